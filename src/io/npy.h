// NumPy .npy files (format spec: numpy/lib/format.py, "NPY format version 1.0/2.0") for F32 and I64 tensors,
// used to exchange activations and fixtures with Python (np.save / np.load).
#pragma once
#include <string>

#include "core/tensor.h"

namespace tfm {

// Writes `t` (F32 -> '<f4', I64 -> '<i8', any shape incl. 0-d) as .npy v1.0, C order, header padded with
// spaces and a final '\n' to a multiple of 64 bytes as np.save does. Written atomically (write_file_atomic).
// Throws std::invalid_argument for an undefined tensor, std::runtime_error if the file cannot be written.
void save_npy(const std::string& path, const Tensor& t);

// Reads a .npy file of version 1.x or 2.x with dtype '<f4' (-> F32) or '<i8' (-> I64), fortran_order False,
// into an owned tensor of the stored shape. Throws std::runtime_error starting with `path` for a bad magic,
// an unsupported version, dtype or Fortran order, a malformed header, or a data size that does not match the
// shape.
Tensor load_npy(const std::string& path);

}  // namespace tfm

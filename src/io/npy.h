// NumPy .npy files (format spec: numpy/lib/format.py, "NPY format version 1.0/2.0") for F32 and I64 tensors,
// used to exchange activations and fixtures with Python (np.save / np.load), and raw arrays of the element types
// embeddings are stored in (float32, int8, uint8).
#pragma once
#include <cstddef>
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

// A .npy array as stored: its descr, shape and C-order data bytes.
struct NpyData {
  std::string descr;  // '<f4' float32, '<i8' int64, '|i1' int8, '|u1' uint8
  Shape shape;
  std::string bytes;  // numel(shape) * npy_item_size(descr)
};
// Bytes per element of a descr read_npy accepts ('<f4' 4, '<i8' 8, '|i1' / '|u1' 1); 0 for any other.
size_t npy_item_size(const std::string& descr);
// Reads a .npy file (v1.x / 2.x, C order) of any descr npy_item_size knows. Throws std::runtime_error starting
// with `path` as load_npy does, naming the supported dtypes for another one.
NpyData read_npy(const std::string& path);
// Writes `nbytes` of C-order data as a .npy v1.0 file of `descr` and `shape` (atomically, as save_npy).
// Throws std::invalid_argument when nbytes does not match the shape, std::runtime_error if it cannot be written.
void write_npy(const std::string& path, const std::string& descr, const Shape& shape, const void* data, size_t nbytes);

}  // namespace tfm

// Helpers shared by the public API's implementation (src/api): path checks that throw tfm::FileNotFoundError,
// Tensor -> Array without copying, per-call thread settings.
#pragma once
#include <memory>
#include <string>

#include "core/tensor.h"
#include "tfm/array.h"
#include "tfm/error.h"

namespace tfm::api {

// Throws FileNotFoundError "<path>: no such folder" / "<path>: not a folder".
void require_dir(const std::string& path, const char* what);
// Throws FileNotFoundError "<path>: no such file" (what: "model folder", "config"...).
void require_file(const std::string& path);
// The tensor's storage, shared (no copy). t must be F32.
FloatArray to_array(Tensor t);
// Throws std::invalid_argument unless threads >= 0; applies a positive count to the calling thread's OpenMP
// regions and BLAS calls (OpenBLAS's OpenMP build follows the caller's omp_get_max_threads()).
void check_threads(int threads);
void apply_threads(int threads);

}  // namespace tfm::api

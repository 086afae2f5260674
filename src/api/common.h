// Helpers shared by the public API's implementation (src/api): path checks that throw tfm::FileNotFoundError,
// Tensor -> Array without copying, per-call thread settings.
#pragma once
#include <memory>
#include <string>

#include "core/tensor.h"
#include "tfm/array.h"
#include "tfm/error.h"

namespace tfm::api {

// A model folder or a Hugging Face model id ("org/name"): an existing path is returned as is, an id resolves to its
// snapshot in the huggingface_hub cache, downloaded when missing (io/hub.h resolve_model; revision "" = main).
// An id that is not cached while HF_HUB_OFFLINE=1 throws FileNotFoundError naming the id and the cache folder.
std::string model_folder(const std::string& path_or_id, const std::string& revision = "");
// Throws FileNotFoundError "<path>: no such folder" / "<path>: not a folder".
void require_dir(const std::string& path, const char* what);
// Throws FileNotFoundError "<path>: no such file" (what: "model folder", "config"...).
void require_file(const std::string& path);
// Throws FileNotFoundError naming both weight files when folder `dir` has none of model.safetensors,
// pytorch_model.bin or their sharded .index.json (models/checkpoint_weights.h).
void require_weights(const std::string& dir);
// The tensor's storage, shared (no copy). t must be F32.
FloatArray to_array(Tensor t);
// check_threads throws std::invalid_argument unless threads >= 0; apply_threads sets the calling thread's OpenMP
// regions and oneDNN GEMMs to `threads`, or to the process default (OMP_NUM_THREADS, else all cores) for 0
// (core/threading's set_num_threads).
void check_threads(int threads);
void apply_threads(int threads);

}  // namespace tfm::api

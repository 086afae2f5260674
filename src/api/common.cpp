#include "api/common.h"

#include <filesystem>
#include <stdexcept>

#include "core/threading.h"
#include "io/hub.h"
#include "models/checkpoint_weights.h"
#include "ops/gemm.h"
#include "tfm/tfm.h"

namespace tfm {

FileNotFoundError::FileNotFoundError(const std::string& message) : std::runtime_error(message) {}
FileNotFoundError::~FileNotFoundError() = default;

#define TFM_STR2(x) #x
#define TFM_STR(x) TFM_STR2(x)
const char* version() { return TFM_STR(TFM_VERSION_MAJOR) "." TFM_STR(TFM_VERSION_MINOR) "." TFM_STR(TFM_VERSION_PATCH); }
bool native_dtype(const std::string& dtype) { return ops::has_native_product(ops::parse_compute_type(dtype)); }

namespace api {

std::string model_folder(const std::string& path_or_id, const std::string& revision) {
  hub::HubOptions o;
  o.revision = revision;
  try {
    return hub::resolve_model(path_or_id, o);
  } catch (const hub::NotCachedError& e) {
    throw FileNotFoundError(e.what());
  }
}

void require_dir(const std::string& path, const char* what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw std::invalid_argument(std::string(what) + ": empty path");
  if (!fs::exists(path, ec)) throw FileNotFoundError(path + ": no such " + what);
  if (!fs::is_directory(path, ec)) throw FileNotFoundError(path + ": not a folder (expected a " + what + ")");
}

void require_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw FileNotFoundError(path + ": no such file");
}

void require_weights(const std::string& dir) {
  try {
    CheckpointWeights::find(dir);
  } catch (const std::runtime_error& e) {
    throw FileNotFoundError(e.what());
  }
}

FloatArray to_array(Tensor t) {
  if (t.dtype() != DType::F32) throw std::logic_error("to_array: expected an F32 tensor");
  Shape shape = t.shape();
  auto keep = std::make_shared<Tensor>(std::move(t));
  return FloatArray(std::shared_ptr<const float>(keep, keep->f32()), std::move(shape));
}

void check_threads(int threads) {
  if (threads < 0) throw std::invalid_argument("threads must be >= 0 (0 = all cores), got " + std::to_string(threads));
}

void apply_threads(int threads) { set_num_threads(threads); }

}  // namespace api

std::string resolve_model(const std::string& path_or_id, const std::string& revision) {
  return api::model_folder(path_or_id, revision);
}

std::string download_model(const std::string& id, const HubDownloadOptions& options) {
  hub::HubOptions o;
  o.revision = options.revision;
  o.include = options.include;
  o.cache_dir = options.cache_dir;
  o.progress = options.progress;
  return hub::download_model(id, o).snapshot;
}

}  // namespace tfm

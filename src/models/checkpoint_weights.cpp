#include "models/checkpoint_weights.h"

#include <fnmatch.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "io/json_util.h"

namespace tfm {

namespace fs = std::filesystem;

std::string CheckpointWeights::find(const std::string& dir) {
  for (const char* f : {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                        "pytorch_model.bin.index.json"})
    if (fs::is_regular_file(dir + "/" + f)) return dir + "/" + f;
  throw std::runtime_error(dir + "/model.safetensors: no such file (nor pytorch_model.bin, nor a sharded "
                           "model.safetensors.index.json or pytorch_model.bin.index.json)");
}

void CheckpointWeights::add_shard(const std::string& file, const std::vector<std::string>* expected) {
  Shard s;
  s.path = file;
  std::vector<std::string> names;
  if (file.size() >= 12 && file.compare(file.size() - 12, 12, ".safetensors") == 0) {
    s.st = std::make_unique<SafeTensorsWeights>(file);
    names = s.st->file().names();
  } else {
    s.pt = std::make_unique<TorchCheckpoint>(TorchCheckpoint::open(file));
    names = s.pt->names();
  }
  const size_t idx = shards_.size();
  for (const auto& n : names) owner_.emplace(n, idx);
  if (expected) {
    std::set<std::string> have(names.begin(), names.end());
    for (const auto& n : *expected)
      if (!have.count(n))
        throw std::runtime_error(path_ + ": weight_map puts tensor '" + n + "' in " + file + ", which does not hold it");
  }
  shards_.push_back(std::move(s));
}

CheckpointWeights::CheckpointWeights(const std::string& dir) : path_(find(dir)) {
  const std::string index = ".index.json";
  if (path_.size() < index.size() || path_.compare(path_.size() - index.size(), index.size(), index) != 0) {
    add_shard(path_, nullptr);
    return;
  }
  nlohmann::json j = load_json_file(path_);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object() || j["weight_map"].empty())
    throw std::runtime_error(path_ + ": no \"weight_map\" object of tensor name -> shard file");
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw std::runtime_error(path_ + ": weight_map entry '" + name + "' is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
      throw std::runtime_error(path_ + ": shard '" + f + "' is not a plain file name in the folder");
    by_file[f].push_back(name);
  }
  for (const auto& [f, names] : by_file) add_shard(dir + "/" + f, &names);
}

std::vector<std::string> CheckpointWeights::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : owner_) out.push_back(k);
  return out;
}

const Shape& CheckpointWeights::shape_of(const std::string& name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) throw std::runtime_error(path_ + ": missing tensor '" + name + "'");
  const Shard& s = shards_[it->second];
  return s.st ? s.st->file().shape_of(name) : s.pt->shape_of(name);
}

Tensor CheckpointWeights::get(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases) {
  return fetch(name, shape, aliases, /*checked=*/true);
}

Tensor CheckpointWeights::get_unchecked(const std::string& name, const Shape& shape,
                                        const std::vector<std::string>& aliases) {
  return fetch(name, shape, aliases, /*checked=*/false);
}

Tensor CheckpointWeights::fetch(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases,
                                bool checked) {
  std::string found;
  if (has(name)) found = name;
  for (size_t i = 0; found.empty() && i < aliases.size(); ++i)
    if (has(aliases[i])) found = aliases[i];
  if (found.empty()) {
    std::string msg = path_ + ": missing tensor '" + name + "'";
    if (!aliases.empty()) {
      msg += " (also tried";
      for (size_t i = 0; i < aliases.size(); ++i) msg += (i ? ", '" : " '") + aliases[i] + "'";
      msg += ")";
    }
    throw std::runtime_error(msg);
  }
  Shard& s = shards_[owner_.at(found)];
  used_.insert(found);
  if (s.st) return checked ? s.st->get(found, shape) : s.st->get_unchecked(found, shape);
  const TorchCheckpoint& pt = *s.pt;
  if (pt.shape_of(found) != shape)
    throw std::runtime_error(pt.path() + ": tensor '" + found + "' has shape " + shape_str(pt.shape_of(found)) +
                             ", config expects " + shape_str(shape));
  const std::string dt = pt.dtype_of(found);
  if (dt != "F32" && dt != "F16" && dt != "BF16" && dt != "F64")
    throw std::runtime_error(pt.path() + ": tensor '" + found + "' has dtype " + dt + ", expected a floating-point type");
  Tensor t = pt.get(found);
  if (!checked) return t;
  // As SafeTensorsWeights: a NaN or Inf weight is refused rather than hidden by masking.
  const float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(p[i]))
      throw std::runtime_error(pt.path() + ": tensor '" + found + "' contains NaN or Inf at element " + std::to_string(i));
  return t;
}

const std::vector<std::string>& CheckpointWeights::skippable() {
  static const std::vector<std::string> patterns = {
      "*position_ids", "*embeddings.token_type_ids", "cls.*", "classifier.*", "pre_classifier.*", "lm_head.*",
      "qa_outputs.*", "pooler.*", "*.pooler.*", "score.*", "generator_*", "discriminator_predictions.*",
      "vocab_transform.*", "vocab_layer_norm.*", "vocab_projector.*",  // DistilBERT's masked-LM head
      "head.*", "decoder.*",                                            // ModernBERT's heads
      "lm_predictions.*", "mask_predictions.*"};                        // DeBERTa-v3's pre-training heads
  return patterns;
}

std::vector<std::string> CheckpointWeights::unused() const {
  std::vector<std::string> out;
  for (const auto& [name, shard] : owner_) {
    if (used_.count(name)) continue;
    bool skip = false;
    for (const auto& p : skippable()) skip = skip || ::fnmatch(p.c_str(), name.c_str(), 0) == 0;
    if (!skip) out.push_back(name);
  }
  return out;
}

void CheckpointWeights::check_all_used(const std::string& config_path) const {
  const std::vector<std::string> u = unused();
  if (u.empty()) return;
  std::string list;
  for (size_t i = 0; i < u.size() && i < 8; ++i) list += (i ? ", " : "") + u[i];
  if (u.size() > 8) list += ", ... (" + std::to_string(u.size() - 8) + " more)";
  throw std::runtime_error(path_ + ": " + std::to_string(u.size()) + " tensor" + (u.size() == 1 ? " is" : "s are") +
                           " not used by the model " + config_path +
                           " describes (do num_hidden_layers and the architecture match the checkpoint?): " + list);
}

ops::ComputeType CheckpointWeights::stored_compute_type() const {
  for (const auto& s : shards_)
    if (s.st && s.st->stored_compute_type() != ops::ComputeType::F32) return s.st->stored_compute_type();
  return ops::ComputeType::F32;
}

const uint16_t* CheckpointWeights::get_bf16(const std::string& name, const Shape& shape,
                                            const std::vector<std::string>& aliases) {
  std::vector<std::string> all = {name};
  all.insert(all.end(), aliases.begin(), aliases.end());
  for (const auto& n : all) {
    auto it = owner_.find(n);
    if (it == owner_.end()) continue;
    if (!shards_[it->second].st) return nullptr;
    const uint16_t* p = shards_[it->second].st->get_bf16(n, shape, {});
    if (p) used_.insert(n);
    return p;
  }
  return nullptr;
}

std::function<void()> CheckpointWeights::releaser(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::F32) return [] {};
  for (auto& s : shards_)
    if (s.st && s.st->file().holds(t.f32(), t.nbytes())) return s.st->releaser(t);
  return [] {};
}

std::function<void()> CheckpointWeights::bytes_releaser(const void* data, size_t bytes) {
  for (auto& s : shards_)
    if (s.st && s.st->file().holds(data, bytes)) return s.st->bytes_releaser(data, bytes);
  return {};
}

void CheckpointWeights::release(const Tensor& t) {
  for (auto& s : shards_)
    if (s.st) s.st->release(t);
}

void CheckpointWeights::release_bytes(const void* data, size_t bytes) {
  for (auto& s : shards_)
    if (s.st) s.st->release_bytes(data, bytes);
}

const int8_t* CheckpointWeights::get_int8(const std::string& name, const Shape& shape,
                                          const std::vector<std::string>& aliases, const float** scale) {
  std::vector<std::string> all = {name};
  all.insert(all.end(), aliases.begin(), aliases.end());
  for (const auto& n : all) {
    auto it = owner_.find(n);
    if (it != owner_.end() && shards_[it->second].st) {
      const int8_t* q = shards_[it->second].st->get_int8(n, shape, {}, scale);
      if (q) {
        used_.insert(n);
        used_.insert(n + "_scale");
      }
      return q;
    }
  }
  return nullptr;
}

}  // namespace tfm

// The parameter store of every model, and the prefixed views modules load from.
//
// A module asks a `Vars` (a prefix over a store, candle's VarBuilder `vb.pp("encoder.layer.0")`) for its tensors by
// their checkpoint names, so a composition file reads line for line against the reference module tree. Behind a
// Vars is one of two stores:
//  - ParamStore: every trainable tensor of a model in one flat float buffer and its gradient in another, named by
//    the PyTorch state_dict names (one buffer makes the optimizer, gradient clipping, all-reduce and checkpointing
//    single loops). Parameters are registered first and allocated by finalize(), so a Param keeps an index.
//  - WeightSource (nn/weights.h): read-only tensors from a safetensors file (views into the mmap) or a seeded
//    random initialisation; no gradients.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tfm {
class WeightSource;
}

namespace tfm::nn {

class ParamStore {
 public:
  struct Entry {
    std::string name;
    Shape shape;
    int64_t offset;  // in floats, into all_data() / all_grad()
    int64_t numel;
  };
  // Registers a parameter; returns its index. Throws std::logic_error after finalize() or for a repeated name.
  int64_t add(const std::string& name, const Shape& shape);
  // Allocates the value and gradient buffers (zeros).
  void finalize();
  float* data(int64_t i) { return data_.data() + entries_[i].offset; }
  float* grad(int64_t i) { return grad_.data() + entries_[i].offset; }
  std::vector<float>& all_data() { return data_; }
  std::vector<float>& all_grad() { return grad_; }
  const std::vector<float>& all_data() const { return data_; }
  const std::vector<float>& all_grad() const { return grad_; }
  const std::vector<Entry>& entries() const { return entries_; }
  int64_t index_of(const std::string& name) const;  // -1 if absent
  int64_t total() const { return total_; }
  void zero_grad();
  // Views of the values, by name, for saving (share this store's memory).
  std::vector<std::pair<std::string, Tensor>> named_tensors();

 private:
  std::vector<Entry> entries_;
  std::vector<float> data_, grad_;
  int64_t total_ = 0;
  bool finalized_ = false;
};

// One parameter tensor of a module: an entry of a ParamStore (trainable, with a gradient) or a read-only tensor
// from a WeightSource. Cheap to copy.
class Param {
 public:
  Param() = default;
  Param(ParamStore* store, int64_t index) : store_(store), index_(index) {}
  explicit Param(Tensor value) : value_(std::move(value)) {}
  bool defined() const { return store_ != nullptr || value_.defined(); }
  // Values, shape as registered. Valid once the store is finalized.
  float* data() const { return store_ ? store_->data(index_) : const_cast<float*>(value_.f32()); }
  // Gradient (same shape), accumulated by backward; null for a read-only parameter.
  float* grad() const { return store_ ? store_->grad(index_) : nullptr; }
  const Tensor& tensor() const { return value_; }  // the read-only tensor (undefined for a store entry)

 private:
  ParamStore* store_ = nullptr;
  int64_t index_ = -1;
  Tensor value_;
};

// A prefix over a store: vars.prefix("encoder").prefix("layer.0").get("weight", {H, H}) names
// "encoder.layer.0.weight". Aliases (name rewrites tried in order when the name is absent from a file) serve
// checkpoints that spell names differently (BERT's "bert." prefix and LayerNorm gamma/beta).
class Vars {
 public:
  using Aliases = std::vector<std::string> (*)(const std::string& name);
  explicit Vars(ParamStore& store) : store_(&store) {}
  explicit Vars(WeightSource& source, Aliases aliases = nullptr) : source_(&source), aliases_(aliases) {}
  Vars prefix(const std::string& name) const;
  Vars prefix(int64_t index) const { return prefix(std::to_string(index)); }
  std::string name(const std::string& leaf) const { return path_.empty() ? leaf : path_ + "." + leaf; }
  // The parameter `leaf` under this prefix with exactly `shape`: registered in a ParamStore (values filled
  // later by load or init), or read from the WeightSource. Throws what WeightSource::get throws.
  Param get(const std::string& leaf, const Shape& shape) const;
  // Whether `leaf` exists (a ParamStore: registered; a file: stored under the name or an alias).
  bool has(const std::string& leaf) const;
  // get() without a file's NaN / Inf check, for weights about to be packed (WeightSource::get_unchecked); a
  // ParamStore registers as get() does.
  Param get_unchecked(const std::string& leaf, const Shape& shape) const;
  // The raw bf16 values of `leaf` stored as BF16 (WeightSource::get_bf16), or null (always null for a ParamStore).
  const uint16_t* get_bf16(const std::string& leaf, const Shape& shape) const;
  // Prequantised int8 weights (WeightSource::get_int8) of `leaf`, or null (always null for a ParamStore).
  const int8_t* get_int8(const std::string& leaf, const Shape& shape, const float** scale) const;
  // Tells a file-backed source that `p` has been copied (packed) and its pages need not stay resident.
  void release(const Param& p) const;
  // release(p) for later, callable after the source is gone (WeightSource::releaser).
  std::function<void()> releaser(const Param& p) const;
  void release_bytes(const void* data, size_t bytes) const;
  // release_bytes for later (WeightSource::bytes_releaser); empty when the source cannot keep the bytes.
  std::function<void()> bytes_releaser(const void* data, size_t bytes) const;

 private:
  std::vector<std::string> aliases_of(const std::string& full) const;
  ParamStore* store_ = nullptr;
  WeightSource* source_ = nullptr;
  Aliases aliases_ = nullptr;
  std::string path_;
};

}  // namespace tfm::nn

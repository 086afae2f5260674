// Named parameter tensors of a model, from a safetensors file or a seeded random initialisation.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "ops/gemm.h"

namespace tfm {

// A lookup of parameters by state_dict name that checks shapes and reports missing names with the file.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Returns the tensor named `name` (or one of `aliases`, tried in order) with exactly `shape`.
  // Throws std::runtime_error: "<file>: missing tensor 'name' (also tried 'alias')" or
  // "<file>: tensor 'name' has shape [a, b], config expects [c, d]".
  virtual Tensor get(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases = {}) = 0;
  // get() without the check for NaN / Inf a file-backed source makes, for weights that are about to be packed:
  // the packing reads every element anyway, and the packed copy is checked instead (nn::Linear::load_packed),
  // so that the mapped file is read once. The caller must call get() for the message when the check fails.
  virtual Tensor get_unchecked(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases = {}) {
    return get(name, shape, aliases);
  }
  // A weight stored as BF16 (`tfm convert --dtype bf16`): its raw bf16 values [shape] in place, or null when
  // `name` (or an alias) is stored in another type (then get() converts it to fp32). Not checked for NaN / Inf.
  // Valid while the source lives.
  virtual const uint16_t* get_bf16(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases) {
    return nullptr;
  }
  // Tells the source that `t` (from get()) has been copied into a packed layout and its memory is no longer
  // read; a file-backed source drops the pages from memory. Default: nothing.
  virtual void release(const Tensor& t) {}
  // release(t) for later, callable after the source is gone (a lazily packed weight releases its pages when it
  // is packed). Default: a function that does nothing.
  virtual std::function<void()> releaser(const Tensor& t) { return [] {}; }
  // Whether `name` can be had, so optional parts (BERT's pooler, a tied decoder) load only when present.
  // A random source creates anything, so it has every name.
  virtual bool has(const std::string& name) const { return true; }
  // The same for raw bytes handed out by get_int8.
  virtual void release_bytes(const void* data, size_t bytes) {}
  // release_bytes for later, like releaser(): a function that keeps data[bytes] (from get_bf16 or get_int8)
  // valid until it is called (then drops the pages) or destroyed, even after the source is gone; or an empty
  // function when the source cannot keep them (the default), and the caller must copy them while it lives.
  virtual std::function<void()> bytes_releaser(const void* data, size_t bytes) { return {}; }
  // A Linear weight stored prequantised by `tfm convert --dtype int8`: tensor `name` of dtype I8 with `shape`
  // [out, in] plus "<name>_scale" F32 [out] (w = weight * scale per output row). Returns null when `name` (or an
  // alias) is not stored that way; then get() applies. The pointers stay valid while the source lives.
  virtual const int8_t* get_int8(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases,
                                 const float** scale) {
    return nullptr;
  }
};

// Weights read in place from an mmapped model.safetensors.
class SafeTensorsWeights : public WeightSource {
 public:
  explicit SafeTensorsWeights(const std::string& path) : st_(SafeTensors::open(path)) {}
  Tensor get(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases = {}) override;
  Tensor get_unchecked(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases = {}) override;
  const uint16_t* get_bf16(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases) override;
  void release(const Tensor& t) override {
    if (t.defined() && t.dtype() == DType::F32) st_.release_pages(t.f32(), t.nbytes());
  }
  std::function<void()> releaser(const Tensor& t) override {
    if (!t.defined() || t.dtype() != DType::F32) return [] {};
    return st_.page_releaser(t.f32(), t.nbytes());
  }
  bool has(const std::string& name) const override { return st_.has(name); }
  const int8_t* get_int8(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases,
                         const float** scale) override;
  void release_bytes(const void* data, size_t bytes) override { st_.release_pages(data, bytes); }
  std::function<void()> bytes_releaser(const void* data, size_t bytes) override {
    return st_.page_releaser(data, bytes);
  }
  const SafeTensors& file() const { return st_; }
  // When on, get() drops the pages of a tensor it has checked for NaN / Inf (the check reads all of them), so that
  // loading a whole model does not hold the whole file in memory: the tensor stays valid, its pages are read
  // again from the file when used. For a model that packs its weights (Seq2SeqModel::open): what it reads
  // afterwards is one weight at a time, and the lookups. Off by default.
  void set_release_checked(bool on) { release_checked_ = on; }
  // Every stored name handed out so far (by get, get_unchecked, get_bf16 or get_int8, the latter with its
  // "<name>_scale"), so a loader can refuse the tensors that no module asked for.
  const std::set<std::string>& used() const { return used_; }
  // The compute type the file's Linear weights are stored for: I8 for a folder written by
  // `tfm convert --dtype int8` (metadata tfm_dtype "int8"), else F32. What a load that names no dtype uses.
  ops::ComputeType stored_compute_type() const;

 private:
  // The stored name of `name` or its first alias present, its shape checked; throws as get() does.
  std::string find(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases) const;
  SafeTensors st_;
  std::vector<Tensor> scales_;  // scales handed out by get_int8 (copies if the file was misaligned)
  mutable std::set<std::string> used_;
  bool release_checked_ = false;
};

// Fresh parameters as PyTorch's default initialisers give them (what document 000 gets when it builds modules
// from a config): Linear weights and biases U(-1/sqrt(in_features), 1/sqrt(in_features)), Embedding N(0, 1),
// LayerNorm weight 1 and bias 0. The kind is read from the name: "*.weight" of rank 2 under an embedding name
// -> N(0,1); "LayerNorm"/"layer_norm"/"ln" -> 1/0; other rank-2 weights and their biases -> Linear.
class RandomWeights : public WeightSource {
 public:
  explicit RandomWeights(uint64_t seed) : rng_(seed) {}
  Tensor get(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases = {}) override;
  // Parameters in creation order, for saving.
  const std::vector<std::pair<std::string, Tensor>>& created() const { return created_; }

 private:
  Rng rng_;
  std::map<std::string, int64_t> fan_in_;  // Linear weight name prefix -> in_features, for its bias
  std::vector<std::pair<std::string, Tensor>> created_;
};

}  // namespace tfm

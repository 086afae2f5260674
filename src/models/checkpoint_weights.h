// The weights of a model folder in whichever form the checkpoint ships them: model.safetensors, sharded
// safetensors (model.safetensors.index.json), pytorch_model.bin (read by the restricted unpickler of
// io/torch_pickle.h: no code in the file runs) or sharded pytorch_model.bin (pytorch_model.bin.index.json).
#pragma once
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "io/torch_pickle.h"
#include "nn/weights.h"

namespace tfm {

class CheckpointWeights : public WeightSource {
 public:
  // Opens the weights of folder `dir`, trying in order model.safetensors, model.safetensors.index.json,
  // pytorch_model.bin, pytorch_model.bin.index.json (the order transformers' from_pretrained prefers).
  // An index's weight_map ({tensor name: shard file name}) must name plain files in `dir`, and each shard must
  // hold the tensors mapped to it. Throws std::runtime_error naming the file; with no weights at all:
  // "DIR/model.safetensors: no such file (nor pytorch_model.bin, nor a sharded model.safetensors.index.json or
  // pytorch_model.bin.index.json)".
  explicit CheckpointWeights(const std::string& dir);
  // The file weights are read from (the index for a sharded checkpoint), as chosen by the constructor; throws
  // like it when there is none. Cheap: opens nothing.
  static std::string find(const std::string& dir);

  // As WeightSource; errors name the shard that holds the tensor. pytorch_model.bin tensors of any floating
  // dtype (F32, F16, BF16, F64) are read as F32, like SafeTensorsWeights; integer tensors are refused.
  Tensor get(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases = {}) override;
  // As the shard's: a safetensors shard hands out its mapped values without the NaN / Inf check, its raw bf16
  // values and page releasers (without these a model read through this class checked every Linear weight twice,
  // widened `tfm convert --dtype bf16` weights to fp32 before packing them, and never dropped the file's pages).
  Tensor get_unchecked(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases = {}) override;
  const uint16_t* get_bf16(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases) override;
  std::function<void()> releaser(const Tensor& t) override;
  std::function<void()> bytes_releaser(const void* data, size_t bytes) override;
  void release(const Tensor& t) override;
  bool has(const std::string& name) const override { return owner_.count(name) != 0; }
  void release_bytes(const void* data, size_t bytes) override;
  const int8_t* get_int8(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases,
                         const float** scale) override;
  const std::string& path() const { return path_; }
  // As SafeTensorsWeights::stored_compute_type: I8 when a safetensors shard was written by `tfm convert --dtype
  // int8`, else F32 (always F32 for pytorch_model.bin).
  ops::ComputeType stored_compute_type() const;
  // Stored shape of `name` (PyTorch order); throws naming the checkpoint if it is missing.
  const Shape& shape_of(const std::string& name) const;
  // Tensor names in sorted order, over all shards.
  std::vector<std::string> names() const;

  // Stored tensors no get / get_int8 has read so far, except those matching a skippable() pattern, sorted.
  std::vector<std::string> unused() const;
  // fnmatch patterns of stored tensors a model may leave unread: buffers (position_ids, token_type_ids) and the
  // heads of other tasks (cls.*, classifier.*, lm_head.*, qa_outputs.*, pooler.*, ...), as transformers'
  // _keys_to_ignore_on_load_unexpected does.
  static const std::vector<std::string>& skippable();
  // Called once a model is built from this checkpoint: throws std::runtime_error naming the unused tensors
  // ("<path>: 4 tensors are not used by the model config.json describes (does num_hidden_layers match the
  // checkpoint?): encoder.layer.2.attention.output.dense.bias, ...") instead of running a silently smaller model.
  void check_all_used(const std::string& config_path) const;

 private:
  struct Shard {
    std::unique_ptr<SafeTensorsWeights> st;
    std::unique_ptr<TorchCheckpoint> pt;
    std::string path;
  };
  void add_shard(const std::string& file, const std::vector<std::string>* expected);
  Tensor fetch(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases, bool checked);

  std::string path_;
  std::vector<Shard> shards_;
  std::map<std::string, size_t> owner_;  // tensor name -> shard
  std::set<std::string> used_;           // names get / get_int8 returned
};

}  // namespace tfm

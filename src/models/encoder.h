// Encoder-only models: Hugging Face BERT (post-LN) and the pre-LN tutorial encoder of document 000.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/weights.h"
#include "ops/activation.h"
#include "ops/gemm.h"

namespace tfm {

// The keys of a Hugging Face BERT config.json, which every encoder family reads (a family with its own key names
// maps them to these: models/registry.h ModelFamily::config_as_bert).
struct EncoderConfig {
  std::string model_type;  // config.json's: a model type of an encoder family of models/registry.h ("bert",
                           // "roberta", "xlm-roberta", ..., "transformer_encoder")
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  std::string hidden_act = "gelu";
  int64_t pad_token_id = 0;
  int64_t relative_attention_num_buckets = 32;  // MPNet: rows of encoder.relative_attention_bias
  bool model_type_given = true;  // false: config.json has no model_type (read as "bert")
  nlohmann::json json;  // config.json as read, for a family's own keys (ModernBertConfig::from)
  std::string source;   // the file it came from, for errors

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // The longest input the model takes, in tokens: the family's rule (ModelFamily::max_input_tokens: less
  // pad_token_id + 1 for the RoBERTa family, less 2 for MPNet, whose positions start after the padding index), else
  // max_position_embeddings.
  int64_t max_input_tokens() const;
  // Parses and validates (positive sizes, hidden_size divisible by num_attention_heads, known activation, the
  // family's own keys). `file` names the source in errors. A missing model_type defaults to "bert"; one no family
  // answers is models/registry.h family_of's refusal, a translation family's require_encoder_family's.
  static EncoderConfig from_json(const nlohmann::json& j, const std::string& file);
  static EncoderConfig load(const std::string& path);
};

struct EncoderOutput {
  Tensor last_hidden_state;  // [B, L, hidden_size]; undefined from forward_first_token (but its default)
  Tensor first_token_state;  // [B, hidden_size] = last_hidden_state[:, 0]: from forward_first_token only
  Tensor hidden_states;      // [num_hidden_layers + 1, B, L, hidden_size], embedding output first (if requested)
  Tensor pooler_output;      // [B, hidden_size], tanh(dense(h[:, 0])) (BERT with pooler weights only; undefined otherwise)
};

class EncoderModel {
 public:
  virtual ~EncoderModel() = default;
  const EncoderConfig& config() const { return config_; }
  // input_ids: [B, L] int64 in [0, vocab_size); token_type_ids: [B, L] int64 or undefined (zeros);
  // attention_mask: [B, L] int64, 1 = real token, 0 = padding, or undefined (all ones).
  // Throws std::invalid_argument when L > max_position_embeddings, an id is out of range, or shapes disagree.
  virtual EncoderOutput forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                                bool all_layers = false) const = 0;
  // forward for callers that read only the real tokens (pooling; token outputs where attention_mask is 1): with
  // padding in the batch the layers run on the real tokens only (nn::encoder_stack_inference, unpadded), and
  // last_hidden_state is 0 at padded positions; the real positions and pooler_output equal forward's. Same
  // errors. A family without an unpadded path runs forward.
  virtual EncoderOutput forward_unpadded(const Tensor& input_ids, const Tensor& token_type_ids,
                                         const Tensor& attention_mask) const {
    return forward(input_ids, token_type_ids, attention_mask, false);
  }
  // forward for callers that read position 0 of each row only (a sequence classification head: h[:, 0] or the
  // pooler, as BertForSequenceClassification / RobertaClassificationHead read): post-LN families run their last
  // layer's query, attention output, LayerNorms and feed-forward on position 0 only (its keys and values still
  // come from every position; nn::EncoderBlock::forward_inference_first_token). first_token_state and
  // pooler_output equal forward's h[:, 0] and pooler_output up to float rounding (products of fewer rows);
  // last_hidden_state is undefined there. unpadded: as forward_unpadded (the layers run on the real tokens only;
  // a row whose position 0 is padding gets 0). Same errors. Default: forward (or forward_unpadded), with
  // first_token_state copied from it.
  virtual EncoderOutput forward_first_token(const Tensor& input_ids, const Tensor& token_type_ids,
                                            const Tensor& attention_mask, bool unpadded = false) const;

 protected:
  EncoderConfig config_;
};

// Builds the family of config.model_type (models/registry.h) with weights from `weights`; the Linear layers are packed
// for `dtype` (ops/gemm.h PackedLinear: fp32, bf16 or int8 dynamic quantisation). Throws std::runtime_error
// when this CPU has no oneDNN kernel for `dtype`, and the family's for a missing tensor (with a hint when
// config.json has no model_type: a tutorial encoder folder read as BERT).
std::unique_ptr<EncoderModel> make_encoder(const EncoderConfig& config, WeightSource& weights,
                                           ops::ComputeType dtype = ops::ComputeType::F32);
// Loads DIR/config.json and DIR/model.safetensors (Linear weights packed, their mmapped pages then released;
// embeddings and LayerNorm used in place from the mmap). No dtype: the type the file is stored for (int8 for a
// `tfm convert --dtype int8` folder, else fp32); *resolved receives the type used.
std::unique_ptr<EncoderModel> load_encoder(const std::string& dir, std::optional<ops::ComputeType> dtype = std::nullopt,
                                           ops::ComputeType* resolved = nullptr);

}  // namespace tfm

namespace tfm::nn {
struct Linear;
}

namespace tfm::detail {
// Checks input_ids [B, L] against the config and returns the key mask as floats [B, L] (1 = attend), built from
// attention_mask or all ones. Throws std::invalid_argument naming the offending value.
std::vector<float> check_encoder_inputs(const EncoderConfig& c, const Tensor& input_ids, const Tensor& token_type_ids,
                                        const Tensor& attention_mask);

// BertPooler / MPNetPooler: tanh(dense(h[:, 0])), [B, H]. first: [B, H] (a first-token forward's rows) or null, then
// h[:, 0] is read from x [B, L, H].
Tensor pooler_output(const nn::Linear& dense, const float* first, const float* x, int64_t B, int64_t L, int64_t H);
}  // namespace tfm::detail

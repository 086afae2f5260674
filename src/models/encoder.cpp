#include "models/encoder.h"

#include <cstring>

#include <cfloat>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/json_keys.h"
#include "io/json_util.h"
#include "models/checkpoint_weights.h"
#include "models/registry.h"
#include "core/profile.h"
#include "nn/layers.h"

namespace tfm {

EncoderConfig EncoderConfig::from_json(const nlohmann::json& config, const std::string& file) {
  EncoderConfig c;
  c.model_type = read_model_type(config, file, "");
  c.model_type_given = !c.model_type.empty();
  if (c.model_type.empty()) c.model_type = "bert";
  const ModelFamily& family = family_of(c.model_type, file);
  // The family first: a translation folder's config has none of an encoder's keys.
  require_encoder_family(family, c.model_type, file, "'tfm translate' and 'tfm serve' run it");
  // Families with their own key names are read through BERT's.
  const nlohmann::json j = family.config_as_bert ? family.config_as_bert(config, file) : config;
  // The keys the mapping wrote are not the file's: a JsonKeyRecorder records the family's own names instead.
  std::vector<std::string> mapped;
  if (family.config_as_bert && JsonKeyRecorder::active() && j.is_object())
    for (const auto& [key, value] : j.items())
      if (!config.contains(key) || config[key] != value) mapped.push_back(key);
  std::optional<JsonKeyRecorder::Derived> not_the_files(std::in_place, std::move(mapped));
  c.json = config;
  c.source = file;
  c.vocab_size = json_int(j, "vocab_size", file);
  c.hidden_size = json_int(j, "hidden_size", file);
  c.num_hidden_layers = json_int(j, "num_hidden_layers", file);
  c.num_attention_heads = json_int(j, "num_attention_heads", file);
  c.intermediate_size = json_int(j, "intermediate_size", file);
  c.max_position_embeddings = json_int(j, "max_position_embeddings", file);
  c.type_vocab_size = json_int_or(j, "type_vocab_size", 2, file);
  c.layer_norm_eps = json_number_or(j, "layer_norm_eps", 1e-12, file);
  // An explicit null would otherwise read as absent (gelu): transformers would fail on it, so do we.
  if (j.is_object() && j.contains("hidden_act") && j["hidden_act"].is_null())
    throw std::runtime_error(file + ": key 'hidden_act' is null (expected an activation name: gelu, relu, ...)");
  c.hidden_act = json_string_or(j, "hidden_act", "gelu", file);
  c.pad_token_id = json_int_or(j, "pad_token_id", family.default_pad_token_id, file);
  c.relative_attention_num_buckets = json_int_or(j, "relative_attention_num_buckets", 32, file);
  check_at_most(file, "relative_attention_num_buckets", c.relative_attention_num_buckets, 1 << 16);
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) throw std::runtime_error(file + ": key '" + key + "' must be positive, found " + std::to_string(v));
  };
  positive("vocab_size", c.vocab_size);
  positive("hidden_size", c.hidden_size);
  positive("num_hidden_layers", c.num_hidden_layers);
  positive("num_attention_heads", c.num_attention_heads);
  positive("intermediate_size", c.intermediate_size);
  positive("max_position_embeddings", c.max_position_embeddings);
  positive("type_vocab_size", c.type_vocab_size);
  check_at_most(file, "vocab_size", c.vocab_size, 1 << 22);
  check_at_most(file, "hidden_size", c.hidden_size, 1 << 14);
  check_at_most(file, "num_hidden_layers", c.num_hidden_layers, 1 << 10);
  check_at_most(file, "intermediate_size", c.intermediate_size, 1 << 16);
  check_at_most(file, "max_position_embeddings", c.max_position_embeddings, 1 << 20);
  check_at_most(file, "type_vocab_size", c.type_vocab_size, 1 << 16);
  if (c.hidden_size % c.num_attention_heads != 0)
    throw std::runtime_error(file + ": hidden_size (" + std::to_string(c.hidden_size) +
                             ") is not divisible by num_attention_heads (" + std::to_string(c.num_attention_heads) + ")");
  if (!(c.layer_norm_eps > 0)) throw std::runtime_error(file + ": key 'layer_norm_eps' must be positive");
  try {
    ops::parse_activation(c.hidden_act);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(file + ": key 'hidden_act': " + e.what());
  }
  const double H = (double)c.hidden_size;
  check_fits_in_memory(file, H * (double)(c.vocab_size + c.max_position_embeddings + c.type_vocab_size) +
                                 (double)c.num_hidden_layers * H * (4 * H + 2 * (double)c.intermediate_size));
  // Only learned absolute positions are implemented; HF's relative_key variants add per-layer distance tables.
  const std::string pos = json_string_or(j, "position_embedding_type", "absolute", file);
  if (pos != "absolute")
    throw std::runtime_error(file + ": position_embedding_type '" + pos + "' is not supported (only 'absolute')");
  not_the_files.reset();  // the family's own check reads the file's keys (c.json)
  if (family.check_config) family.check_config(c);
  return c;
}

EncoderConfig EncoderConfig::load(const std::string& path) { return from_json(load_json_file(path), path); }

int64_t EncoderConfig::max_input_tokens() const {
  const ModelFamily* family = find_family(model_type);
  return family && family->max_input_tokens ? family->max_input_tokens(*this) : max_position_embeddings;
}

EncoderOutput EncoderModel::forward_first_token(const Tensor& input_ids, const Tensor& token_type_ids,
                                                const Tensor& attention_mask, bool unpadded) const {
  EncoderOutput out = unpadded ? forward_unpadded(input_ids, token_type_ids, attention_mask)
                               : forward(input_ids, token_type_ids, attention_mask, false);
  const int64_t B = input_ids.size(0), L = input_ids.size(1), H = config_.hidden_size;
  out.first_token_state = Tensor::empty({B, H});
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(out.first_token_state.f32() + b * H, out.last_hidden_state.f32() + b * L * H, sizeof(float) * H);
  return out;
}

std::unique_ptr<EncoderModel> make_encoder(const EncoderConfig& config, WeightSource& weights, ops::ComputeType dtype) {
  const std::string file = config.source.empty() ? "config.json" : config.source;
  const ModelFamily& family = family_of(config.model_type, file);
  require_encoder_family(family, config.model_type, file);
  try {
    return family.make_encoder(config, weights, dtype);
  } catch (const std::runtime_error& e) {
    // A tutorial encoder folder without model_type is read as BERT, and its tensor names do not match.
    if (config.model_type_given || std::string(e.what()).find("missing tensor") == std::string::npos) throw;
    throw std::runtime_error(std::string(e.what()) + " (" + file + " has no model_type, so it is read as BERT; a "
                             "pre-LN tutorial encoder needs \"model_type\": \"transformer_encoder\")");
  }
}

std::unique_ptr<EncoderModel> load_encoder(const std::string& dir, std::optional<ops::ComputeType> dtype,
                                           ops::ComputeType* resolved) {
  EncoderConfig c = EncoderConfig::load(dir + "/config.json");
  CheckpointWeights w(dir);
  const ops::ComputeType ct = dtype ? *dtype : w.stored_compute_type();
  if (resolved) *resolved = ct;
  std::unique_ptr<EncoderModel> m = make_encoder(c, w, ct);
  w.check_all_used(dir + "/config.json");
  return m;
}

namespace detail {
Tensor pooler_output(const nn::Linear& dense, const float* first, const float* x, int64_t B, int64_t L, int64_t H) {
  OpTimer t("pooler");
  Tensor pooled = Tensor::empty({B, H});
  std::vector<float> cls(B * H);
  for (int64_t b = 0; b < B; ++b) std::memcpy(cls.data() + b * H, first ? first + b * H : x + b * L * H, sizeof(float) * H);
  dense.forward(nn::Context{}, pooled.f32(), cls.data(), B);
  ops::tanh_forward(pooled.f32(), pooled.f32(), B * H);
  return pooled;
}

std::vector<float> check_encoder_inputs(const EncoderConfig& c, const Tensor& input_ids, const Tensor& token_type_ids,
                                        const Tensor& attention_mask) {
  if (input_ids.ndim() != 2 || input_ids.dtype() != DType::I64)
    throw std::invalid_argument("input_ids must be an int64 tensor [batch, seq_len], got " + shape_str(input_ids.shape()));
  const int64_t B = input_ids.size(0), L = input_ids.size(1);
  if (L == 0) throw std::invalid_argument("input_ids is empty (seq_len 0)");
  if (L > c.max_position_embeddings)
    throw std::invalid_argument("sequence of " + std::to_string(L) + " tokens is longer than max_position_embeddings (" +
                                std::to_string(c.max_position_embeddings) + "); truncate the input");
  const int64_t* ids = input_ids.i64();
  for (int64_t i = 0; i < B * L; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab_size)
      throw std::invalid_argument("input_ids[" + std::to_string(i / L) + ", " + std::to_string(i % L) + "] = " +
                                  std::to_string(ids[i]) + " is outside the vocabulary [0, " +
                                  std::to_string(c.vocab_size) + ")");
  if (token_type_ids.defined()) {
    if (token_type_ids.shape() != input_ids.shape() || token_type_ids.dtype() != DType::I64)
      throw std::invalid_argument("token_type_ids must be int64 with the shape of input_ids " + shape_str(input_ids.shape()));
    for (int64_t i = 0; i < B * L; ++i)
      if (token_type_ids.i64()[i] < 0 || token_type_ids.i64()[i] >= c.type_vocab_size)
        throw std::invalid_argument("token_type_ids value " + std::to_string(token_type_ids.i64()[i]) +
                                    " is outside [0, " + std::to_string(c.type_vocab_size) + ")");
  }
  std::vector<float> key_mask(B * L, 1.0f);
  if (attention_mask.defined()) {
    if (attention_mask.shape() != input_ids.shape() || attention_mask.dtype() != DType::I64)
      throw std::invalid_argument("attention_mask must be int64 with the shape of input_ids " + shape_str(input_ids.shape()));
    for (int64_t i = 0; i < B * L; ++i) key_mask[i] = attention_mask.i64()[i] != 0 ? 1.0f : 0.0f;
  }
  return key_mask;
}
}  // namespace detail

}  // namespace tfm

#include "models/nomic_bert.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/profile.h"
#include "io/json_keys.h"
#include "io/json_util.h"
#include "models/registry.h"
#include "nn/layers.h"
#include "nn/params.h"
#include "nn/transformer_block.h"
#include "ops/embedding.h"

namespace tfm {

namespace {

bool is_gated(const std::string& activation) { return activation == "swiglu" || activation == "geglu"; }

// NomciBertGatedMLP: hidden_features rounded up to a multiple of multiple_of (256).
int64_t round_up_256(int64_t n) { return (n + 255) / 256 * 256; }

}  // namespace

nlohmann::json nomic_bert_config_as_bert(const nlohmann::json& j, const std::string& file) {
  nlohmann::json b = j;
  const int64_t H = json_int(j, "n_embd", file);
  const std::string activation = json_string_or(j, "activation_function", "swiglu", file);
  if (activation == "glu")  // read here, before hidden_act is: the message names the file's key
    throw std::runtime_error(file + ": key 'activation_function' 'glu' is not supported (swiglu, geglu, gelu, "
                             "gelu_new)");
  const bool gated = is_gated(activation);
  b["hidden_size"] = H;
  b["num_attention_heads"] = json_int(j, "n_head", file);
  b["num_hidden_layers"] = json_int(j, "n_layer", file);
  const bool inner_given = json_is_set(j, "n_inner");
  int64_t inner = inner_given ? json_int(j, "n_inner", file) : (gated ? 8 * H / 3 : 4 * H);
  if (gated) inner = round_up_256(inner);
  b["intermediate_size"] = inner;
  b["max_position_embeddings"] = json_int_or(j, "n_positions", 1024, file);
  b["layer_norm_eps"] = json_number_or(j, "layer_norm_epsilon", 1e-5, file);
  b["hidden_act"] = activation == "swiglu" ? "silu" : activation == "geglu" ? "gelu" : activation;
  b["type_vocab_size"] = std::max<int64_t>(1, json_int_or(j, "type_vocab_size", 2, file));
  return b;
}

NomicBertConfig NomicBertConfig::from(const EncoderConfig& c) {
  const nlohmann::json& j = c.json;
  const std::string& file = c.source;
  auto fail = [&](const std::string& key, const std::string& what) {
    throw std::runtime_error(file + ": key '" + key + "' " + what);
  };
  auto set = [&](const char* key) { return json_is_set(j, key); };
  NomicBertConfig m;
  const std::string activation = json_string_or(j, "activation_function", "swiglu", file);
  m.gated = is_gated(activation);
  m.act = ops::parse_activation(c.hidden_act);  // checked by EncoderConfig::from_json
  m.qkv_bias = json_bool_or(j, "qkv_proj_bias", true, file);
  m.fc1_bias = json_bool_or(j, "mlp_fc1_bias", true, file);
  m.fc2_bias = json_bool_or(j, "mlp_fc2_bias", true, file);
  m.token_types = json_int_or(j, "type_vocab_size", 2, file) > 0;
  if (json_bool_or(j, "prenorm", false, file)) fail("prenorm", "true is not supported (only post-norm, false)");
  if (json_bool_or(j, "causal", false, file)) fail("causal", "true is not supported (a bidirectional encoder)");
  if (json_int_or(j, "moe_every_n_layers", 0, file) > 0)
    fail("moe_every_n_layers", "> 0 (mixture-of-experts layers) is not supported");
  if (set("rotary_scaling_factor"))
    fail("rotary_scaling_factor", "is not supported (dynamic NTK rotary scaling); it must be null");
  if (set("rotary_emb_scale_base")) fail("rotary_emb_scale_base", "is not supported (xPos scaling); it must be null");
  if (json_bool_or(j, "rotary_emb_interleaved", false, file))
    fail("rotary_emb_interleaved", "true is not supported (only GPT-NeoX halves, false)");
  const double fraction = json_number_or(j, "rotary_emb_fraction", 0.0, file);
  if (!(fraction <= 1.0)) fail("rotary_emb_fraction", "must be at most 1");
  if (fraction > 0) {
    const double dim = (double)c.head_dim() * fraction;  // NomicBertAttention.rotary_emb_dim
    m.rotary_dim = (int64_t)dim;
    if ((double)m.rotary_dim != dim || m.rotary_dim % 2 != 0 || m.rotary_dim <= 0)
      fail("rotary_emb_fraction", "gives a rotary dimension of " + std::to_string(dim) + " (head_dim " +
                                      std::to_string(c.head_dim()) + "); it must be a positive even integer");
    m.rotary_base = json_number_or(j, "rotary_emb_base", 10000.0, file);
    if (!(m.rotary_base > 0)) fail("rotary_emb_base", "must be positive");
  }
  return m;
}

namespace {

// Base-model names, then the "bert."-prefixed names of NomicBertFor* checkpoints.
std::vector<std::string> nomic_aliases(const std::string& name) { return {"bert." + name}; }

// NomicBertBlock under lv ("encoder.layers.N"), post-norm: Wqkv / out_proj (bias qkv_proj_bias) with rotary
// positions, norm1; the gated MLP as one [2I, H] product: fc12 first (the activation's half, FeedForward's `a`)
// then fc11 (the gate it multiplies), fc2; norm2.
nn::EncoderBlock nomic_layer(const nn::Vars& lv, const EncoderConfig& c, const NomicBertConfig& m,
                             const nn::Rotary& rope, ops::ComputeType ct) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const float eps = (float)c.layer_norm_eps;
  nn::EncoderBlock b;
  b.norm_first = false;
  b.attention.num_heads = c.num_attention_heads;
  b.attention.hidden_size = H;
  b.attention.qkv = nn::Linear::load_packed({lv.prefix("attn.Wqkv")}, H, 3 * H, ct, m.qkv_bias);
  b.attention.output = nn::Linear::load_packed({lv.prefix("attn.out_proj")}, H, H, ct, m.qkv_bias);
  b.attention.rotary = rope;
  b.norm1 = nn::LayerNorm::load(lv.prefix("norm1"), H, eps);
  b.ffn.act = m.act;
  b.ffn.gated = m.gated;
  const std::vector<nn::Vars> fc1 = m.gated ? std::vector<nn::Vars>{lv.prefix("mlp.fc12"), lv.prefix("mlp.fc11")}
                                            : std::vector<nn::Vars>{lv.prefix("mlp.fc1")};
  b.ffn.linear1 = nn::Linear::load_packed(fc1, H, I, ct, m.fc1_bias);
  b.ffn.linear2 = nn::Linear::load_packed({lv.prefix("mlp.fc2")}, I, H, ct, m.fc2_bias);
  b.norm2 = nn::LayerNorm::load(lv.prefix("norm2"), H, eps);
  return b;
}

class NomicBert : public EncoderModel {
 public:
  NomicBert(const EncoderConfig& c, WeightSource& w, ops::ComputeType ct) : m_(NomicBertConfig::from(c)) {
    config_ = c;
    const int64_t H = c.hidden_size;
    const nn::Vars vb(w, nomic_aliases);
    const nn::Vars emb = vb.prefix("embeddings");
    // Unchecked: forward checks the rows it gathers (nn::Embeddings::forward_inference).
    emb_.word = emb.prefix("word_embeddings").get_unchecked("weight", {c.vocab_size, H});
    if (m_.token_types)
      emb_.type = emb.prefix("token_type_embeddings").get_unchecked("weight", {c.type_vocab_size, H});
    if (m_.rotary_dim == 0)
      emb_.position = emb.prefix("position_embeddings").get_unchecked("weight", {c.max_position_embeddings, H});
    emb_.norm = nn::LayerNorm::load(vb.prefix("emb_ln"), H, (float)c.layer_norm_eps);
    emb_.dim = H;
    emb_.type_first = true;  // NomicBertEmbeddings: word, then + token type, then + position
    const nn::Rotary rope = m_.rotary_dim > 0 ? nn::Rotary::make(m_.rotary_base, m_.rotary_dim) : nn::Rotary{};
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      layers_.push_back(nomic_layer(vb.prefix("encoder.layers").prefix(i), c, m_, rope, ct));
  }
  EncoderOutput forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                        bool all_layers) const override {
    return run(input_ids, token_type_ids, attention_mask, all_layers, /*unpadded=*/false);
  }
  // The real tokens only (nn::encoder_stack_inference): rotary positions restart in each sentence, as on the
  // padded path of a right-padded batch. Padded rows are 0.
  EncoderOutput forward_unpadded(const Tensor& input_ids, const Tensor& token_type_ids,
                                 const Tensor& attention_mask) const override {
    return run(input_ids, token_type_ids, attention_mask, false, /*unpadded=*/true);
  }

 private:
  EncoderOutput run(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                    bool all_layers, bool unpadded) const {
    const EncoderConfig& c = config_;
    const Tensor tt_ids = emb_.type.defined() ? token_type_ids : Tensor();
    std::vector<float> key_mask = detail::check_encoder_inputs(c, input_ids, tt_ids, attention_mask);
    const int64_t B = input_ids.size(0), L = input_ids.size(1), H = c.hidden_size, N = B * L;
    const int64_t* ids = input_ids.i64();
    const int64_t* tt = tt_ids.defined() ? tt_ids.i64() : nullptr;
    EncoderOutput out;
    Tensor x = Tensor::empty({B, L, H}), hs;
    if (all_layers) hs = Tensor::empty({c.num_hidden_layers + 1, B, L, H});
    float* X = x.f32();
    {
      OpTimer t("embeddings");
      emb_.forward_inference(X, ids, nullptr, tt, N, L);
    }
    if (all_layers) std::memcpy(hs.f32(), X, sizeof(float) * N * H);
    const bool gather = unpadded && nn::real_tokens_contiguous(key_mask.data(), B, L);
    nn::encoder_stack_inference(layers_, X, B, L, key_mask.data(), gather, all_layers ? hs.f32() : nullptr);
    for (int64_t n = 0; n < N && unpadded; ++n)  // padded rows 0
      if (key_mask[n] == 0.0f) std::memset(X + n * H, 0, sizeof(float) * H);
    out.last_hidden_state = x;
    out.hidden_states = hs;
    return out;
  }

  NomicBertConfig m_;
  nn::Embeddings emb_;  // word, token type, absolute positions (without rotary), emb_ln
  std::vector<nn::EncoderBlock> layers_;
};

}  // namespace

std::unique_ptr<EncoderModel> make_nomic_bert(const EncoderConfig& config, WeightSource& weights,
                                              ops::ComputeType dtype) {
  return std::make_unique<NomicBert>(config, weights, dtype);
}

// ---------------------------------------------------------------- the family's entry (models/registry.h)

// Inference only: no task heads (the published checkpoints are embedders) and no fine-tuning yet.
const ModelFamily& nomic_bert_family() {
  static const ModelFamily f{
      .name = "nomic_bert",
      .model_types = {{"nomic_bert", "NomicBert"}},
      .config_as_bert = nomic_bert_config_as_bert,
      .check_config = [](const EncoderConfig& c) { NomicBertConfig::from(c); },
      .make_encoder = make_nomic_bert,
      // nomic_bert_config_as_bert writes BERT's names from the keys below; a config.json's own hidden_size, ... (if
      // any) are not read.
      .config_keys = detail::encoder_config_keys({
          {"hidden_size", "", ConfigKeyRole::Ignored},
          {"num_hidden_layers", "", ConfigKeyRole::Ignored},
          {"num_attention_heads", "", ConfigKeyRole::Ignored},
          {"intermediate_size", "", ConfigKeyRole::Ignored},
          {"max_position_embeddings", "", ConfigKeyRole::Ignored},
          {"layer_norm_eps", "1e-12", ConfigKeyRole::Ignored},
          {"hidden_act", "\"gelu\"", ConfigKeyRole::Ignored},
          {"type_vocab_size", "2", ConfigKeyRole::Size},
          {"n_embd", "", ConfigKeyRole::Size},
          {"n_head", "", ConfigKeyRole::Value},
          {"n_layer", "", ConfigKeyRole::Size},
          {"n_inner", "(8 n_embd / 3 gated, 4 n_embd)", ConfigKeyRole::Size},  // rounded up to 256 when gated
          {"n_positions", "1024", ConfigKeyRole::Size},
          {"layer_norm_epsilon", "1e-05", ConfigKeyRole::Value},
          {"activation_function", "\"swiglu\"", ConfigKeyRole::Value},
          {"qkv_proj_bias", "true", ConfigKeyRole::Size},
          {"mlp_fc1_bias", "true", ConfigKeyRole::Size},
          {"mlp_fc2_bias", "true", ConfigKeyRole::Size},
          {"rotary_emb_fraction", "0.0", ConfigKeyRole::Value},
          {"rotary_emb_base", "10000.0", ConfigKeyRole::Value},  // read when rotary_emb_fraction > 0
          {"prenorm", "false", ConfigKeyRole::Checked},
          {"causal", "false", ConfigKeyRole::Checked},
          {"moe_every_n_layers", "0", ConfigKeyRole::Checked},
          {"rotary_scaling_factor", "null", ConfigKeyRole::Checked},
          {"rotary_emb_scale_base", "null", ConfigKeyRole::Checked},
          {"rotary_emb_interleaved", "false", ConfigKeyRole::Checked},
      }),
  };
  return f;
}

}  // namespace tfm

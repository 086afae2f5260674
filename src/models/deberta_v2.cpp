#include "models/deberta_v2.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/profile.h"
#include "io/json_util.h"
#include "models/checkpoint_weights.h"
#include "models/registry.h"
#include "nn/disentangled_attention.h"
#include "nn/layers.h"
#include "nn/params.h"
#include "nn/transformer_block.h"
#include "ops/embedding.h"

namespace tfm {

nlohmann::json deberta_v2_config_as_bert(const nlohmann::json& j, const std::string&) {
  nlohmann::json b = j;
  if (!b.is_object()) return b;
  // DebertaV2Config's defaults (deberta-v2-xlarge's sizes) for the keys BERT's reader requires.
  const std::pair<const char*, int64_t> defaults[] = {
      {"vocab_size", 128100},      {"hidden_size", 1536},        {"num_hidden_layers", 24},
      {"num_attention_heads", 24}, {"intermediate_size", 6144},  {"max_position_embeddings", 512},
      {"type_vocab_size", 0}};
  for (const auto& [key, value] : defaults)
    if (!b.contains(key)) b[key] = value;
  if (!b.contains("layer_norm_eps")) b["layer_norm_eps"] = 1e-7;
  if (b["type_vocab_size"].is_number_integer() && b["type_vocab_size"].get<int64_t>() == 0) b["type_vocab_size"] = 1;
  return b;
}

DebertaV2Config DebertaV2Config::from(const EncoderConfig& c) {
  const nlohmann::json& j = c.json;
  const std::string& file = c.source;
  auto fail = [&](const std::string& key, const std::string& what) {
    throw std::runtime_error(file + ": key '" + key + "' " + what);
  };
  DebertaV2Config m;
  m.embedding_size = json_int_or(j, "embedding_size", c.hidden_size, file);
  if (m.embedding_size <= 0) fail("embedding_size", "must be positive");
  m.position_biased_input = json_bool_or(j, "position_biased_input", true, file);
  m.token_types = json_int_or(j, "type_vocab_size", 0, file) > 0;
  m.relative_attention = json_bool_or(j, "relative_attention", false, file);
  m.position_buckets = json_int_or(j, "position_buckets", -1, file);
  m.max_relative_positions = json_int_or(j, "max_relative_positions", -1, file);
  if (m.max_relative_positions < 1) m.max_relative_positions = c.max_position_embeddings;
  m.span = m.position_buckets > 0 ? m.position_buckets : m.max_relative_positions;
  if (m.position_buckets > 0 && m.position_buckets < 2) fail("position_buckets", "must be at least 2 (or <= 0)");
  if (m.position_buckets > 0 && m.max_relative_positions <= m.position_buckets / 2 + 1)
    fail("max_relative_positions", "must exceed position_buckets / 2 + 1 (the log buckets divide by its log)");
  if (m.span > (1 << 16)) fail(m.position_buckets > 0 ? "position_buckets" : "max_relative_positions", "exceeds 65536");
  if (j.contains("pos_att_type") && !j["pos_att_type"].is_null()) {
    std::vector<std::string> types;
    const nlohmann::json& p = j["pos_att_type"];
    if (p.is_string()) {  // DebertaV2Config splits "p2c|c2p"
      std::string s = p.get<std::string>(), cur;
      for (char ch : s + "|") {
        if (ch == '|') {
          types.push_back(cur);
          cur.clear();
        } else if (ch != ' ') {
          cur += (char)std::tolower((unsigned char)ch);
        }
      }
    } else if (p.is_array()) {
      for (const auto& t : p) {
        if (!t.is_string()) fail("pos_att_type", "must be a list of strings");
        types.push_back(t.get<std::string>());
      }
    } else {
      fail("pos_att_type", "must be a list or a '|'-separated string");
    }
    for (const std::string& t : types) {
      if (t == "c2p") m.c2p = true;
      else if (t == "p2c") m.p2c = true;
      else if (!t.empty()) fail("pos_att_type", "entry '" + t + "' is not supported (c2p, p2c)");
    }
  }
  const std::string norm = json_string_or(j, "norm_rel_ebd", "none", file);
  for (size_t a = 0; a <= norm.size();) {  // "layer_norm", "none", or '|'-separated
    size_t e = norm.find('|', a);
    if (e == std::string::npos) e = norm.size();
    std::string t = norm.substr(a, e - a);
    t.erase(0, t.find_first_not_of(' '));
    t.erase(t.find_last_not_of(' ') + 1);
    for (char& ch : t) ch = (char)std::tolower((unsigned char)ch);
    if (t == "layer_norm") m.norm_rel_ebd = true;
    else if (t != "none" && !t.empty()) fail("norm_rel_ebd", "'" + norm + "' is not supported (none, layer_norm)");
    a = e + 1;
  }
  m.share_att_key = json_bool_or(j, "share_att_key", false, file);
  if (json_int_or(j, "conv_kernel_size", 0, file) > 0)
    fail("conv_kernel_size", "> 0 (DeBERTa-v2's ConvLayer after the first layer) is not supported");
  if (json_int_or(j, "attention_head_size", c.head_dim(), file) != c.head_dim())
    fail("attention_head_size", "other than hidden_size / num_attention_heads is not supported");
  if (json_int_or(j, "pooler_hidden_size", c.hidden_size, file) != c.hidden_size)
    fail("pooler_hidden_size", "other than hidden_size is not supported");
  try {
    m.pooler_act = ops::parse_activation(json_string_or(j, "pooler_hidden_act", "gelu", file));
  } catch (const std::exception& e) {
    fail("pooler_hidden_act", e.what());
  }
  return m;
}

namespace {

// Base-model names, then the "deberta."-prefixed names of the DebertaV2For* checkpoints.
std::vector<std::string> deberta_aliases(const std::string& name) { return {"deberta." + name}; }

// rel_embeddings' rows through a packed product w [out, H] (+ bias): [rows, out].
std::vector<float> project(const nn::Linear& w, const std::vector<float>& x, int64_t rows) {
  std::vector<float> y(rows * w.out_features);
  w.forward_inference(y.data(), x.data(), rows);
  return y;
}

// One DebertaV2Layer under lv ("encoder.layer.N"), post-LN: attention.self.{query,key,value}_proj packed as one
// q | k | v product; attention.output.{dense,LayerNorm}; intermediate.dense; output.{dense,LayerNorm}. Its
// disentangled bias: pos_query / pos_key the projections of rel [2 span, H].
nn::EncoderBlock deberta_layer(const nn::Vars& lv, const EncoderConfig& c, const DebertaV2Config& m,
                               const std::vector<float>& rel, ops::ComputeType ct) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const float eps = (float)c.layer_norm_eps;
  const nn::Vars self = lv.prefix("attention.self");
  nn::EncoderBlock b;
  b.attention.num_heads = c.num_attention_heads;
  b.attention.hidden_size = H;
  b.attention.qkv = nn::Linear::load_packed({self.prefix("query_proj"), self.prefix("key_proj"),
                                             self.prefix("value_proj")}, H, H, ct);
  b.attention.output = nn::Linear::load_packed({lv.prefix("attention.output.dense")}, H, H, ct);
  b.norm1 = nn::LayerNorm::load(lv.prefix("attention.output.LayerNorm"), H, eps);
  b.ffn.act = ops::parse_activation(c.hidden_act);
  b.ffn.linear1 = nn::Linear::load_packed({lv.prefix("intermediate.dense")}, H, I, ct);
  b.ffn.linear2 = nn::Linear::load_packed({lv.prefix("output.dense")}, I, H, ct);
  b.norm2 = nn::LayerNorm::load(lv.prefix("output.LayerNorm"), H, eps);

  auto d = std::make_shared<nn::DisentangledAttention>();
  d->num_heads = c.num_attention_heads;
  d->head_dim = c.head_dim();
  d->span = m.span;
  d->bucket_size = m.position_buckets;
  d->max_position = m.max_relative_positions;
  d->c2p = m.relative_attention && m.c2p;
  d->p2c = m.relative_attention && m.p2c;
  const int64_t R = 2 * m.span;
  if (m.share_att_key && (d->c2p || d->p2c)) {  // query_proj / key_proj of rel: the q and k columns of one product
    const std::vector<float> qkv = project(b.attention.qkv, rel, R);
    if (d->p2c) d->pos_query.resize(R * H);
    if (d->c2p) d->pos_key.resize(R * H);
    for (int64_t r = 0; r < R; ++r) {
      if (d->p2c) std::memcpy(d->pos_query.data() + r * H, qkv.data() + r * 3 * H, sizeof(float) * H);
      if (d->c2p) std::memcpy(d->pos_key.data() + r * H, qkv.data() + r * 3 * H + H, sizeof(float) * H);
    }
  } else {
    if (d->c2p) d->pos_key = project(nn::Linear::load_packed({self.prefix("pos_key_proj")}, H, H, ct), rel, R);
    if (d->p2c) d->pos_query = project(nn::Linear::load_packed({self.prefix("pos_query_proj")}, H, H, ct), rel, R);
  }
  // relative_attention false: no bias, but the scores keep scale 1 / sqrt(head_dim * scale_factor) (as published).
  if (!m.relative_attention) d->factor = 1 + (m.c2p ? 1 : 0) + (m.p2c ? 1 : 0);
  b.attention.disentangled = std::move(d);
  return b;
}

std::optional<HeadKind> detect_deberta_head(const CheckpointWeights& w) {
  if (w.has("pooler.dense.weight") && w.has("classifier.weight")) return HeadKind::SequenceClassification;
  if (w.has("classifier.weight")) return HeadKind::TokenClassification;
  return std::nullopt;
}

HeadLayout load_deberta_head(HeadKind kind, const EncoderConfig& c, CheckpointWeights& w) {
  const int64_t H = c.hidden_size;
  HeadLayout head;
  head.input = HeadInput::FirstToken;  // ContextPooler: hidden_states[:, 0]
  if (kind == HeadKind::SequenceClassification) {
    HeadStage pooler, classifier;
    pooler.linear = nn::Linear::load(nn::Vars(w).prefix("pooler.dense"), H, H);
    pooler.act = DebertaV2Config::from(c).pooler_act;
    classifier.linear = detail::load_head_linear(w, {"classifier"}, H);
    head.stages = {std::move(pooler), std::move(classifier)};
  } else if (kind == HeadKind::TokenClassification) {
    HeadStage classifier;
    classifier.linear = detail::load_head_linear(w, {"classifier"}, H);
    head.stages = {std::move(classifier)};
  } else {
    throw std::runtime_error(w.path() + ": DeBERTa-v2 has sequence and token classification heads here; its masked-LM "
                             "head (DebertaV2ForMaskedLM) is not supported");
  }
  return head;
}

class DebertaV2 : public EncoderModel {
 public:
  DebertaV2(const EncoderConfig& c, WeightSource& w, ops::ComputeType ct) : m_(DebertaV2Config::from(c)) {
    config_ = c;
    const int64_t H = c.hidden_size, E = m_.embedding_size;
    const nn::Vars vb(w, deberta_aliases);
    const nn::Vars emb = vb.prefix("embeddings");
    // Unchecked: forward checks the rows it gathers (nn::Embeddings::forward_inference).
    emb_.word = emb.prefix("word_embeddings").get_unchecked("weight", {c.vocab_size, E});
    if (m_.position_biased_input)
      emb_.position = emb.prefix("position_embeddings").get_unchecked("weight", {c.max_position_embeddings, E});
    else if (emb.has("position_embeddings.weight"))  // stored by some checkpoints, unused (HF ignores it too)
      emb.prefix("position_embeddings").get_unchecked("weight", {c.max_position_embeddings, E});
    if (m_.token_types)
      emb_.type = emb.prefix("token_type_embeddings").get_unchecked("weight", {c.type_vocab_size, E});
    // DebertaV2Embeddings projects the sum before its LayerNorm: the module's norm is the identity, emb_ln_ follows.
    if (E != H) emb_.project = nn::Linear::load_packed({emb.prefix("embed_proj")}, E, H, ct, /*has_bias=*/false);
    emb_.norm = nn::LayerNorm::identity(E);
    emb_.dim = E;
    emb_ln_ = nn::LayerNorm::load(emb.prefix("LayerNorm"), H, (float)c.layer_norm_eps);
    std::vector<float> rel;
    if (m_.relative_attention) {
      // DebertaV2Encoder.get_rel_embedding: rel_embeddings [2 span, H], LayerNorm'd when norm_rel_ebd says so.
      const int64_t R = 2 * m_.span;
      const nn::Param table = vb.prefix("encoder.rel_embeddings").get("weight", {R, H});
      rel.assign(table.data(), table.data() + R * H);
      if (m_.norm_rel_ebd)
        nn::LayerNorm::load(vb.prefix("encoder.LayerNorm"), H, (float)c.layer_norm_eps).forward_inference(
            rel.data(), rel.data(), R);
    }
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      layers_.push_back(deberta_layer(vb.prefix("encoder.layer").prefix(l), c, m_, rel, ct));
  }
  EncoderOutput forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                        bool all_layers) const override {
    return run(input_ids, token_type_ids, attention_mask, all_layers, /*unpadded=*/false);
  }
  // The real tokens only (nn::encoder_stack_inference): each sentence's relative positions are its own, as in the
  // padded row when its real tokens are one run (otherwise the stack runs padded). Padded rows are 0.
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
    const int64_t B = input_ids.size(0), L = input_ids.size(1), H = c.hidden_size;
    const int64_t N = B * L;
    const int64_t* ids = input_ids.i64();
    const int64_t* tt = tt_ids.defined() ? tt_ids.i64() : nullptr;
    EncoderOutput out;
    Tensor x = Tensor::empty({B, L, H}), hs;
    if (all_layers) hs = Tensor::empty({c.num_hidden_layers + 1, B, L, H});
    float* X = x.f32();
    {
      OpTimer t("embeddings");
      // DebertaV2Embeddings: word (+ position) (+ token type), E wide; embed_proj; LayerNorm; times the mask.
      emb_.forward_inference(X, ids, nullptr, tt, N, L);
      emb_ln_.forward_inference(X, X, N);
      for (int64_t n = 0; n < N; ++n)
        if (key_mask[n] == 0.0f) std::memset(X + n * H, 0, sizeof(float) * H);
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

  DebertaV2Config m_;
  nn::Embeddings emb_;   // word (+ position) (+ token type), E wide, then embed_proj
  nn::LayerNorm emb_ln_;  // after the projection
  std::vector<nn::EncoderBlock> layers_;
};

}  // namespace

std::unique_ptr<EncoderModel> make_deberta_v2(const EncoderConfig& config, WeightSource& weights,
                                              ops::ComputeType dtype) {
  return std::make_unique<DebertaV2>(config, weights, dtype);
}

FamilyHeads deberta_v2_heads() { return {detect_deberta_head, load_deberta_head}; }

// ---------------------------------------------------------------- the family's entry (models/registry.h)

// Inference (encode, embed, classify, rerank, token classification); no fine-tuning yet (the disentangled bias has
// no backward).
const ModelFamily& deberta_v2_family() {
  static const ModelFamily f{
      .name = "deberta-v2",
      .model_types = {{"deberta-v2", "DebertaV2"}},
      .config_as_bert = deberta_v2_config_as_bert,
      .check_config = [](const EncoderConfig& c) { DebertaV2Config::from(c); },
      .make_encoder = make_deberta_v2,
      .heads = deberta_v2_heads,
      // DebertaV2Config's defaults. hidden_act, layer_norm_eps and pooler_hidden_act have no fixture away from their
      // defaults yet (tests/test_config_keys.cpp lists them as pending; issue 48).
      .config_keys = detail::encoder_config_keys({
          {"type_vocab_size", "0", ConfigKeyRole::Size},
          {"layer_norm_eps", "1e-07", ConfigKeyRole::Value},
          {"embedding_size", "(hidden_size)", ConfigKeyRole::Size},  // embed_proj when != hidden_size
          {"attention_head_size", "(hidden_size / num_attention_heads)", ConfigKeyRole::Checked},
          {"conv_kernel_size", "0", ConfigKeyRole::Checked},        // > 0 (v2-xlarge's ConvLayer) refused
          {"pooler_hidden_size", "(hidden_size)", ConfigKeyRole::Checked},
          {"pooler_hidden_act", "\"gelu\"", ConfigKeyRole::Value},
          {"relative_attention", "false", ConfigKeyRole::Value},
          {"max_relative_positions", "-1", ConfigKeyRole::Value},
          {"position_buckets", "-1", ConfigKeyRole::Value},
          {"position_biased_input", "true", ConfigKeyRole::Value},
          {"share_att_key", "false", ConfigKeyRole::Value},
          {"norm_rel_ebd", "\"none\"", ConfigKeyRole::Value},
      }),
  };
  return f;
}

}  // namespace tfm

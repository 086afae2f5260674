#include "models/modernbert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/profile.h"
#include "io/json_util.h"
#include "models/checkpoint_weights.h"
#include "nn/layers.h"
#include "nn/params.h"
#include "nn/transformer_block.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/local_attention.h"
#include "ops/rotary.h"
#include "models/registry.h"

namespace tfm {

ModernBertConfig ModernBertConfig::from(const EncoderConfig& c) {
  const nlohmann::json& j = c.json;
  const std::string& file = c.source;
  ModernBertConfig m;
  auto fail = [&](const std::string& key, const std::string& what) {
    throw std::runtime_error(file + ": key '" + key + "' " + what);
  };
  auto activation = [&](const char* key, const std::string& fallback) {
    const std::string name = json_string_or(j, key, fallback, file);
    try {
      return ops::parse_activation(name);
    } catch (const std::invalid_argument& e) {
      fail(key, e.what());
    }
    return ops::Activation::Gelu;
  };
  m.norm_eps = json_number_or(j, "norm_eps", 1e-5, file);
  if (!(m.norm_eps > 0)) fail("norm_eps", "must be positive");
  m.norm_bias = json_bool_or(j, "norm_bias", false, file);
  m.attention_bias = json_bool_or(j, "attention_bias", false, file);
  m.mlp_bias = json_bool_or(j, "mlp_bias", false, file);
  m.hidden_activation = activation("hidden_activation", "gelu");
  m.classifier_activation = activation("classifier_activation", "gelu");
  m.classifier_bias = json_bool_or(j, "classifier_bias", false, file);
  m.decoder_bias = json_bool_or(j, "decoder_bias", true, file);
  m.classifier_pooling = json_string_or(j, "classifier_pooling", "cls", file);
  if (m.classifier_pooling != "cls" && m.classifier_pooling != "mean")
    fail("classifier_pooling", "must be \"cls\" or \"mean\", found \"" + m.classifier_pooling + "\"");
  m.local_attention = json_int_or(j, "local_attention", 128, file);
  if (m.local_attention < 0) fail("local_attention", "must not be negative");
  if (c.head_dim() % 2 != 0)
    throw std::runtime_error(file + ": head_dim (hidden_size / num_attention_heads = " + std::to_string(c.head_dim()) +
                             ") must be even for rotary embeddings");

  const int64_t NL = c.num_hidden_layers;
  m.global_layer.assign(NL, false);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const nlohmann::json& t = j["layer_types"];
    if (!t.is_array() || (int64_t)t.size() != NL)
      fail("layer_types", "must be a list of num_hidden_layers (" + std::to_string(NL) + ") strings");
    for (int64_t i = 0; i < NL; ++i) {
      const std::string s = t[i].is_string() ? t[i].get<std::string>() : "";
      if (s != "full_attention" && s != "sliding_attention")
        fail("layer_types", "entry " + std::to_string(i) + " must be \"full_attention\" or \"sliding_attention\"");
      m.global_layer[i] = s == "full_attention";
    }
  } else {
    const int64_t n = json_int_or(j, "global_attn_every_n_layers", 3, file);
    if (n <= 0) fail("global_attn_every_n_layers", "must be positive, found " + std::to_string(n));
    for (int64_t i = 0; i < NL; ++i) m.global_layer[i] = i % n == 0;
  }

  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) fail("rope_scaling", "is not supported");
  m.global_rope_theta = json_number_or(j, "global_rope_theta", 160000.0, file);
  // Older configs may say local_rope_theta null: the local layers then use the global theta (modeling_modernbert.py
  // before rope_parameters).
  const bool local_null = j.contains("local_rope_theta") && j["local_rope_theta"].is_null();
  m.local_rope_theta = local_null ? m.global_rope_theta : json_number_or(j, "local_rope_theta", 10000.0, file);
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const nlohmann::json& rp = j["rope_parameters"];
    if (!rp.is_object()) fail("rope_parameters", "must be an object");
    for (const char* kind : {"full_attention", "sliding_attention"}) {
      if (!rp.contains(kind) || rp[kind].is_null()) continue;
      const nlohmann::json& p = rp[kind];
      const std::string key = std::string("rope_parameters.") + kind;
      if (!p.is_object()) fail(key, "must be an object");
      const std::string type = json_string_or(p, "rope_type", "default", file);
      if (type != "default") fail(key + ".rope_type", "'" + type + "' is not supported (only 'default')");
      double& theta = std::string(kind) == "full_attention" ? m.global_rope_theta : m.local_rope_theta;
      theta = json_number_or(p, "rope_theta", theta, file);
    }
  }
  if (!(m.global_rope_theta > 0)) fail("global_rope_theta", "must be positive");
  if (!(m.local_rope_theta > 0)) fail("local_rope_theta", "must be positive");
  return m;
}

namespace {

std::vector<std::string> modernbert_aliases(const std::string& name) { return {"model." + name}; }

// A Linear of the checkpoint, packed for ct: "<vb>.weight" [out, in] and, when has_bias, "<vb>.bias" [out].
// Weights stored prequantised (I8 + "_scale") are used as stored for ct int8 and dequantised otherwise.
nn::Linear load_linear(const nn::Vars& vb, int64_t in, int64_t out, bool has_bias, ops::ComputeType ct) {
  if (has_bias) return nn::Linear::load_packed({vb}, in, out, ct);
  nn::Linear l;
  l.in_features = in;
  l.out_features = out;
  const float* scale = nullptr;
  if (const int8_t* q = vb.get_int8("weight", {out, in}, &scale)) {
    if (ct == ops::ComputeType::I8) {
      l.packed = ops::PackedLinear::from_int8(q, scale, nullptr, in, out);
    } else {
      std::vector<float> w(out * in);
      for (int64_t r = 0; r < out; ++r)
        for (int64_t c = 0; c < in; ++c) w[r * in + c] = (float)q[r * in + c] * scale[r];
      l.packed = ops::PackedLinear(w.data(), nullptr, in, out, ct);
    }
    vb.release_bytes(q, (size_t)(out * in));
    return l;
  }
  nn::Param w = vb.get("weight", {out, in});
  l.packed = ops::PackedLinear(w.data(), nullptr, in, out, ct);
  vb.release(w);
  return l;
}

// ModernBertModel's tensors under vb: the embeddings, the layers (LayerT: a struct with ModernBERT's layer fields,
// the inference Layer below or ModernBertTrainable::Layer), the final norm. Every Linear is read by
// load_linear(vb, in, out, has_bias): packed for inference, or trainable parameters of a ParamStore.
template <class LayerT, class LoadLinear>
void read_modernbert(const nn::Vars& vb, const EncoderConfig& c, const ModernBertConfig& m, nn::Param& tok,
                     nn::LayerNorm& emb_norm, std::vector<LayerT>& layers, nn::LayerNorm& final_norm,
                     const LoadLinear& load_linear) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const float eps = (float)m.norm_eps;
  // Unchecked from a file: inference reads only the rows of its ids and checks those (detail::check_gathered_rows);
  // a ParamStore registers it as get() would.
  tok = vb.prefix("embeddings.tok_embeddings").get_unchecked("weight", {c.vocab_size, H});
  emb_norm = nn::LayerNorm::load(vb.prefix("embeddings.norm"), H, eps, m.norm_bias);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const nn::Vars lv = vb.prefix("layers").prefix(i);
    LayerT L;
    L.global = m.global_layer[i];
    L.has_attn_norm = i > 0;  // layer 0: nn.Identity
    if (L.has_attn_norm) L.attn_norm = nn::LayerNorm::load(lv.prefix("attn_norm"), H, eps, m.norm_bias);
    L.wqkv = load_linear(lv.prefix("attn.Wqkv"), H, 3 * H, m.attention_bias);
    L.wo = load_linear(lv.prefix("attn.Wo"), H, H, m.attention_bias);
    L.mlp_norm = nn::LayerNorm::load(lv.prefix("mlp_norm"), H, eps, m.norm_bias);
    L.wi = load_linear(lv.prefix("mlp.Wi"), H, 2 * I, m.mlp_bias);
    L.mlp_wo = load_linear(lv.prefix("mlp.Wo"), I, H, m.mlp_bias);
    layers.push_back(std::move(L));
  }
  final_norm = nn::LayerNorm::load(vb.prefix("final_norm"), H, eps, m.norm_bias);
}

struct Layer {
  bool global = true;
  bool has_attn_norm = false;  // layer 0: identity
  nn::LayerNorm attn_norm, mlp_norm;
  nn::Linear wqkv, wo, wi, mlp_wo;
};

class ModernBert : public EncoderModel {
 public:
  ModernBert(const EncoderConfig& c, WeightSource& w, ops::ComputeType ct) : m_(ModernBertConfig::from(c)) {
    config_ = c;
    const nn::Vars vb(w, modernbert_aliases);
    read_modernbert(vb, c, m_, tok_, emb_norm_, layers_, final_norm_,
                    [ct](const nn::Vars& v, int64_t in, int64_t out, bool bias) { return load_linear(v, in, out, bias, ct); });
  }

  EncoderOutput forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                        bool all_layers) const override {
    return run(input_ids, token_type_ids, attention_mask, all_layers, /*unpadded=*/false);
  }
  // The real tokens only, as modeling_modernbert.py's unpadded (flash-attention) path: every layer on the T real
  // tokens, rotary angles at each token's column in the padded row, global attention and the sliding window
  // inside each sentence. Equal to forward on the real tokens when each row's real tokens are one run (the window
  // and the rotary products depend on j - i only); a row with a hole in its mask runs padded.
  EncoderOutput forward_unpadded(const Tensor& input_ids, const Tensor& token_type_ids,
                                 const Tensor& attention_mask) const override {
    return run(input_ids, token_type_ids, attention_mask, false, /*unpadded=*/true);
  }

  const ModernBertConfig& modernbert_config() const { return m_; }

 private:
  EncoderOutput run(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                    bool all_layers, bool unpadded) const {
    const EncoderConfig& c = config_;
    // token_type_ids are checked for shape and range as for every encoder, then ignored.
    std::vector<float> key_mask = detail::check_encoder_inputs(c, input_ids, token_type_ids, attention_mask);
    const int64_t B = input_ids.size(0), L = input_ids.size(1), H = c.hidden_size;
    const int64_t N = B * L, NL = c.num_hidden_layers;
    bool padded = false;
    for (float v : key_mask) padded |= v == 0.0f;
    // Unpadded: the real tokens gathered row after row; rows[t] is token t's padded row, start[b] the column of
    // row b's first real token (its rotary offset).
    const bool gather = unpadded && padded && nn::real_tokens_contiguous(key_mask.data(), B, L);
    std::vector<int64_t> rows, offsets, start;
    std::vector<int64_t> ids(input_ids.i64(), input_ids.i64() + N);
    if (gather) {
      offsets.assign(B + 1, 0);
      start.assign(B, 0);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t l = L - 1; l >= 0; --l)
          if (key_mask[b * L + l] != 0.0f) start[b] = l;
        for (int64_t l = 0; l < L; ++l)
          if (key_mask[b * L + l] != 0.0f) rows.push_back(b * L + l);
        offsets[b + 1] = (int64_t)rows.size();
      }
      for (size_t t = 0; t < rows.size(); ++t) ids[t] = ids[rows[t]];
      ids.resize(rows.size());
    }
    const int64_t T = gather ? (int64_t)rows.size() : N;
    EncoderOutput out;
    if (T == 0) {  // nothing but padding
      out.last_hidden_state = Tensor::zeros({B, L, H});
      return out;
    }

    Tensor hs;
    if (all_layers) hs = Tensor::empty({NL + 1, B, L, H});
    Tensor x = Tensor::empty({B, L, H});
    std::vector<float> packed(gather ? T * H : 0);
    float* X = gather ? packed.data() : x.f32();
    {
      OpTimer t("embeddings");
      ops::embedding_forward(X, ids.data(), tok_.data(), T, c.vocab_size, H);
      detail::check_gathered_rows(X, T, H, {{"embeddings.tok_embeddings.weight", tok_.data(),
                                              [&](int64_t n) { return ids[n]; }}});
      emb_norm_.forward_inference(X, X, T);
    }
    if (all_layers) std::memcpy(hs.f32(), X, sizeof(float) * N * H);
    Stack st{B, L, padded && !gather ? key_mask.data() : nullptr, gather ? offsets.data() : nullptr,
             gather ? start.data() : nullptr};
    layers_forward(X, T, st, all_layers ? hs.f32() + N * H : nullptr);
    final_norm_.forward_inference(X, X, T);
    if (gather) {  // scattered back; padded rows 0
      float* Y = x.f32();
      std::memset(Y, 0, sizeof(float) * N * H);
      for (int64_t t = 0; t < T; ++t) std::memcpy(Y + rows[t] * H, X + t * H, sizeof(float) * H);
    } else if (unpadded) {  // ran padded (a hole in a row's mask): the padded rows 0 all the same
      for (int64_t n = 0; n < N; ++n)
        if (key_mask[n] == 0.0f) std::memset(X + n * H, 0, sizeof(float) * H);
    }
    out.last_hidden_state = x;
    out.hidden_states = hs;
    return out;
  }

  // The layout the layers run on: a padded batch [B, L] (key_mask or null), or an unpadded one (offsets [B + 1]
  // into the gathered rows, start[b] the padded column of sentence b's first token).
  struct Stack {
    int64_t B, L;
    const float* key_mask;
    const int64_t* offsets;
    const int64_t* start;
  };

  // Every layer in place on X [n, H] (n = B * L padded, T unpadded). hidden_states (padded only): slot l holds layer
  // l's output [B, L, H].
  void layers_forward(float* X, int64_t n, const Stack& st, float* hidden_states) const {
    const EncoderConfig& c = config_;
    const int64_t B = st.B, L = st.L, H = c.hidden_size, I = c.intermediate_size;
    const int64_t nh = c.num_attention_heads, hd = c.head_dim(), half = hd / 2;
    // Rotary tables [L, head_dim / 2] of the two thetas (only those some layer uses).
    std::vector<float> gcos, gsin, lcos, lsin;
    bool any_global = false, any_local = false;
    for (const Layer& ly : layers_) (ly.global ? any_global : any_local) = true;
    if (any_global) {
      gcos.resize(L * half), gsin.resize(L * half);
      ops::rotary_tables(gcos.data(), gsin.data(), L, hd, m_.global_rope_theta);
    }
    if (any_local) {
      lcos.resize(L * half), lsin.resize(L * half);
      ops::rotary_tables(lcos.data(), lsin.data(), L, hd, m_.local_rope_theta);
    }
    std::vector<float> h(n * H), qkv(n * 3 * H), ctx(n * H), a(n * H), inter(n * 2 * I), gated(n * I);
    ops::AttentionDims dims;
    dims.batch = B;
    dims.q_len = dims.kv_len = L;
    dims.num_heads = nh;
    dims.head_dim = hd;
    dims.q_ld = dims.k_ld = dims.v_ld = 3 * H;
    dims.out_ld = H;
    dims.seq_offsets = st.offsets;
    ops::AttentionMask mask;
    mask.key_mask = st.key_mask;
    const int64_t window = m_.local_attention / 2;
    for (int64_t l = 0; l < (int64_t)layers_.size(); ++l) {
      const Layer& ly = layers_[l];
      const float* in = X;
      if (ly.has_attn_norm) {
        ly.attn_norm.forward_inference(h.data(), X, n);
        in = h.data();
      }
      ly.wqkv.forward_inference(qkv.data(), in, n);
      const float* cs = ly.global ? gcos.data() : lcos.data();
      const float* sn = ly.global ? gsin.data() : lsin.data();
      {
        OpTimer t("rotary");  // q and k: the first 2H columns
        if (!st.offsets) {
          ops::rotary_apply(qkv.data(), B, L, 2 * nh, hd, 3 * H, cs, sn);
        } else {
          for (int64_t b = 0; b < B; ++b)  // sentence b at its padded columns start[b] ..
            ops::rotary_apply(qkv.data() + st.offsets[b] * 3 * H, 1, st.offsets[b + 1] - st.offsets[b], 2 * nh, hd,
                              3 * H, cs + st.start[b] * half, sn + st.start[b] * half);
        }
      }
      const float *q = qkv.data(), *k = q + H, *v = q + 2 * H;
      {
        OpTimer t("attention");
        if (ly.global)
          ops::attention_forward(ctx.data(), nullptr, q, k, v, dims, mask);
        else
          ops::sliding_window_attention(ctx.data(), q, k, v, dims, st.key_mask, window);
      }
      ly.wo.forward_inference(a.data(), ctx.data(), n);
      ly.mlp_norm.add_forward_inference(h.data(), X, a.data(), X, n);  // X += attention; h = mlp_norm(X)
      ly.wi.forward_inference(inter.data(), h.data(), n);
      geglu(gated.data(), inter.data(), n, I);
      ly.mlp_wo.forward_inference(a.data(), gated.data(), n);
#pragma omp parallel for if (n * H > 65536)
      for (int64_t i = 0; i < n * H; ++i) X[i] += a[i];
      if (hidden_states) std::memcpy(hidden_states + l * n * H, X, sizeof(float) * n * H);
    }
  }

  // gated [N, I] = act(inter[:, :I]) * inter[:, I:] (ModernBertMLP: input, gate = Wi(x).chunk(2, dim=-1)).
  void geglu(float* gated, const float* inter, int64_t N, int64_t I) const {
    OpTimer t("geglu");
    ops::glu_forward(gated, inter, N, I, m_.hidden_activation);
  }

  ModernBertConfig m_;
  nn::Param tok_;
  nn::LayerNorm emb_norm_, final_norm_;
  std::vector<Layer> layers_;
};

}  // namespace

namespace {

std::optional<HeadKind> detect_modernbert_head(const CheckpointWeights& w) {
  if (w.has("classifier.weight")) return HeadKind::SequenceClassification;
  if (w.has("decoder.bias") || w.has("decoder.weight") || w.has("head.dense.weight")) return HeadKind::MaskedLM;
  return std::nullopt;
}

HeadLayout load_modernbert_head(HeadKind kind, const EncoderConfig& c, CheckpointWeights& w) {
  const ModernBertConfig m = ModernBertConfig::from(c);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const nn::Vars vb(w);
  HeadLayout head;
  head.input = m.classifier_pooling == "mean" ? HeadInput::MeanTokens : HeadInput::FirstToken;
  HeadStage prediction, out;
  prediction.linear = nn::Linear::load(vb.prefix("head.dense"), H, H, m.classifier_bias);
  prediction.act = m.classifier_activation;
  prediction.norm = nn::LayerNorm::load(vb.prefix("head.norm"), H, (float)m.norm_eps, m.norm_bias);
  if (kind == HeadKind::MaskedLM) {
    const std::vector<std::string> tied = {"model.embeddings.tok_embeddings.weight", "embeddings.tok_embeddings.weight"};
    if (m.decoder_bias) {
      out.linear = detail::load_vocab_decoder(w, {"decoder.weight"}, tied, {"decoder.bias"}, V, H, &head.tied_decoder);
    } else {
      head.tied_decoder = !w.has("decoder.weight");
      const std::vector<std::string> names = head.tied_decoder ? tied : std::vector<std::string>{"decoder.weight"};
      out.linear.weight = nn::Param(w.get(names[0], {V, H}, std::vector<std::string>(names.begin() + 1, names.end())));
      out.linear.in_features = H;
      out.linear.out_features = V;
    }
  } else {
    out.linear = detail::load_head_linear(w, {"classifier"}, H);
  }
  head.stages = {std::move(prediction), std::move(out)};
  return head;
}

}  // namespace

FamilyHeads modernbert_heads() { return {detect_modernbert_head, load_modernbert_head}; }

std::unique_ptr<EncoderModel> make_modernbert(const EncoderConfig& config, WeightSource& weights,
                                              ops::ComputeType dtype) {
  return std::make_unique<ModernBert>(config, weights, dtype);
}

// ---------------------------------------------------------------- training

namespace {
// A dropout of p when ctx draws masks: mask [n] filled (cleared otherwise, meaning no dropout).
void draw_dropout(std::vector<float>& mask, const nn::Context& ctx, float p, int64_t n,
                  const ops::AttentionDropoutDims* dims = nullptr) {
  mask.clear();
  if (!ctx.rng || p <= 0.0f) return;
  mask.resize(n);
  ops::dropout_mask(mask.data(), n, p, *ctx.rng, dims);
}
float dropout_p(const EncoderConfig& c, const char* key) {
  const double p = json_number_or(c.json, key, 0.0, c.source);
  if (!(p >= 0.0 && p < 1.0)) throw std::runtime_error(c.source + ": key '" + std::string(key) + "' must be in [0, 1)");
  return (float)p;
}
}  // namespace

ModernBertTrainable::ModernBertTrainable(nn::ParamStore& store, const EncoderConfig& c, const std::string& prefix)
    : config_(c), m_(ModernBertConfig::from(c)), prefix_(prefix) {
  if (!prefix_.empty() && prefix_.back() != '.') prefix_ += '.';
  embedding_dropout_ = dropout_p(c, "embedding_dropout");
  attention_dropout_ = dropout_p(c, "attention_dropout");
  mlp_dropout_ = dropout_p(c, "mlp_dropout");
  nn::Vars vb(store);
  if (!prefix_.empty()) vb = vb.prefix(prefix_.substr(0, prefix_.size() - 1));
  read_modernbert(vb, c, m_, tok_, emb_norm_, layers_, final_norm_,
                  [](const nn::Vars& v, int64_t in, int64_t out, bool bias) { return nn::Linear::load(v, in, out, bias); });
  for (const auto& e : store.entries())
    if (e.name.compare(0, prefix_.size(), prefix_) == 0) names_.push_back(e.name);
}

void ModernBertTrainable::load(nn::ParamStore& store, WeightSource& weights) const {
  for (const std::string& full : names_) {
    const std::string name = full.substr(prefix_.size());
    const int64_t i = store.index_of(full);
    // Bare ("" prefix): the ModernBertFor* names are accepted too.
    Tensor t = weights.get(name, store.entries()[i].shape, {prefix_.empty() ? "model." + name : full});
    std::memcpy(store.data(i), t.f32(), sizeof(float) * t.numel());
    weights.release(t);  // the store holds it now: the file's pages need not stay resident for the whole run
  }
}

void ModernBertTrainable::set_precision(ops::ComputeType precision) {
  for (Layer& l : layers_)
    for (nn::Linear* lin : {&l.wqkv, &l.wo, &l.wi, &l.mlp_wo}) lin->precision = precision;
}

void ModernBertTrainable::forward(const nn::Context& ctx_in, const int64_t* input_ids, const int64_t*,
                                  const float* key_mask, int64_t B, int64_t L) {
  const EncoderConfig& c = config_;
  const int64_t H = c.hidden_size, I = c.intermediate_size, N = B * L;
  const int64_t nh = c.num_attention_heads, hd = c.head_dim(), half = hd / 2;
  for (int64_t n = 0; n < N; ++n)
    if (input_ids[n] < 0 || input_ids[n] >= c.vocab_size)
      throw std::invalid_argument("input_ids value " + std::to_string(input_ids[n]) + " is outside [0, vocab_size = " +
                                  std::to_string(c.vocab_size) + ")");
  nn::Context ctx = ctx_in;
  ctx.packed = false;
  B_ = B;
  L_ = L;
  ids_.assign(input_ids, input_ids + N);
  // Embeddings: drop(norm(tok_embeddings[ids])).
  emb_.resize(N * H);
  emb_normed_.resize(N * H);
  ops::embedding_forward(emb_.data(), ids_.data(), tok_.data(), N, c.vocab_size, H);
  emb_norm_.forward(emb_normed_.data(), emb_.data(), N);
  draw_dropout(emb_drop_, ctx, embedding_dropout_, N * H);
  out_ = emb_normed_;
  if (!emb_drop_.empty()) ops::dropout_apply(out_.data(), out_.data(), emb_drop_.data(), N * H);
  // Masks: the key padding mask (global layers), and it times the band |i - j| <= local_attention // 2 (sliding).
  ops::AttentionMask global_mask, local_mask;
  bool padded = false;
  if (key_mask)
    for (int64_t n = 0; n < N; ++n) padded |= key_mask[n] == 0.0f;
  if (padded) global_mask.key_mask = key_mask;
  const int64_t window = m_.local_attention / 2;
  band_.assign(B * L * L, 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = std::max<int64_t>(0, i - window); j <= std::min(L - 1, i + window); ++j)
        band_[(b * L + i) * L + j] = key_mask ? (key_mask[b * L + j] != 0.0f ? 1.0f : 0.0f) : 1.0f;
  local_mask.mask = band_.data();
  gcos_.resize(L * half), gsin_.resize(L * half), lcos_.resize(L * half), lsin_.resize(L * half);
  ops::rotary_tables(gcos_.data(), gsin_.data(), L, hd, m_.global_rope_theta);
  ops::rotary_tables(lcos_.data(), lsin_.data(), L, hd, m_.local_rope_theta);
  ops::AttentionDims dims{B, L, L, nh, hd};
  dims.q_ld = dims.k_ld = dims.v_ld = 3 * H;
  dims.out_ld = H;
  const ops::AttentionDropoutDims pdims{nh, L, L};
  std::vector<float> a(N * H);
  for (Layer& ly : layers_) {
    ly.x = out_;
    const float* in = ly.x.data();
    if (ly.has_attn_norm) {
      ly.h.resize(N * H);
      ly.attn_norm.forward(ly.h.data(), ly.x.data(), N);
      in = ly.h.data();
    }
    ly.qkv.resize(N * 3 * H);
    ly.wqkv.forward(ctx, ly.qkv.data(), in, N);
    ops::rotary_apply(ly.qkv.data(), B, L, 2 * nh, hd, 3 * H, ly.global ? gcos_.data() : lcos_.data(),
                      ly.global ? gsin_.data() : lsin_.data());
    ly.probs.resize(B * nh * L * L);
    ly.ctx.resize(N * H);
    draw_dropout(ly.pdrop, ctx, attention_dropout_, B * nh * L * L, &pdims);
    const float* q = ly.qkv.data();
    ops::attention_forward(ly.ctx.data(), ly.probs.data(), q, q + H, q + 2 * H, dims,
                           ly.global ? global_mask : local_mask, ly.pdrop.empty() ? nullptr : ly.pdrop.data());
    ly.wo.forward(ctx, a.data(), ly.ctx.data(), N);
    draw_dropout(ly.odrop, ctx, attention_dropout_, N * H);
    if (!ly.odrop.empty()) ops::dropout_apply(a.data(), a.data(), ly.odrop.data(), N * H);
    ly.x1.resize(N * H);
    for (int64_t i = 0; i < N * H; ++i) ly.x1[i] = ly.x[i] + a[i];
    ly.h2.resize(N * H);
    ly.mlp_norm.forward(ly.h2.data(), ly.x1.data(), N);
    ly.inter.resize(N * 2 * I);
    ly.wi.forward(ctx, ly.inter.data(), ly.h2.data(), N);
    ly.gated.resize(N * I);
    ops::glu_forward(ly.gated.data(), ly.inter.data(), N, I, m_.hidden_activation);
    draw_dropout(ly.mdrop, ctx, mlp_dropout_, N * I);
    if (!ly.mdrop.empty()) ops::dropout_apply(ly.gated.data(), ly.gated.data(), ly.mdrop.data(), N * I);
    ly.mlp_wo.forward(ctx, a.data(), ly.gated.data(), N);
    for (int64_t i = 0; i < N * H; ++i) out_[i] = ly.x1[i] + a[i];
  }
  last_.resize(N * H);
  final_norm_.forward(last_.data(), out_.data(), N);
}

void ModernBertTrainable::backward(const float* dlast, const float* dpooled) {
  if (dpooled) throw std::logic_error("ModernBertTrainable::backward: ModernBERT has no pooler");
  const EncoderConfig& c = config_;
  const int64_t H = c.hidden_size, I = c.intermediate_size, B = B_, L = L_, N = B * L;
  const int64_t nh = c.num_attention_heads, hd = c.head_dim();
  std::vector<float> dx(N * H, 0.0f), dh(N * H), da(N * H), dgated(N * I), dinter(N * 2 * I), dqkv(N * 3 * H);
  if (dlast) final_norm_.backward(dx.data(), dlast);
  ops::AttentionDims dims{B, L, L, nh, hd};
  dims.q_ld = dims.k_ld = dims.v_ld = 3 * H;
  dims.out_ld = H;
  for (int64_t l = (int64_t)layers_.size() - 1; l >= 0; --l) {
    Layer& ly = layers_[l];
    // x2 = x1 + mlp.Wo(drop(glu(Wi(mlp_norm(x1))))): dx is d x2, becomes d x1.
    ly.mlp_wo.backward(dgated.data(), dx.data(), ly.gated.data(), N, /*accumulate=*/false);
    if (!ly.mdrop.empty()) ops::dropout_apply(dgated.data(), dgated.data(), ly.mdrop.data(), N * I);
    ops::glu_backward(dinter.data(), dgated.data(), ly.inter.data(), N, I, m_.hidden_activation);
    ly.wi.backward(dh.data(), dinter.data(), ly.h2.data(), N, /*accumulate=*/false);
    ly.mlp_norm.backward(dx.data(), dh.data(), /*accumulate=*/true);
    // x1 = x + drop(Wo(attention(rope(Wqkv(attn_norm(x)))))): dx becomes d x.
    std::memcpy(da.data(), dx.data(), sizeof(float) * N * H);
    if (!ly.odrop.empty()) ops::dropout_apply(da.data(), da.data(), ly.odrop.data(), N * H);
    ly.wo.backward(dh.data(), da.data(), ly.ctx.data(), N, /*accumulate=*/false);
    const float* q = ly.qkv.data();
    float* dq = dqkv.data();
    ops::attention_backward(dq, dq + H, dq + 2 * H, dh.data(), ly.probs.data(), q, q + H, q + 2 * H, dims,
                            ly.pdrop.empty() ? nullptr : ly.pdrop.data());
    ops::rotary_backward(dq, B, L, 2 * nh, hd, 3 * H, ly.global ? gcos_.data() : lcos_.data(),
                         ly.global ? gsin_.data() : lsin_.data());
    if (ly.has_attn_norm) {
      ly.wqkv.backward(dh.data(), dqkv.data(), ly.h.data(), N, /*accumulate=*/false);
      ly.attn_norm.backward(dx.data(), dh.data(), /*accumulate=*/true);
    } else {
      ly.wqkv.backward(dx.data(), dqkv.data(), ly.x.data(), N, /*accumulate=*/true);
    }
  }
  if (!emb_drop_.empty()) ops::dropout_apply(dx.data(), dx.data(), emb_drop_.data(), N * H);
  emb_norm_.backward(dh.data(), dx.data());
  ops::embedding_backward(tok_.grad(), dh.data(), ids_.data(), N, H);
}

// ---------------------------------------------------------------- the family's entry (models/registry.h)

namespace {
// modeling_modernbert.py: ModernBertPredictionHead head(x) = norm(act(dense(x))) (dense bias classifier_bias, norm
// bias norm_bias, eps norm_eps, act classifier_activation), then ForSequenceClassification: pool (classifier_pooling
// "cls" h[:, 0], "mean" the mean over attention_mask), head, drop (classifier_dropout), classifier;
// ForTokenClassification: head, drop, classifier per token; ForMaskedLM: decoder(head(h)), the decoder tied to
// tok_embeddings, bias decoder.bias when decoder_bias. A head tensor not in the checkpoint as _init_weights draws
// it: trunc_normal_ (cutoff initializer_cutoff_factor, default 3) with std initializer_range /
// sqrt(2 num_hidden_layers) for head.dense ("out"), hidden_size^-0.5 for the classifier ("final_out").
TrainingHeadSpec modernbert_training_head(const EncoderConfig& c, HeadKind kind, int64_t C) {
  const ModernBertConfig m = ModernBertConfig::from(c);
  const nlohmann::json& j = c.json;
  const double range = json_number_or(j, "initializer_range", 0.02, c.source);
  const double cutoff = j.contains("initializer_cutoff_factor") && !j["initializer_cutoff_factor"].is_null()
                            ? json_number_or(j, "initializer_cutoff_factor", 3.0, c.source)
                            : 3.0;
  HeadStageSpec head = detail::head_stage("head.dense", c.hidden_size, false);
  head.linear_bias = m.classifier_bias;
  head.act = m.classifier_activation;
  head.norm = "head.norm";
  head.norm_bias = m.norm_bias;
  head.norm_eps = (float)m.norm_eps;
  head.init_std = range / std::sqrt(2.0 * (double)c.num_hidden_layers);
  head.init_cutoff = cutoff;
  TrainingHeadSpec h;
  if (kind == HeadKind::MaskedLM) {
    HeadStageSpec decoder = detail::head_stage("decoder", c.vocab_size, false);
    decoder.tied = true;
    if (m.decoder_bias) decoder.bias = "decoder.bias";
    h.stages = {head, decoder};
    return h;
  }
  HeadStageSpec classifier = detail::head_stage("classifier", C, true);
  classifier.init_std = 1.0 / std::sqrt((double)c.hidden_size);
  classifier.init_cutoff = cutoff;
  if (kind == HeadKind::SequenceClassification)
    h.input = m.classifier_pooling == "mean" ? HeadInput::MeanTokens : HeadInput::FirstToken;
  h.stages = {head, classifier};
  return h;
}

// The body reads embedding_dropout, attention_dropout and mlp_dropout itself (ModernBertTrainable; checked here),
// so its p is 0; the classifiers' classifier_dropout (default 0).
TrainingDropouts modernbert_dropouts(const nlohmann::json& config, HeadKind kind, const std::string& file) {
  for (const char* key : {"embedding_dropout", "attention_dropout", "mlp_dropout"})
    detail::dropout_of(config, key, 0.0, file);
  const bool set = config.contains("classifier_dropout") && !config["classifier_dropout"].is_null();
  TrainingDropouts d;
  d.head = kind != HeadKind::MaskedLM && set ? detail::dropout_of(config, "classifier_dropout", 0.0, file) : 0.0f;
  return d;
}
}  // namespace

const ModelFamily& modernbert_family() {
  static const ModelFamily f{
      .name = "modernbert",
      .model_types = {{"modernbert", "ModernBert"}},
      .check_config = [](const EncoderConfig& c) { ModernBertConfig::from(c); },  // its own keys, checked at load
      .make_encoder = make_modernbert,
      .heads = modernbert_heads,
      .trainable_body = [](nn::ParamStore& s, const EncoderConfig& c,
                           const TrainableEncoderOptions& o) -> std::unique_ptr<TrainableEncoder> {
        return std::make_unique<ModernBertTrainable>(s, c, o.bare ? "" : "model.");
      },
      .training_head = modernbert_training_head,
      .training_dropouts = modernbert_dropouts,
  };
  return f;
}

}  // namespace tfm

#include "models/modernbert.h"

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
#include "ops/embedding.h"
#include "ops/local_attention.h"
#include "ops/rotary.h"

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

// nn.LayerNorm(C, eps, bias=has_bias): without a bias the shift is zero.
nn::LayerNorm load_norm(const nn::Vars& vb, int64_t C, double eps, bool has_bias) {
  if (has_bias) return nn::LayerNorm::load(vb, C, (float)eps);
  nn::LayerNorm ln;
  ln.weight = vb.get("weight", {C});
  ln.bias = nn::Param(Tensor::zeros({C}));
  ln.C = C;
  ln.eps = (float)eps;
  return ln;
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
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    const nn::Vars vb(w, modernbert_aliases);
    tok_ = vb.prefix("embeddings.tok_embeddings").get("weight", {c.vocab_size, H});
    vb.release(tok_);  // forward reads only the rows of its ids
    emb_norm_ = load_norm(vb.prefix("embeddings.norm"), H, m_.norm_eps, m_.norm_bias);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      const nn::Vars lv = vb.prefix("layers").prefix(i);
      Layer L;
      L.global = m_.global_layer[i];
      L.has_attn_norm = i > 0;
      if (L.has_attn_norm) L.attn_norm = load_norm(lv.prefix("attn_norm"), H, m_.norm_eps, m_.norm_bias);
      L.wqkv = load_linear(lv.prefix("attn.Wqkv"), H, 3 * H, m_.attention_bias, ct);
      L.wo = load_linear(lv.prefix("attn.Wo"), H, H, m_.attention_bias, ct);
      L.mlp_norm = load_norm(lv.prefix("mlp_norm"), H, m_.norm_eps, m_.norm_bias);
      L.wi = load_linear(lv.prefix("mlp.Wi"), H, 2 * I, m_.mlp_bias, ct);
      L.mlp_wo = load_linear(lv.prefix("mlp.Wo"), I, H, m_.mlp_bias, ct);
      layers_.push_back(std::move(L));
    }
    final_norm_ = load_norm(vb.prefix("final_norm"), H, m_.norm_eps, m_.norm_bias);
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
#pragma omp parallel for if (N * I > 65536)
    for (int64_t n = 0; n < N; ++n) {
      float* g = gated + n * I;
      const float* in = inter + n * 2 * I;
      ops::activation_forward(g, in, I, m_.hidden_activation);
      for (int64_t i = 0; i < I; ++i) g[i] *= in[I + i];
    }
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
  prediction.norm = load_norm(vb.prefix("head.norm"), H, m.norm_eps, m.norm_bias);
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

}  // namespace tfm

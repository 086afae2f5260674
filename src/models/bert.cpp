#include "models/bert.h"

#include <cstring>
#include <stdexcept>
#include <vector>

#include "nn/layers.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/gemm.h"
#include "ops/layer_norm.h"
#include "ops/matmul.h"
#include "ops/profile.h"

namespace tfm {
namespace {

using nn::LayerNorm;
using nn::Linear;
using ops::PackedLinear;
struct BertLayer {
  PackedLinear qkv;  // query, key and value concatenated at load: one GEMM, out [N, 3 * hidden_size]
  PackedLinear attn_out, intermediate, output;
  LayerNorm attn_ln, out_ln;
};

class Bert : public EncoderModel {
 public:
  Bert(const EncoderConfig& c, WeightSource& w, ops::ComputeType ct) {
    config_ = c;
    ct_ = ct;
    act_ = ops::parse_activation(c.hidden_act);
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    word_ = get(w, "embeddings.word_embeddings.weight", {c.vocab_size, H});
    pos_ = get(w, "embeddings.position_embeddings.weight", {c.max_position_embeddings, H});
    type_ = get(w, "embeddings.token_type_embeddings.weight", {c.type_vocab_size, H});
    emb_ln_ = norm(w, "embeddings.LayerNorm", H);
    // Loading read every page (the finite check); forward reads only the rows of the ids it sees, so the pages
    // are dropped and fault back in from the file on use. The views stay valid.
    for (const Tensor* t : {&word_, &pos_, &type_}) w.release(*t);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      std::string p = "encoder.layer." + std::to_string(l) + ".";
      BertLayer L;
      L.qkv = packed(w, {p + "attention.self.query", p + "attention.self.key", p + "attention.self.value"}, H, H);
      L.attn_out = packed(w, {p + "attention.output.dense"}, H, H);
      L.attn_ln = norm(w, p + "attention.output.LayerNorm", H);
      L.intermediate = packed(w, {p + "intermediate.dense"}, H, I);
      L.output = packed(w, {p + "output.dense"}, I, H);
      L.out_ln = norm(w, p + "output.LayerNorm", H);
      layers_.push_back(std::move(L));
    }
    // BertForMaskedLM / BertForTokenClassification checkpoints have no pooler: load it only when present.
    if (w.has("pooler.dense.weight") || w.has("bert.pooler.dense.weight")) pooler_ = linear(w, "pooler.dense", H, H);
  }

  EncoderOutput forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                        bool all_layers) const override {
    const EncoderConfig& c = config_;
    std::vector<float> key_mask = detail::check_encoder_inputs(c, input_ids, token_type_ids, attention_mask);
    const int64_t B = input_ids.size(0), L = input_ids.size(1), H = c.hidden_size, I = c.intermediate_size;
    const int64_t N = B * L, NL = c.num_hidden_layers;
    EncoderOutput out;
    Tensor hs;
    if (all_layers) hs = Tensor::empty({NL + 1, B, L, H});
    Tensor x = Tensor::empty({B, L, H});
    ops::OpTimer t_emb("embeddings");  // sections for bench_encoder --breakdown (ops/profile.h; off: no cost)
    float* X = x.f32();
    // Embeddings: word + position + token_type, then LayerNorm.
    const int64_t* ids = input_ids.i64();
    const int64_t* tt = token_type_ids.defined() ? token_type_ids.i64() : nullptr;
    const float *we = word_.f32(), *pe = pos_.f32(), *te = type_.f32();
#pragma omp parallel for if (N * H > 65536)
    for (int64_t n = 0; n < N; ++n) {
      const float* w = we + ids[n] * H;
      const float* p = pe + (n % L) * H;
      const float* t = te + (tt ? tt[n] : 0) * H;
      for (int64_t h = 0; h < H; ++h) X[n * H + h] = w[h] + p[h] + t[h];
    }
    emb_ln_.forward(X, X, N);
    if (all_layers) std::memcpy(hs.f32(), X, sizeof(float) * N * H);
    t_emb.stop();

    // Activation buffers, reused by every layer.
    std::vector<float> qkv(N * 3 * H), ctx(N * H), a(N * H), inter(N * I);
    ops::AttentionMask mask;
    bool padded = false;
    for (float m : key_mask) padded |= m == 0.0f;
    if (padded) mask.key_mask = key_mask.data();
    ops::AttentionDims dims{B, L, L, c.num_attention_heads, c.head_dim()};
    dims.q_ld = dims.k_ld = dims.v_ld = 3 * H;  // heads read in place from the fused QKV rows
    dims.out_ld = H;
    const ops::Epilogue act = ops::epilogue_of(act_);
    for (int64_t l = 0; l < NL; ++l) {
      const BertLayer& Ly = layers_[l];
      {
        ops::OpTimer t("qkv_gemm");
        Ly.qkv.forward(qkv.data(), X, N);
      }
      {
        ops::OpTimer t("attention");
        ops::attention_forward(ctx.data(), nullptr, qkv.data(), qkv.data() + H, qkv.data() + 2 * H, dims, mask);
      }
      // a = LayerNorm(dense(ctx) + x)
      {
        ops::OpTimer t("attn_out_gemm");
        Ly.attn_out.forward(a.data(), ctx.data(), N);
      }
      {
        ops::OpTimer t("add_layernorm");
        add_norm(Ly.attn_ln, a.data(), a.data(), X, N);
      }
      // x = LayerNorm(dense(act(dense(a))) + a)
      {
        ops::OpTimer t("ffn_in_gemm_act");
        Ly.intermediate.forward(inter.data(), a.data(), N, act);  // bias + activation fused into the GEMM
      }
      {
        ops::OpTimer t("ffn_out_gemm");
        Ly.output.forward(X, inter.data(), N);
      }
      {
        ops::OpTimer t("add_layernorm");
        add_norm(Ly.out_ln, X, X, a.data(), N);
      }
      if (all_layers) std::memcpy(hs.f32() + (l + 1) * N * H, X, sizeof(float) * N * H);
    }
    // Pooler: tanh(dense(x[:, 0])), when the checkpoint has one.
    if (pooler_.weight.defined()) {
      ops::OpTimer t("pooler");
      Tensor pooled = Tensor::empty({B, H});
      std::vector<float> cls(B * H);
      for (int64_t b = 0; b < B; ++b) std::memcpy(cls.data() + b * H, X + b * L * H, sizeof(float) * H);
      pooler_.forward(pooled.f32(), cls.data(), B);
      ops::tanh_forward(pooled.f32(), pooled.f32(), B * H);
      out.pooler_output = pooled;
    }
    out.last_hidden_state = x;
    out.hidden_states = hs;
    return out;
  }

 private:
  // out = LayerNorm(y + residual) in one pass (post-LN); out may alias y or residual.
  static void add_norm(const LayerNorm& ln, float* out, const float* y, const float* residual, int64_t N) {
    ops::add_layer_norm_forward(out, nullptr, y, residual, ln.weight.f32(), ln.bias.f32(), N, ln.weight.size(0),
                                ln.eps);
  }
  // Hugging Face names, then the "bert."-prefixed names of BertFor* checkpoints; LayerNorm also as gamma/beta.
  static Tensor get(WeightSource& w, const std::string& name, const Shape& shape) {
    std::vector<std::string> aliases = {"bert." + name};
    auto swap_suffix = [&](const std::string& from, const std::string& to) {
      if (name.find("LayerNorm." + from) != std::string::npos && name.size() >= from.size() &&
          name.compare(name.size() - from.size(), from.size(), from) == 0) {
        std::string old = name.substr(0, name.size() - from.size()) + to;
        aliases.push_back(old);
        aliases.push_back("bert." + old);
      }
    };
    swap_suffix("weight", "gamma");
    swap_suffix("bias", "beta");
    return w.get(name, shape, aliases);
  }
  static Linear linear(WeightSource& w, const std::string& p, int64_t in, int64_t out) {
    return {get(w, p + ".weight", {out, in}), get(w, p + ".bias", {out})};
  }
  // The Linear layers named by `prefixes` (same in_features), stacked along out_features and packed for ct_;
  // their file pages are released once packed.
  // A folder from `tfm convert --dtype int8` stores the weights prequantised: used as stored for int8, dequantised
  // for fp32 / bf16.
  PackedLinear packed(WeightSource& w, const std::vector<std::string>& prefixes, int64_t in, int64_t out) const {
    const int64_t n = (int64_t)prefixes.size();
    std::vector<const int8_t*> q(n);
    std::vector<const float*> sc(n);
    int64_t quantised = 0;
    for (int64_t i = 0; i < n; ++i) {
      const std::string name = prefixes[i] + ".weight";
      q[i] = w.get_int8(name, {out, in}, {"bert." + name}, &sc[i]);
      quantised += q[i] != nullptr;
    }
    if (quantised == n && ct_ != ops::ComputeType::I8) {
      // Asked for another compute type: dequantise (w = q * scale of its row) and pack for it, so the model
      // computes in the type it reports.
      std::vector<float> weight(n * out * in), bias(n * out);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t r = 0; r < out; ++r)
          for (int64_t c = 0; c < in; ++c)
            weight[(i * out + r) * in + c] = (float)q[i][r * in + c] * sc[i][r];
        w.release_bytes(q[i], (size_t)(out * in));
        Tensor b = get(w, prefixes[i] + ".bias", {out});
        std::memcpy(bias.data() + i * out, b.f32(), sizeof(float) * out);
      }
      return PackedLinear(weight.data(), bias.data(), in, n * out, ct_);
    }
    if (quantised == n) {
      std::vector<int8_t> qw(n * out * in);
      std::vector<float> scale(n * out), bias(n * out);
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(qw.data() + i * out * in, q[i], (size_t)(out * in));
        w.release_bytes(q[i], (size_t)(out * in));
        std::memcpy(scale.data() + i * out, sc[i], sizeof(float) * out);
        Tensor b = get(w, prefixes[i] + ".bias", {out});
        std::memcpy(bias.data() + i * out, b.f32(), sizeof(float) * out);
      }
      return PackedLinear::from_int8(qw.data(), scale.data(), bias.data(), in, n * out);
    }
    if (prefixes.size() == 1) {
      Linear l = linear(w, prefixes[0], in, out);
      PackedLinear p(l.weight.f32(), l.bias.f32(), in, out, ct_);
      w.release(l.weight);
      return p;
    }
    std::vector<float> weight(n * out * in), bias(n * out);
    for (int64_t i = 0; i < n; ++i) {
      Linear l = linear(w, prefixes[i], in, out);
      std::memcpy(weight.data() + i * out * in, l.weight.f32(), sizeof(float) * out * in);
      std::memcpy(bias.data() + i * out, l.bias.f32(), sizeof(float) * out);
      w.release(l.weight);
    }
    return PackedLinear(weight.data(), bias.data(), in, n * out, ct_);
  }
  LayerNorm norm(WeightSource& w, const std::string& p, int64_t H) const {
    return {get(w, p + ".weight", {H}), get(w, p + ".bias", {H}), (float)config_.layer_norm_eps};
  }

  ops::Activation act_;
  ops::ComputeType ct_ = ops::ComputeType::F32;
  Tensor word_, pos_, type_;
  LayerNorm emb_ln_;
  std::vector<BertLayer> layers_;
  Linear pooler_;
};

}  // namespace

std::unique_ptr<EncoderModel> make_bert(const EncoderConfig& config, WeightSource& weights, ops::ComputeType dtype) {
  return std::make_unique<Bert>(config, weights, dtype);
}

}  // namespace tfm

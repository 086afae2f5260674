#include "models/transformer_encoder.h"

#include <cstring>
#include <vector>

#include "nn/layers.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/gemm.h"
#include "ops/layer_norm.h"

namespace tfm {
namespace {

struct EncoderLayer {
  nn::LayerNorm layer_norm_1, layer_norm_2;
  // The per-head Linear(hidden_size, head_dim) q, k and v projections stacked at load into one GEMM: output
  // columns [q heads 0..n-1 | k heads | v heads], so head h of q sits at h*head_dim as torch.cat puts it.
  ops::PackedLinear qkv;
  ops::PackedLinear output_linear, linear1, linear2;
};

ops::PackedLinear pack(WeightSource& w, const std::string& prefix, int64_t in, int64_t out, ops::ComputeType ct) {
  nn::Linear lin = nn::Linear::load(w, prefix, in, out);
  ops::PackedLinear p(lin.weight.f32(), lin.bias.f32(), in, out, ct);
  w.release(lin.weight);
  return p;
}

class TutorialEncoder : public EncoderModel {
 public:
  TutorialEncoder(const EncoderConfig& c, WeightSource& w, ops::ComputeType ct) {
    config_ = c;
    act_ = ops::parse_activation(c.hidden_act);
    const int64_t H = c.hidden_size, I = c.intermediate_size, Dh = c.head_dim();
    tok_ = w.get("embeddings.token_embeddings.weight", {c.vocab_size, H});
    pos_ = w.get("embeddings.position_embeddings.weight", {c.max_position_embeddings, H});
    emb_ln_ = nn::LayerNorm::load(w, "embeddings.layer_norm", H, 1e-12f);  // fixed in the reference module
    w.release(tok_);  // pages fault back in from the file for the rows forward reads
    w.release(pos_);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      std::string p = "layers." + std::to_string(l) + ".";
      EncoderLayer L;
      L.layer_norm_1 = nn::LayerNorm::load(w, p + "layer_norm_1", H, 1e-5f);  // nn.LayerNorm default eps
      L.layer_norm_2 = nn::LayerNorm::load(w, p + "layer_norm_2", H, 1e-5f);
      std::vector<float> qkv_w(3 * H * H), qkv_b(3 * H);
      const int64_t nh = c.num_attention_heads;
      for (int64_t h = 0; h < nh; ++h)  // the module's parameter order (RandomWeights draws in call order)
        for (int64_t part = 0; part < 3; ++part) {
          std::string name = p + "attention.heads." + std::to_string(h) + "." + "qkv"[part];
          nn::Linear lin = nn::Linear::load(w, name, H, Dh);
          const int64_t row = part * H + h * Dh;
          std::memcpy(qkv_w.data() + row * H, lin.weight.f32(), sizeof(float) * Dh * H);
          std::memcpy(qkv_b.data() + row, lin.bias.f32(), sizeof(float) * Dh);
          w.release(lin.weight);
        }
      L.qkv = ops::PackedLinear(qkv_w.data(), qkv_b.data(), H, 3 * H, ct);
      L.output_linear = pack(w, p + "attention.output_linear", H, H, ct);
      L.linear1 = pack(w, p + "feed_forward.linear1", H, I, ct);
      L.linear2 = pack(w, p + "feed_forward.linear2", I, H, ct);
      layers_.push_back(std::move(L));
    }
  }

  EncoderOutput forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                        bool all_layers) const override {
    const EncoderConfig& c = config_;
    // token_type_ids are accepted for interface symmetry; this architecture has no segment embeddings.
    std::vector<float> key_mask = detail::check_encoder_inputs(c, input_ids, Tensor(), attention_mask);
    const int64_t B = input_ids.size(0), L = input_ids.size(1), H = c.hidden_size, I = c.intermediate_size;
    const int64_t N = B * L, NL = c.num_hidden_layers;
    Tensor hs;
    if (all_layers) hs = Tensor::empty({NL + 1, B, L, H});
    Tensor x = Tensor::empty({B, L, H});
    float* X = x.f32();
    const int64_t* ids = input_ids.i64();
    for (int64_t n = 0; n < N; ++n) {
      const float* t = tok_.f32() + ids[n] * H;
      const float* p = pos_.f32() + (n % L) * H;
      for (int64_t h = 0; h < H; ++h) X[n * H + h] = t[h] + p[h];
    }
    emb_ln_.forward(X, X, N);
    if (all_layers) std::memcpy(hs.f32(), X, sizeof(float) * N * H);

    std::vector<float> hbuf(N * H), qkv(N * 3 * H), ctx(N * H), inter(N * I);
    ops::AttentionMask mask;
    if (attention_mask.defined()) mask.key_mask = key_mask.data();
    ops::AttentionDims dims{B, L, L, c.num_attention_heads, c.head_dim()};
    dims.q_ld = dims.k_ld = dims.v_ld = 3 * H;
    dims.out_ld = H;
    const ops::Epilogue act = ops::epilogue_of(act_);
    // Pre-LN: x += f(LN(x)). Each residual add is fused into the LayerNorm that follows it: x += f_out and
    // hbuf = LN(x) in one pass (ops::add_layer_norm_forward writes the sum back into x).
    auto add_norm = [&](const nn::LayerNorm* ln, float* f_out) {
      if (ln)
        ops::add_layer_norm_forward(f_out, X, X, f_out, ln->weight.f32(), ln->bias.f32(), N, H, ln->eps);
      else
        for (int64_t i = 0; i < N * H; ++i) X[i] += f_out[i];
    };
    if (NL > 0) layers_[0].layer_norm_1.forward(hbuf.data(), X, N);
    for (int64_t l = 0; l < NL; ++l) {
      const EncoderLayer& Ly = layers_[l];
      // x = x + MHA(LN1(x)); hbuf holds LN1(x) on entry
      Ly.qkv.forward(qkv.data(), hbuf.data(), N);
      ops::attention_forward(ctx.data(), nullptr, qkv.data(), qkv.data() + H, qkv.data() + 2 * H, dims, mask);
      Ly.output_linear.forward(hbuf.data(), ctx.data(), N);
      add_norm(&Ly.layer_norm_2, hbuf.data());  // x += attention; hbuf = LN2(x)
      // x = x + FFN(LN2(x)); dropout is off at inference
      Ly.linear1.forward(inter.data(), hbuf.data(), N, act);  // bias + activation fused
      Ly.linear2.forward(hbuf.data(), inter.data(), N);
      add_norm(l + 1 < NL ? &layers_[l + 1].layer_norm_1 : nullptr, hbuf.data());  // x += FFN; hbuf = LN1'(x)
      if (all_layers) std::memcpy(hs.f32() + (l + 1) * N * H, X, sizeof(float) * N * H);
    }
    EncoderOutput out;
    out.last_hidden_state = x;
    out.hidden_states = hs;
    return out;
  }

 private:
  ops::Activation act_;
  Tensor tok_, pos_;
  nn::LayerNorm emb_ln_;
  std::vector<EncoderLayer> layers_;
};

}  // namespace

std::unique_ptr<EncoderModel> make_transformer_encoder(const EncoderConfig& config, WeightSource& weights,
                                                      ops::ComputeType dtype) {
  return std::make_unique<TutorialEncoder>(config, weights, dtype);
}

}  // namespace tfm

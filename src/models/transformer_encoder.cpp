#include "models/transformer_encoder.h"

#include <cstring>
#include <vector>

#include "nn/layers.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/gemm.h"

namespace tfm {
namespace {

struct EncoderLayer {
  nn::LayerNorm layer_norm_1, layer_norm_2;
  std::vector<nn::Linear> q, k, v;  // one Linear(hidden_size, head_dim) per head
  nn::Linear output_linear, linear1, linear2;
};

// Projects x [N, H] by each head's Linear(H, head_dim) into the column block h*head_dim of out [N, H], so the
// heads land side by side exactly as torch.cat([...], dim=-1) puts them.
void project_heads(float* out, const float* x, const std::vector<nn::Linear>& heads, int64_t N, int64_t H) {
  const int64_t Dh = heads[0].out_features();
  for (size_t h = 0; h < heads.size(); ++h) {
    const float* b = heads[h].bias.f32();
    for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * H + h * Dh, b, sizeof(float) * Dh);
    ops::gemm(false, true, N, Dh, H, 1.0f, x, H, heads[h].weight.f32(), H, 1.0f, out + h * Dh, H);
  }
}

class TutorialEncoder : public EncoderModel {
 public:
  TutorialEncoder(const EncoderConfig& c, WeightSource& w) {
    config_ = c;
    act_ = ops::parse_activation(c.hidden_act);
    const int64_t H = c.hidden_size, I = c.intermediate_size, Dh = c.head_dim();
    tok_ = w.get("embeddings.token_embeddings.weight", {c.vocab_size, H});
    pos_ = w.get("embeddings.position_embeddings.weight", {c.max_position_embeddings, H});
    emb_ln_ = nn::LayerNorm::load(w, "embeddings.layer_norm", H, 1e-12f);  // fixed in the reference module
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      std::string p = "layers." + std::to_string(l) + ".";
      EncoderLayer L;
      L.layer_norm_1 = nn::LayerNorm::load(w, p + "layer_norm_1", H, 1e-5f);  // nn.LayerNorm default eps
      L.layer_norm_2 = nn::LayerNorm::load(w, p + "layer_norm_2", H, 1e-5f);
      for (int64_t h = 0; h < c.num_attention_heads; ++h) {
        std::string hp = p + "attention.heads." + std::to_string(h) + ".";
        L.q.push_back(nn::Linear::load(w, hp + "q", H, Dh));
        L.k.push_back(nn::Linear::load(w, hp + "k", H, Dh));
        L.v.push_back(nn::Linear::load(w, hp + "v", H, Dh));
      }
      L.output_linear = nn::Linear::load(w, p + "attention.output_linear", H, H);
      L.linear1 = nn::Linear::load(w, p + "feed_forward.linear1", H, I);
      L.linear2 = nn::Linear::load(w, p + "feed_forward.linear2", I, H);
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

    std::vector<float> hbuf(N * H), q(N * H), k(N * H), v(N * H), ctx(N * H), inter(N * I);
    ops::AttentionMask mask;
    if (attention_mask.defined()) mask.key_mask = key_mask.data();
    ops::AttentionDims dims{B, L, L, c.num_attention_heads, c.head_dim()};
    for (int64_t l = 0; l < NL; ++l) {
      const EncoderLayer& Ly = layers_[l];
      // x = x + MHA(LN1(x))
      Ly.layer_norm_1.forward(hbuf.data(), X, N);
      project_heads(q.data(), hbuf.data(), Ly.q, N, H);
      project_heads(k.data(), hbuf.data(), Ly.k, N, H);
      project_heads(v.data(), hbuf.data(), Ly.v, N, H);
      ops::attention_forward(ctx.data(), nullptr, q.data(), k.data(), v.data(), dims, mask);
      Ly.output_linear.forward(hbuf.data(), ctx.data(), N);
      for (int64_t i = 0; i < N * H; ++i) X[i] += hbuf[i];
      // x = x + FFN(LN2(x)); dropout is off at inference
      Ly.layer_norm_2.forward(hbuf.data(), X, N);
      Ly.linear1.forward(inter.data(), hbuf.data(), N);
      ops::activation_forward(inter.data(), inter.data(), N * I, act_);
      Ly.linear2.forward(hbuf.data(), inter.data(), N);
      for (int64_t i = 0; i < N * H; ++i) X[i] += hbuf[i];
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

std::unique_ptr<EncoderModel> make_transformer_encoder(const EncoderConfig& config, WeightSource& weights) {
  return std::make_unique<TutorialEncoder>(config, weights);
}

}  // namespace tfm

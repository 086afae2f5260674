#include "models/transformer_encoder.h"

#include <cstring>
#include <vector>

#include "nn/params.h"
#include "nn/transformer_block.h"
#include "ops/activation.h"
#include "models/registry.h"

namespace tfm {
namespace {

// TransformerEncoderLayer of document 000: layer_norm_1, attention.heads.N.{q,k,v} (one Linear(hidden_size,
// head_dim) per head) and attention.output_linear, layer_norm_2, feed_forward.{linear1,linear2}; pre-LN.
nn::EncoderBlock tutorial_layer(const nn::Vars& vb, const EncoderConfig& c, ops::ComputeType ct) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, Dh = c.head_dim(), nh = c.num_attention_heads;
  nn::EncoderBlock b;
  b.norm_first = true;
  b.norm1 = nn::LayerNorm::load(vb.prefix("layer_norm_1"), H, 1e-5f);  // nn.LayerNorm default eps
  b.norm2 = nn::LayerNorm::load(vb.prefix("layer_norm_2"), H, 1e-5f);
  // The per-head q, k and v projections stacked into one product: output columns [q heads 0..n-1 | k heads |
  // v heads], so head h of q sits at h*head_dim as torch.cat puts it.
  std::vector<float> qkv_w(3 * H * H), qkv_b(3 * H);
  for (int64_t h = 0; h < nh; ++h)  // the module's parameter order (RandomWeights draws in call order)
    for (int64_t part = 0; part < 3; ++part) {
      const nn::Vars head = vb.prefix("attention.heads").prefix(h).prefix(std::string(1, "qkv"[part]));
      nn::Linear lin = nn::Linear::load(head, H, Dh);
      const int64_t row = part * H + h * Dh;
      std::memcpy(qkv_w.data() + row * H, lin.weight.data(), sizeof(float) * Dh * H);
      std::memcpy(qkv_b.data() + row, lin.bias.data(), sizeof(float) * Dh);
      head.release(lin.weight);
    }
  b.attention.num_heads = nh;
  b.attention.hidden_size = H;
  b.attention.qkv = nn::Linear::from_weights(qkv_w.data(), qkv_b.data(), H, 3 * H, ct);
  b.attention.output = nn::Linear::load_packed({vb.prefix("attention.output_linear")}, H, H, ct);
  b.ffn.linear1 = nn::Linear::load_packed({vb.prefix("feed_forward.linear1")}, H, I, ct);
  b.ffn.linear2 = nn::Linear::load_packed({vb.prefix("feed_forward.linear2")}, I, H, ct);
  b.ffn.act = ops::parse_activation(c.hidden_act);
  return b;
}

class TutorialEncoder : public EncoderModel {
 public:
  TutorialEncoder(const EncoderConfig& c, WeightSource& w, ops::ComputeType ct) {
    config_ = c;
    const int64_t H = c.hidden_size;
    const nn::Vars vb(w);
    // Read in place and unchecked: forward reads only the rows it needs and checks those.
    emb_.word = vb.prefix("embeddings.token_embeddings").get_unchecked("weight", {c.vocab_size, H});
    emb_.position = vb.prefix("embeddings.position_embeddings").get_unchecked("weight", {c.max_position_embeddings, H});
    emb_.norm = nn::LayerNorm::load(vb.prefix("embeddings.layer_norm"), H, 1e-12f);  // fixed in the reference module
    emb_.dim = H;
    emb_.word_name = "embeddings.token_embeddings.weight";
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) layers_.push_back(tutorial_layer(vb.prefix("layers").prefix(l), c, ct));
  }

  // token_type_ids are accepted for interface symmetry; this architecture has no segment embeddings.
  EncoderOutput forward(const Tensor& input_ids, const Tensor&, const Tensor& attention_mask,
                        bool all_layers) const override {
    return run(input_ids, attention_mask, all_layers, /*unpadded=*/false);
  }
  EncoderOutput forward_unpadded(const Tensor& input_ids, const Tensor&, const Tensor& attention_mask) const override {
    return run(input_ids, attention_mask, false, /*unpadded=*/true);
  }

 private:
  EncoderOutput run(const Tensor& input_ids, const Tensor& attention_mask, bool all_layers, bool unpadded) const {
    const EncoderConfig& c = config_;
    std::vector<float> key_mask = detail::check_encoder_inputs(c, input_ids, Tensor(), attention_mask);
    const int64_t B = input_ids.size(0), L = input_ids.size(1), H = c.hidden_size;
    const int64_t N = B * L, NL = c.num_hidden_layers;
    Tensor hs;
    if (all_layers) hs = Tensor::empty({NL + 1, B, L, H});
    Tensor x = Tensor::empty({B, L, H});
    float* X = x.f32();
    const int64_t* ids = input_ids.i64();
    emb_.forward_inference(X, ids, nullptr, nullptr, N, L);
    if (all_layers) std::memcpy(hs.f32(), X, sizeof(float) * N * H);

    nn::encoder_stack_inference(layers_, X, B, L, attention_mask.defined() ? key_mask.data() : nullptr, unpadded,
                                all_layers ? hs.f32() : nullptr);
    EncoderOutput out;
    out.last_hidden_state = x;
    out.hidden_states = hs;
    return out;
  }

  nn::Embeddings emb_;  // token + position, LayerNorm
  std::vector<nn::EncoderBlock> layers_;
};

}  // namespace

std::unique_ptr<EncoderModel> make_transformer_encoder(const EncoderConfig& config, WeightSource& weights,
                                                      ops::ComputeType dtype) {
  return std::make_unique<TutorialEncoder>(config, weights, dtype);
}

// The tutorial encoder: inference only (no task heads, no fine-tuning), its attention reading unpacked per-head
// weights (so no prequantised int8).
const ModelFamily& transformer_encoder_family() {
  static const ModelFamily f{
      .name = "transformer_encoder",
      .model_types = {{"transformer_encoder", ""}},
      .make_encoder = make_transformer_encoder,
      .int8_weights = false,
      .config_keys = detail::encoder_config_keys({
          {"type_vocab_size", "2", ConfigKeyRole::Ignored},  // no segment embeddings
          // The reference module fixes its LayerNorms' eps: 1e-12 on the embeddings, 1e-5 in the layers.
          {"layer_norm_eps", "1e-12", ConfigKeyRole::Ignored},
      }),
  };
  return f;
}

}  // namespace tfm

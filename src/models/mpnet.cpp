#include "models/mpnet.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/profile.h"
#include "models/checkpoint_weights.h"
#include "models/roberta.h"
#include "nn/params.h"
#include "nn/transformer_block.h"
#include "ops/activation.h"
#include "models/registry.h"

namespace tfm {

int64_t detail::mpnet_relative_position_bucket(int64_t relative_position, int64_t num_buckets, int64_t max_distance) {
  int64_t ret = 0;
  int64_t n = -relative_position;
  num_buckets /= 2;
  if (n < 0) ret += num_buckets;
  n = n < 0 ? -n : n;
  const int64_t max_exact = num_buckets / 2;
  if (n < max_exact) return ret + n;
  // torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact), in float32
  // (the Python scalars enter a float32 tensor op as float32), truncated by .to(torch.long).
  const float ratio = std::log((float)n / (float)max_exact);
  const float scale = (float)std::log((double)max_distance / (double)max_exact);
  int64_t large = max_exact + (int64_t)(ratio / scale * (float)(num_buckets - max_exact));
  if (large > num_buckets - 1) large = num_buckets - 1;
  return ret + large;
}

namespace {

constexpr int64_t kPaddingIdx = 1;  // MPNetEmbeddings.padding_idx
constexpr int64_t kNumBuckets = 32, kMaxDistance = 128;  // MPNetEncoder.compute_position_bias defaults

// Base-model names, then the "mpnet."-prefixed names of the MPNetFor* heads' checkpoints.
std::vector<std::string> mpnet_aliases(const std::string& name) { return {"mpnet." + name}; }

// One MPNetLayer under `vb` ("encoder.layer.N"): attention.attn.{q,k,v} (packed into one GEMM at inference),
// attention.attn.o, attention.LayerNorm, intermediate.dense, output.{dense,LayerNorm}; post-LN, as BertLayer.
nn::EncoderBlock mpnet_layer(const nn::Vars& vb, const EncoderConfig& c, ops::ComputeType ct, bool trainable) {
  const detail::PostLnLayerNames names = {"attention.attn.q", "attention.attn.k", "attention.attn.v",
                                          "attention.attn.o", "attention.LayerNorm", "intermediate.dense",
                                          "output.dense", "output.LayerNorm"};
  return detail::post_ln_layer(vb, c, ct, trainable, names, (float)c.layer_norm_eps);
}

// The bucket of each relative position j - i of L tokens, indexed by j - i + L - 1.
std::vector<int64_t> relative_buckets(int64_t L) {
  std::vector<int64_t> bucket(2 * L - 1);
  for (int64_t r = 0; r < 2 * L - 1; ++r)
    bucket[r] = detail::mpnet_relative_position_bucket(r - (L - 1), kNumBuckets, kMaxDistance);
  return bucket;
}

std::optional<HeadKind> detect_mpnet_head(const CheckpointWeights& w) { return detail::detect_lm_style_head(w); }

HeadLayout load_mpnet_head(HeadKind kind, const EncoderConfig& c, CheckpointWeights& w) {
  return detail::load_lm_style_head(kind, c, w, "mpnet.");  // MPNet's heads are RoBERTa's
}

class MPNet : public EncoderModel {
 public:
  MPNet(const EncoderConfig& c, WeightSource& w, ops::ComputeType ct) {
    config_ = c;
    detail::check_mpnet_config(c);
    const int64_t H = c.hidden_size;
    const nn::Vars vb(w, mpnet_aliases);
    const nn::Vars emb = vb.prefix("embeddings");
    // Read in place and unchecked: forward reads only the rows it needs and checks those.
    emb_.word = emb.prefix("word_embeddings").get_unchecked("weight", {c.vocab_size, H});
    emb_.position = emb.prefix("position_embeddings").get_unchecked("weight", {c.max_position_embeddings, H});
    emb_.norm = nn::LayerNorm::load(emb.prefix("LayerNorm"), H, (float)c.layer_norm_eps);
    emb_.dim = H;
    rel_bias_ = vb.prefix("encoder.relative_attention_bias")
                    .get("weight", {c.relative_attention_num_buckets, c.num_attention_heads});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      layers_.push_back(mpnet_layer(vb.prefix("encoder.layer").prefix(l), c, ct, /*trainable=*/false));
    if (vb.has("pooler.dense.weight")) pooler_ = nn::Linear::load(vb.prefix("pooler.dense"), H, H);
  }

  EncoderOutput forward(const Tensor& input_ids, const Tensor& /*token_type_ids: MPNet has none*/,
                        const Tensor& attention_mask, bool all_layers) const override {
    return run(input_ids, attention_mask, all_layers, /*unpadded=*/false);
  }
  // The real tokens only (nn::encoder_stack_inference): the relative bias is read at each sentence's own positions,
  // which equals the padded forward's bias(j - i) whenever a row's real tokens are one run (otherwise the stack
  // runs padded).
  EncoderOutput forward_unpadded(const Tensor& input_ids, const Tensor& /*token_type_ids*/,
                                 const Tensor& attention_mask) const override {
    return run(input_ids, attention_mask, false, /*unpadded=*/true);
  }
  EncoderOutput forward_first_token(const Tensor& input_ids, const Tensor& /*token_type_ids*/,
                                    const Tensor& attention_mask, bool unpadded = false) const override {
    return run(input_ids, attention_mask, false, unpadded, /*first_token=*/true);
  }

 private:
  EncoderOutput run(const Tensor& input_ids, const Tensor& attention_mask, bool all_layers, bool unpadded,
                    bool first_token = false) const {
    const EncoderConfig& c = config_;
    std::vector<float> key_mask = detail::check_encoder_inputs(c, input_ids, Tensor(), attention_mask);
    const int64_t B = input_ids.size(0), L = input_ids.size(1), H = c.hidden_size;
    const int64_t N = B * L, NL = c.num_hidden_layers, NH = c.num_attention_heads;
    const int64_t* ids = input_ids.i64();
    const std::vector<int64_t> position_ids = detail::position_ids_from_padding(config_, ids, B, L, kPaddingIdx, "MPNet's padding_idx");
    EncoderOutput out;
    Tensor hs;
    if (all_layers) hs = Tensor::empty({NL + 1, B, L, H});
    Tensor x = Tensor::empty({B, L, H});
    OpTimer t_emb("embeddings");
    float* X = x.f32();
    // MPNetEmbeddings: word + position, then LayerNorm.
    emb_.forward_inference(X, ids, position_ids.data(), nullptr, N, L);
    if (all_layers) std::memcpy(hs.f32(), X, sizeof(float) * N * H);
    t_emb.stop();

    // MPNetEncoder.compute_position_bias: [heads, L, L], the same for every batch row and every layer.
    OpTimer t_bias("position_bias");
    std::vector<float> bias(NH * L * L);
    detail::mpnet_position_bias(bias.data(), rel_bias_.data(), NH, L);
    t_bias.stop();
    Tensor first;
    if (first_token) first = Tensor::empty({B, H});
    nn::encoder_stack_inference(layers_, X, B, L, key_mask.data(), unpadded, all_layers ? hs.f32() : nullptr,
                                bias.data(), first_token ? first.f32() : nullptr);
    // MPNetPooler: tanh(dense(x[:, 0])), when the checkpoint has one.
    if (pooler_.weight.defined())
      out.pooler_output = detail::pooler_output(pooler_, first_token ? first.f32() : nullptr, X, B, L, H);
    if (first_token) out.first_token_state = first;  // x holds the layer before the last's output
    else out.last_hidden_state = x;
    out.hidden_states = hs;
    return out;
  }

  // create_position_ids_from_input_ids(input_ids, padding_idx 1), [B * L]; refuses rows past the position table.
  nn::Embeddings emb_;  // word + position (from padding_idx), LayerNorm
  nn::Param rel_bias_;
  std::vector<nn::EncoderBlock> layers_;
  nn::Linear pooler_;
};

}  // namespace

FamilyHeads mpnet_heads() { return {detect_mpnet_head, load_mpnet_head}; }

void detail::mpnet_position_bias(float* bias, const float* table, int64_t heads, int64_t L) {
  const std::vector<int64_t> bucket = relative_buckets(L);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < L; ++i) {
      float* row = bias + (h * L + i) * L;
      for (int64_t j = 0; j < L; ++j) row[j] = table[bucket[j - i + L - 1] * heads + h];
    }
}

void detail::mpnet_position_bias_backward(float* dtable, const float* dbias, int64_t heads, int64_t L) {
  const std::vector<int64_t> bucket = relative_buckets(L);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < L; ++i) {
      const float* row = dbias + (h * L + i) * L;
      for (int64_t j = 0; j < L; ++j) dtable[bucket[j - i + L - 1] * heads + h] += row[j];
    }
}

void detail::check_mpnet_config(const EncoderConfig& c) {
  if (c.relative_attention_num_buckets < kNumBuckets)
    throw std::runtime_error("config: relative_attention_num_buckets " +
                             std::to_string(c.relative_attention_num_buckets) +
                             " is below 32, the buckets MPNet's relative_position_bucket produces");
  if (c.max_position_embeddings <= kPaddingIdx + 1)
    throw std::runtime_error("config: max_position_embeddings " + std::to_string(c.max_position_embeddings) +
                             " leaves no position for MPNet (positions start at padding_idx 1 + 1)");
}

detail::BertVariant detail::mpnet_variant() {
  BertVariant v;
  v.aliases = mpnet_aliases;
  v.prefix = "mpnet.";
  v.layer = mpnet_layer;
  v.token_type_embeddings = false;
  v.positions_from_padding = true;
  v.padding_idx = kPaddingIdx;
  v.relative_attention_bias = true;
  return v;
}

std::unique_ptr<EncoderModel> make_mpnet(const EncoderConfig& config, WeightSource& weights, ops::ComputeType dtype) {
  return std::make_unique<MPNet>(config, weights, dtype);
}

// ---------------------------------------------------------------- the family's entry (models/registry.h)

namespace {
// MPNet: hidden_dropout_prob for the body and the heads (MPNetConfig has no classifier_dropout),
// attention_probs_dropout_prob.
TrainingDropouts mpnet_dropouts(const nlohmann::json& config, HeadKind, const std::string& file) {
  TrainingDropouts d;
  d.body = d.head = detail::dropout_of(config, "hidden_dropout_prob", 0.1, file);
  d.attention = detail::dropout_of(config, "attention_probs_dropout_prob", 0.1, file);
  return d;
}
}  // namespace

const ModelFamily& mpnet_family() {
  static const ModelFamily f{
      .name = "mpnet",
      .model_types = {{"mpnet", "MPNet"}},
      .default_pad_token_id = 1,  // MPNetConfig's
      .make_encoder = make_mpnet,
      // Positions start after MPNet's padding_idx, fixed at 1.
      .max_input_tokens = [](const EncoderConfig& c) { return c.max_position_embeddings - 2; },
      .heads = mpnet_heads,
      .trainable_body =
          [](nn::ParamStore& s, const EncoderConfig& c, const TrainableEncoderOptions& o) {
            return detail::bert_variant_body(s, c, o, detail::mpnet_variant());
          },
      // MPNetForSequenceClassification's MPNetClassificationHead and MPNetLMHead are RoBERTa's, names included.
      .training_head = detail::roberta_training_head,
      .training_dropouts = mpnet_dropouts,
      .config_keys = detail::encoder_config_keys({
          {"type_vocab_size", "2", ConfigKeyRole::Ignored},  // MPNet has no token types
          {"pad_token_id", "1", ConfigKeyRole::Ignored},     // positions from padding_idx 1 whatever it says
          {"relative_attention_num_buckets", "32", ConfigKeyRole::Size},  // rows of relative_attention_bias
          {"hidden_dropout_prob", "0.1", ConfigKeyRole::Training},
          {"attention_probs_dropout_prob", "0.1", ConfigKeyRole::Training},
      }),
  };
  return f;
}

}  // namespace tfm

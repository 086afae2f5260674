#include "models/roberta.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/profile.h"
#include "models/bert.h"
#include "nn/params.h"
#include "nn/transformer_block.h"
#include "ops/activation.h"

namespace tfm {
namespace {

// Base-model names, then the "roberta."-prefixed names of the *For* heads' checkpoints.
std::vector<std::string> roberta_aliases(const std::string& name) { return {"roberta." + name}; }

class Roberta : public EncoderModel {
 public:
  Roberta(const EncoderConfig& c, WeightSource& w, ops::ComputeType ct) {
    config_ = c;
    if (c.pad_token_id < 0 || c.pad_token_id >= c.max_position_embeddings)
      throw std::runtime_error("config: pad_token_id " + std::to_string(c.pad_token_id) +
                               " is outside [0, max_position_embeddings = " + std::to_string(c.max_position_embeddings) +
                               "); RoBERTa position ids start at pad_token_id + 1");
    const int64_t H = c.hidden_size;
    const nn::Vars vb(w, roberta_aliases);
    const nn::Vars emb = vb.prefix("embeddings");
    word_ = emb.prefix("word_embeddings").get("weight", {c.vocab_size, H});
    pos_ = emb.prefix("position_embeddings").get("weight", {c.max_position_embeddings, H});
    type_ = emb.prefix("token_type_embeddings").get("weight", {c.type_vocab_size, H});
    emb_ln_ = nn::LayerNorm::load(emb.prefix("LayerNorm"), H, (float)c.layer_norm_eps);
    for (const nn::Param* t : {&word_, &pos_, &type_}) vb.release(*t);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      layers_.push_back(detail::bert_layer(vb.prefix("encoder.layer").prefix(l), c, ct));
    if (vb.has("pooler.dense.weight")) pooler_ = nn::Linear::load(vb.prefix("pooler.dense"), H, H);
  }

  EncoderOutput forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                        bool all_layers) const override {
    const EncoderConfig& c = config_;
    std::vector<float> key_mask = detail::check_encoder_inputs(c, input_ids, token_type_ids, attention_mask);
    const int64_t B = input_ids.size(0), L = input_ids.size(1), H = c.hidden_size;
    const int64_t N = B * L, NL = c.num_hidden_layers, pad = c.pad_token_id;
    if (pad + L >= c.max_position_embeddings)
      throw std::invalid_argument("sequence of " + std::to_string(L) + " tokens needs position " +
                                  std::to_string(pad + L) + ", past max_position_embeddings (" +
                                  std::to_string(c.max_position_embeddings) + ") with pad_token_id " +
                                  std::to_string(pad) + "; truncate the input to " +
                                  std::to_string(c.max_position_embeddings - pad - 1) + " tokens");
    const int64_t* ids = input_ids.i64();
    // create_position_ids_from_input_ids: cumsum(ids != pad) * (ids != pad) + pad.
    std::vector<int64_t> position_ids(N);
    for (int64_t b = 0; b < B; ++b) {
      int64_t count = 0;
      for (int64_t l = 0; l < L; ++l) {
        const bool real = ids[b * L + l] != pad;
        count += real;
        position_ids[b * L + l] = real ? pad + count : pad;
      }
    }
    EncoderOutput out;
    Tensor hs;
    if (all_layers) hs = Tensor::empty({NL + 1, B, L, H});
    Tensor x = Tensor::empty({B, L, H});
    OpTimer t_emb("embeddings");
    float* X = x.f32();
    const int64_t* tt = token_type_ids.defined() ? token_type_ids.i64() : nullptr;
    const float *we = word_.data(), *pe = pos_.data(), *te = type_.data();
#pragma omp parallel for if (N * H > 65536)
    for (int64_t n = 0; n < N; ++n) {
      const float* w = we + ids[n] * H;
      const float* p = pe + position_ids[n] * H;
      const float* t = te + (tt ? tt[n] : 0) * H;
      for (int64_t h = 0; h < H; ++h) X[n * H + h] = w[h] + p[h] + t[h];
    }
    emb_ln_.forward_inference(X, X, N);
    if (all_layers) std::memcpy(hs.f32(), X, sizeof(float) * N * H);
    t_emb.stop();

    ops::AttentionMask mask;
    bool padded = false;
    for (float m : key_mask) padded |= m == 0.0f;
    if (padded) mask.key_mask = key_mask.data();
    nn::BlockScratch scratch;
    for (int64_t l = 0; l < NL; ++l) {
      layers_[l].forward_inference(X, B, L, mask, scratch);
      if (all_layers) std::memcpy(hs.f32() + (l + 1) * N * H, X, sizeof(float) * N * H);
    }
    // RobertaPooler: tanh(dense(x[:, 0])) (BERT's), when the checkpoint has one.
    if (pooler_.weight.defined()) {
      OpTimer t("pooler");
      Tensor pooled = Tensor::empty({B, H});
      std::vector<float> cls(B * H);
      for (int64_t b = 0; b < B; ++b) std::memcpy(cls.data() + b * H, X + b * L * H, sizeof(float) * H);
      pooler_.forward(nn::Context{}, pooled.f32(), cls.data(), B);
      ops::tanh_forward(pooled.f32(), pooled.f32(), B * H);
      out.pooler_output = pooled;
    }
    out.last_hidden_state = x;
    out.hidden_states = hs;
    return out;
  }

 private:
  nn::Param word_, pos_, type_;
  nn::LayerNorm emb_ln_;
  std::vector<nn::EncoderBlock> layers_;
  nn::Linear pooler_;
};

}  // namespace

std::unique_ptr<EncoderModel> make_roberta(const EncoderConfig& config, WeightSource& weights, ops::ComputeType dtype) {
  return std::make_unique<Roberta>(config, weights, dtype);
}

}  // namespace tfm

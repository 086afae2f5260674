// transformer_seq2seq as a composition of nn/ modules (nn/transformer_block.h): embeddings and positions, the
// encoder and decoder blocks, the output projection, the loss. Incremental decoding is decode/decoder_cache.h.
#include "models/seq2seq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <stdexcept>

#include "core/profile.h"
#include "io/safetensors.h"
#include "nn/weights.h"
#include "models/hf_seq2seq.h"
#include "ops/cross_entropy.h"
#include "ops/gemm_bf16.h"

namespace tfm {

namespace {

void check_ids(const int64_t* ids, int64_t n, int64_t vocab, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw std::out_of_range(std::string(what) + " id " + std::to_string(ids[i]) + " is outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
}

// d2l MultiHeadAttention: W_q, W_k, W_v, W_o (bias only with attention_bias).
nn::MultiHeadAttention d2l_attention(const nn::Vars& vb, const Seq2SeqConfig& c) {
  nn::MultiHeadAttention a;
  for (auto [l, name] : {std::pair{&a.query, "W_q"}, {&a.key, "W_k"}, {&a.value, "W_v"}, {&a.output, "W_o"}})
    *l = nn::Linear::load(vb.prefix(name), c.num_hiddens, c.num_hiddens, c.attention_bias);
  a.num_heads = c.num_heads;
  a.hidden_size = c.num_hiddens;
  return a;
}
// d2l PositionWiseFFN: dense2(act(dense1(x))).
nn::FeedForward d2l_ffn(const nn::Vars& vb, const Seq2SeqConfig& c) {
  nn::FeedForward f;
  f.linear1 = nn::Linear::load(vb.prefix("dense1"), c.num_hiddens, c.ffn_num_hiddens);
  f.linear2 = nn::Linear::load(vb.prefix("dense2"), c.ffn_num_hiddens, c.num_hiddens);
  f.act = ops::parse_activation(c.activation);
  return f;
}
// AddNorm's LayerNorm (eps 1e-5), also the pre-LN norm of the same sublayer.
nn::LayerNorm d2l_norm(const nn::Vars& vb, const Seq2SeqConfig& c) { return nn::LayerNorm::load(vb, c.num_hiddens, 1e-5f); }

template <class F>
void for_each_linear(Seq2SeqModules& m, F f) {
  auto mha = [&](nn::MultiHeadAttention& a) {
    for (nn::Linear* l : {&a.query, &a.key, &a.value, &a.output}) f(*l);
  };
  for (auto& b : m.encoder) {
    mha(b.attention);
    f(b.ffn.linear1);
    f(b.ffn.linear2);
  }
  for (auto& b : m.decoder) {
    mha(b.attention1);
    mha(b.attention2);
    f(b.ffn.linear1);
    f(b.ffn.linear2);
  }
  f(m.dense);
}

}  // namespace

// The teacher-forced forward's saved activations and the backward's buffers.
struct Seq2SeqModel::Train {
  nn::Buf enc_x0, dec_x0, enc_final, dec_final, logits, d_enc_out, d_dec_x, dx_a, dx_b, row_weight,
      token_loss;
};

Seq2SeqModel::Seq2SeqModel(const Seq2SeqConfig& c) : config_(c), t_(std::make_unique<Train>()) {
  build(nn::Vars(params_));
  params_.finalize();
  if (c.family == "d2l")
    for (const auto& e : params_.entries())  // LayerNorm defaults so an un-initialised model is still sane
      if (e.name.find("ln.weight") != std::string::npos)
        std::fill(params_.all_data().begin() + e.offset, params_.all_data().begin() + e.offset + e.numel, 1.0f);
}

Seq2SeqModel::Seq2SeqModel(const Seq2SeqConfig& c, std::unique_ptr<SafeTensorsWeights> file)
    : config_(c), t_(std::make_unique<Train>()), file_(std::move(file)) {
  const bool hf = c.family != "d2l";
  build(hf ? nn::Vars(*file_, hf_seq2seq_aliases) : nn::Vars(*file_));
  const SafeTensors& st = file_->file();
  std::set<std::string> seen = file_->used();
  if (hf) hf_seq2seq_load_extras(*this, st, st.path(), seen);
  for (const auto& n : st.names())
    if (!seen.count(n))
      throw std::runtime_error(st.path() + ": unexpected tensor '" + n + "' (not part of a " +
                               (hf ? c.family : std::string("transformer_seq2seq")) + " with this config)");
}

std::unique_ptr<Seq2SeqModel> Seq2SeqModel::open(const Seq2SeqConfig& config, const std::string& path) {
  auto file = std::make_unique<SafeTensorsWeights>(path);
  file->set_release_checked(true);  // the whole file is read by the checks, and need not stay in memory
  return std::unique_ptr<Seq2SeqModel>(new Seq2SeqModel(config, std::move(file)));
}

void Seq2SeqModel::require_trainable(const char* what) const {
  if (file_)
    throw std::logic_error(std::string("Seq2SeqModel::") + what +
                           ": this model was opened for inference only (Seq2SeqModel::open); construct it from its "
                           "config for training");
}

void Seq2SeqModel::release_unpacked_pages() const {
  if (!file_) return;
  for (const nn::Embedding* e : {&m_.src_embedding, &m_.tgt_embedding}) file_->release(e->weight.tensor());
}

void Seq2SeqModel::build(const nn::Vars& vb) {
  const Seq2SeqConfig& c = config_;
  if (c.family != "d2l") {  // a Hugging Face folder: its own names and options (models/hf_seq2seq.cpp)
    build_hf_seq2seq(*this, vb);
    return;
  }
  const int64_t H = c.num_hiddens;
  // Registration order = PyTorch's named_parameters() order (module construction order).
  const nn::Vars enc = vb.prefix("encoder"), dec = vb.prefix("decoder");
  const float scale = std::sqrt((float)H);
  m_.src_embedding = nn::Embedding::load(enc.prefix("embedding"), c.src_vocab_size, H, scale);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const nn::Vars p = enc.prefix("blks.block" + std::to_string(i));
    nn::EncoderBlock b;
    b.attention = d2l_attention(p.prefix("attention"), c);
    b.norm1 = d2l_norm(p.prefix("addnorm1.ln"), c);
    b.ffn = d2l_ffn(p.prefix("ffn"), c);
    b.norm2 = d2l_norm(p.prefix("addnorm2.ln"), c);
    b.norm_first = c.norm_first;
    m_.encoder.push_back(std::move(b));
  }
  if (c.norm_first) m_.encoder_norm = d2l_norm(enc.prefix("ln"), c);
  if (c.shared_embeddings)
    m_.tgt_embedding = m_.src_embedding;
  else
    m_.tgt_embedding = nn::Embedding::load(dec.prefix("embedding"), c.tgt_vocab_size, H, scale);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const nn::Vars p = dec.prefix("blks.block" + std::to_string(i));
    nn::DecoderBlock b;
    b.attention1 = d2l_attention(p.prefix("attention1"), c);
    b.norm1 = d2l_norm(p.prefix("addnorm1.ln"), c);
    b.attention2 = d2l_attention(p.prefix("attention2"), c);
    b.norm2 = d2l_norm(p.prefix("addnorm2.ln"), c);
    b.ffn = d2l_ffn(p.prefix("ffn"), c);
    b.norm3 = d2l_norm(p.prefix("addnorm3.ln"), c);
    b.norm_first = c.norm_first;
    m_.decoder.push_back(std::move(b));
  }
  if (c.norm_first) m_.decoder_norm = d2l_norm(dec.prefix("ln"), c);
  if (c.shared_embeddings) {  // tied output projection: logits = x E^T + b
    m_.dense.weight = m_.src_embedding.weight;
    m_.dense.bias = dec.prefix("dense").get("bias", {c.tgt_vocab_size});
    m_.dense.in_features = H;
    m_.dense.out_features = c.tgt_vocab_size;
  } else {
    m_.dense = nn::Linear::load(dec.prefix("dense"), H, c.tgt_vocab_size);
  }
  // P[pos, 2i] = sin(pos / 10000^(2i/H)), P[pos, 2i+1] = cos(...), in float32 as the reference computes it.
  m_.P.assign(c.max_len * H, 0.0f);
  for (int64_t pos = 0; pos < c.max_len; ++pos)
    for (int64_t i = 0; i < H / 2; ++i) {
      float x = (float)pos / std::pow(10000.0f, (float)(2 * i) / (float)H);
      m_.P[pos * H + 2 * i] = std::sin(x);
      m_.P[pos * H + 2 * i + 1] = std::cos(x);
    }
}

Seq2SeqModel::~Seq2SeqModel() = default;

void Seq2SeqModel::set_precision(ops::ComputeType precision) {
  require_trainable("set_precision");
  if (precision == ops::ComputeType::I8)
    throw std::invalid_argument("training precision must be fp32 or bf16, not int8");
  if (precision == ops::ComputeType::BF16) ops::require_bf16_gemm();
  precision_ = precision;
  for_each_linear(m_, [&](nn::Linear& l) { l.precision = precision; });
}

void Seq2SeqModel::prepare_inference(ops::ComputeType dtype, bool quantize_output_projection) {
  // An inference-only model packs each weight once and lets go of what it was packed from (below); it does not
  // pack the decoder's separate self-attention projections, which only training-style forwards use (a step runs
  // the fused one).
  if (file_ && !m_.dense.weight.defined())
    throw std::logic_error("Seq2SeqModel::prepare_inference: an inference-only model is prepared once (its weights "
                           "are then only in the packed form)");
  // The output projection picks the words: it stays fp32 unless asked (quantise it only where measured to be
  // safe; on the Multi30k recipe's model int8 there cost 0.05 BLEU beyond int8 elsewhere). Packed first: while
  // it is, the file pages it is read from (the largest matrix, a tied embedding) are in memory beside its packed
  // copy, and no other packed weight is yet.
  m_.dense.pack(quantize_output_projection ? dtype : ops::ComputeType::F32);
  if (file_) file_->release(m_.dense.weight.tensor());
  std::set<const nn::Linear*> skip = {&m_.dense};
  if (file_)
    for (const auto& blk : m_.decoder)
      for (const nn::Linear* l : {&blk.attention1.query, &blk.attention1.key, &blk.attention1.value}) skip.insert(l);
  for_each_linear(m_, [&](nn::Linear& l) {
    if (skip.count(&l)) return;
    l.pack(dtype);
    if (file_) file_->release(l.weight.tensor());  // one weight's file pages in memory at a time
  });
  // A decoder step multiplies a few rows: one product for the three self-attention projections, not three.
  const int64_t H = config_.num_hiddens;
  for (auto& blk : m_.decoder) {
    nn::MultiHeadAttention& a = blk.attention1;
    std::vector<float> w(3 * H * H), b;
    const bool bias = a.query.bias.defined();
    if (bias) b.resize(3 * H);
    int64_t i = 0;
    for (const nn::Linear* l : {&a.query, &a.key, &a.value}) {
      std::memcpy(w.data() + i * H * H, l->weight.data(), sizeof(float) * H * H);
      if (bias) std::memcpy(b.data() + i * H, l->bias.data(), sizeof(float) * H);
      if (file_) file_->release(l->weight.tensor());
      ++i;
    }
    a.qkv = nn::Linear::from_weights(w.data(), bias ? b.data() : nullptr, H, 3 * H, dtype);
  }
  if (!file_) return;
  // The packed copies are all the model multiplies by now: the weights' file pages are dropped (views into the
  // mapping; read again from the file if ever needed) and weights of its own (dequantised int8) freed. The
  // embeddings stay (lookups), their pages dropped too: packing the tied output projection read all of them.
  for_each_linear(m_, [&](nn::Linear& l) {
    if (!l.weight.defined()) return;
    file_->release(l.weight.tensor());
    l.weight = nn::Param();
  });
  release_unpacked_pages();
}

void Seq2SeqModel::init(Rng& rng) {
  require_trainable("init");
  for (const auto& e : params_.entries()) {
    float* p = params_.data(params_.index_of(e.name));
    const std::string& n = e.name;
    bool is_ln = n.find(".ln.") != std::string::npos || n.rfind("encoder.ln", 0) == 0 || n.rfind("decoder.ln", 0) == 0;
    if (is_ln) {
      std::fill(p, p + e.numel, n.size() >= 6 && n.compare(n.size() - 6, 6, "weight") == 0 ? 1.0f : 0.0f);
    } else if (n.find("embedding") != std::string::npos) {
      // N(0, 1) as nn.Embedding; a matrix tied to the output projection gets N(0, 1/H) (fairseq's choice), so
      // the logits start small while the sqrt(H)-scaled input embeddings keep unit variance.
      float sd = config_.shared_embeddings ? 1.0f / std::sqrt((float)config_.num_hiddens) : 1.0f;
      for (int64_t i = 0; i < e.numel; ++i) p[i] = sd * rng.normal();
    } else if (e.shape.size() == 2) {  // Linear weight [out, in]: Xavier uniform
      float bound = std::sqrt(6.0f / (float)(e.shape[0] + e.shape[1]));
      for (int64_t i = 0; i < e.numel; ++i) p[i] = rng.uniform(-bound, bound);
    } else {  // Linear bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as nn.Linear
      float bound = 1.0f / std::sqrt((float)(n.find("dense1") != std::string::npos ? config_.num_hiddens
                                             : n.find("dense2") != std::string::npos ? config_.ffn_num_hiddens
                                                                                     : config_.num_hiddens));
      for (int64_t i = 0; i < e.numel; ++i) p[i] = rng.uniform(-bound, bound);
    }
  }
}

void Seq2SeqModel::load(const std::string& path) {
  require_trainable("load");
  SafeTensors st = SafeTensors::open(path);
  std::set<std::string> expected;
  const bool hf = config_.family != "d2l";
  for (const auto& e0 : params_.entries()) {
    auto e = e0;
    expected.insert(e.name);
    if (hf && !st.has(e.name)) {  // a tied matrix saved under one of its other names
      for (const std::string& alt : hf_seq2seq_aliases(e.name))
        if (st.has(alt)) {
          expected.insert(alt);
          e.name = alt;
          break;
        }
    }
    if (!st.has(e.name)) throw std::runtime_error(path + ": missing tensor '" + e.name + "'");
    if (st.shape_of(e.name) != e.shape)
      throw std::runtime_error(path + ": tensor '" + e.name + "' has shape " + shape_str(st.shape_of(e.name)) +
                               ", config expects " + shape_str(e.shape));
    if (hf && st.dtype_of(e.name) == "I8" && e.shape.size() == 2 && st.has(e.name + "_scale")) {
      // `tfm convert --dtype int8`: w = q * scale of its row (packing in int8 quantises it back to the same q).
      const int8_t* qd = reinterpret_cast<const int8_t*>(st.raw_data(e.name));
      Tensor sc = st.get(e.name + "_scale");
      if (sc.numel() != e.shape[0] || sc.dtype() != DType::F32)
        throw std::runtime_error(path + ": tensor '" + e.name + "_scale' must have " + std::to_string(e.shape[0]) +
                                 " F32 elements");
      float* dst = params_.all_data().data() + e.offset;
      for (int64_t r = 0; r < e.shape[0]; ++r)
        for (int64_t k = 0; k < e.shape[1]; ++k) dst[r * e.shape[1] + k] = (float)qd[r * e.shape[1] + k] * sc.f32()[r];
      expected.insert(e.name + "_scale");
      continue;
    }
    Tensor t = st.get(e.name);
    if (t.dtype() != DType::F32) throw std::runtime_error(path + ": tensor '" + e.name + "' is not floating point");
    const float* src = t.f32();
    for (int64_t i = 0; i < e.numel; ++i)
      if (!std::isfinite(src[i]))
        throw std::runtime_error(path + ": tensor '" + e.name + "' contains NaN or Inf at element " + std::to_string(i));
    std::memcpy(params_.all_data().data() + e.offset, src, sizeof(float) * e.numel);
  }
  if (hf) hf_seq2seq_load_extras(*this, st, path, expected);
  for (const auto& n : st.names())
    if (!expected.count(n))
      throw std::runtime_error(path + ": unexpected tensor '" + n + "' (not part of a " +
                               (hf ? config_.family : std::string("transformer_seq2seq")) + " with this config)");
}

void Seq2SeqModel::save(const std::string& path) {
  require_trainable("save");
  save_safetensors(path, params_.named_tensors());
}

// ---------------------------------------------------------------- forward / backward

namespace {

void resize_zero(nn::Buf& b, size_t n) { b.assign(n, 0.0f); }

}  // namespace

const float* Seq2SeqModel::encoder_forward(const int64_t* src, const int64_t* src_valid_len, int64_t B, int64_t Ls,
                                           const nn::Context& ctx) {
  Train& t = *t_;
  const Seq2SeqConfig& c = config_;
  const int64_t H = c.num_hiddens;
  if (Ls > c.max_len)
    throw std::invalid_argument("source of " + std::to_string(Ls) + " tokens is longer than max_len (" +
                                std::to_string(c.max_len) + ")");
  check_ids(src, B * Ls, c.src_vocab_size, "source");
  t.enc_x0.resize(B * Ls * H);
  m_.src_embedding.forward(ctx, t.enc_x0.data(), src, B, Ls, m_.P.data());
  ops::AttentionMask src_mask;
  src_mask.valid_lens = src_valid_len;
  const float* x = t.enc_x0.data();
  for (auto& blk : m_.encoder) {
    blk.forward(ctx, x, B, Ls, src_mask);
    x = blk.out.data();
  }
  if (c.norm_first) {
    t.enc_final.resize(B * Ls * H);
    m_.encoder_norm.forward(t.enc_final.data(), x, B * Ls);
    x = t.enc_final.data();
  }
  return x;
}

// Runs encoder and decoder in teacher-forcing mode; leaves every module's saved state and t_->logits [B*Lt, V].
void Seq2SeqModel::forward_train(const Seq2SeqBatch& b, const nn::Context& ctx) {
  Train& t = *t_;
  const Seq2SeqConfig& c = config_;
  const int64_t B = b.batch, Ls = b.src_len, Lt = b.tgt_len, H = c.num_hiddens;
  if (Lt > c.max_len) throw std::invalid_argument("target longer than max_len (" + std::to_string(c.max_len) + ")");
  check_ids(b.dec_input, B * Lt, c.tgt_vocab_size, "target");
  OpTimer t_enc("train: encoder forward");  // sections of the training profile (TFM_PROFILE=1, core/profile.h)
  const float* enc_out = encoder_forward(b.src, b.src_valid_len, B, Ls, ctx);
  t_enc.stop();
  OpTimer t_dec("train: decoder forward");
  // Decoder (training mode: causal self-attention, d2l's dec_valid_lens = 1..Lt)
  t.dec_x0.resize(B * Lt * H);
  m_.tgt_embedding.forward(ctx, t.dec_x0.data(), b.dec_input, B, Lt, m_.P.data());
  ops::AttentionMask causal, src_mask;
  causal.causal = true;
  src_mask.valid_lens = b.src_valid_len;
  const float* x = t.dec_x0.data();
  for (auto& blk : m_.decoder) {
    blk.forward(ctx, x, enc_out, B, Lt, Ls, causal, src_mask);
    x = blk.out.data();
  }
  if (c.norm_first) {
    t.dec_final.resize(B * Lt * H);
    m_.decoder_norm.forward(t.dec_final.data(), x, B * Lt);
    x = t.dec_final.data();
  }
  t_dec.stop();
  OpTimer t_out("train: output projection forward");
  t.logits.resize(B * Lt * c.tgt_vocab_size);
  m_.dense.forward(ctx, t.logits.data(), x, B * Lt);
}

LossResult Seq2SeqModel::forward_backward(const Seq2SeqBatch& b, Rng* rng, float label_smoothing, bool token_mean,
                                          int64_t token_denominator,
                                          const std::function<void(int64_t offset)>& grads_ready) {
  require_trainable("forward_backward");
  Train& t = *t_;
  const Seq2SeqConfig& c = config_;
  // The d2l layout registers parameters in forward order (embedding, encoder blocks, [encoder norm], [target
  // embedding], decoder blocks, [decoder norm], dense) and the backward visits them in reverse, the tied
  // embedding (offset 0) last: once a module's backward is done, every gradient from its first parameter on is.
  const bool report = grads_ready && c.family == "d2l";
  auto ready_from = [&](const nn::Param& first) {
    if (report) grads_ready(first.grad() - params_.all_grad().data());
  };
  const int64_t B = b.batch, Ls = b.src_len, Lt = b.tgt_len, H = c.num_hiddens, V = c.tgt_vocab_size;
  check_ids(b.labels, B * Lt, V, "label");
  nn::Context ctx;
  ctx.rng = rng;
  ctx.dropout = (float)c.dropout;
  ctx.grad = true;
  forward_train(b, ctx);
  // Loss: d2l MaskedSoftmaxCELoss = per-sequence mean over Lt of mask * CE, summed over the batch; or the mean
  // over valid tokens (token_mean).
  LossResult r;
  for (int64_t i = 0; i < B; ++i) r.num_tokens += std::min<int64_t>(std::max<int64_t>(b.tgt_valid_len[i], 0), Lt);
  const int64_t per_seq = b.loss_len > 0 ? b.loss_len : Lt;
  const int64_t denom = token_denominator > 0 ? token_denominator : std::max<int64_t>(r.num_tokens, 1);
  const float w = token_mean ? 1.0f / (float)denom : 1.0f / (float)per_seq;
  t.row_weight.assign(B * Lt, 0.0f);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t s = 0; s < Lt && s < b.tgt_valid_len[i]; ++s) t.row_weight[i * Lt + s] = w;
  OpTimer t_ce("train: cross-entropy");
  t.token_loss.resize(B * Lt);
  // In place: t.logits becomes the gradient of the logits (the step's largest buffer, [B*Lt, V], held once).
  float* dlogits = t.logits.data();
  ops::cross_entropy_forward_backward(t.token_loss.data(), dlogits, t.logits.data(), b.labels,
                                      t.row_weight.data(), B * Lt, V, label_smoothing);
  for (int64_t i = 0; i < B * Lt; ++i) {
    if (t.row_weight[i] == 0.0f) continue;
    r.loss_sum += (double)t.token_loss[i] * t.row_weight[i];
    r.token_loss_sum += t.token_loss[i];
  }
  t_ce.stop();
  OpTimer t_outb("train: output projection backward");
  // Backward through the decoder. dx_a / dx_b alternate as "gradient of this block's output / input".
  const float* dec_top = c.norm_first ? t.dec_final.data() : m_.decoder.back().out.data();
  resize_zero(t.d_dec_x, B * Lt * H);
  m_.dense.backward(t.d_dec_x.data(), dlogits, dec_top, B * Lt);
  t_outb.stop();
  OpTimer t_decb("train: decoder backward");
  if (c.norm_first) {
    resize_zero(t.dx_a, B * Lt * H);
    m_.decoder_norm.backward(t.dx_a.data(), t.d_dec_x.data(), /*accumulate=*/true);
  } else {
    t.dx_a = t.d_dec_x;
  }
  resize_zero(t.d_enc_out, B * Ls * H);
  for (int64_t i = (int64_t)m_.decoder.size() - 1; i >= 0; --i) {
    resize_zero(t.dx_b, B * Lt * H);
    m_.decoder[i].backward(t.dx_a.data(), t.dx_b.data(), t.d_enc_out.data());
    t.dx_a.swap(t.dx_b);
    ready_from(m_.decoder[i].attention1.query.weight);
  }
  t_decb.stop();
  OpTimer t_tgtb("train: embedding backward");
  m_.tgt_embedding.backward(t.dx_a.data());
  if (!c.shared_embeddings) ready_from(m_.tgt_embedding.weight);
  t_tgtb.stop();
  // Backward through the encoder.
  OpTimer t_encb("train: encoder backward");
  if (c.norm_first) {
    resize_zero(t.dx_a, B * Ls * H);
    m_.encoder_norm.backward(t.dx_a.data(), t.d_enc_out.data(), /*accumulate=*/true);
    ready_from(m_.encoder_norm.weight);
  } else {
    t.dx_a = t.d_enc_out;
  }
  for (int64_t i = (int64_t)m_.encoder.size() - 1; i >= 0; --i) {
    resize_zero(t.dx_b, B * Ls * H);
    m_.encoder[i].backward(t.dx_a.data(), t.dx_b.data());
    t.dx_a.swap(t.dx_b);
    ready_from(m_.encoder[i].attention.query.weight);
  }
  t_encb.stop();
  OpTimer t_srcb("train: embedding backward");
  m_.src_embedding.backward(t.dx_a.data());
  t_srcb.stop();
  if (grads_ready) grads_ready(0);
  return r;
}

Tensor Seq2SeqModel::forward_logits(const Seq2SeqBatch& b) {
  require_trainable("forward_logits");
  forward_train(b, nn::Context{});
  Tensor out = Tensor::empty({b.batch, b.tgt_len, config_.tgt_vocab_size});
  std::memcpy(out.f32(), t_->logits.data(), out.nbytes());
  return out;
}

// ---------------------------------------------------------------- inference

Tensor Seq2SeqModel::encode(const int64_t* src, const int64_t* src_valid_len, int64_t B, int64_t Ls,
                            std::vector<Tensor>* attention_weights) {
  decode_profile::Timer tm(decode_profile::kEncoder);
  nn::Context ctx;
  ctx.packed = true;
  const float* x = encoder_forward(src, src_valid_len, B, Ls, ctx);
  if (attention_weights) {
    attention_weights->clear();
    for (auto& blk : m_.encoder) {
      Tensor w = Tensor::empty({B, config_.num_heads, Ls, Ls});
      std::memcpy(w.f32(), blk.attention.probs.data(), w.nbytes());
      attention_weights->push_back(w);
    }
  }
  Tensor out = Tensor::empty({B, Ls, config_.num_hiddens});
  std::memcpy(out.f32(), x, out.nbytes());
  return out;
}

void Seq2SeqModel::embed_target_step(float* x, const int64_t* tokens, int64_t B, int64_t pos) const {
  const Seq2SeqConfig& c = config_;
  const int64_t H = c.num_hiddens;
  if (pos >= c.max_len) throw std::invalid_argument("decoding past max_len");
  check_ids(tokens, B, c.tgt_vocab_size, "target");
  m_.tgt_embedding.forward_inference(x, tokens, B, m_.P.data() + pos * H);
}

void Seq2SeqModel::project_output(float* logits, float* x, int64_t B) const {
  if (config_.norm_first) m_.decoder_norm.forward_inference(x, x, B);
  m_.dense.forward_inference(logits, x, B);
}

}  // namespace tfm

#include "serve/backends.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <utf8proc.h>

#include "io/json_util.h"
#include "models/heads.h"
#include "models/sentence_transformer.h"
#include "serve/requests.h"
#include "text/nmt_data.h"

namespace tfm::serve {

// ------------------------------------------------------------------------------------------ embeddings

std::vector<float> pool_hidden(const float* h, const int64_t* mask, int64_t L, int64_t H, const std::string& pooling) {
  std::vector<float> v(H, 0.0f);
  if (pooling == "cls") {
    std::copy(h, h + H, v.begin());
    return v;
  }
  // sentence-transformers mean pooling: sum(h * mask) / clamp(sum(mask), 1e-9).
  double n = 0;
  std::vector<double> acc(H, 0.0);
  for (int64_t l = 0; l < L; ++l) {
    if (!mask[l]) continue;
    n += 1;
    for (int64_t j = 0; j < H; ++j) acc[j] += h[l * H + j];
  }
  for (int64_t j = 0; j < H; ++j) v[j] = (float)(acc[j] / std::max(n, 1e-9));
  return v;
}

namespace {

// Offsets of `e` (the encoding of `encoded`) in the request text, which is `encoded` without its first `skip` code
// points (a prompt); special and prompt tokens get (-1, -1).
std::vector<std::pair<int64_t, int64_t>> request_offsets(const BertTokenizer& tok, const std::string& encoded,
                                                         const Encoding& e, const std::vector<bool>& special,
                                                         int64_t skip) {
  // The tokenizer's own offsets (Hugging Face's offset_mapping) when the encoding still has them.
  std::vector<std::pair<int64_t, int64_t>> out =
      e.offsets.size() == e.input_ids.size() ? e.offsets : token_offsets(tok, encoded, e);
  for (size_t i = 0; i < out.size(); ++i) {
    auto& [a, b] = out[i];
    if (special[i] || (a == 0 && b == 0) || a < skip) {
      a = b = -1;
    } else {
      a -= skip;
      b -= skip;
    }
  }
  return out;
}

// A request's ids and tokens; a [CLS]/[SEP] the tokenizer added at either end is marked special (no offsets).
TokenizedInput tokenized(const Encoding& e, bool add_special_tokens) {
  TokenizedInput t;
  t.ids = e.input_ids;
  t.token_type_ids = e.token_type_ids;
  t.tokens = e.tokens;
  const bool mask = e.special_tokens_mask.size() == t.tokens.size();
  for (size_t i = 0; i < t.tokens.size(); ++i)
    t.special.push_back(add_special_tokens &&
                        (mask ? e.special_tokens_mask[i] == 1
                              : (i == 0 || i + 1 == t.tokens.size()) && (t.tokens[i] == "[CLS]" || t.tokens[i] == "[SEP]")));
  return t;
}

// The sentence-transformers pipeline's input: each request's ids, unpadded (attention_mask all ones).
std::vector<Encoding> encodings(const std::vector<const TokenizedInput*>& batch) {
  std::vector<Encoding> enc(batch.size());
  for (size_t b = 0; b < batch.size(); ++b) {
    enc[b].input_ids = batch[b]->ids;
    enc[b].token_type_ids = batch[b]->token_type_ids;
    enc[b].attention_mask.assign(batch[b]->ids.size(), 1);
  }
  return enc;
}
std::vector<const Encoding*> pointers(const std::vector<Encoding>& enc) {
  std::vector<const Encoding*> p;
  for (const Encoding& e : enc) p.push_back(&e);
  return p;
}

int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

class EncoderEmbedding : public EmbeddingModel {
 public:
  EncoderEmbedding(const std::string& dir, std::string pooling)
      : pooling_(std::move(pooling)), tok_(BertTokenizer::from_dir(dir)), model_(load_encoder(dir)) {
    if (pooling_ != "mean" && pooling_ != "cls")
      throw std::invalid_argument("pooling must be 'mean' or 'cls', got '" + pooling_ + "'");
    if (tok_.vocab_size() > model_->config().vocab_size)
      throw std::runtime_error(dir + ": tokenizer vocabulary (" + std::to_string(tok_.vocab_size()) +
                               " tokens) is larger than config.json vocab_size (" +
                               std::to_string(model_->config().vocab_size) + ")");
  }
  std::string pooling() const override { return pooling_; }
  int64_t hidden_size() const override { return model_->config().hidden_size; }
  int64_t max_input_length() const override {
    return std::min(model_->config().max_position_embeddings, tok_.model_max_length());
  }
  TokenizedInput tokenize(const std::string& text, bool add_special_tokens, int64_t max_length) const override {
    Encoding e = tok_.encode(text, nullptr, add_special_tokens, max_length);
    TokenizedInput t = tokenized(e, add_special_tokens);
    t.offsets = request_offsets(tok_, text, e, t.special, 0);
    return t;
  }
  std::string decode(const std::vector<int64_t>& ids, bool skip_special) const override {
    return tok_.decode(ids, skip_special);
  }
  std::vector<std::vector<float>> embed(const std::vector<const TokenizedInput*>& batch) const override {
    int64_t L = 0;
    Tensor h = forward(batch, L);
    const int64_t H = hidden_size();
    std::vector<std::vector<float>> out;
    std::vector<int64_t> mask(L);
    for (size_t b = 0; b < batch.size(); ++b) {
      for (int64_t l = 0; l < L; ++l) mask[l] = l < (int64_t)batch[b]->ids.size();
      out.push_back(pool_hidden(h.f32() + b * L * H, mask.data(), L, H, pooling_));
    }
    return out;
  }
  std::vector<std::vector<float>> embed_all(const std::vector<const TokenizedInput*>& batch) const override {
    int64_t L = 0;
    Tensor h = forward(batch, L);
    const int64_t H = hidden_size();
    std::vector<std::vector<float>> out;
    for (size_t b = 0; b < batch.size(); ++b) {
      const float* p = h.f32() + b * L * H;
      out.emplace_back(p, p + batch[b]->ids.size() * H);
    }
    return out;
  }

 private:
  // last_hidden_state [B, L, H] of the right-padded batch.
  Tensor forward(const std::vector<const TokenizedInput*>& batch, int64_t& L) const {
    const int64_t B = (int64_t)batch.size();
    L = 0;
    for (auto* t : batch) L = std::max<int64_t>(L, (int64_t)t->ids.size());
    Tensor ids = Tensor::zeros({B, L}, DType::I64), tt = Tensor::zeros({B, L}, DType::I64),
           mask = Tensor::zeros({B, L}, DType::I64);
    for (int64_t b = 0; b < B; ++b)
      for (size_t l = 0; l < batch[b]->ids.size(); ++l) {
        ids.i64()[b * L + l] = batch[b]->ids[l];
        tt.i64()[b * L + l] = batch[b]->token_type_ids[l];
        mask.i64()[b * L + l] = 1;
      }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t l = (int64_t)batch[b]->ids.size(); l < L; ++l) ids.i64()[b * L + l] = model_->config().pad_token_id;
    EncoderOutput o = model_->forward(ids, tt, mask, false);
    for (int64_t i = 0; i < o.last_hidden_state.numel(); ++i)
      if (!std::isfinite(o.last_hidden_state.f32()[i]))
        throw ApiError(500, "backend", "the encoder produced a non-finite value");
    return o.last_hidden_state;
  }

  std::string pooling_;
  BertTokenizer tok_;
  std::unique_ptr<EncoderModel> model_;
};

// sentence-transformers' do_lower_case (str.lower, per code point), for measuring the untruncated length only.
std::string lower_utf8(const std::string& s) {
  std::string out;
  const auto* p = (const utf8proc_uint8_t*)s.data();
  for (utf8proc_ssize_t i = 0, n = (utf8proc_ssize_t)s.size(); i < n;) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate(p + i, n - i, &cp);
    if (k <= 0) return s;  // invalid UTF-8: the tokenizer reports it
    utf8proc_uint8_t buf[4];
    out.append((const char*)buf, (size_t)utf8proc_encode_char(utf8proc_tolower(cp), buf));
    i += k;
  }
  return out;
}

class SentenceTransformerEmbedding : public EmbeddingModel {
 public:
  SentenceTransformerEmbedding(const std::string& dir, const SentenceTransformerOptions& o)
      : st_(SentenceTransformer::load(dir, o)) {
    const std::string sb = dir + "/sentence_bert_config.json";
    if (std::filesystem::exists(sb)) do_lower_case_ = json_bool_or(load_json_file(sb), "do_lower_case", false, sb);
  }
  std::string pooling() const override { return st_.describe(); }
  int64_t hidden_size() const override { return st_.dimension(); }
  int64_t max_input_length() const override { return st_.max_seq_length(); }
  TokenizedInput tokenize(const std::string& text, bool add_special_tokens, int64_t max_length) const override {
    Encoding e;
    if (!add_special_tokens) {  // /tokenize without special tokens: the pipeline's text, pieces only
      std::string t = st_.prompt() + text;
      e = st_.tokenizer().encode(do_lower_case_ ? lower_utf8(t) : t, nullptr, false, 0);
    } else {
      e = st_.tokenize(text);  // prompt, do_lower_case, cut to max_seq_length
      if (max_length == 0 && (int64_t)e.input_ids.size() >= st_.max_seq_length()) {
        std::string t = st_.prompt() + text;
        Encoding full = st_.tokenizer().encode(do_lower_case_ ? lower_utf8(t) : t, nullptr, true, 0);
        if (full.input_ids.size() > e.input_ids.size()) e = std::move(full);  // over the limit: caller answers 422
      }
    }
    TokenizedInput t = tokenized(e, add_special_tokens);
    // The tokenizer saw prompt + text (lowercased per code point, which keeps the character count).
    const std::string seen = st_.prompt() + text;
    t.offsets = request_offsets(st_.tokenizer(), do_lower_case_ ? lower_utf8(seen) : seen, e, t.special,
                                code_points(st_.prompt()));
    return t;
  }
  std::string decode(const std::vector<int64_t>& ids, bool skip_special) const override {
    return st_.tokenizer().decode(ids, skip_special);
  }
  std::vector<std::vector<float>> embed(const std::vector<const TokenizedInput*>& batch) const override {
    std::vector<Encoding> enc = encodings(batch);
    Tensor v = st_.embed(pointers(enc));
    const int64_t D = st_.dimension();
    std::vector<std::vector<float>> out;
    for (size_t b = 0; b < batch.size(); ++b) {
      const float* p = v.f32() + b * D;
      for (int64_t j = 0; j < D; ++j)
        if (!std::isfinite(p[j])) throw ApiError(500, "backend", "the model produced a non-finite value");
      out.emplace_back(p, p + D);
    }
    return out;
  }
  // The Transformer module's token embeddings (before Pooling), as text-embeddings-inference's /embed_all.
  std::vector<std::vector<float>> embed_all(const std::vector<const TokenizedInput*>& batch) const override {
    std::vector<Encoding> enc = encodings(batch);
    Tensor h = st_.token_embeddings(pointers(enc));
    const int64_t L = h.size(1), H = h.size(2);
    std::vector<std::vector<float>> out;
    for (size_t b = 0; b < batch.size(); ++b) {
      const float* p = h.f32() + (int64_t)b * L * H;
      const int64_t n = (int64_t)batch[b]->ids.size() * H;
      for (int64_t j = 0; j < n; ++j)
        if (!std::isfinite(p[j])) throw ApiError(500, "backend", "the model produced a non-finite value");
      out.emplace_back(p, p + n);
    }
    return out;
  }

 private:
  SentenceTransformer st_;
  bool do_lower_case_ = false;
};

}  // namespace

std::unique_ptr<EmbeddingModel> load_sentence_transformer_embedding(const std::string& dir, const std::string& pooling,
                                                                     const std::string& prompt_name, bool no_prompt) {
  SentenceTransformerOptions o;
  o.pooling = pooling;
  o.prompt_name = prompt_name;
  o.no_prompt = no_prompt;
  return std::make_unique<SentenceTransformerEmbedding>(dir, o);
}

std::unique_ptr<EmbeddingModel> load_encoder_embedding(const std::string& dir, const std::string& pooling) {
  return std::make_unique<EncoderEmbedding>(dir, pooling);
}

// ------------------------------------------------------------------------------------------ translation

Translator::Translator(const std::string& dir)
    : model_(Seq2SeqConfig::from_json(load_json_file(dir + "/config.json"), dir + "/config.json")) {
  namespace fs = std::filesystem;
  const Seq2SeqConfig& c = model_.config();
  const nlohmann::json cj = load_json_file(dir + "/config.json");
  subword_ = fs::exists(dir + "/spm.model") ||
             json_string_or(cj, "tokenizer", "", dir + "/config.json") == "sentencepiece";
  if (subword_) {
    spm_ = std::make_unique<SubwordModel>(SubwordModel::load(dir + "/spm.model"));
    if (spm_->vocab_size() != c.src_vocab_size || spm_->vocab_size() != c.tgt_vocab_size)
      throw std::runtime_error(dir + ": spm.model has " + std::to_string(spm_->vocab_size()) +
                               " pieces but config.json says src_vocab_size " + std::to_string(c.src_vocab_size));
  } else {
    src_vocab_ = std::make_unique<Vocab>(Vocab::load(dir + "/src_vocab.txt"));
    tgt_vocab_ = std::make_unique<Vocab>(Vocab::load(dir + "/tgt_vocab.txt"));
    if (src_vocab_->size() != c.src_vocab_size || tgt_vocab_->size() != c.tgt_vocab_size)
      throw std::runtime_error(dir + ": vocabulary files have " + std::to_string(src_vocab_->size()) + " / " +
                               std::to_string(tgt_vocab_->size()) + " tokens but config.json says " +
                               std::to_string(c.src_vocab_size) + " / " + std::to_string(c.tgt_vocab_size));
  }
  model_.load(dir + "/model.safetensors");
  opt_.max_steps = c.num_steps;
  opt_.bos_id = subword_ ? spm_->bos_id() : (*tgt_vocab_)["<bos>"];
  opt_.eos_id = subword_ ? spm_->eos_id() : (*tgt_vocab_)["<eos>"];
  opt_.position_mode = c.decode_positions == "absolute" ? PositionMode::kAbsolute : PositionMode::kD2lStep;
  pad_id_ = subword_ ? spm_->pad_id() : (*src_vocab_)["<pad>"];
}

int64_t Translator::max_source_tokens() const {
  const Seq2SeqConfig& c = model_.config();
  return subword_ ? std::min<int64_t>(c.max_len, 1024) : c.num_steps;
}

int64_t Translator::padded_len(int64_t n) const {
  // d2l word models pad every source to num_steps, as predict_seq2seq does (the padding is masked).
  return subword_ ? n : std::max<int64_t>(n, model_.config().num_steps);
}

std::vector<int64_t> Translator::encode_source(const std::string& text, bool truncate) const {
  const int64_t limit = max_source_tokens();
  std::vector<int64_t> ids;
  if (subword_) {
    ids = spm_->encode(text);
    ids.push_back(spm_->eos_id());
    if ((int64_t)ids.size() > limit) {
      if (!truncate) goto too_long;
      ids.resize(limit - 1);
      ids.push_back(spm_->eos_id());
    }
    return ids;
  } else {
    const std::string pre = preprocess_nmt(text);
    EncodedSource s = encode_source_sentence(pre, *src_vocab_, limit + 1);  // valid_len limit + 1: too long
    if (s.valid_len > limit) {
      if (!truncate) goto too_long;
      s = encode_source_sentence(pre, *src_vocab_, limit);  // d2l's truncate_pad
    }
    return std::vector<int64_t>(s.ids.begin(), s.ids.begin() + s.valid_len);
  }
too_long:
  throw validation_error("input is longer than the model's limit of " + std::to_string(limit) +
                         " source tokens (with <eos>); send \"truncate\": true or start the server with "
                         "--auto-truncate");
}

std::string Translator::source_token(int64_t id) const {
  return subword_ ? spm_->id_to_piece(id) : src_vocab_->to_token(id);
}
std::string Translator::target_token(int64_t id) const {
  return subword_ ? spm_->id_to_piece(id) : tgt_vocab_->to_token(id);
}
std::string Translator::detokenize(const std::vector<int64_t>& ids) const {
  if (subword_) return spm_->decode(ids);
  std::string line;
  for (size_t k = 0; k < ids.size(); ++k) line += (k ? " " : "") + tgt_vocab_->to_token(ids[k]);
  return line;
}

std::vector<std::string> Translator::translate(const std::vector<const std::vector<int64_t>*>& sources,
                                               int64_t beam_size) {
  const int64_t n = (int64_t)sources.size();
  int64_t Ls = 0;
  for (auto* s : sources) Ls = std::max(Ls, padded_len((int64_t)s->size()));
  std::vector<int64_t> ids(n * Ls, pad_id_), vl(n);
  for (int64_t k = 0; k < n; ++k) {
    std::copy(sources[k]->begin(), sources[k]->end(), ids.begin() + k * Ls);
    vl[k] = (int64_t)sources[k]->size();
  }
  DecodeOptions opt = opt_;
  opt.beam_size = beam_size;
  auto res = beam_size > 1 ? beam_search_batch(model_, ids.data(), vl.data(), n, Ls, opt)
                           : greedy_decode(model_, ids.data(), vl.data(), n, Ls, opt);
  std::vector<std::string> out;
  for (const auto& r : res) out.push_back(detokenize(r));
  return out;
}

nlohmann::json Translator::attention(const std::vector<int64_t>& source) {
  const Seq2SeqConfig& c = model_.config();
  const int64_t vl = (int64_t)source.size(), Ls = padded_len(vl), heads = c.num_heads, V = c.tgt_vocab_size;
  std::vector<int64_t> ids(source);
  ids.resize(Ls, pad_id_);
  std::vector<Tensor> enc_attn;
  Tensor enc = model_.encode(ids.data(), &vl, 1, Ls, &enc_attn);
  DecoderCache cache;
  model_.start_decoding(cache, enc, &vl, opt_.max_steps);
  int64_t token = opt_.bos_id;
  std::vector<float> logits(V);
  std::vector<int64_t> out;
  std::vector<std::string> target_tokens;
  // cross[layer][head][step][key]
  nlohmann::json cross = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_layers; ++l) cross.push_back(nlohmann::json::array());
  for (auto& layer : cross)
    for (int64_t h = 0; h < heads; ++h) layer.push_back(nlohmann::json::array());
  for (int64_t t = 0; t < opt_.max_steps; ++t) {
    std::vector<std::vector<float>> w;  // per layer [1, heads, 1, Ls]
    model_.decode_step(cache, &token, logits.data(), opt_.position_mode, &w);
    token = (int64_t)(std::max_element(logits.begin(), logits.end()) - logits.begin());
    for (int64_t l = 0; l < c.num_layers; ++l)
      for (int64_t h = 0; h < heads; ++h)
        cross[l][h].push_back(std::vector<float>(w[l].begin() + h * Ls, w[l].begin() + h * Ls + vl));
    target_tokens.push_back(target_token(token));
    if (token == opt_.eos_id) break;
    out.push_back(token);
  }
  nlohmann::json self = nlohmann::json::array();
  for (const Tensor& a : enc_attn) {  // [1, heads, Ls, Ls]
    nlohmann::json layer = nlohmann::json::array();
    for (int64_t h = 0; h < heads; ++h) {
      nlohmann::json m = nlohmann::json::array();
      for (int64_t q = 0; q < vl; ++q) {
        const float* row = a.f32() + (h * Ls + q) * Ls;
        m.push_back(std::vector<float>(row, row + vl));
      }
      layer.push_back(m);
    }
    self.push_back(layer);
  }
  std::vector<std::string> source_tokens;
  for (int64_t id : source) source_tokens.push_back(source_token(id));
  return {{"translatedText", detokenize(out)}, {"source_tokens", source_tokens}, {"target_tokens", target_tokens},
          {"num_layers", c.num_layers},        {"num_heads", heads},             {"encoder_self", self},
          {"cross", cross}};
}

}  // namespace tfm::serve

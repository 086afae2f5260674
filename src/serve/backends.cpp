#include "serve/backends.h"

#include <algorithm>
#include <cmath>

#include "serve/requests.h"

namespace tfm::serve {

// ------------------------------------------------------------------------------------------ embeddings

namespace {

// A right-padded batch of requests as the API takes it: ids [B, L] (pad 0, masked), token_type_ids, attention_mask.
struct PaddedBatch {
  std::vector<int64_t> ids, types, mask;
  int64_t B = 0, L = 0;
  explicit PaddedBatch(const std::vector<const TokenizedInput*>& batch, int64_t pad_id) : B((int64_t)batch.size()) {
    for (auto* t : batch) L = std::max<int64_t>(L, (int64_t)t->ids.size());
    ids.assign(B * L, pad_id), types.assign(B * L, 0), mask.assign(B * L, 0);
    for (int64_t b = 0; b < B; ++b)
      for (size_t l = 0; l < batch[b]->ids.size(); ++l) {
        ids[b * L + l] = batch[b]->ids[l];
        types[b * L + l] = batch[b]->token_type_ids[l];
        mask[b * L + l] = 1;
      }
  }
  EncoderInputs inputs() const { return EncoderInputs{ids.data(), mask.data(), types.data(), B, L}; }
};

void check_finite(const FloatArray& a) {
  for (float x : a)
    if (!std::isfinite(x)) throw ApiError(500, "backend", "the model produced a non-finite value");
}

// An encoder folder through the public API: a plain BERT / tutorial encoder (EmbedOptions::pooling) or a
// sentence-transformers folder (its own pipeline).
class EncoderEmbedding : public EmbeddingModel {
 public:
  EncoderEmbedding(const std::string& dir, const EncoderOptions& o) : enc_(dir, o) {
    if (!enc_.has_tokenizer()) enc_.tokenizer();  // throws "this model folder has no tokenizer ..."
  }
  std::string pooling() const override { return enc_.pooling(); }
  int64_t hidden_size() const override { return enc_.embedding_dim(); }
  int64_t max_input_length() const override { return enc_.max_input_length(); }
  int64_t vocab_size() const override { return enc_.vocab_size(); }
  TokenizedInput tokenize(const std::string& text, bool add_special_tokens, int64_t max_length,
                          const std::string& prompt_name) const override {
    TokenizeOptions to;
    to.add_special_tokens = add_special_tokens;
    to.max_length = max_length;
    TextEncoding e = enc_.tokenize(text, to, prompt_name);
    TokenizedInput t;
    t.ids = std::move(e.input_ids);
    t.token_type_ids = std::move(e.token_type_ids);
    t.tokens = std::move(e.tokens);
    t.special = std::move(e.special);
    t.offsets = std::move(e.offsets);
    return t;
  }
  std::string decode(const std::vector<int64_t>& ids, bool skip_special) const override {
    return enc_.tokenizer().decode(ids, skip_special);
  }
  std::vector<std::vector<float>> embed(const std::vector<const TokenizedInput*>& batch,
                                        const std::string& prompt_name) const override {
    PaddedBatch p(batch, enc_.tokenizer().pad_id());
    EmbedOptions eo;
    eo.normalize = false;
    eo.prompt_name = prompt_name;
    FloatArray v = enc_.embed(p.inputs(), eo);
    check_finite(v);
    const int64_t D = v.size(1);
    std::vector<std::vector<float>> out;
    for (int64_t b = 0; b < p.B; ++b) out.emplace_back(v.data() + b * D, v.data() + (b + 1) * D);
    return out;
  }
  // Token embeddings without padding: [B][L_b * H] (as text-embeddings-inference's /embed_all).
  std::vector<std::vector<float>> embed_all(const std::vector<const TokenizedInput*>& batch) const override {
    PaddedBatch p(batch, enc_.tokenizer().pad_id());
    FloatArray h = enc_.token_embeddings(p.inputs());
    const int64_t L = h.size(1), H = h.size(2);
    std::vector<std::vector<float>> out;
    for (int64_t b = 0; b < p.B; ++b) {
      const float* r = h.data() + b * L * H;
      out.emplace_back(r, r + (int64_t)batch[b]->ids.size() * H);
      for (float x : out.back())
        if (!std::isfinite(x)) throw ApiError(500, "backend", "the model produced a non-finite value");
    }
    return out;
  }

 private:
  Encoder enc_;
};

}  // namespace

std::unique_ptr<EmbeddingModel> load_sentence_transformer_embedding(const std::string& dir, const std::string& pooling,
                                                                     const std::string& prompt_name, bool no_prompt,
                                                                     int threads, const std::string& dtype) {
  EncoderOptions o;
  o.threads = threads;
  o.dtype = dtype;
  o.pooling = pooling;
  o.prompt_name = prompt_name;
  o.no_prompt = no_prompt;
  return std::make_unique<EncoderEmbedding>(dir, o);
}

std::unique_ptr<EmbeddingModel> load_encoder_embedding(const std::string& dir, const std::string& pooling, int threads,
                                                       const std::string& dtype) {
  EncoderOptions o;
  o.threads = threads;
  o.dtype = dtype;
  o.pooling = pooling;
  return std::make_unique<EncoderEmbedding>(dir, o);
}

// ------------------------------------------------------------------------------------------ translation

TranslationBackend::TranslationBackend(const std::string& dir, int threads, const std::string& dtype)
    : tr_(dir, TranslatorOptions{threads, dtype.empty() ? "fp32" : dtype, false}) {}

std::vector<int64_t> TranslationBackend::encode_source(const std::string& text, bool truncate,
                                                      const TranslateOptions& options) const {
  SourceEncoding e = tr_.encode_source(text, options);
  if (e.full_length > tr_.max_source_tokens() && !truncate)
    throw validation_error("input is longer than the model's limit of " + std::to_string(tr_.max_source_tokens()) +
                           " source tokens (with <eos>); send \"truncate\": true or start the server with "
                           "--auto-truncate");
  return std::move(e.ids);
}

std::vector<int64_t> TranslationBackend::encode_target(const std::string& text) const {
  try {
    return tr_.encode_target(text);
  } catch (const std::invalid_argument& e) {
    throw validation_error(e.what());
  }
}

std::vector<std::string> TranslationBackend::translate(const std::vector<const std::vector<int64_t>*>& sources,
                                                       int64_t beam_size) const {
  std::vector<std::vector<int64_t>> src;
  for (auto* s : sources) src.push_back(*s);
  TranslateOptions o;
  o.beam_size = beam_size;
  std::vector<std::string> out;
  for (Translation& t : translate(sources, o)) out.push_back(std::move(t.text));
  return out;
}

std::vector<Translation> TranslationBackend::translate(const std::vector<const std::vector<int64_t>*>& sources,
                                                       const TranslateOptions& options) const {
  std::vector<std::vector<int64_t>> src;
  for (auto* s : sources) src.push_back(*s);
  return tr_.translate_ids(src, options);
}

nlohmann::json TranslationBackend::attention(const std::vector<int64_t>& source, int64_t beam_size) const {
  TranslateOptions o;
  o.beam_size = beam_size;
  const TranslationAttention a = tr_.attention(source, o);
  // [layers][heads][rows][keys] as nested lists.
  auto nested = [](const std::vector<FloatArray>& maps) {
    nlohmann::json out = nlohmann::json::array();
    for (const FloatArray& m : maps) {  // [heads, rows, keys]
      const int64_t heads = m.size(0), rows = m.size(1), keys = m.size(2);
      nlohmann::json layer = nlohmann::json::array();
      for (int64_t h = 0; h < heads; ++h) {
        nlohmann::json mat = nlohmann::json::array();
        for (int64_t r = 0; r < rows; ++r) {
          const float* row = m.data() + (h * rows + r) * keys;
          mat.push_back(std::vector<float>(row, row + keys));
        }
        layer.push_back(mat);
      }
      out.push_back(layer);
    }
    return out;
  };
  return {{"translatedText", a.translation.text}, {"source_tokens", a.source_tokens},
          {"target_tokens", a.target_tokens},     {"num_layers", a.num_layers},
          {"num_heads", a.num_heads},             {"encoder_self", nested(a.encoder_self)},
          {"cross", nested(a.cross)}};
}

}  // namespace tfm::serve

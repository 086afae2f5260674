// What `tfm serve` runs: an embedding model (encoder + pooling) or a translation model (transformer_seq2seq).
// EmbeddingModel is the plug-in point for other embedders (a sentence-transformers folder with its own pooling
// and normalisation implements the same interface).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "decode/search.h"
#include "models/encoder.h"
#include "models/seq2seq.h"
#include "text/bert_tokenizer.h"
#include "text/subword.h"
#include "text/vocab.h"

namespace tfm::serve {

// A tokenized input: ids [L] with special tokens, token_type_ids [L], the token strings [L] and which are special.
struct TokenizedInput {
  std::vector<int64_t> ids, token_type_ids;
  std::vector<std::string> tokens;
  std::vector<bool> special;
  // Per token [start, stop) in the request text, in characters (code points), as Hugging Face's offset_mapping;
  // (-1, -1) for tokens with no place in it (special tokens, prompt tokens). Filled by tokenize() for /tokenize.
  std::vector<std::pair<int64_t, int64_t>> offsets;
};

class EmbeddingModel {
 public:
  virtual ~EmbeddingModel() = default;
  virtual std::string pooling() const = 0;         // "mean", "cls", or a sentence-transformers pipeline
  virtual int64_t hidden_size() const = 0;         // length of each embedding
  virtual int64_t max_input_length() const = 0;    // tokens per input, special tokens included
  // Tokenizes `text`; max_length > 0 truncates to that many tokens, 0 keeps all (the caller checks the limit).
  virtual TokenizedInput tokenize(const std::string& text, bool add_special_tokens, int64_t max_length) const = 0;
  // Text of ids as Hugging Face decode (clean_up_tokenization_spaces false); skip_special drops special tokens.
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special) const = 0;
  // Pooled embeddings: batch of B inputs -> [B][hidden_size]; not normalised unless the model's own pipeline
  // ends in Normalize (a sentence-transformers folder).
  virtual std::vector<std::vector<float>> embed(const std::vector<const TokenizedInput*>& batch) const = 0;
  // Whether embed_all gives token embeddings (false: it throws ApiError 501).
  virtual bool has_token_embeddings() const { return true; }
  // Last hidden state without padding: [B][L_b * hidden_size].
  virtual std::vector<std::vector<float>> embed_all(const std::vector<const TokenizedInput*>& batch) const = 0;
};

// A BERT / tutorial encoder folder (config.json, model.safetensors, tokenizer.json or vocab.txt) with mean
// pooling over attention_mask (sentence-transformers' default) or the [CLS] vector. Throws what load_encoder and
// BertTokenizer::from_dir throw, and std::invalid_argument for an unknown pooling.
std::unique_ptr<EmbeddingModel> load_encoder_embedding(const std::string& dir, const std::string& pooling);

// A sentence-transformers folder (modules.json): SentenceTransformer.encode's embeddings (Pooling, Dense,
// Normalize as the folder says; its default prompt unless no_prompt or another prompt_name). Inputs longer than
// max_seq_length are reported by tokenize(.., max_length 0) at their full length, so the server answers 422
// rather than truncating silently. embed_all throws ApiError 501 (the pipeline's output is one vector a text).
// Throws what SentenceTransformer::load throws.
std::unique_ptr<EmbeddingModel> load_sentence_transformer_embedding(const std::string& dir, const std::string& pooling,
                                                                     const std::string& prompt_name, bool no_prompt);

// mean over rows with mask 1 of h [L, H] (mask [L]); [CLS] = row 0. Exposed for tests.
std::vector<float> pool_hidden(const float* h, const int64_t* mask, int64_t L, int64_t H, const std::string& pooling);

// A transformer_seq2seq folder as `tfm translate` reads it (word vocabularies or a joint SentencePiece model).
class Translator {
 public:
  // Throws std::runtime_error naming the file on a missing/inconsistent folder.
  explicit Translator(const std::string& dir);
  // Source ids with <eos>. A sentence over max_source_tokens() throws ApiError 422 naming the limit, unless
  // truncate (then cut to the limit, <eos> kept). Words outside a word vocabulary are read as <unk>.
  std::vector<int64_t> encode_source(const std::string& text, bool truncate) const;
  int64_t max_source_tokens() const;
  // Translations of a batch of sources (greedy when beam_size == 1).
  std::vector<std::string> translate(const std::vector<const std::vector<int64_t>*>& sources, int64_t beam_size);
  // Greedy translation of one source plus every layer's attention, for the web page:
  // {"translatedText", "source_tokens" [Ls], "target_tokens" [T], "num_layers", "num_heads",
  //  "encoder_self" [layers][heads][Ls][Ls], "cross" [layers][heads][T][Ls]}.
  nlohmann::json attention(const std::vector<int64_t>& source);
  const Seq2SeqConfig& config() const { return model_.config(); }

 private:
  std::string source_token(int64_t id) const;
  std::string target_token(int64_t id) const;
  std::string detokenize(const std::vector<int64_t>& ids) const;
  int64_t padded_len(int64_t n) const;
  Seq2SeqModel model_;
  bool subword_ = false;
  std::unique_ptr<SubwordModel> spm_;
  std::unique_ptr<Vocab> src_vocab_, tgt_vocab_;
  DecodeOptions opt_;
  int64_t pad_id_ = 0;
};

}  // namespace tfm::serve

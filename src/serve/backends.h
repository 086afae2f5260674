// What `tfm serve` runs, over the public API (include/tfm): an embedding model (encoder + pooling) or a
// translation model (transformer_seq2seq).
// EmbeddingModel is the plug-in point for other embedders (a sentence-transformers folder with its own pooling
// and normalisation implements the same interface).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/encoder.h"
#include "tfm/translator.h"

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
  virtual std::string pooling() const = 0;         // "mean", "max", "cls+mean", ..., or a sentence-transformers pipeline
  virtual int64_t hidden_size() const = 0;         // length of each embedding
  virtual int64_t max_input_length() const = 0;    // tokens per input, special tokens included
  virtual int64_t vocab_size() const = 0;           // token ids are in [0, vocab_size)
  // Tokenizes `text`; max_length > 0 truncates to that many tokens, 0 keeps all (the caller checks the limit).
  // prompt_name: a sentence-transformers prompt to prepend ("" = the model's own); an unknown name, or any name for
  // a plain folder, throws std::invalid_argument.
  virtual TokenizedInput tokenize(const std::string& text, bool add_special_tokens, int64_t max_length,
                                  const std::string& prompt_name = "") const = 0;
  // Text of ids as Hugging Face decode (clean_up_tokenization_spaces false); skip_special drops special tokens.
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special) const = 0;
  // Pooled embeddings before any normalisation (a sentence-transformers folder's Normalize module is left out, as
  // text-embeddings-inference does; the caller normalises): batch of B inputs -> [B][hidden_size]. prompt_name:
  // the prompt the inputs were tokenized with (a Pooling that excludes the prompt needs its length).
  virtual std::vector<std::vector<float>> embed(const std::vector<const TokenizedInput*>& batch,
                                                const std::string& prompt_name = "") const = 0;
  // Whether embed_all gives token embeddings (false: it throws ApiError 501).
  virtual bool has_token_embeddings() const { return true; }
  // Last hidden state without padding: [B][L_b * hidden_size].
  virtual std::vector<std::vector<float>> embed_all(const std::vector<const TokenizedInput*>& batch) const = 0;
};

// A BERT / tutorial encoder folder (config.json, model.safetensors, tokenizer.json or vocab.txt) with a pooling of
// tfm::EmbedOptions::pooling (mean over attention_mask, sentence-transformers' default, [CLS], max, ...), through
// tfm::Encoder. Throws
// what tfm::Encoder's constructor throws, and std::runtime_error for a folder without a tokenizer.
// dtype: tfm::EncoderOptions::dtype ("": as the folder stores it).
std::unique_ptr<EmbeddingModel> load_encoder_embedding(const std::string& dir, const std::string& pooling, int threads,
                                                       const std::string& dtype = "");

// A sentence-transformers folder (modules.json): SentenceTransformer.encode's embeddings (Pooling, Dense,
// Normalize as the folder says; its default prompt unless no_prompt or another prompt_name). Inputs longer than
// max_seq_length are reported by tokenize(.., max_length 0) at their full length, so the server answers 422
// rather than truncating silently; embed_all gives the Transformer module's token embeddings. Throws what
// tfm::Encoder's constructor throws.
std::unique_ptr<EmbeddingModel> load_sentence_transformer_embedding(const std::string& dir, const std::string& pooling,
                                                                     const std::string& prompt_name, bool no_prompt,
                                                                     int threads, const std::string& dtype = "");

// A transformer_seq2seq folder through tfm::Translator, as `tfm translate` reads it (word vocabularies or a joint
// SentencePiece model).
class TranslationBackend {
 public:
  // threads: per call, on the calling thread (0: OMP_NUM_THREADS, else all cores). Throws what tfm::Translator's
  // constructor throws.
  // dtype: tfm::TranslatorOptions::dtype ("": fp32).
  TranslationBackend(const std::string& dir, int threads, const std::string& dtype = "");
  // Source ids with <eos>. A sentence over max_source_tokens() throws ApiError 422 naming the limit, unless
  // truncate (then cut to the limit). Words outside a word vocabulary are read as <unk>. `options`: the source
  // and target languages of multilingual folders (Translator::encode_source).
  std::vector<int64_t> encode_source(const std::string& text, bool truncate, const TranslateOptions& options = {}) const;
  // Target ids of a text (bad words), as Translator::encode_target; ApiError 422 for invalid UTF-8.
  std::vector<int64_t> encode_target(const std::string& text) const;
  // Multilingual folders (M2M100, NLLB): the language codes they take (Translator::languages); else empty.
  std::vector<std::string> languages() const { return tr_.languages(); }
  int64_t max_source_tokens() const { return tr_.max_source_tokens(); }
  // Translations of a batch of sources (greedy when beam_size == 1).
  std::vector<std::string> translate(const std::vector<const std::vector<int64_t>*>& sources, int64_t beam_size) const;
  // The same with every option of tfm::TranslateOptions (a /translate request's generation fields); with
  // num_hypotheses > 1 each Translation holds its n-best list in `hypotheses`.
  std::vector<Translation> translate(const std::vector<const std::vector<int64_t>*>& sources,
                                     const TranslateOptions& options) const;
  // The translation of one source (beam_size 0: the model's default; beam search: its best hypothesis, decoded
  // again with teacher forcing) plus every layer's attention, for the web page:
  // {"translatedText", "source_tokens" [Ls], "target_tokens" [T], "num_layers", "num_heads",
  //  "encoder_self" [layers][heads][Ls][Ls], "cross" [layers][heads][T][Ls]}.
  nlohmann::json attention(const std::vector<int64_t>& source, int64_t beam_size = 0) const;
  int64_t num_layers() const { return tr_.num_layers(); }
  int64_t num_heads() const { return tr_.num_heads(); }

 private:
  Translator tr_;
};

}  // namespace tfm::serve

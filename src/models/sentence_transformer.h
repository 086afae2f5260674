// A sentence-transformers model folder (modules.json: Transformer -> Pooling -> Dense -> Normalize) or a plain
// BERT folder with a chosen pooling, giving sentence embeddings equal to SentenceTransformer.encode().
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/encoder.h"
#include "models/pooling.h"
#include "text/bert_tokenizer.h"

namespace tfm {

struct SentenceTransformerOptions {
  // Pooling modes ("cls", "mean", "mean+max", ... see PoolingConfig::from_names). Required for a folder without
  // modules.json; for a sentence-transformers folder it replaces the Pooling module's modes.
  std::string pooling;
  // A prompt from config_sentence_transformers.json "prompts" (empty: its "default_prompt_name", if any).
  std::string prompt_name;
  // A literal prompt prepended to every text (overrides prompt_name).
  std::string prompt;
  bool no_prompt = false;  // ignore default_prompt_name
  // Adds a Normalize step when the folder has none.
  bool normalize = false;
  // Truncation length in tokens incl. [CLS]/[SEP]; 0 = sentence_bert_config.json max_seq_length, else
  // min(tokenizer model_max_length, max_position_embeddings).
  int64_t max_seq_length = 0;
  // Compute type of the Transformer module's Linear layers; none: as its folder stores them (int8 for a
  // `tfm convert --dtype int8` folder, else fp32). Pooling, Dense and Normalize stay fp32.
  std::optional<ops::ComputeType> dtype;
};

// What a sentence-transformers folder is made of, read from its JSON files without loading weights (the
// modules.json walk of SentenceTransformer::load; tfm finetune --task embed trains the same modules).
struct SentenceTransformerLayout {
  std::string transformer_dir;  // the Transformer module's folder (config.json, weights, tokenizer files)
  std::string transformer_path;  // its "path" in modules.json, relative to the folder ("" = the folder itself)
  bool has_pooling = false;
  PoolingConfig pooling;         // the Pooling module's config.json (when has_pooling)
  std::string pooling_path;      // its "path" in modules.json
  std::vector<std::string> dense_paths;  // Dense modules' folders, relative to the folder, in order
  bool normalize = false;        // a Normalize module follows
  std::string normalize_path;
  int64_t max_seq_length = 0;    // sentence_bert_config.json (0: absent)
  bool do_lower_case = false;    // sentence_bert_config.json
  std::string sentence_bert_config;  // the file those two came from ("" if none)
};
// Reads DIR/modules.json (when present) and sentence_bert_config.json. Without modules.json, transformer_dir is
// `dir` and has_pooling false. Throws std::runtime_error naming the file for a malformed or unsupported module
// list (SentenceTransformer::load's errors).
SentenceTransformerLayout read_sentence_transformer_layout(const std::string& dir);

// The encoder's last hidden state pooled as `pooling` says ([B, num_modes * H]), the layers running on the real
// tokens only (EncoderModel::forward_unpadded). CLS-only pooling reads h[:, 0]: then the last layer computes
// position 0 only (EncoderModel::forward_first_token, unpadded). input_ids / token_type_ids / attention_mask:
// [B, L] int64 (mask 1 = real token); prompt_length: as pool() takes it. Equal to pool(pooling,
// m.forward(...).last_hidden_state, attention_mask, prompt_length) (sentence-transformers' Pooling.forward).
// Throws as EncoderModel::forward and pool().
Tensor encode_and_pool(const EncoderModel& m, const PoolingConfig& pooling, const Tensor& input_ids,
                       const Tensor& token_type_ids, const Tensor& attention_mask, int64_t prompt_length = 0);

// Python's str.lower() per code point (what sentence-transformers applies with do_lower_case); equal to it but for
// the few characters whose lowercase is two code points (U+0130). Invalid UTF-8 is returned unchanged.
std::string lower_like_python(const std::string& s);

class SentenceTransformer {
 public:
  // Loads `dir`. With DIR/modules.json the modules are followed in order: sentence_transformers.models.Transformer
  // (config.json + model.safetensors + tokenizer files in its path), .Pooling, .Dense, .Normalize; any other
  // module type is an error naming it. sentence_bert_config.json gives max_seq_length and do_lower_case,
  // config_sentence_transformers.json the prompts. Without modules.json, options.pooling must be set.
  // Throws std::runtime_error naming the file for a missing or malformed part, std::invalid_argument for bad
  // options (unknown prompt name, pooling mode).
  static SentenceTransformer load(const std::string& dir, const SentenceTransformerOptions& options = {});

  // Tokenizes one text as SentenceTransformer.encode does: prompt prepended, lowercased when do_lower_case,
  // truncated to max_seq_length. Throws std::invalid_argument for invalid UTF-8.
  Encoding tokenize(const std::string& text) const;
  // Embeds already tokenized texts (from tokenize()), right-padded into one batch.
  // Returns [B, dimension()] float32.
  Tensor embed(const std::vector<const Encoding*>& batch) const;
  // The Transformer module's output for already tokenized texts, right-padded into one batch: last_hidden_state
  // [B, L, encoder hidden_size] (L = the longest input; padded rows are not meaningful), before Pooling, as
  // sentence-transformers' output_value="token_embeddings" and text-embeddings-inference's /embed_all give it.
  Tensor token_embeddings(const std::vector<const Encoding*>& batch) const;
  // tokenize + embed. texts: B strings -> [B, dimension()].
  Tensor encode(const std::vector<std::string>& texts) const;

  int64_t dimension() const { return dim_; }
  int64_t max_seq_length() const { return max_seq_length_; }
  const BertTokenizer& tokenizer() const { return *tokenizer_; }
  const EncoderConfig& encoder_config() const { return encoder_->config(); }
  ops::ComputeType compute_type() const { return compute_type_; }  // the Transformer module's
  // "Transformer(bert, max_seq_length 128) -> Pooling(mean) -> Normalize"
  std::string describe() const;
  // The prompt in use ("" if none) and its length in tokens as sentence-transformers counts it ([CLS] + prompt).
  const std::string& prompt() const { return prompt_; }
  int64_t prompt_length() const { return prompt_length_; }
  // A copy sharing this one's weights whose prompt is config_sentence_transformers.json's prompts[name] ("": no
  // prompt), as SentenceTransformer.encode(prompt_name=name). Throws std::invalid_argument for an unknown name
  // (the message lists the folder's names).
  SentenceTransformer with_prompt(const std::string& name) const;
  // A copy sharing this one's weights with (true) or without (false) the final L2 normalisation.
  SentenceTransformer with_normalize(bool normalize) const;
  bool normalizes() const { return normalize_; }
  // The names of config_sentence_transformers.json "prompts", sorted.
  std::vector<std::string> prompt_names() const;

 private:
  SentenceTransformer() = default;
  std::shared_ptr<EncoderModel> encoder_;
  std::shared_ptr<BertTokenizer> tokenizer_;
  PoolingConfig pooling_;
  std::vector<DenseModule> dense_;
  bool normalize_ = false;
  bool do_lower_case_ = false;
  int64_t max_seq_length_ = 512;
  std::string prompt_;
  int64_t prompt_length_ = 0;
  std::map<std::string, std::string> prompts_;  // config_sentence_transformers.json "prompts"
  std::string prompts_file_;
  const std::string& prompt_text(const std::string& name) const;  // prompts_[name]; "" for ""; throws unknown
  void set_prompt(const std::string& text);                       // prompt_ and prompt_length_
  int64_t dim_ = 0;
  ops::ComputeType compute_type_ = ops::ComputeType::F32;
};

}  // namespace tfm

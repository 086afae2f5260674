// Hugging Face generation_config.json (transformers GenerationConfig) as decoding options.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "decode/logits_process.h"
#include "decode/search.h"

namespace tfm {

// The keys of generation_config.json that greedy and beam search read, with transformers' defaults.
struct GenerationConfig {
  int64_t num_beams = 1;
  double length_penalty = 1.0;
  EarlyStopping early_stopping = EarlyStopping::kFalse;  // JSON true / false / "never"
  int64_t max_length = 20;       // tokens, the decoder start token counted
  int64_t max_new_tokens = -1;   // > 0: overrides max_length (max_length = max_new_tokens + 1)
  int64_t min_length = 0;        // the decoder start token counted
  int64_t num_return_sequences = 1;
  int64_t decoder_start_token_id = -1, eos_token_id = -1, pad_token_id = -1;
  int64_t forced_bos_token_id = -1, forced_eos_token_id = -1;
  std::vector<std::vector<int64_t>> bad_words_ids;
  double repetition_penalty = 1.0;    // > 0, 1 = off
  int64_t no_repeat_ngram_size = 0;   // 0 = off
  bool do_sample = false;             // sampling (greedy search only); the warpers below apply with it
  double temperature = 1.0;           // > 0
  int64_t top_k = 50;                 // transformers' default; 0 = all tokens
  double top_p = 1.0;                 // (0, 1]
  nlohmann::json raw;  // the merged object, for options other modules read

  // Keys from `config` (config.json: the fallback, as transformers' GenerationConfig.from_model_config) overridden
  // by `generation` (generation_config.json; may be null). Throws std::runtime_error naming `file` and the key for
  // a wrong type or value (num_beams < 1, max_length < 1, a missing decoder_start_token_id / eos_token_id, ...).
  static GenerationConfig from_json(const nlohmann::json& config, const nlohmann::json& generation,
                                    const std::string& file);
  // Steps of decoding: max_new_tokens if set, else max_length - 1.
  int64_t max_steps() const { return max_new_tokens > 0 ? max_new_tokens : max_length - 1; }
  // DecodeOptions with hf = true (bos_id = decoder_start_token_id, forced_bos / forced_eos; the other processors
  // are processor_options()').
  DecodeOptions decode_options() const;
  // The logits processors and warpers of these keys (transformers' _get_logits_processor / _get_logits_warper):
  // repetition_penalty, no_repeat_ngram_size, bad_words_ids, min_length, and with do_sample temperature, top_k,
  // top_p; eos_id = eos_token_id. `seed` seeds the sampling streams (see LogitsProcessor::start).
  LogitsProcessorOptions processor_options(uint64_t seed = 0) const;
};

}  // namespace tfm

#include "decode/generation_config.h"

#include <stdexcept>

namespace tfm {

namespace {
int64_t int_of(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer())
    throw std::runtime_error(file + ": key '" + key + "' must be an integer, found " + j[key].dump());
  return j[key].get<int64_t>();
}
double num_of(const nlohmann::json& j, const char* key, double fallback, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number())
    throw std::runtime_error(file + ": key '" + key + "' must be a number, found " + j[key].dump());
  return j[key].get<double>();
}
}  // namespace

GenerationConfig GenerationConfig::from_json(const nlohmann::json& config, const nlohmann::json& generation,
                                             const std::string& file) {
  nlohmann::json j = config.is_object() ? config : nlohmann::json::object();
  if (generation.is_object())
    for (auto it = generation.begin(); it != generation.end(); ++it) j[it.key()] = it.value();
  GenerationConfig g;
  g.raw = j;
  g.num_beams = int_of(j, "num_beams", 1, file);
  g.length_penalty = num_of(j, "length_penalty", 1.0, file);
  g.repetition_penalty = num_of(j, "repetition_penalty", 1.0, file);
  g.temperature = num_of(j, "temperature", 1.0, file);
  g.top_p = num_of(j, "top_p", 1.0, file);
  g.top_k = int_of(j, "top_k", 50, file);
  g.no_repeat_ngram_size = int_of(j, "no_repeat_ngram_size", 0, file);
  if (j.contains("do_sample") && !j["do_sample"].is_null()) {
    if (!j["do_sample"].is_boolean())
      throw std::runtime_error(file + ": key 'do_sample' must be true or false, found " + j["do_sample"].dump());
    g.do_sample = j["do_sample"].get<bool>();
  }
  if (j.contains("early_stopping") && !j["early_stopping"].is_null()) {
    const auto& e = j["early_stopping"];
    if (e.is_boolean())
      g.early_stopping = e.get<bool>() ? EarlyStopping::kTrue : EarlyStopping::kFalse;
    else if (e.is_string() && e.get<std::string>() == "never")
      g.early_stopping = EarlyStopping::kNever;
    else
      throw std::runtime_error(file + ": key 'early_stopping' must be true, false or \"never\", found " + e.dump());
  }
  g.max_length = int_of(j, "max_length", 20, file);
  g.max_new_tokens = int_of(j, "max_new_tokens", -1, file);
  g.min_length = int_of(j, "min_length", 0, file);
  g.num_return_sequences = int_of(j, "num_return_sequences", 1, file);
  g.eos_token_id = int_of(j, "eos_token_id", -1, file);
  g.pad_token_id = int_of(j, "pad_token_id", -1, file);
  g.decoder_start_token_id = int_of(j, "decoder_start_token_id", int_of(j, "bos_token_id", -1, file), file);
  g.forced_bos_token_id = int_of(j, "forced_bos_token_id", -1, file);
  g.forced_eos_token_id = int_of(j, "forced_eos_token_id", -1, file);
  if (j.contains("bad_words_ids") && !j["bad_words_ids"].is_null()) {
    const auto& b = j["bad_words_ids"];
    bool ok = b.is_array();
    if (ok)
      for (const auto& w : b) {
        if (!w.is_array() || w.empty()) { ok = false; break; }
        std::vector<int64_t> seq;
        for (const auto& t : w) {
          if (!t.is_number_integer()) { ok = false; break; }
          seq.push_back(t.get<int64_t>());
        }
        g.bad_words_ids.push_back(seq);
      }
    if (!ok) throw std::runtime_error(file + ": key 'bad_words_ids' must be a list of lists of token ids");
  }
  if (g.num_beams < 1 || g.num_beams > 64)
    throw std::runtime_error(file + ": num_beams must be from 1 to 64, found " + std::to_string(g.num_beams));
  if (g.max_length < 1 && g.max_new_tokens <= 0)
    throw std::runtime_error(file + ": max_length must be >= 1, found " + std::to_string(g.max_length));
  if (g.num_return_sequences < 1 || g.num_return_sequences > g.num_beams)
    throw std::runtime_error(file + ": num_return_sequences must be from 1 to num_beams (" +
                             std::to_string(g.num_beams) + "), found " + std::to_string(g.num_return_sequences));
  if (g.decoder_start_token_id < 0)
    throw std::runtime_error(file + ": no decoder_start_token_id (nor bos_token_id)");
  if (g.eos_token_id < 0) throw std::runtime_error(file + ": no eos_token_id");
  return g;
}

DecodeOptions GenerationConfig::decode_options() const {
  DecodeOptions o;
  o.hf = true;
  o.beam_size = num_beams;
  o.length_penalty = (float)length_penalty;
  o.early_stopping = early_stopping;
  o.max_steps = max_steps();
  o.bos_id = decoder_start_token_id;
  o.eos_id = eos_token_id;
  o.forced_bos_id = forced_bos_token_id;
  o.forced_eos_id = forced_eos_token_id;
  o.position_mode = PositionMode::kAbsolute;
  return o;
}

LogitsProcessorOptions GenerationConfig::processor_options(uint64_t seed) const {
  LogitsProcessorOptions p;
  p.repetition_penalty = (float)repetition_penalty;
  p.no_repeat_ngram_size = no_repeat_ngram_size;
  p.bad_words_ids = bad_words_ids;
  p.min_length = min_length;
  p.eos_id = eos_token_id;
  p.do_sample = do_sample;
  p.temperature = (float)temperature;
  p.top_k = top_k;
  p.top_p = (float)top_p;
  p.seed = seed;
  return p;
}

}  // namespace tfm

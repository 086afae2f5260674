#include "serve/requests.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace tfm::serve {

using nlohmann::json;

ApiError validation_error(const std::string& message) { return ApiError(422, "validation", message); }

namespace {

json parse_object(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw validation_error("request body is not valid JSON (UTF-8)");
  if (!j.is_object()) throw validation_error("request body must be a JSON object");
  return j;
}

// A string or a non-empty list of strings under `field`; sets `single`.
std::vector<std::string> string_or_list(const json& j, const char* field, const RequestLimits& limits, bool& single) {
  auto it = j.find(field);
  if (it == j.end()) throw validation_error(std::string("missing field `") + field + "`");
  std::vector<std::string> out;
  if (it->is_string()) {
    single = true;
    out.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    single = false;
    if (it->empty()) throw validation_error(std::string("`") + field + "` cannot be an empty list");
    if ((int64_t)it->size() > limits.max_client_batch_size)
      throw ApiError(413, "payload_too_large",
                     "batch size " + std::to_string(it->size()) + " > maximum allowed batch size " +
                         std::to_string(limits.max_client_batch_size) + " (--max-client-batch-size)");
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string())
        throw validation_error(std::string("`") + field + "[" + std::to_string(i) + "]` must be a string");
      out.push_back((*it)[i].get<std::string>());
    }
  } else {
    throw validation_error(std::string("`") + field + "` must be a string or a list of strings");
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string where = single ? std::string("`") + field + "`" : std::string("`") + field + "[" +
                                                                            std::to_string(i) + "]`";
    if (out[i].empty()) throw validation_error(where + " cannot be empty");
    if ((int64_t)out[i].size() > limits.max_input_chars)
      throw ApiError(413, "payload_too_large",
                     where + " has " + std::to_string(out[i].size()) + " bytes, more than the limit of " +
                         std::to_string(limits.max_input_chars));
  }
  return out;
}

bool bool_or(const json& j, const char* field, bool dflt) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) throw validation_error(std::string("`") + field + "` must be true or false");
  return it->get<bool>();
}

std::string string_or(const json& j, const char* field, const std::string& dflt) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_string()) throw validation_error(std::string("`") + field + "` must be a string");
  return it->get<std::string>();
}

}  // namespace

EmbedRequest parse_embed_request(std::string_view body, const RequestLimits& limits, const char* field) {
  json j = parse_object(body);
  EmbedRequest r;
  r.inputs = string_or_list(j, field, limits, r.single);
  r.normalize = bool_or(j, "normalize", true);
  if (j.contains("truncate") && !j["truncate"].is_null()) r.truncate = bool_or(j, "truncate", false);
  r.model = string_or(j, "model", "");
  if (std::string(field) == "input") {
    const std::string fmt = string_or(j, "encoding_format", "float");
    if (fmt != "float") throw validation_error("`encoding_format` '" + fmt + "' is not supported; use \"float\"");
  }
  return r;
}

TokenizeRequest parse_tokenize_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  TokenizeRequest r;
  r.inputs = string_or_list(j, "inputs", limits, r.single);
  r.add_special_tokens = bool_or(j, "add_special_tokens", true);
  return r;
}

DecodeRequest parse_decode_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  DecodeRequest r;
  auto it = j.find("ids");
  if (it == j.end() || !it->is_array()) throw validation_error("missing field `ids` (a list of token ids, or a list of lists)");
  auto ids_of = [](const json& a) {
    std::vector<int64_t> v;
    for (const json& x : a) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        throw validation_error("`ids` must hold whole numbers >= 0, found " + x.dump());
      v.push_back(x.get<int64_t>());
    }
    return v;
  };
  if (it->empty() || !it->at(0).is_array()) {
    r.single = true;
    r.ids.push_back(ids_of(*it));
  } else {
    for (const json& a : *it) {
      if (!a.is_array()) throw validation_error("`ids` must be a list of ids or a list of lists of ids");
      r.ids.push_back(ids_of(a));
    }
  }
  if ((int64_t)r.ids.size() > limits.max_client_batch_size)
    throw ApiError(413, "payload_too_large",
                   "batch size " + std::to_string(r.ids.size()) + " > maximum allowed batch size " +
                       std::to_string(limits.max_client_batch_size) + " (--max-client-batch-size)");
  r.skip_special_tokens = bool_or(j, "skip_special_tokens", true);
  return r;
}

TranslateRequest parse_translate_request(std::string_view body, const RequestLimits& limits, int64_t max_beam_size) {
  json j = parse_object(body);
  TranslateRequest r;
  r.q = string_or_list(j, "q", limits, r.single);
  r.source = string_or(j, "source", "auto");
  r.target = string_or(j, "target", "");
  if (r.target.empty()) throw validation_error("missing field `target` (a language code from GET /languages)");
  const std::string format = string_or(j, "format", "text");
  if (format != "text") throw validation_error("`format` '" + format + "' is not supported; use \"text\"");
  if (auto it = j.find("beam_size"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > max_beam_size)
      throw validation_error("`beam_size` must be a whole number from 1 to " + std::to_string(max_beam_size));
    r.beam_size = it->get<int64_t>();
  }
  if (j.contains("truncate") && !j["truncate"].is_null()) r.truncate = bool_or(j, "truncate", false);
  // Generation fields: checked for type and range here, the rest (sampling with beam_size > 1) by tfm::Translator.
  auto whole = [&](const char* name, int64_t lo, int64_t hi, int64_t& out) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi)
      throw validation_error(std::string("`") + name + "` must be a whole number from " + std::to_string(lo) + " to " +
                             std::to_string(hi));
    out = it->get<int64_t>();
    r.generation = true;
  };
  auto number = [&](const char* name, double lo, double hi, double& out) {  // in (lo, hi]
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return;
    const double v = it->is_number() ? it->get<double>() : NAN;
    if (!(v > lo && v <= hi))
      throw validation_error(std::string("`") + name + "` must be a number in (" + std::to_string((int64_t)lo) + ", " +
                             std::to_string((int64_t)hi) + "]");
    out = v;
    r.generation = true;
  };
  whole("sampling_topk", 0, 1 << 20, r.sampling_topk);
  whole("no_repeat_ngram_size", 0, 1000, r.no_repeat_ngram_size);
  whole("min_length", 0, 100000, r.min_length);
  int64_t seed = 0;
  whole("seed", 0, INT64_MAX, seed);
  r.seed = (uint64_t)seed;
  number("sampling_topp", 0, 1, r.sampling_topp);
  number("sampling_temperature", 0, 1000, r.sampling_temperature);
  number("repetition_penalty", 0, 100, r.repetition_penalty);
  if (auto it = j.find("target_prefix"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      r.target_prefix.assign(r.q.size(), it->get<std::string>());
    } else if (it->is_array() && it->size() == r.q.size() &&
               std::all_of(it->begin(), it->end(), [](const json& e) { return e.is_string(); })) {
      for (const json& e : *it) r.target_prefix.push_back(e.get<std::string>());
    } else {
      throw validation_error("`target_prefix` must be a string or a list of " + std::to_string(r.q.size()) +
                             " strings (one per `q`)");
    }
    r.generation = true;
  }
  return r;
}

PredictRequest parse_predict_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  PredictRequest r;
  auto it = j.find("inputs");
  if (it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_array()) {
    // A batch of sequences: [[text], [text, text_pair], ...].
    if ((int64_t)it->size() > limits.max_client_batch_size)
      throw ApiError(413, "payload_too_large",
                     "batch size " + std::to_string(it->size()) + " > maximum allowed batch size " +
                         std::to_string(limits.max_client_batch_size) + " (--max-client-batch-size)");
    bool any_pair = false;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& e = (*it)[i];
      const std::string where = "`inputs[" + std::to_string(i) + "]`";
      if (!e.is_array() || e.empty() || e.size() > 2)
        throw validation_error(where + " must be a list of one text or a (text, text_pair) pair of strings");
      json wrapped = {{"x", e}};
      bool single = false;
      RequestLimits l = limits;
      l.max_client_batch_size = 2;
      std::vector<std::string> s;
      try {
        s = string_or_list(wrapped, "x", l, single);
      } catch (const ApiError& ex) {
        std::string m = ex.what();
        if (auto p = m.find("`x"); p != std::string::npos) m.replace(p, 2, where.substr(0, where.size() - 1));
        throw ApiError(ex.status, ex.type, m);
      }
      r.texts.push_back(s[0]);
      r.pairs.push_back(s.size() == 2 ? s[1] : "");
      any_pair |= s.size() == 2;
    }
    if (!any_pair) r.pairs.clear();
  } else {
    std::vector<std::string> v = string_or_list(j, "inputs", limits, r.single);
    if (!r.single && v.size() == 2) {  // TEI reads a list of two strings as one (text, text_pair) pair
      r.single = true;
      r.texts = {v[0]};
      r.pairs = {v[1]};
    } else {
      r.texts = std::move(v);
    }
  }
  r.raw_scores = bool_or(j, "raw_scores", false);
  if (j.contains("truncate") && !j["truncate"].is_null()) r.truncate = bool_or(j, "truncate", false);
  return r;
}

RerankRequest parse_rerank_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  RerankRequest r;
  bool single = false;
  auto q = string_or_list(j, "query", limits, single);
  if (!single) throw validation_error("`query` must be one string");
  r.query = q[0];
  r.texts = string_or_list(j, "texts", limits, single);
  if (single) throw validation_error("`texts` must be a list of strings");
  r.raw_scores = bool_or(j, "raw_scores", false);
  r.return_text = bool_or(j, "return_text", false);
  if (j.contains("truncate") && !j["truncate"].is_null()) r.truncate = bool_or(j, "truncate", false);
  return r;
}

std::string parse_attention_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  bool single = false;
  auto q = string_or_list(j, "q", limits, single);
  if (!single) throw validation_error("`q` must be one string");
  return q[0];
}

}  // namespace tfm::serve

#include "serve/requests.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "tfm/pipeline.h"

namespace tfm::serve {

using nlohmann::json;

std::vector<std::string>& ignored_fields() {
  thread_local std::vector<std::string> fields;
  return fields;
}

ApiError validation_error(const std::string& message) { return ApiError(422, "validation", message); }

std::string excerpt(std::string_view value) {
  constexpr size_t kMax = 80;
  if (value.size() <= kMax) return std::string(value);
  size_t n = kMax;
  while (n > 0 && ((unsigned char)value[n] & 0xC0) == 0x80) --n;  // not inside a UTF-8 character
  return std::string(value.substr(0, n)) + "... (" + std::to_string(value.size() - n) + " more bytes)";
}

void check_json_depth(std::string_view body) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw ApiError(422, "validation",
                       "request body nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

namespace {

json parse_object(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw validation_error("the request body is empty: send a JSON object (Content-Type: application/json)");
  check_json_depth(body);
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

bool is_one_of(const std::string& key, std::initializer_list<const char*> known) {
  for (const char* k : known)
    if (key == k) return true;
  return false;
}

// Notes each field of `j` that is not in `known` as ignored (ignored_fields), named after `prefix`.
void only_fields(const json& j, std::initializer_list<const char*> known, const std::string& prefix = "") {
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!is_one_of(it.key(), known)) ignored_fields().push_back(prefix + it.key());
}

// The Hugging Face Inference API's shape, {"inputs": ..., "parameters": {...}}: each `known` parameter becomes a
// field of `j` (422 when the body also gives it, with another value), any other is ignored. True when the body
// has a `parameters` object.
bool lift_parameters(json& j, std::initializer_list<const char*> known) {
  auto p = j.find("parameters");
  if (p == j.end()) return false;
  if (p->is_null()) {
    j.erase(p);
    return false;
  }
  if (!p->is_object()) throw validation_error("`parameters` must be an object");
  const json params = std::move(*p);
  j.erase("parameters");
  for (auto it = params.begin(); it != params.end(); ++it) {
    if (!is_one_of(it.key(), known)) {
      ignored_fields().push_back("parameters." + it.key());
      continue;
    }
    if (auto top = j.find(it.key()); top != j.end() && *top != it.value())
      throw validation_error("`" + it.key() + "` is given twice, as a field and in `parameters`, with different values");
    j[it.key()] = it.value();
  }
  return true;
}

std::optional<bool> optional_bool(const json& j, const char* field) {
  if (!j.contains(field) || j[field].is_null()) return std::nullopt;
  return bool_or(j, field, false);
}

std::optional<std::string> optional_string(const json& j, const char* field) {
  if (!j.contains(field) || j[field].is_null()) return std::nullopt;
  std::string v = string_or(j, field, "");
  if (v.empty()) throw validation_error(std::string("`") + field + "` cannot be empty");
  return v;
}

// text-embeddings-inference's truncation_direction: "Right" (default) or "Left" (tokenizers' names; lower case
// accepted too). true: Left.
bool truncation_left(const json& j) {
  const std::string d = string_or(j, "truncation_direction", "Right");
  if (d == "Right" || d == "right") return false;
  if (d == "Left" || d == "left") return true;
  throw validation_error("`truncation_direction` '" + excerpt(d) + "' is not supported; use \"Right\" or \"Left\"");
}

// A list of token ids (non-empty, each a whole number >= 0).
std::vector<int64_t> id_list(const json& a, const std::string& where) {
  if (a.empty()) throw validation_error(where + " cannot be an empty list of token ids");
  std::vector<int64_t> v;
  for (const json& x : a) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0)
      throw validation_error(where + " must be a string or a list of token ids (whole numbers >= 0), found " +
                             excerpt(x.dump()));
    v.push_back(x.get<int64_t>());
  }
  return v;
}

}  // namespace

EmbedRequest parse_embed_request(std::string_view body, const RequestLimits& limits, EmbedRoute route) {
  json j = parse_object(body);
  const bool openai = route == EmbedRoute::OpenAI;
  const char* field = openai ? "input" : "inputs";
  if (!j.contains(field)) throw validation_error(std::string("missing field `") + field + "`");
  switch (route) {
    case EmbedRoute::Embed:
      lift_parameters(j, {"normalize", "truncate", "truncation_direction", "prompt_name", "dimensions", "precision",
                          "ranges"});
      only_fields(j, {"inputs", "normalize", "truncate", "truncation_direction", "prompt_name", "dimensions",
                      "precision", "ranges"});
      break;
    case EmbedRoute::EmbedAll:
    case EmbedRoute::EmbedSparse:
      lift_parameters(j, {"truncate", "truncation_direction", "prompt_name"});
      only_fields(j, {"inputs", "truncate", "truncation_direction", "prompt_name"});
      break;
    case EmbedRoute::OpenAI:
      only_fields(j, {"input", "model", "user", "encoding_format", "dimensions", "truncate", "truncation_direction",
                      "prompt_name", "precision", "ranges"});
      break;
  }
  EmbedRequest r;
  auto it = j.find(field);
  if (it == j.end()) throw validation_error(std::string("missing field `") + field + "`");
  // One list of ids is one input (TEI's Single(Ids)); otherwise a list holds strings and lists of ids.
  const bool one_id_list = it->is_array() && !it->empty() && (*it)[0].is_number();
  if (one_id_list) {
    r.single = true;
    r.inputs.push_back("");
    r.token_ids.push_back(id_list(*it, std::string("`") + field + "`"));
  } else if (it->is_array()) {
    json strings = json::array();
    std::vector<size_t> id_pos;
    for (size_t i = 0; i < it->size(); ++i) {
      if ((*it)[i].is_array()) {
        strings.push_back("x");  // checked below as ids
        id_pos.push_back(i);
      } else {
        strings.push_back((*it)[i]);
      }
    }
    json wrapped = {{"x", strings}};
    try {
      r.inputs = string_or_list(wrapped, "x", limits, r.single);
    } catch (const ApiError& ex) {
      std::string m = ex.what();
      for (size_t p; (p = m.find("`x")) != std::string::npos;) m.replace(p, 2, std::string("`") + field);
      if (ex.type == "validation" && m.find("must be a string") != std::string::npos)
        m += " or a list of token ids";
      throw ApiError(ex.status, ex.type, m);
    }
    r.token_ids.assign(r.inputs.size(), {});
    for (size_t i : id_pos) {
      r.inputs[i].clear();
      r.token_ids[i] = id_list((*it)[i], std::string("`") + field + "[" + std::to_string(i) + "]`");
    }
  } else {
    r.inputs = string_or_list(j, field, limits, r.single);
    r.token_ids.assign(r.inputs.size(), {});
  }
  for (size_t i = 0; i < r.token_ids.size(); ++i)
    if ((int64_t)r.token_ids[i].size() > limits.max_input_chars)
      throw ApiError(413, "payload_too_large", std::string("`") + field + "` holds more token ids than the limit");
  r.normalize = bool_or(j, "normalize", true);
  r.truncate = optional_bool(j, "truncate");
  r.truncate_left = truncation_left(j);
  r.prompt_name = optional_string(j, "prompt_name");
  if (r.prompt_name && r.has_token_ids())
    throw validation_error("`prompt_name` cannot be used with token-id inputs (they are used as given)");
  if (auto d = j.find("dimensions"); d != j.end() && !d->is_null()) {
    if (!d->is_number_integer() || d->get<int64_t>() < 1)
      throw validation_error("`dimensions` must be a whole number >= 1");
    r.dimensions = d->get<int64_t>();
  }
  if (route == EmbedRoute::Embed || route == EmbedRoute::OpenAI) {
    const std::string precision = string_or(j, "precision", "float32");
    try {
      r.precision = parse_precision(precision);
    } catch (const std::invalid_argument&) {
      throw validation_error("`precision` '" + excerpt(precision) +
                             "' is not one of float32, int8, uint8, binary, ubinary");
    }
    if (auto g = j.find("ranges"); g != j.end() && !g->is_null()) {
      if (!precision_needs_ranges(r.precision))
        throw validation_error("`ranges` are the quantisation ranges of `precision` int8 or uint8");
      const char* shape = "`ranges` must be two lists of numbers of the same length, [[min of each dimension], "
                          "[max of each dimension]]";
      if (!g->is_array() || g->size() != 2 || !(*g)[0].is_array() || !(*g)[1].is_array() || (*g)[0].empty() ||
          (*g)[0].size() != (*g)[1].size())
        throw validation_error(shape);
      for (int row = 0; row < 2; ++row)
        for (const json& x : (*g)[row]) {
          if (!x.is_number() || !std::isfinite(x.get<double>())) throw validation_error(shape);
          r.ranges.push_back(x.get<float>());
        }
    }
  }
  r.model = string_or(j, "model", "");
  (void)string_or(j, "user", "");  // OpenAI's end-user id: type-checked, not used
  const std::string fmt = string_or(j, "encoding_format", "float");
  if (fmt == "base64")
    r.base64 = true;
  else if (fmt != "float")
    throw validation_error("`encoding_format` '" + excerpt(fmt) + "' is not supported; use \"float\" or \"base64\"");
  return r;
}

SimilarityRequest parse_similarity_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  only_fields(j, {"inputs", "parameters"});
  auto in = j.find("inputs");
  if (in == j.end() || !in->is_object())
    throw validation_error("missing field `inputs` (an object with `source_sentence` and `sentences`)");
  only_fields(*in, {"source_sentence", "sentences"}, "inputs.");
  SimilarityRequest r;
  bool single = false;
  auto src = string_or_list(*in, "source_sentence", limits, single);
  if (!single) throw validation_error("`source_sentence` must be one string");
  r.source_sentence = src[0];
  RequestLimits l = limits;
  if (l.max_client_batch_size > 1) --l.max_client_batch_size;  // the source is embedded with them
  r.sentences = string_or_list(*in, "sentences", l, single);
  if (single) throw validation_error("`sentences` must be a list of strings");
  if (auto p = j.find("parameters"); p != j.end() && !p->is_null()) {
    if (!p->is_object()) throw validation_error("`parameters` must be an object");
    only_fields(*p, {"truncate", "truncation_direction", "prompt_name"}, "parameters.");
    r.truncate = optional_bool(*p, "truncate");
    r.truncate_left = truncation_left(*p);
    r.prompt_name = optional_string(*p, "prompt_name");
  }
  return r;
}

TokenizeRequest parse_tokenize_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  TokenizeRequest r;
  only_fields(j, {"inputs", "add_special_tokens", "prompt_name"});
  r.inputs = string_or_list(j, "inputs", limits, r.single);
  r.add_special_tokens = bool_or(j, "add_special_tokens", true);
  r.prompt_name = optional_string(j, "prompt_name");
  return r;
}

DecodeRequest parse_decode_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  only_fields(j, {"ids", "skip_special_tokens"});
  DecodeRequest r;
  auto it = j.find("ids");
  if (it == j.end() || !it->is_array()) throw validation_error("missing field `ids` (a list of token ids, or a list of lists)");
  auto ids_of = [](const json& a) {
    std::vector<int64_t> v;
    for (const json& x : a) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        throw validation_error("`ids` must hold whole numbers >= 0, found " + excerpt(x.dump()));
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
  only_fields(j, {"q", "source", "target", "format", "beam_size", "alternatives", "api_key", "apiKey", "truncate",
                  "sampling_topk", "sampling_topp", "sampling_temperature", "seed", "seed_per_sentence", "repetition_penalty",
                  "no_repeat_ngram_size", "min_length", "target_prefix", "length_penalty", "early_stopping",
                  "max_new_tokens", "bad_words", "bad_words_ids", "forced_eos"});
  TranslateRequest r;
  r.q = string_or_list(j, "q", limits, r.single);
  r.source = string_or(j, "source", "auto");
  r.target = string_or(j, "target", "");
  if (r.target.empty()) throw validation_error("missing field `target` (a language code from GET /languages)");
  r.format = string_or(j, "format", "text");
  if (r.format != "text" && r.format != "html")
    throw validation_error("`format` '" + excerpt(r.format) + "' is not supported; use \"text\" or \"html\"");
  if (auto it = j.find("beam_size"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > max_beam_size)
      throw validation_error("`beam_size` must be a whole number from 1 to " + std::to_string(max_beam_size));
    r.beam_size = it->get<int64_t>();
  }
  if (auto it = j.find("alternatives"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= max_beam_size)
      throw validation_error("`alternatives` must be a whole number from 0 to " + std::to_string(max_beam_size - 1) +
                             " (the beam holds at most " + std::to_string(max_beam_size) + " hypotheses)");
    r.alternatives = it->get<int64_t>();
  }
  r.api_key = string_or(j, "api_key", "");
  if (r.api_key.empty()) r.api_key = string_or(j, "apiKey", "");  // the libretranslate npm client's name
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
  if (auto it = j.find("seed_per_sentence"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) throw validation_error("`seed_per_sentence` must be true or false");
    r.seed_per_sentence = it->get<bool>();
    r.generation = true;
  }
  number("sampling_topp", 0, 1, r.sampling_topp);
  number("sampling_temperature", 0, 1000, r.sampling_temperature);
  number("repetition_penalty", 0, 100, r.repetition_penalty);
  whole("max_new_tokens", 1, 100000, r.max_new_tokens);
  if (auto it = j.find("length_penalty"); it != j.end() && !it->is_null()) {
    if (!it->is_number() || !(std::fabs(it->get<double>()) <= 100))
      throw validation_error("`length_penalty` must be a number from -100 to 100");
    r.length_penalty = it->get<double>();
    r.generation = true;
  }
  if (auto it = j.find("early_stopping"); it != j.end() && !it->is_null()) {
    if (it->is_boolean())
      r.early_stopping = it->get<bool>() ? "true" : "false";
    else if (it->is_string() && it->get<std::string>() == "never")
      r.early_stopping = "never";
    else
      throw validation_error("`early_stopping` must be true, false or \"never\"");
    r.generation = true;
  }
  if (auto it = j.find("forced_eos"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) throw validation_error("`forced_eos` must be true or false");
    r.forced_eos = it->get<bool>() ? 1 : 0;
    r.generation = true;
  }
  if (auto it = j.find("bad_words"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || !std::all_of(it->begin(), it->end(), [](const json& e) { return e.is_string(); }))
      throw validation_error("`bad_words` must be a list of strings (target texts never generated)");
    for (const json& e : *it) r.bad_words.push_back(e.get<std::string>());
    r.generation = true;
  }
  if (auto it = j.find("bad_words_ids"); it != j.end() && !it->is_null()) {
    bool ok = it->is_array();
    for (const json& w : ok ? *it : json::array()) {
      ok = w.is_array() && !w.empty() && std::all_of(w.begin(), w.end(), [](const json& e) {
             return e.is_number_integer() && e.get<int64_t>() >= 0;
           });
      if (!ok) break;
      r.bad_words_ids.push_back(w.get<std::vector<int64_t>>());
    }
    if (!ok) throw validation_error("`bad_words_ids` must be a list of non-empty lists of target token ids");
    r.generation = true;
  }
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

std::string form_to_json(const std::vector<std::pair<std::string, std::string>>& fields) {
  json j = json::object();
  for (const auto& [k, v] : fields) {
    json value = v;
    if ((k == "beam_size" || k == "alternatives") && !v.empty() && v.size() < 10 &&
        v.find_first_not_of("0123456789") == std::string::npos)
      value = std::stoll(v);
    else if (k == "truncate" && (v == "true" || v == "false"))
      value = v == "true";
    if (!j.contains(k))
      j[k] = value;
    else if (j[k].is_array())
      j[k].push_back(value);
    else
      j[k] = json::array({j[k], value});
  }
  return j.dump();
}

PredictRequest parse_predict_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  PredictRequest r;
  r.hf_inference = lift_parameters(j, {"raw_scores", "truncate", "truncation_direction", "top_k", "function_to_apply"});
  only_fields(j, {"inputs", "raw_scores", "truncate", "truncation_direction", "top_k", "function_to_apply"});
  if (truncation_left(j))
    throw validation_error("`truncation_direction` \"Left\" is not supported for text pairs; use \"Right\"");
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
  if (auto k = j.find("top_k"); k != j.end() && !k->is_null()) {
    if (!k->is_number_integer() || k->get<int64_t>() < 1) throw validation_error("`top_k` must be a whole number >= 1");
    r.top_k = k->get<int64_t>();
  }
  r.function = string_or(j, "function_to_apply", r.raw_scores ? "none" : "");
  if (r.function != "" && r.function != "none" && r.function != "sigmoid" && r.function != "softmax")
    throw validation_error("`function_to_apply` '" + excerpt(r.function) +
                           "' is not supported; use \"sigmoid\", \"softmax\" or \"none\"");
  if (r.raw_scores && r.function != "none")
    throw validation_error("`raw_scores` true asks for no function; `function_to_apply` '" + r.function + "' for one");
  return r;
}

bool asks_zero_shot(std::string_view body) {
  const json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return false;
  if (j.contains("candidate_labels")) return true;
  auto p = j.find("parameters");
  return p != j.end() && p->is_object() && p->contains("candidate_labels");
}

ZeroShotRequest parse_zero_shot_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  lift_parameters(j, {"candidate_labels", "multi_label", "hypothesis_template", "truncate"});
  only_fields(j, {"inputs", "candidate_labels", "multi_label", "hypothesis_template", "truncate"});
  ZeroShotRequest r;
  r.texts = string_or_list(j, "inputs", limits, r.single);
  auto c = j.find("candidate_labels");
  if (c == j.end() || c->is_null()) throw validation_error("`candidate_labels` is missing: give a list of labels");
  if (c->is_string()) {
    try {
      r.candidate_labels = split_candidate_labels(c->get<std::string>());
    } catch (const std::invalid_argument& e) {
      throw validation_error(std::string("`candidate_labels`: ") + e.what());
    }
  } else {
    bool single = false;
    r.candidate_labels = string_or_list(j, "candidate_labels", limits, single);
  }
  r.hypothesis_template = string_or(j, "hypothesis_template", r.hypothesis_template);
  if (r.hypothesis_template.find("{}") == std::string::npos)
    throw validation_error("`hypothesis_template` \"" + excerpt(r.hypothesis_template) +
                           "\" has no {} where the label goes (as in \"This example is {}.\")");
  r.multi_label = bool_or(j, "multi_label", false);
  r.truncate = optional_bool(j, "truncate");
  return r;
}

QuestionAnsweringRequest parse_question_answering_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  lift_parameters(j, {"top_k", "doc_stride", "max_answer_len", "max_seq_len", "handle_impossible_answer",
                      "align_to_words", "max_question_len", "padding"});
  only_fields(j, {"inputs", "top_k", "doc_stride", "max_answer_len", "max_seq_len", "handle_impossible_answer",
                  "align_to_words"});
  QuestionAnsweringRequest r;
  auto in = j.find("inputs");
  if (in == j.end() || in->is_null())
    throw validation_error("`inputs` is missing: give {\"question\": ..., \"context\": ...} or a list of them");
  r.single = in->is_object();
  const json list = r.single ? json::array({*in}) : *in;
  if (!list.is_array() || list.empty())
    throw validation_error("`inputs` must be {\"question\", \"context\"} or a non-empty list of them");
  if ((int64_t)list.size() > limits.max_client_batch_size)
    throw ApiError(413, "payload_too_large", "`inputs` has " + std::to_string(list.size()) +
                                                 " items, more than the limit of " +
                                                 std::to_string(limits.max_client_batch_size));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = r.single ? std::string("`inputs`") : "`inputs[" + std::to_string(i) + "]`";
    if (!list[i].is_object()) throw validation_error(where + " must be an object {\"question\", \"context\"}");
    std::pair<std::string, std::string> qc;
    for (auto [key, dst] : {std::pair<const char*, std::string*>{"question", &qc.first}, {"context", &qc.second}}) {
      auto f = list[i].find(key);
      if (f == list[i].end() || !f->is_string())
        throw validation_error(where + ": `" + key + "` must be a string");
      *dst = f->get<std::string>();
      if (dst->empty()) throw validation_error(where + ": `" + key + "` cannot be empty");
      if ((int64_t)dst->size() > limits.max_input_chars)
        throw ApiError(413, "payload_too_large", where + ": `" + key + "` has " + std::to_string(dst->size()) +
                                                     " bytes, more than the limit of " +
                                                     std::to_string(limits.max_input_chars));
    }
    r.inputs.push_back(std::move(qc));
  }
  auto whole = [&](const char* field, int64_t lo, int64_t dflt) {
    auto it = j.find(field);
    if (it == j.end() || it->is_null()) return dflt;
    if (!it->is_number_integer() || it->get<int64_t>() < lo)
      throw validation_error(std::string("`") + field + "` must be a whole number >= " + std::to_string(lo));
    return it->get<int64_t>();
  };
  r.options.top_k = whole("top_k", 1, 1);
  r.options.doc_stride = whole("doc_stride", 1, 0);
  r.options.max_answer_length = whole("max_answer_len", 1, 15);
  r.options.max_seq_length = whole("max_seq_len", 1, 0);
  r.options.handle_impossible_answer = bool_or(j, "handle_impossible_answer", false);
  r.options.align_to_words = bool_or(j, "align_to_words", true);
  return r;
}

TaskInputsRequest parse_token_classification_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  lift_parameters(j, {"aggregation_strategy", "ignore_labels", "truncate"});
  only_fields(j, {"inputs", "aggregation_strategy", "ignore_labels", "truncate"});
  TaskInputsRequest r;
  r.texts = string_or_list(j, "inputs", limits, r.single);
  r.aggregation_strategy = string_or(j, "aggregation_strategy", "none");
  for (char& ch : r.aggregation_strategy) ch = (char)std::tolower((unsigned char)ch);
  try {
    parse_aggregation_strategy(r.aggregation_strategy);
  } catch (const std::invalid_argument& e) {
    throw validation_error(std::string("`aggregation_strategy`: ") + e.what());
  }
  if (auto it = j.find("ignore_labels"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw validation_error("`ignore_labels` must be a list of labels");
    r.ignore_labels.emplace();
    for (const json& l : *it) {
      if (!l.is_string()) throw validation_error("`ignore_labels` must be a list of labels");
      r.ignore_labels->push_back(l.get<std::string>());
    }
  }
  r.truncate = optional_bool(j, "truncate");
  return r;
}

TaskInputsRequest parse_fill_mask_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  lift_parameters(j, {"top_k", "truncate"});
  only_fields(j, {"inputs", "top_k", "truncate"});
  TaskInputsRequest r;
  r.texts = string_or_list(j, "inputs", limits, r.single);
  if (auto k = j.find("top_k"); k != j.end() && !k->is_null()) {
    if (!k->is_number_integer() || k->get<int64_t>() < 1) throw validation_error("`top_k` must be a whole number >= 1");
    r.top_k = k->get<int64_t>();
  }
  r.truncate = optional_bool(j, "truncate");
  return r;
}

RerankRequest parse_rerank_request(std::string_view body, const RequestLimits& limits) {
  json j = parse_object(body);
  lift_parameters(j, {"raw_scores", "return_text", "truncate", "truncation_direction"});
  only_fields(j, {"query", "texts", "raw_scores", "return_text", "truncate", "truncation_direction"});
  if (truncation_left(j))
    throw validation_error("`truncation_direction` \"Left\" is not supported for text pairs; use \"Right\"");
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

AttentionRequest parse_attention_request(std::string_view body, const RequestLimits& limits, int64_t max_beam_size) {
  json j = parse_object(body);
  only_fields(j, {"q", "source", "target", "beam_size"});
  AttentionRequest r;
  bool single = false;
  auto q = string_or_list(j, "q", limits, single);
  if (!single) throw validation_error("`q` must be one string");
  r.q = q[0];
  if (auto it = j.find("beam_size"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > max_beam_size)
      throw validation_error("`beam_size` must be a whole number from 1 to " + std::to_string(max_beam_size));
    r.beam_size = it->get<int64_t>();
  }
  return r;
}

}  // namespace tfm::serve

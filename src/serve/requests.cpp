#include "serve/requests.h"

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

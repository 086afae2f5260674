// HTTP helpers shared by the server's route groups: JSON answers and errors, request bodies as JSON text, form
// decoding, OpenAI's base64 and error shapes.
#pragma once
#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tfm::serve {

void send_json(httplib::Response& res, int status, const nlohmann::json& body);
// {"error": message, "error_type": type}
void send_error(httplib::Response& res, int status, const std::string& type, const std::string& message);
// OpenAI's routes (/v1/...) answer errors in OpenAI's shape.
bool openai_route(const std::string& path);
// OpenAI's error object {"error": {"message", "type", "param", "code"}} from ours: a validation error (422) is
// OpenAI's 400 with `param` the field it names; `code` is our error_type.
void to_openai_error(httplib::Response& res);
// The routes LibreTranslate defines (/translate, /detect, /languages, /frontend/settings, /translate_file,
// /download_file/NAME, /suggest): a bad request is answered 400 there (422 elsewhere), and a form's api_key field
// is an API key.
bool libretranslate_route(const std::string& path);

// RFC 4648 base64 of little-endian float32 values (OpenAI's encoding_format "base64").
std::string base64_f32(const std::vector<float>& v);
// RFC 4648 base64 of raw bytes (quantised embeddings: int8 / uint8 elements).
std::string base64_bytes(const std::string& bytes);

// application/x-www-form-urlencoded fields, percent-decoded ('+' is a space).
std::vector<std::pair<std::string, std::string>> parse_urlencoded(const std::string& body);

// The body parsed as JSON, or a discarded value when it is not JSON or nests deeper than kMaxJsonDepth (the
// route's own parse then answers 422).
nlohmann::json parse_shallow(const std::string& body);
// A request body as JSON text, for every route. A body that starts with '{' (after white space) is JSON
// whatever its Content-Type: `curl -d '{...}'` sends application/x-www-form-urlencoded, and LibreTranslate reads
// such a body as JSON too. Otherwise, where the route takes forms (`forms`: /translate), the fields of an
// urlencoded or multipart form as a JSON object (form_to_json); else the body as it is.
std::string json_body(const httplib::Request& req, bool forms = false);
// Whether the request's body (JSON or form) has this top-level field.
bool has_field(const httplib::Request& req, const char* field);

double seconds_since(std::chrono::steady_clock::time_point t);

// TFM_SERVE_DEBUG_DELAY_MS: tests only. Sleeps this long before loading the model and before each batch, so a
// test can see /health 503, a full server (429) and SIGTERM with a request in flight without racing.
void debug_delay();

}  // namespace tfm::serve

#include "serve/http_util.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "serve/requests.h"

namespace tfm::serve {

using nlohmann::json;

void debug_delay() {
  static const long ms = [] {
    const char* e = std::getenv("TFM_SERVE_DEBUG_DELAY_MS");
    return e ? std::strtol(e, nullptr, 10) : 0L;
  }();
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 60000L)));
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& type, const std::string& message) {
  send_json(res, status, {{"error", message}, {"error_type", type}});
}

bool openai_route(const std::string& path) { return path.rfind("/v1/", 0) == 0; }

void to_openai_error(httplib::Response& res) {
  json j = json::parse(res.body, nullptr, false);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_string()) return;
  const std::string message = j["error"], code = j.value("error_type", "");
  // OpenAI answers a bad request 400 (its clients raise BadRequestError) naming the field in `param`: ours is the
  // first `field` (or `field[i]`) the message quotes.
  json param = nullptr;
  if (const size_t a = message.find('`'); a != std::string::npos) {
    const size_t b = message.find('`', a + 1);
    if (b != std::string::npos) param = message.substr(a + 1, std::min(b, message.find('[', a + 1)) - a - 1);
  }
  const int status = res.status == 422 ? 400 : res.status;
  const std::string type = status >= 500 ? "server_error" : "invalid_request_error";
  send_json(res, status, {{"error", {{"message", message}, {"type", type}, {"param", param}, {"code", code}}}});
}

bool libretranslate_route(const std::string& path) {
  for (const char* p : {"/translate", "/detect", "/languages", "/frontend/settings", "/translate_file", "/suggest"})
    if (path == p) return true;
  return path.rfind("/download_file/", 0) == 0;
}

// RFC 4648 base64 of little-endian float32 values (OpenAI's encoding_format "base64").
std::string base64_f32(const std::vector<float>& v) {
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int k = 0; k < 4; ++k) bytes[i * 4 + k] = (char)((u >> (8 * k)) & 0xFF);
  }
  return base64_bytes(bytes);
}

std::string base64_bytes(const std::string& bytes) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = ((uint32_t)(unsigned char)bytes[i] << 16) |
                       (i + 1 < bytes.size() ? (uint32_t)(unsigned char)bytes[i + 1] << 8 : 0) |
                       (i + 2 < bytes.size() ? (uint32_t)(unsigned char)bytes[i + 2] : 0);
    out += t[(n >> 18) & 63];
    out += t[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? t[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? t[n & 63] : '=';
  }
  return out;
}

// application/x-www-form-urlencoded fields, percent-decoded ('+' is a space).
std::vector<std::pair<std::string, std::string>> parse_urlencoded(const std::string& body) {
  auto decode = [](const std::string& s) {
    std::string o;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '+') {
        o += ' ';
      } else if (s[i] == '%' && i + 2 < s.size() && std::isxdigit((unsigned char)s[i + 1]) &&
                 std::isxdigit((unsigned char)s[i + 2])) {
        o += (char)std::stoi(s.substr(i + 1, 2), nullptr, 16);
        i += 2;
      } else {
        o += s[i];
      }
    }
    return o;
  };
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = 0;
  while (i <= body.size()) {
    size_t amp = body.find('&', i);
    if (amp == std::string::npos) amp = body.size();
    const std::string part = body.substr(i, amp - i);
    if (!part.empty()) {
      const size_t eq = part.find('=');
      out.push_back({decode(part.substr(0, eq)), eq == std::string::npos ? "" : decode(part.substr(eq + 1))});
    }
    i = amp + 1;
  }
  return out;
}

// The body parsed as JSON, or a discarded value when it is not JSON or nests deeper than kMaxJsonDepth (the
// route's own parse then answers 422).
json parse_shallow(const std::string& body) {
  try {
    check_json_depth(body);
  } catch (const ApiError&) {
    return json(json::value_t::discarded);
  }
  return json::parse(body, nullptr, false);
}
// A request body as JSON text, for every route. A body that starts with '{' (after white space) is JSON
// whatever its Content-Type: `curl -d '{...}'` sends application/x-www-form-urlencoded, and LibreTranslate reads
// such a body as JSON too. Otherwise, where the route takes forms (`forms`: /translate), the fields of an
// urlencoded or multipart form as a JSON object (form_to_json); else the body as it is.
std::string json_body(const httplib::Request& req, bool forms) {
  const size_t start = req.body.find_first_not_of(" \t\r\n");
  if (start != std::string::npos && req.body[start] == '{') return req.body;
  if (!forms) return req.body;
  const std::string ct = req.get_header_value("Content-Type");
  if (ct.rfind("application/x-www-form-urlencoded", 0) == 0) return form_to_json(parse_urlencoded(req.body));
  if (ct.rfind("multipart/form-data", 0) == 0) {
    std::vector<std::pair<std::string, std::string>> f;
    for (const auto& [name, part] : req.files) f.push_back({name, part.content});
    return form_to_json(f);
  }
  return req.body;
}
bool has_field(const httplib::Request& req, const char* field) {
  json j = parse_shallow(json_body(req, true));
  return j.is_object() && j.contains(field);
}

}  // namespace tfm::serve

#include "io/json_keys.h"
#include "io/json_util.h"

#include "io/atomic_file.h"

#include <unistd.h>

#include <cstdio>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace tfm {

using nlohmann::json;

json load_json_file(const std::string& path) {
  const std::string text = read_whole_file(path);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 5: ..."; keep the reason.
    std::string reason = e.what();
    if (size_t colon = reason.find(": "); colon != std::string::npos) reason = reason.substr(colon + 2);
    // nlohmann quotes the bytes it last read: a binary file would put raw bytes on the terminal.
    std::string clean;
    for (unsigned char c : reason) {
      if (c >= 0x20 && c < 0x7f) {
        clean += (char)c;
      } else {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", c);
        clean += hex;
      }
    }
    throw std::runtime_error(path + ": invalid JSON at byte " + std::to_string(e.byte) + ": " + clean);
  }
}

namespace {

thread_local JsonKeyRecorder* t_recorder = nullptr;

// The value of `key`, or nullptr when it is absent or null (the *_or getters then use their fallback).
const json* lookup(const json& j, const std::string& key, const std::string& file) {
  if (t_recorder) t_recorder->record(key);
  if (!j.is_object())
    throw std::runtime_error(file + ": expected a JSON object to read key '" + key + "' from, found " +
                             j.type_name());
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

const json& require(const json& j, const std::string& key, const std::string& file) {
  const json* v = lookup(j, key, file);
  if (!v) {
    bool is_null = j.contains(key);
    throw std::runtime_error(file + ": " + (is_null ? "key '" + key + "' is null, a value is required"
                                                    : "missing required key '" + key + "'"));
  }
  return *v;
}

std::runtime_error wrong_type(const std::string& file, const std::string& key, const char* want, const json& v) {
  std::string found = v.type_name();
  // "found number 768.5" says why it is not an integer.
  if (v.is_number()) found.append(1, ' ').append(v.dump());
  return std::runtime_error(file + ": key '" + key + "' must be " + want + ", found " + found);
}

int64_t as_int(const json& v, const std::string& key, const std::string& file) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > (uint64_t)INT64_MAX) throw wrong_type(file, key, "an integer in int64 range", v);
    return (int64_t)v.get<uint64_t>();
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    // 2^63 is exactly representable; anything >= it does not fit int64.
    if (std::isfinite(d) && d == std::floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0)
      return (int64_t)d;
  }
  throw wrong_type(file, key, "an integer", v);
}

double as_number(const json& v, const std::string& key, const std::string& file) {
  if (!v.is_number()) throw wrong_type(file, key, "a number", v);
  return v.get<double>();
}

std::string as_string(const json& v, const std::string& key, const std::string& file) {
  if (!v.is_string()) throw wrong_type(file, key, "a string", v);
  return v.get<std::string>();
}

bool as_bool(const json& v, const std::string& key, const std::string& file) {
  if (!v.is_boolean()) throw wrong_type(file, key, "true or false", v);
  return v.get<bool>();
}

}  // namespace

int64_t json_int(const json& j, const std::string& key, const std::string& file) {
  return as_int(require(j, key, file), key, file);
}
int64_t json_int_or(const json& j, const std::string& key, int64_t fallback, const std::string& file) {
  const json* v = lookup(j, key, file);
  return v ? as_int(*v, key, file) : fallback;
}
double json_number(const json& j, const std::string& key, const std::string& file) {
  return as_number(require(j, key, file), key, file);
}
double json_number_or(const json& j, const std::string& key, double fallback, const std::string& file) {
  const json* v = lookup(j, key, file);
  return v ? as_number(*v, key, file) : fallback;
}
std::string json_string(const json& j, const std::string& key, const std::string& file) {
  return as_string(require(j, key, file), key, file);
}
std::string json_string_or(const json& j, const std::string& key, const std::string& fallback,
                           const std::string& file) {
  const json* v = lookup(j, key, file);
  return v ? as_string(*v, key, file) : fallback;
}
bool json_bool(const json& j, const std::string& key, const std::string& file) {
  return as_bool(require(j, key, file), key, file);
}
bool json_bool_or(const json& j, const std::string& key, bool fallback, const std::string& file) {
  const json* v = lookup(j, key, file);
  return v ? as_bool(*v, key, file) : fallback;
}

bool json_is_set(const json& j, const std::string& key) {
  if (t_recorder) t_recorder->record(key);
  if (!j.is_object()) return false;
  auto it = j.find(key);
  return it != j.end() && !it->is_null();
}

JsonKeyRecorder::JsonKeyRecorder() {
  if (t_recorder) throw std::logic_error("JsonKeyRecorder: one is already recording on this thread");
  t_recorder = this;
}
JsonKeyRecorder::~JsonKeyRecorder() { t_recorder = nullptr; }
bool JsonKeyRecorder::active() { return t_recorder != nullptr; }

void JsonKeyRecorder::record(const std::string& key) {
  if (prefix_.empty() && derived_.count(key)) return;
  keys_.insert(prefix_.empty() ? key : prefix_ + "." + key);
}

JsonKeyRecorder::Prefix::Prefix(const std::string& prefix) {
  if (!t_recorder) return;
  saved_ = t_recorder->prefix_;
  t_recorder->prefix_ = saved_.empty() ? prefix : saved_ + "." + prefix;
}
JsonKeyRecorder::Prefix::~Prefix() {
  if (t_recorder) t_recorder->prefix_ = saved_;
}

JsonKeyRecorder::Derived::Derived(std::vector<std::string> keys) {
  if (!t_recorder) return;
  saved_ = t_recorder->derived_;
  t_recorder->derived_.insert(keys.begin(), keys.end());
}
JsonKeyRecorder::Derived::~Derived() {
  if (t_recorder) t_recorder->derived_ = saved_;
}

void check_at_most(const std::string& file, const char* key, int64_t value, int64_t max) {
  if (value > max)
    throw std::runtime_error(file + ": key '" + key + "' must be at most " + std::to_string(max) + ", found " +
                             std::to_string(value));
}

void check_fits_in_memory(const std::string& file, double num_floats) {
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const double need = num_floats * 4.0, have = (double)::sysconf(_SC_PHYS_PAGES) * (double)::sysconf(_SC_PAGESIZE);
  if (have > 0 && need > have) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ": the model needs %.1f GiB of float32 weights, more than this machine's %.1f GiB",
                  need / gib, have / gib);
    throw std::runtime_error(file + buf);
  }
}

}  // namespace tfm

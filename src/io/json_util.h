// JSON config files (config.json, tokenizer_config.json, training configs) with typed getters whose errors name
// the file and key, e.g. "config.json: key 'hidden_size' must be an integer, found string".
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace tfm {

// Parses the file at `path`. Throws std::runtime_error "<path>: cannot open: <strerror>" or
// "<path>: invalid JSON at byte N: <reason>".
nlohmann::json load_json_file(const std::string& path);

// Typed getters for `key` of the object `j`, read from `file` (used only in messages). All throw
// std::runtime_error naming file and key when `j` is not an object, when a required key is missing, or when the
// value has the wrong type. The *_or variants return `fallback` when the key is missing or null (Hugging Face
// configs write null for "use the default", e.g. "classifier_dropout": null).

// An integer; an integral float such as 768.0 is accepted, 768.5 is not. Range: int64.
int64_t json_int(const nlohmann::json& j, const std::string& key, const std::string& file);
int64_t json_int_or(const nlohmann::json& j, const std::string& key, int64_t fallback, const std::string& file);
// Any JSON number (integer or float).
double json_number(const nlohmann::json& j, const std::string& key, const std::string& file);
double json_number_or(const nlohmann::json& j, const std::string& key, double fallback, const std::string& file);
std::string json_string(const nlohmann::json& j, const std::string& key, const std::string& file);
std::string json_string_or(const nlohmann::json& j, const std::string& key, const std::string& fallback,
                           const std::string& file);
// true/false only (0/1 and "true" are rejected, as Python's json would give them other types).
bool json_bool(const nlohmann::json& j, const std::string& key, const std::string& file);
bool json_bool_or(const nlohmann::json& j, const std::string& key, bool fallback, const std::string& file);

// Model configs come from other people's files; these bound sizes before anything is allocated, so a typo such as
// hidden_size 65536 or max_len 2e7 gives a message instead of an out-of-memory kill.
// Throws std::runtime_error "<file>: key '<key>' must be at most <max>, found <value>".
void check_at_most(const std::string& file, const char* key, int64_t value, int64_t max);
// Throws std::runtime_error naming `file` when `num_floats` float32 values (weights, tables) exceed the
// machine's physical memory (sysconf _SC_PHYS_PAGES).
void check_fits_in_memory(const std::string& file, double num_floats);

}  // namespace tfm

// Which config keys a reader looks up: json_is_set, and JsonKeyRecorder, which records every key the getters of
// io/json_util.h (json_int ... json_bool_or) and json_is_set look up (tests/test_config_keys.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace tfm {

// Whether the object `j` holds `key` with a value other than null (a non-object holds nothing). Counts as a read of
// `key` for a JsonKeyRecorder: readers test optional keys with it rather than with j.contains.
bool json_is_set(const nlohmann::json& j, const std::string& key);

// While a JsonKeyRecorder lives, every key that json_int ... json_bool_or (io/json_util.h) and json_is_set look up
// on this thread is added to keys(), present in the object or not (a key read for its default counts).
// tests/test_config_keys.cpp loads each fixture under one and compares the keys with the family's table
// (models/registry.h ModelFamily::config_keys). Recorders do not nest: a second one on the thread throws
// std::logic_error.
class JsonKeyRecorder {
 public:
  JsonKeyRecorder();
  ~JsonKeyRecorder();
  JsonKeyRecorder(const JsonKeyRecorder&) = delete;
  JsonKeyRecorder& operator=(const JsonKeyRecorder&) = delete;
  const std::set<std::string>& keys() const { return keys_; }
  // Whether one is recording on this thread (readers skip work done only for the record).
  static bool active();

  // While a Prefix lives, keys are recorded as "<prefix>.<key>": a nested object's keys
  // ("rope_parameters.full_attention.rope_theta").
  class Prefix {
   public:
    explicit Prefix(const std::string& prefix);
    ~Prefix();
    Prefix(const Prefix&) = delete;
    Prefix& operator=(const Prefix&) = delete;

   private:
    std::string saved_;
  };
  // While a Derived lives, lookups of `keys` are not recorded: they are keys a reader wrote itself into a copy of
  // the config (ModelFamily::config_as_bert's BERT names), not keys of the file.
  class Derived {
   public:
    explicit Derived(std::vector<std::string> keys);
    ~Derived();
    Derived(const Derived&) = delete;
    Derived& operator=(const Derived&) = delete;

   private:
    std::set<std::string> saved_;
  };

  // Adds `key` under the current Prefix, unless a Derived names it (the getters call it).
  void record(const std::string& key);

 private:
  std::set<std::string> keys_;
  std::string prefix_;
  std::set<std::string> derived_;
};

}  // namespace tfm

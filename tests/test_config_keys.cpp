// The config key tables of the families (models/registry.h ModelFamily::config_keys) against their readers: every
// fixture folder under tests/fixtures with a config.json model_type is loaded as its family loads it (the config,
// the weights, the task head the tensors hold, and for a trainable family its training heads and dropouts) under an
// io/json_util.h JsonKeyRecorder, and
//   - a key read but not in the family's table fails (a reader that grew a key the table lacks);
//   - a listed key other than Ignored that no fixture of the family reads fails (a table entry gone stale);
//   - a Value key (one that changes the numbers) that no fixture sets to a value other than its default fails: the
//     fixtures with those values are compared with their PyTorch references by the family's tests (and by
//     test_config_key_fixtures.cpp for tests/fixtures/config_keys/).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "io/json_keys.h"
#include "io/json_util.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "models/registry.h"
#include "models/seq2seq.h"
#include "test_util.h"

using namespace tfm;

namespace {

struct LoadedFixture {
  std::string dir;  // relative to tests/fixtures
  nlohmann::json config;
  const ModelFamily* family = nullptr;
  std::set<std::string> read;  // the keys the family's reader looked up
  std::string error;           // the load's exception, if any
};

constexpr HeadKind kKinds[] = {HeadKind::SequenceClassification, HeadKind::TokenClassification, HeadKind::MaskedLM};

// Loads `dir` as its family does and returns the keys read.
std::set<std::string> keys_read(const std::string& dir, const nlohmann::json& config, const ModelFamily& family) {
  const std::string path = dir + "/config.json";
  JsonKeyRecorder recorder;
  if (family.translation) {
    family.seq2seq_config(config, path);
    return recorder.keys();
  }
  EncoderConfig c = EncoderConfig::from_json(config, path);
  CheckpointWeights w(dir);
  make_encoder(c, w);
  if (family.heads) {
    const FamilyHeads heads = family.heads();
    if (std::optional<HeadKind> kind = heads.detect(w)) heads.load(*kind, c, w);
  }
  for (HeadKind kind : kKinds) {
    try {
      if (family.training_dropouts) family.training_dropouts(config, kind, path);
      if (family.training_head) family.training_head(c, kind, 3);
    } catch (const std::runtime_error&) {
      // a kind the family does not fine-tune (ELECTRA's masked LM)
    }
  }
  return recorder.keys();
}

const std::vector<LoadedFixture>& loaded_fixtures() {
  static const std::vector<LoadedFixture> all = [] {
    namespace fs = std::filesystem;
    const fs::path root = fs::path(test::source_dir()) / "tests" / "fixtures";
    std::vector<LoadedFixture> out;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (e.path().filename() != "config.json") continue;
      LoadedFixture f;
      f.dir = fs::relative(e.path().parent_path(), root).string();
      try {
        f.config = load_json_file(e.path().string());
      } catch (const std::exception&) {
        continue;  // deliberately broken files of other tests
      }
      if (!f.config.is_object() || !f.config.contains("model_type") || !f.config["model_type"].is_string()) continue;
      f.family = find_family(f.config["model_type"].get<std::string>());
      if (!f.family) continue;
      try {
        f.read = keys_read(e.path().parent_path().string(), f.config, *f.family);
      } catch (const std::exception& ex) {
        f.error = ex.what();
      }
      out.push_back(std::move(f));
    }
    return out;
  }();
  return all;
}

const ConfigKey* find_key(const ModelFamily& family, const std::string& key) {
  for (const ConfigKey& k : family.config_keys)
    if (key == k.key) return &k;
  return nullptr;
}

// The value of a key ("parent.child" for nested objects) in `config`; null when absent.
nlohmann::json value_of(const nlohmann::json& config, const std::string& key) {
  const nlohmann::json* v = &config;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!v->is_object() || !v->contains(part)) return nullptr;
    v = &(*v)[part];
    if (dot == std::string::npos) return *v;
    start = dot + 1;
  }
}

// Whether `v` differs from the default written as JSON text (numbers compared as numbers: 1e-05 == 0.00001).
bool differs_from_default(const nlohmann::json& v, const std::string& default_json) {
  const nlohmann::json d = nlohmann::json::parse(default_json);
  if (v.is_null()) return false;  // absent or null: the default
  if (v.is_number() && d.is_number()) return v.get<double>() != d.get<double>();
  return v != d;
}

bool computed_or_required(const ConfigKey& k) {
  const std::string d = k.default_json;
  return d.empty() || d[0] == '(';
}

TEST(ConfigKeys, EveryFamilyHasATableAndFixtures) {
  for (const ModelFamily* family : model_families()) {
    EXPECT_FALSE(family->config_keys.empty()) << family->name << " has no config_keys table (models/registry.h)";
    bool any = false;
    for (const LoadedFixture& f : loaded_fixtures()) any = any || f.family == family;
    EXPECT_TRUE(any) << "no fixture folder under tests/fixtures has a config.json of family " << family->name;
    std::set<std::string> seen;
    for (const ConfigKey& k : family->config_keys) {
      EXPECT_TRUE(seen.insert(k.key).second) << family->name << " lists '" << k.key << "' twice";
      if (!computed_or_required(k)) {
        EXPECT_TRUE(nlohmann::json::accept(k.default_json))
            << family->name << " '" << k.key << "': default is not JSON: " << k.default_json;
      }
    }
  }
}

TEST(ConfigKeys, EveryFixtureLoads) {
  for (const LoadedFixture& f : loaded_fixtures()) EXPECT_EQ(f.error, "") << f.dir;
}

// A key the reader looked up that the family's table lacks.
TEST(ConfigKeys, EveryKeyReadIsListed) {
  for (const LoadedFixture& f : loaded_fixtures())
    for (const std::string& key : f.read) {
      if (key == "model_type") continue;
      EXPECT_TRUE(find_key(*f.family, key) != nullptr)
          << f.dir << ": the " << f.family->name << " reader reads '" << key
          << "', which its config_keys table (models/registry.h) does not list";
    }
}

// A listed key (other than Ignored) that no fixture of the family reads.
TEST(ConfigKeys, EveryListedKeyIsRead) {
  for (const ModelFamily* family : model_families()) {
    std::set<std::string> read;
    for (const LoadedFixture& f : loaded_fixtures())
      if (f.family == family) read.insert(f.read.begin(), f.read.end());
    for (const ConfigKey& k : family->config_keys) {
      if (k.role == ConfigKeyRole::Ignored) continue;
      EXPECT_TRUE(read.count(k.key)) << family->name << " lists '" << k.key
                                     << "', but loading its fixtures never reads it";
    }
  }
}

// Value keys of a family that landed before its config_keys fixture: listed here so that the gap stays visible
// (issue 48 is open for them); every other family's Value keys must have a fixture.
bool pending_fixture(const std::string& family, const std::string& key) {
  static const std::set<std::pair<std::string, std::string>> pending = {
      {"deberta-v2", "hidden_act"}, {"deberta-v2", "layer_norm_eps"}, {"deberta-v2", "pooler_hidden_act"}};
  return pending.count({family, key}) > 0;
}

// A key that changes the numbers has a fixture where it is not the default.
TEST(ConfigKeys, EveryValueKeyHasANonDefaultFixture) {
  for (const ModelFamily* family : model_families())
    for (const ConfigKey& k : family->config_keys) {
      if (k.role != ConfigKeyRole::Value || pending_fixture(family->name, k.key)) continue;
      std::string where;
      for (const LoadedFixture& f : loaded_fixtures()) {
        if (f.family != family) continue;
        const nlohmann::json v = value_of(f.config, k.key);
        const bool set = computed_or_required(k) ? !v.is_null() : differs_from_default(v, k.default_json);
        if (set) {
          where = f.dir;
          break;
        }
      }
      EXPECT_NE(where, "") << family->name << ": no fixture sets '" << k.key << "' to a value other than its default "
                           << (k.default_json[0] ? k.default_json : "(required)");
    }
}

// The recorder itself: keys read for their defaults count, nested prefixes and derived keys.
TEST(ConfigKeys, RecorderRecordsLookups) {
  const nlohmann::json j = {{"a", 1}, {"n", {{"x", 2}}}, {"z", nullptr}};
  JsonKeyRecorder r;
  json_int(j, "a", "f");
  json_int_or(j, "missing", 3, "f");
  EXPECT_FALSE(json_is_set(j, "z"));
  {
    JsonKeyRecorder::Prefix p("n");
    json_int(j["n"], "x", "f");
  }
  {
    JsonKeyRecorder::Derived d({"b"});
    json_int_or(j, "b", 0, "f");
  }
  EXPECT_EQ(r.keys(), (std::set<std::string>{"a", "missing", "n.x", "z"}));
  EXPECT_THROW(JsonKeyRecorder second, std::logic_error);
}

// DistilBERT's keys are its own names, not the BERT names config_as_bert maps them to.
TEST(ConfigKeys, MappedKeysAreRecordedUnderTheFamilysNames) {
  for (const LoadedFixture& f : loaded_fixtures()) {
    if (std::string(f.family->name) != "distilbert") continue;
    EXPECT_TRUE(f.read.count("dim")) << f.dir;
    EXPECT_TRUE(f.read.count("activation")) << f.dir;
    EXPECT_FALSE(f.read.count("hidden_size")) << f.dir;
    EXPECT_FALSE(f.read.count("hidden_act")) << f.dir;
  }
}

}  // namespace

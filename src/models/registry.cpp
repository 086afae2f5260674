#include "models/registry.h"

#include <algorithm>
#include <stdexcept>

#include "io/json_keys.h"
#include "io/json_util.h"

namespace tfm {

// Each family defines its entry at the end of its own file. They are listed here, one line each, rather than
// registered by static objects in their files: tfm_lib is a static library (installed as libtfm.a for programs
// that link it without --whole-archive), and the linker drops an archive member nothing references, so a
// self-registering object of a family whose functions nothing else calls (ModernBERT, MPNet, the tutorial
// encoder) would silently vanish from the registry. This list is that reference.
const ModelFamily& bert_family();                 // models/bert.cpp
const ModelFamily& roberta_family();              // models/roberta.cpp
const ModelFamily& distilbert_family();           // models/distilbert.cpp
const ModelFamily& mpnet_family();                // models/mpnet.cpp
const ModelFamily& modernbert_family();           // models/modernbert.cpp
const ModelFamily& electra_family();              // models/electra.cpp
const ModelFamily& nomic_bert_family();           // models/nomic_bert.cpp
const ModelFamily& deberta_v2_family();           // models/deberta_v2.cpp
const ModelFamily& transformer_encoder_family();  // models/transformer_encoder.cpp
const ModelFamily& d2l_seq2seq_family();          // models/seq2seq_config.cpp
const ModelFamily& marian_family();               // models/hf_seq2seq.cpp
const ModelFamily& m2m_100_family();              // models/hf_seq2seq.cpp

const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> all = {
      &bert_family(),         &roberta_family(),     &distilbert_family(),          &mpnet_family(),
      &modernbert_family(),   &electra_family(),     &nomic_bert_family(),          &deberta_v2_family(),
      &transformer_encoder_family(),                 &d2l_seq2seq_family(),         &marian_family(),
      &m2m_100_family(),
  };
  return all;
}

bool ModelFamily::answers_model_type(const std::string& model_type) const {
  for (const FamilyModelType& t : model_types)
    if (model_type == t.model_type) return true;
  return false;
}

bool ModelFamily::answers_architecture(const std::string& architecture) const {
  for (const std::string& a : architectures)
    if (architecture == a) return true;
  for (const FamilyModelType& t : model_types) {
    const std::string stem = t.class_stem;
    if (stem.empty() || architecture.compare(0, stem.size(), stem) != 0) continue;
    const std::string rest = architecture.substr(stem.size());
    if (rest == "Model" || rest.rfind("For", 0) == 0) return true;
  }
  return false;
}

const char* ModelFamily::class_stem(const std::string& model_type) const {
  for (const FamilyModelType& t : model_types)
    if (model_type == t.model_type) return t.class_stem;
  throw std::logic_error(std::string("family ") + name + " does not answer model_type '" + model_type + "'");
}

const ModelFamily* find_family(const std::string& model_type) {
  for (const ModelFamily* f : model_families())
    if (f->answers_model_type(model_type)) return f;
  return nullptr;
}

namespace {
std::string types_where(bool (*keep)(const ModelFamily&)) {
  std::string s;
  for (const ModelFamily* f : model_families())
    if (keep(*f))
      for (const FamilyModelType& t : f->model_types) s += (s.empty() ? "" : ", ") + std::string(t.model_type);
  return s;
}
}  // namespace

std::string supported_model_types() {
  return types_where([](const ModelFamily&) { return true; });
}
std::string model_types_with_heads() {
  return types_where([](const ModelFamily& f) { return f.heads != nullptr; });
}
std::string trainable_model_types_list() {
  return types_where([](const ModelFamily& f) { return f.trainable(); });
}

std::string read_model_type(const nlohmann::json& config, const std::string& file, const std::string& fallback) {
  return json_string_or(config, "model_type", fallback, file);
}

std::string default_model_type(const nlohmann::json& config) {
  return config.is_object() && config.contains("src_vocab_size") ? "transformer_seq2seq" : "bert";
}

const ModelFamily& family_of(const std::string& model_type, const std::string& file) {
  if (const ModelFamily* f = find_family(model_type)) return *f;
  throw std::runtime_error(file + ": model_type '" + model_type + "' is not a model this tool runs (supported: " +
                           supported_model_types() + ")");
}

void require_encoder_family(const ModelFamily& family, const std::string& model_type, const std::string& file,
                            const std::string& hint) {
  if (!family.translation) return;
  throw std::runtime_error(file + ": this is a " + model_type + " folder (a translation model), not an encoder" +
                           (hint.empty() ? "" : "; " + hint));
}

void require_translation_family(const ModelFamily& family, const std::string& model_type, const std::string& file,
                                const std::string& hint) {
  if (family.translation) return;
  throw std::runtime_error(file + ": this is a " + model_type + " folder (an encoder), not a translation model" +
                           (hint.empty() ? "" : "; " + hint));
}

namespace detail {

HeadStageSpec head_stage(std::string linear, int64_t out, bool dropout) {
  HeadStageSpec s;
  s.linear = std::move(linear);
  s.out = out;
  s.dropout = dropout;
  return s;
}

TrainingHeadSpec token_classifier_head(int64_t C) {
  TrainingHeadSpec h;
  h.stages = {head_stage("classifier", C, true)};
  return h;
}

TrainingHeadSpec lm_head(const std::string& transform, ops::Activation act, const std::string& norm,
                         const std::string& decoder, const std::string& bias, std::vector<std::string> bias_aliases,
                         const EncoderConfig& c) {
  HeadStageSpec t = head_stage(transform, c.hidden_size, false), d = head_stage(decoder, c.vocab_size, false);
  t.act = act;
  t.norm = norm;
  d.tied = true;
  d.bias = bias;
  d.bias_aliases = std::move(bias_aliases);
  TrainingHeadSpec h;
  h.stages = {t, d};
  return h;
}

float dropout_of(const nlohmann::json& config, const char* key, double fallback, const std::string& file) {
  const double v = json_number_or(config, key, fallback, file);
  if (!(v >= 0 && v < 1)) throw std::runtime_error(file + ": key '" + std::string(key) + "' must be in [0, 1)");
  return (float)v;
}

std::vector<ConfigKey> encoder_config_keys(const std::vector<ConfigKey>& own) {
  using enum ConfigKeyRole;
  std::vector<ConfigKey> keys = {
      {"vocab_size", "", Size},
      {"hidden_size", "", Size},
      {"num_hidden_layers", "", Size},
      {"num_attention_heads", "", Value},  // the head split of the same [H, H] projections
      {"intermediate_size", "", Size},
      {"max_position_embeddings", "", Size},
      {"type_vocab_size", "2", Size},
      {"layer_norm_eps", "1e-12", Value},
      {"hidden_act", "\"gelu\"", Value},
      {"pad_token_id", "0", Ignored},  // BERT's positions are 0 .. L-1; fine-tuning pads with it (masked)
      {"relative_attention_num_buckets", "32", Ignored},  // MPNet's
      {"position_embedding_type", "\"absolute\"", Checked},
  };
  for (const ConfigKey& k : own) {
    auto same = std::find_if(keys.begin(), keys.end(), [&](const ConfigKey& e) { return std::string(e.key) == k.key; });
    if (same != keys.end())
      *same = k;
    else
      keys.push_back(k);
  }
  return keys;
}

TrainingDropouts bert_dropouts(const nlohmann::json& config, HeadKind kind, const std::string& file) {
  TrainingDropouts d;
  d.body = d.head = dropout_of(config, "hidden_dropout_prob", 0.1, file);
  d.attention = dropout_of(config, "attention_probs_dropout_prob", 0.1, file);
  if (kind != HeadKind::MaskedLM && json_is_set(config, "classifier_dropout"))
    d.head = dropout_of(config, "classifier_dropout", d.body, file);
  return d;
}

}  // namespace detail

}  // namespace tfm

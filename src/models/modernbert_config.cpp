// config.json's ModernBERT keys (models/modernbert.h ModernBertConfig), read and checked.
#include <stdexcept>
#include <string>

#include "io/json_keys.h"
#include "io/json_util.h"
#include "models/modernbert.h"

namespace tfm {

ModernBertConfig ModernBertConfig::from(const EncoderConfig& c) {
  const nlohmann::json& j = c.json;
  const std::string& file = c.source;
  ModernBertConfig m;
  auto fail = [&](const std::string& key, const std::string& what) {
    throw std::runtime_error(file + ": key '" + key + "' " + what);
  };
  auto activation = [&](const char* key, const std::string& fallback) {
    const std::string name = json_string_or(j, key, fallback, file);
    try {
      return ops::parse_activation(name);
    } catch (const std::invalid_argument& e) {
      fail(key, e.what());
    }
    return ops::Activation::Gelu;
  };
  m.norm_eps = json_number_or(j, "norm_eps", 1e-5, file);
  if (!(m.norm_eps > 0)) fail("norm_eps", "must be positive");
  m.norm_bias = json_bool_or(j, "norm_bias", false, file);
  m.attention_bias = json_bool_or(j, "attention_bias", false, file);
  m.mlp_bias = json_bool_or(j, "mlp_bias", false, file);
  m.hidden_activation = activation("hidden_activation", "gelu");
  m.classifier_activation = activation("classifier_activation", "gelu");
  m.classifier_bias = json_bool_or(j, "classifier_bias", false, file);
  m.decoder_bias = json_bool_or(j, "decoder_bias", true, file);
  m.classifier_pooling = json_string_or(j, "classifier_pooling", "cls", file);
  if (m.classifier_pooling != "cls" && m.classifier_pooling != "mean")
    fail("classifier_pooling", "must be \"cls\" or \"mean\", found \"" + m.classifier_pooling + "\"");
  m.local_attention = json_int_or(j, "local_attention", 128, file);
  if (m.local_attention < 0) fail("local_attention", "must not be negative");
  if (c.head_dim() % 2 != 0)
    throw std::runtime_error(file + ": head_dim (hidden_size / num_attention_heads = " + std::to_string(c.head_dim()) +
                             ") must be even for rotary embeddings");

  const int64_t NL = c.num_hidden_layers;
  m.global_layer.assign(NL, false);
  if (json_is_set(j, "layer_types")) {
    const nlohmann::json& t = j["layer_types"];
    if (!t.is_array() || (int64_t)t.size() != NL)
      fail("layer_types", "must be a list of num_hidden_layers (" + std::to_string(NL) + ") strings");
    for (int64_t i = 0; i < NL; ++i) {
      const std::string s = t[i].is_string() ? t[i].get<std::string>() : "";
      if (s != "full_attention" && s != "sliding_attention")
        fail("layer_types", "entry " + std::to_string(i) + " must be \"full_attention\" or \"sliding_attention\"");
      m.global_layer[i] = s == "full_attention";
    }
  } else {
    const int64_t n = json_int_or(j, "global_attn_every_n_layers", 3, file);
    if (n <= 0) fail("global_attn_every_n_layers", "must be positive, found " + std::to_string(n));
    for (int64_t i = 0; i < NL; ++i) m.global_layer[i] = i % n == 0;
  }

  if (json_is_set(j, "rope_scaling")) fail("rope_scaling", "is not supported");
  m.global_rope_theta = json_number_or(j, "global_rope_theta", 160000.0, file);
  // Older configs may say local_rope_theta null: the local layers then use the global theta (modeling_modernbert.py
  // before rope_parameters).
  const bool local_null = !json_is_set(j, "local_rope_theta") && j.contains("local_rope_theta");
  m.local_rope_theta = local_null ? m.global_rope_theta : json_number_or(j, "local_rope_theta", 10000.0, file);
  if (json_is_set(j, "rope_parameters")) {
    const nlohmann::json& rp = j["rope_parameters"];
    if (!rp.is_object()) fail("rope_parameters", "must be an object");
    for (const char* kind : {"full_attention", "sliding_attention"}) {
      const JsonKeyRecorder::Prefix nested(std::string("rope_parameters"));
      if (!json_is_set(rp, kind)) continue;
      const nlohmann::json& p = rp[kind];
      const std::string key = std::string("rope_parameters.") + kind;
      const JsonKeyRecorder::Prefix nested_kind(kind);
      if (!p.is_object()) fail(key, "must be an object");
      const std::string type = json_string_or(p, "rope_type", "default", file);
      if (type != "default") fail(key + ".rope_type", "'" + type + "' is not supported (only 'default')");
      double& theta = std::string(kind) == "full_attention" ? m.global_rope_theta : m.local_rope_theta;
      theta = json_number_or(p, "rope_theta", theta, file);
    }
  }
  if (!(m.global_rope_theta > 0)) fail("global_rope_theta", "must be positive");
  if (!(m.local_rope_theta > 0)) fail("local_rope_theta", "must be positive");
  return m;
}

}  // namespace tfm

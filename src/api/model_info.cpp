// tfm::inspect_model: a model folder's family, kind and task, from the family registry (models/registry.h).
#include "tfm/model_info.h"

#include <algorithm>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "api/common.h"
#include "io/json_util.h"
#include "models/heads.h"
#include "models/registry.h"

namespace tfm {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* task_of(HeadKind k) {
  switch (k) {
    case HeadKind::SequenceClassification: return "sequence-classification";
    case HeadKind::TokenClassification: return "token-classification";
    case HeadKind::MaskedLM: return "fill-mask";
    case HeadKind::QuestionAnswering: return "question-answering";
  }
  return "embedding";
}

// The head an architecture class names ("RobertaForMaskedLM" -> fill-mask); "" for a base model.
std::string task_of_architecture(const std::string& a) {
  if (ends_with(a, "ForSequenceClassification")) return "sequence-classification";
  if (ends_with(a, "ForTokenClassification")) return "token-classification";
  if (ends_with(a, "ForMaskedLM") || ends_with(a, "ForPreTraining")) return "fill-mask";
  if (ends_with(a, "ForQuestionAnswering")) return "question-answering";
  return "";
}

// A translation folder's languages: config.json source_lang / target_lang, else a folder name ending in
// "-SRC-TGT" with 2- or 3-letter codes (opus-mt-en-fr, en-fr), else none ("").
std::pair<std::string, std::string> folder_languages(const std::string& dir, const nlohmann::json& cj,
                                                     const std::string& path) {
  std::string s = json_string_or(cj, "source_lang", "", path), t = json_string_or(cj, "target_lang", "", path);
  if (!s.empty() && !t.empty()) return {s, t};
  std::string name = dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  if (auto p = name.rfind('/'); p != std::string::npos) name = name.substr(p + 1);
  auto code = [](const std::string& c) {
    return (c.size() == 2 || c.size() == 3) &&
           std::all_of(c.begin(), c.end(), [](char ch) { return ch >= 'a' && ch <= 'z'; });
  };
  const size_t b = name.rfind('-');
  if (b == std::string::npos || b == 0) return {s, t};
  const size_t a = name.rfind('-', b - 1), start = a == std::string::npos ? 0 : a + 1;
  const std::string src = name.substr(start, b - start), tgt = name.substr(b + 1);
  if (code(src) && code(tgt)) return {s.empty() ? src : s, t.empty() ? tgt : t};
  return {s, t};
}

}  // namespace

ModelInfo inspect_model(const std::string& model) {
  ModelInfo info;
  info.dir = api::model_folder(model);
  api::require_dir(info.dir, "model folder");
  const std::string path = info.dir + "/config.json";
  api::require_file(path);
  const nlohmann::json j = load_json_file(path);
  info.model_type = read_model_type(j, path, default_model_type(j));
  const ModelFamily& family = family_of(info.model_type, path);
  info.family = family.name;
  info.translation = family.translation;
  if (j.is_object() && j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"])
      if (a.is_string()) info.architectures.push_back(a.get<std::string>());
  if (info.translation) {
    info.task = "translation";
    std::tie(info.source_lang, info.target_lang) = folder_languages(info.dir, j, path);
    return info;
  }
  info.task = "embedding";
  for (const std::string& a : info.architectures)
    if (const std::string t = task_of_architecture(a); !t.empty()) {
      info.task = t;
      return info;
    }
  // No architectures: the head the tensors hold, as tfm::Classifier finds it; a folder whose head cannot be read
  // is left to the loader's message.
  if (info.architectures.empty() && family.heads) try {
      info.task = task_of(detect_head_kind(info.dir));
    } catch (const std::exception&) {
    }
  return info;
}

}  // namespace tfm

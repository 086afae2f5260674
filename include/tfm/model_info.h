/// @file tfm/model_info.h
/// What a model folder holds, as the library's family registry reads its config.json: the family, the kind of
/// model and the task of its head. The CLI, `tfm serve` and the Python bindings ask this instead of reading
/// config.json themselves, so every command accepts and refuses the same folders with the same message.
#pragma once
#include <string>
#include <vector>

namespace tfm {

struct ModelInfo {
  std::string dir;         ///< the folder read (a Hugging Face model id resolved to its cached snapshot)
  std::string model_type;  ///< config.json "model_type" ("bert" when absent; "transformer_seq2seq" for a tfm train folder)
  std::string family;      ///< the registry's name of its family: "bert", "roberta", "marian", "d2l_seq2seq", ...
  std::vector<std::string> architectures;  ///< config.json "architectures" (empty when absent)
  bool translation = false;                ///< a seq2seq folder (tfm::Translator, tfm translate, serve translation)
  /// "translation" for a translation folder; else the head its architectures name: "sequence-classification",
  /// "token-classification", "fill-mask" (*ForMaskedLM / *ForPreTraining), "question-answering"; without architectures the head the
  /// tensors hold; "embedding" for a base model (no head).
  std::string task;
  /// Translation folders: the direction, config.json "source_lang" / "target_lang", else a folder name ending in
  /// "-SRC-TGT" with 2- or 3-letter codes (opus-mt-en-fr, en-fr); "" when neither says.
  std::string source_lang, target_lang;
};

/// Reads DIR/config.json through the family registry. Throws tfm::FileNotFoundError for a missing folder or
/// config.json, std::runtime_error "<dir>/config.json: model_type 'x' is not a model this tool runs (supported:
/// ...)" for a folder of an unsupported kind (the one message every command gives), and for a config.json that is
/// not valid JSON.
ModelInfo inspect_model(const std::string& dir);

}  // namespace tfm

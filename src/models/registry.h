// The model families: one ModelFamily entry per family, defined at the end of the family's own file
// (models/bert.cpp bert_family(), models/roberta.cpp roberta_family(), ..., models/hf_seq2seq.cpp
// marian_family()). An entry says which config.json model_type values and Hugging Face class names the family
// answers and holds everything the layers above need of it: the config mapping, the inference loader, the task
// heads, the longest input, the training body, head and dropouts, or the translation config. Everything above
// models/ asks the registry (or tfm::inspect_model, include/tfm/model_info.h) and never reads model_type or
// names a family; config.json's "model_type" is read here only.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/encoder.h"
#include "models/head_layout.h"
#include "models/trainable_encoder.h"
#include "nn/params.h"
#include "ops/activation.h"

namespace tfm {

struct Seq2SeqConfig;

// The dropouts of a family's *For<kind> model in training (p's in [0, 1)).
struct TrainingDropouts {
  float body = 0.0f, attention = 0.0f, head = 0.0f;
  bool operator==(const TrainingDropouts&) const = default;
};

// One stage of a head in training: y [M, out] = norm(act(linear(dropout(x [M, in])))); its tensors are store
// entries under Hugging Face names.
struct HeadStageSpec {
  std::string linear;             // the Linear's prefix ("classifier.out_proj"); weight [out, in], bias [out]
  int64_t out = 0;
  bool linear_bias = true;        // false: the Linear has no bias (ModernBERT head.dense without classifier_bias)
  bool dropout = false;           // dropout (the head's p) on the stage's input
  bool tanh = false;              // tanh after the linear (RobertaClassificationHead.dense)
  std::optional<ops::Activation> act;
  std::string norm;               // the LayerNorm's prefix after the activation; empty: none
  bool norm_bias = true;          // false: the LayerNorm has no bias (ModernBERT norm_bias false)
  float norm_eps = -1;            // the LayerNorm's eps; < 0: config layer_norm_eps
  // A weight not in the checkpoint: N(0, init_std) (< 0: the model's initializer_range), truncated to
  // +-init_cutoff * init_std when init_cutoff > 0 (init.trunc_normal_, ModernBERT's _init_weights).
  double init_std = -1, init_cutoff = 0;
  bool tied = false;              // the weight is the body's word embeddings (tie_word_embeddings); bias `bias`
  std::string bias;               // (tied) the bias's name; empty: no bias (ModernBERT without decoder_bias)
  std::vector<std::string> bias_aliases;
};

// A task head in training (train/finetune.cpp TrainingHead builds and runs it): what a sequence classification
// head reads, then its stages in order.
struct TrainingHeadSpec {
  HeadInput input = HeadInput::FirstToken;
  std::vector<HeadStageSpec> stages;
};

// A config.json model_type a family answers and the stem of its Hugging Face class names ("xlm-roberta",
// "XLMRoberta": XLMRobertaModel, XLMRobertaForMaskedLM, ...).
struct FamilyModelType {
  const char* model_type;
  const char* class_stem;
};

// What a config.json key does in a family (ModelFamily::config_keys).
enum class ConfigKeyRole {
  Size,      // sizes tensors, says which tensors exist, or bounds the input: a wrong value fails loading a fixture
  Value,     // changes the numbers: a fixture sets it to a value other than the default and a test compares that
             // fixture with its PyTorch reference (a required key: any fixture)
  Checked,   // only the default's behaviour is implemented; another value is refused with a message
  Training,  // read by fine-tuning only (dropouts, the initialisation of new head weights)
  Ignored,   // no effect on this family's numbers, on purpose (the shared BERT reader reads it, or nothing does)
};

// One config.json key a family reads: its name (a key of a nested object as "parent.child"), the value used when
// it is absent or null, as JSON text ("1e-12", "\"gelu\"", "true", "null"; "" when it is required; "(...)" for a
// default computed from other keys), and its role.
struct ConfigKey {
  const char* key;
  const char* default_json;
  ConfigKeyRole role;
};

// One family. A null function is a job the family does not do (no task heads, no fine-tuning, ...).
struct ModelFamily {
  const char* name = "";  // the registry name: "bert", "roberta", "marian", "d2l_seq2seq", ...
  std::vector<FamilyModelType> model_types{};
  // Further config.json "architectures" it answers beyond <stem>Model / <stem>For* (MarianMTModel).
  std::vector<std::string> architectures{};
  bool translation = false;  // a seq2seq family (Translator, tfm translate, serve translation)

  // ---- encoder families (EncoderConfig, make_encoder, TaskModel)
  // config.json with the family's own key names rewritten as BERT's (DistilBERT's dim, n_layers, ...); null: as is.
  nlohmann::json (*config_as_bert)(const nlohmann::json& config, const std::string& file) = nullptr;
  int64_t default_pad_token_id = 0;  // when config.json has none (RobertaConfig's and MPNetConfig's is 1)
  // Checks the family's own keys (EncoderConfig::from_json calls it last); null: none.
  void (*check_config)(const EncoderConfig& config) = nullptr;
  // Builds the inference encoder (Linear layers packed for the compute type).
  std::unique_ptr<EncoderModel> (*make_encoder)(const EncoderConfig& config, WeightSource& weights,
                                                ops::ComputeType dtype) = nullptr;
  // The longest input in tokens (EncoderConfig::max_input_tokens); null: max_position_embeddings.
  int64_t (*max_input_tokens)(const EncoderConfig& config) = nullptr;
  // The task heads' layout (models/head_layout.h); null: the family has no task heads.
  FamilyHeads (*heads)() = nullptr;
  // Whether its Linear weights may be stored prequantised as int8 (tfm convert --dtype int8).
  bool int8_weights = true;

  // ---- fine-tuning (train/finetune.h); all three null: the family cannot be fine-tuned
  // The trainable body, its parameters registered in `store`.
  std::unique_ptr<TrainableEncoder> (*trainable_body)(nn::ParamStore& store, const EncoderConfig& config,
                                                      const TrainableEncoderOptions& options) = nullptr;
  // The head of `kind` in training (out: num_labels; masked LM: vocab_size).
  TrainingHeadSpec (*training_head)(const EncoderConfig& config, HeadKind kind, int64_t out) = nullptr;
  // The dropouts in training, from config.json; std::runtime_error naming `file` for a p outside [0, 1).
  TrainingDropouts (*training_dropouts)(const nlohmann::json& config, HeadKind kind, const std::string& file) = nullptr;

  // ---- translation families
  // The Seq2SeqConfig of config.json (throws std::runtime_error naming `file` and the key).
  Seq2SeqConfig (*seq2seq_config)(const nlohmann::json& config, const std::string& file) = nullptr;
  // A Hugging Face checkpoint folder, read with its tokenizer files and generation_config.json
  // (TranslationTokenizer, GenerationConfig); false: a tfm train folder (its vocabularies or spm.model).
  bool hugging_face = false;

  // ---- every family
  // The config.json keys the family reads, with defaults and roles: EncoderConfig::from_json (config_as_bert,
  // check_config), make_encoder, the heads' load and the training head and dropouts for encoders; seq2seq_config
  // for translation families. "model_type" (read_model_type) and the task keys every encoder shares
  // (architectures, id2label, problem_type, sentence_transformers: models/heads.h TaskModel::load) are not listed.
  // tests/test_config_keys.cpp loads every fixture under a JsonKeyRecorder (io/json_util.h) and fails on a key read
  // but not listed, a listed key (other than Ignored) no fixture read, and a Value key no fixture sets to a value
  // other than its default.
  std::vector<ConfigKey> config_keys{};

  bool answers_model_type(const std::string& model_type) const;
  // Whether `architecture` is one of this family's classes (<stem>Model, <stem>For..., or `architectures`).
  bool answers_architecture(const std::string& architecture) const;
  // The class stem of `model_type` ("Roberta"); std::logic_error when the family does not answer it.
  const char* class_stem(const std::string& model_type) const;
  bool trainable() const { return trainable_body != nullptr; }
};

// Every family, in the order of the messages' lists.
const std::vector<const ModelFamily*>& model_families();
// The family answering config.json model_type; null when none does.
const ModelFamily* find_family(const std::string& model_type);
// Every model_type the families answer, comma-separated, for messages: "bert, roberta, ..., m2m_100".
std::string supported_model_types();
// config.json's "model_type" (`fallback` when absent or null): the one place it is read. Throws
// std::runtime_error naming `file` when it is not a string.
std::string read_model_type(const nlohmann::json& config, const std::string& file, const std::string& fallback);
// The model_type of a config.json without one, as its loaders assume: "transformer_seq2seq" when it has the tutorial
// seq2seq's keys (src_vocab_size), else "bert".
std::string default_model_type(const nlohmann::json& config);
// The family of `model_type`. Throws std::runtime_error "<file>: model_type 'x' is not a model this tool runs
// (supported: ...)" when none answers it: the one refusal of an unsupported folder.
const ModelFamily& family_of(const std::string& model_type, const std::string& file);
// The refusals of a folder of a known family given to the other kind of command, one wording each (`hint` after a
// "; " when not empty). std::runtime_error:
//   "<file>: this is a <model_type> folder (a translation model), not an encoder; <hint>"
//   "<file>: this is a <model_type> folder (an encoder), not a translation model; <hint>"
void require_encoder_family(const ModelFamily& family, const std::string& model_type, const std::string& file,
                            const std::string& hint = "");
void require_translation_family(const ModelFamily& family, const std::string& model_type, const std::string& file,
                                const std::string& hint = "");
// The model types of the families with task heads / of the trainable families, comma-separated.
std::string model_types_with_heads();
std::string trainable_model_types_list();

namespace detail {
// Helpers of the families' training heads and dropouts.
// A stage reading `linear` with `out` features, dropout on its input when `dropout`.
HeadStageSpec head_stage(std::string linear, int64_t out, bool dropout);
// *ForTokenClassification of the BERT-style families: classifier(dropout(h)) per token.
TrainingHeadSpec token_classifier_head(int64_t C);
// An LM head: transform = norm(act(linear(h))), then the decoder tied to the word embeddings plus `bias`.
TrainingHeadSpec lm_head(const std::string& transform, ops::Activation act, const std::string& norm,
                         const std::string& decoder, const std::string& bias, std::vector<std::string> bias_aliases,
                         const EncoderConfig& c);
// The dropout p of a config key (`fallback` when absent), checked to be in [0, 1).
float dropout_of(const nlohmann::json& config, const char* key, double fallback, const std::string& file);
// BERT and RoBERTa: hidden_dropout_prob, attention_probs_dropout_prob; the classifiers' classifier_dropout when set.
TrainingDropouts bert_dropouts(const nlohmann::json& config, HeadKind kind, const std::string& file);
// The keys EncoderConfig::from_json reads, with BERT's defaults and roles (vocab_size, hidden_size, ...,
// position_embedding_type), each replaced by the entry of `own` with the same key; `own`'s other keys follow.
std::vector<ConfigKey> encoder_config_keys(const std::vector<ConfigKey>& own);
}  // namespace detail

}  // namespace tfm

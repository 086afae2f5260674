// The family registry (models/registry.h) and tfm::inspect_model (include/tfm/model_info.h): each family answers
// the config.json model_type values and the class names Hugging Face's transformers gives its models, and a folder
// of a kind no family answers is refused with one message by every loader and every command.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/encoder.h"
#include "models/heads.h"
#include "models/registry.h"
#include "run_tfm.h"
#include "test_util.h"
#include "tfm/classifier.h"
#include "tfm/convert.h"
#include "tfm/encoder.h"
#include "tfm/finetune.h"
#include "tfm/model_info.h"
#include "tfm/translator.h"
#include "train/finetune.h"

namespace tfm {
namespace {

using test::fixture;

// transformers' model types and class names (configuration_auto.py CONFIG_MAPPING_NAMES, the modeling files), and
// the family each belongs to here.
struct Known {
  const char* model_type;
  const char* architecture;  // a class of that model type ("" for tfm's own formats)
  const char* family;
  bool translation;
};
const Known kKnown[] = {
    {"bert", "BertForSequenceClassification", "bert", false},
    {"bert", "BertModel", "bert", false},
    {"roberta", "RobertaForMaskedLM", "roberta", false},
    {"xlm-roberta", "XLMRobertaForSequenceClassification", "roberta", false},
    {"camembert", "CamembertForTokenClassification", "roberta", false},
    {"distilbert", "DistilBertForMaskedLM", "distilbert", false},
    {"mpnet", "MPNetForMaskedLM", "mpnet", false},
    {"modernbert", "ModernBertForSequenceClassification", "modernbert", false},
    {"electra", "ElectraForPreTraining", "electra", false},
    {"nomic_bert", "NomicBertModel", "nomic_bert", false},
    {"deberta-v2", "DebertaV2ForSequenceClassification", "deberta-v2", false},
    {"transformer_encoder", "", "transformer_encoder", false},
    {"transformer_seq2seq", "", "d2l_seq2seq", true},
    {"marian", "MarianMTModel", "marian", true},
    {"m2m_100", "M2M100ForConditionalGeneration", "m2m_100", true},
};

const std::string kSupported =
    "bert, roberta, xlm-roberta, camembert, distilbert, mpnet, modernbert, electra, nomic_bert, deberta-v2, "
    "transformer_encoder, transformer_seq2seq, "
    "marian, m2m_100";

TEST(Registry, EveryFamilyAnswersItsModelTypesAndArchitectures) {
  for (const Known& k : kKnown) {
    SCOPED_TRACE(k.model_type);
    const ModelFamily* f = find_family(k.model_type);
    ASSERT_NE(f, nullptr);
    EXPECT_STREQ(f->name, k.family);
    EXPECT_EQ(f->translation, k.translation);
    if (*k.architecture) { EXPECT_TRUE(f->answers_architecture(k.architecture)) << k.architecture; }
    // No other family answers the model type or the class.
    for (const ModelFamily* other : model_families()) {
      if (other == f) continue;
      EXPECT_FALSE(other->answers_model_type(k.model_type)) << other->name;
      if (*k.architecture) { EXPECT_FALSE(other->answers_architecture(k.architecture)) << other->name; }
    }
  }
  // Names that only share a prefix are not answered.
  EXPECT_FALSE(find_family("roberta")->answers_architecture("RobertaPreLayerNormForMaskedLM"));
  EXPECT_FALSE(find_family("bert")->answers_architecture("BertGenerationEncoder"));
  EXPECT_EQ(find_family("gpt2"), nullptr);
  EXPECT_EQ(find_family(""), nullptr);
  EXPECT_EQ(supported_model_types(), kSupported);
}

// Every registered family is one of the known ones above and holds the functions its kind needs.
TEST(Registry, EveryFamilyIsComplete) {
  std::set<std::string> names;
  for (const ModelFamily* f : model_families()) {
    SCOPED_TRACE(f->name);
    EXPECT_TRUE(names.insert(f->name).second) << "registered twice";
    ASSERT_FALSE(f->model_types.empty());
    for (const FamilyModelType& t : f->model_types) {
      EXPECT_EQ(find_family(t.model_type), f) << t.model_type;
      bool known = false;
      for (const Known& k : kKnown) known |= std::string(k.model_type) == t.model_type;
      EXPECT_TRUE(known) << t.model_type << " is not in this test's table";
    }
    if (f->translation) {
      EXPECT_NE(f->seq2seq_config, nullptr);
      EXPECT_EQ(f->make_encoder, nullptr);
    } else {
      EXPECT_NE(f->make_encoder, nullptr);
      EXPECT_EQ(f->seq2seq_config, nullptr);
    }
    // Fine-tuning needs all three or none.
    const int training = (f->trainable_body != nullptr) + (f->training_head != nullptr) +
                         (f->training_dropouts != nullptr);
    EXPECT_TRUE(training == 0 || training == 3) << training;
    if (training) { EXPECT_NE(f->heads, nullptr) << "a trainable family's saved heads must load"; }
  }
  EXPECT_EQ(std::string(trainable_model_types()),
            "bert, roberta, xlm-roberta, camembert, distilbert, mpnet, modernbert, electra");
  EXPECT_EQ(model_types_with_heads(),
            "bert, roberta, xlm-roberta, camembert, distilbert, mpnet, modernbert, electra, deberta-v2");
}

TEST(Registry, TrainedArchitecturesAreTransformersClassNames) {
  EXPECT_EQ(trained_architecture("xlm-roberta", HeadKind::SequenceClassification),
            "XLMRobertaForSequenceClassification");
  EXPECT_EQ(trained_architecture("camembert", HeadKind::TokenClassification), "CamembertForTokenClassification");
  EXPECT_EQ(trained_architecture("distilbert", HeadKind::MaskedLM), "DistilBertForMaskedLM");
  EXPECT_EQ(trained_architecture("mpnet", HeadKind::MaskedLM), "MPNetForMaskedLM");
  EXPECT_EQ(trained_architecture("modernbert", HeadKind::SequenceClassification),
            "ModernBertForSequenceClassification");
  EXPECT_EQ(trained_architecture("electra", HeadKind::TokenClassification), "ElectraForTokenClassification");
}

// The longest input: RoBERTa's positions start after pad_token_id, MPNet's after its padding index 1
// (transformers' create_position_ids_from_input_ids), the others use every position.
TEST(Registry, MaxInputTokensFollowTheFamily) {
  auto config = [](const char* type, int pad) {
    nlohmann::json j = {{"model_type", type},     {"vocab_size", 50},      {"hidden_size", 8},
                        {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"intermediate_size", 16},
                        {"max_position_embeddings", 20}};
    if (pad >= 0) j["pad_token_id"] = pad;
    return EncoderConfig::from_json(j, "config.json");
  };
  EXPECT_EQ(config("bert", -1).max_input_tokens(), 20);
  EXPECT_EQ(config("roberta", -1).max_input_tokens(), 18);  // RobertaConfig's pad_token_id 1
  EXPECT_EQ(config("xlm-roberta", 3).max_input_tokens(), 16);
  EXPECT_EQ(config("mpnet", -1).max_input_tokens(), 18);
  EXPECT_EQ(config("roberta", -1).pad_token_id, 1);
  EXPECT_EQ(config("bert", -1).pad_token_id, 0);
}

TEST(Registry, InspectModelReadsTheFamilyAndTask) {
  struct Case {
    const char* folder;
    const char* model_type;
    const char* family;
    bool translation;
    const char* task;
  };
  for (const Case& c : {
           Case{"bert", "bert", "bert", false, "embedding"},
           Case{"family_heads/roberta_mlm", "roberta", "roberta", false, "fill-mask"},
           Case{"family_heads/xlmr_cross", "xlm-roberta", "roberta", false, "sequence-classification"},
           Case{"family_heads/distilbert_tokcls", "distilbert", "distilbert", false, "token-classification"},
           Case{"transformer_encoder", "transformer_encoder", "transformer_encoder", false, "embedding"},
           Case{"marian", "marian", "marian", true, "translation"},
           Case{"nllb", "m2m_100", "m2m_100", true, "translation"},
           Case{"d2l_trained", "transformer_seq2seq", "d2l_seq2seq", true, "translation"},
       }) {
    SCOPED_TRACE(c.folder);
    const ModelInfo info = inspect_model(fixture(c.folder));
    EXPECT_EQ(info.dir, fixture(c.folder));
    EXPECT_EQ(info.model_type, c.model_type);
    EXPECT_EQ(info.family, c.family);
    EXPECT_EQ(info.translation, c.translation);
    EXPECT_EQ(info.task, c.task);
  }
  EXPECT_EQ(inspect_model(fixture("marian")).architectures, std::vector<std::string>{"MarianMTModel"});
}

TEST(Registry, InspectModelFindsTheHeadWithoutArchitecturesAndTheLanguagePair) {
  test::TempFolder t;
  // A classifier whose config.json lost "architectures": the head the tensors hold.
  nlohmann::json cfg = nlohmann::json::parse(test::slurp(fixture("family_heads/bert_seqcls/config.json")));
  cfg.erase("architectures");
  test::spit(t.path + "/config.json.new", cfg.dump());
  test::link_folder(fixture("family_heads/bert_seqcls"), t.path + "/cls", {{"config.json", t.path + "/config.json.new"}});
  EXPECT_EQ(inspect_model(t.path + "/cls").task, "sequence-classification");
  // A translation folder named SRC-TGT, and one whose config.json says it.
  test::link_folder(fixture("marian"), t.path + "/opus-mt-de-en");
  const ModelInfo named = inspect_model(t.path + "/opus-mt-de-en");
  EXPECT_EQ(named.source_lang, "de");
  EXPECT_EQ(named.target_lang, "en");
  nlohmann::json m = nlohmann::json::parse(test::slurp(fixture("marian/config.json")));
  m["source_lang"] = "fr";
  m["target_lang"] = "es";
  test::spit(t.path + "/marian.json", m.dump());
  test::link_folder(fixture("marian"), t.path + "/m", {{"config.json", t.path + "/marian.json"}});
  const ModelInfo said = inspect_model(t.path + "/m");
  EXPECT_EQ(said.source_lang, "fr");
  EXPECT_EQ(said.target_lang, "es");
  EXPECT_TRUE(inspect_model(fixture("bert")).source_lang.empty());
}

// A folder of a model type no family answers: a copy of a BERT classifier with model_type "gpt2", so that every
// other file a loader looks for is there.
struct UnsupportedFolder {
  test::TempFolder t;
  std::string dir, config;
  UnsupportedFolder() {
    nlohmann::json cfg = nlohmann::json::parse(test::slurp(fixture("family_heads/bert_seqcls/config.json")));
    cfg["model_type"] = "gpt2";
    test::spit(t.path + "/config.json", cfg.dump());
    dir = t.path + "/gpt2";
    test::link_folder(fixture("family_heads/bert_seqcls"), dir, {{"config.json", t.path + "/config.json"}});
    config = dir + "/config.json";
  }
  std::string message() const {
    return config + ": model_type 'gpt2' is not a model this tool runs (supported: " + kSupported + ")";
  }
};

template <typename F>
void expect_refusal(const std::string& what, const std::string& message, F f) {
  try {
    f();
    ADD_FAILURE() << what << ": accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), message) << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": " << e.what() << " (not a std::runtime_error)";
  }
}

TEST(Registry, AnUnsupportedFolderIsRefusedWithOneMessageByEveryLoader) {
  UnsupportedFolder u;
  const std::string m = u.message();
  expect_refusal("inspect_model", m, [&] { inspect_model(u.dir); });
  expect_refusal("EncoderConfig", m, [&] { EncoderConfig::load(u.config); });
  expect_refusal("load_encoder", m, [&] { load_encoder(u.dir); });
  expect_refusal("TaskModel", m, [&] { TaskModel::load(u.dir, HeadKind::SequenceClassification); });
  expect_refusal("Encoder", m, [&] { Encoder e(u.dir); });
  expect_refusal("Classifier", m, [&] { Classifier c(u.dir); });
  expect_refusal("Translator", m, [&] { Translator tr(u.dir); });
  expect_refusal("convert", m, [&] {
    ConvertOptions o;
    o.dtype = "bf16";
    convert(u.dir, u.t.path + "/out", o);
  });
  EXPECT_FALSE(std::filesystem::exists(u.t.path + "/out"));
  test::spit(u.t.path + "/train.csv", "text,label\nthe cat,a\nthe dog,b\n");
  expect_refusal("finetune", m, [&] {
    FinetuneOptions o;
    o.train_file = u.t.path + "/train.csv";
    o.out_dir = u.t.path + "/ft";
    finetune(u.dir, o);
  });
  EXPECT_FALSE(std::filesystem::exists(u.t.path + "/ft"));
}

TEST(Registry, AnUnsupportedFolderIsRefusedWithOneMessageByEveryCommand) {
  UnsupportedFolder u;
  const std::string m = u.message();
  test::spit(u.t.path + "/train.csv", "text,label\nthe cat,a\nthe dog,b\n");
  test::spit(u.t.path + "/lines.txt", "the cat\n");
  const std::vector<std::vector<std::string>> commands = {
      {"encode", "--model", u.dir, "--text", "the cat"},
      {"embed", "--model", u.dir, "--pooling", "mean", "--input", u.t.path + "/lines.txt"},
      {"classify", "--model", u.dir, "the cat"},
      {"translate", "--model", u.dir, "the cat"},
      {"convert", "--model", u.dir, "--dtype", "bf16", "--out", u.t.path + "/out"},
      {"finetune", "--model", u.dir, "--train", u.t.path + "/train.csv", "--out", u.t.path + "/ft", "--no-progress"},
  };
  for (const auto& args : commands) {
    SCOPED_TRACE(args[0]);
    test::expect_one_line_error(test::run_tfm_in(u.t.path, args), m);
  }
  EXPECT_FALSE(std::filesystem::exists(u.t.path + "/out"));
  EXPECT_FALSE(std::filesystem::exists(u.t.path + "/ft"));
}

// A folder of a known family given to the other kind of command says what it is.
TEST(Registry, AFolderOfTheOtherKindIsNamed) {
  test::TempFolder t;
  const std::string roberta = fixture("family_heads/roberta_seqcls");
  test::expect_one_line_error(test::run_tfm_in(t.path, {"translate", "--model", roberta, "the cat"}),
                              "this is a roberta folder (an encoder), not a translation model");
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"translate", "--model", fixture("family_heads/modernbert_seqcls"), "the cat"}),
      "this is a modernbert folder (an encoder), not a translation model");
  try {
    Translator tr(roberta);
    ADD_FAILURE() << "an encoder folder loaded as a translator";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("this is a roberta folder (an encoder), not a translation model"),
              std::string::npos)
        << e.what();
  }
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"convert", "--model", fixture("d2l_trained"), "--dtype", "bf16", "--out", t.path + "/o"}),
      "this is a transformer_seq2seq folder (a translation model), not an encoder");
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"encode", "--model", fixture("marian"), "--text", "the cat"}),
      "this is a marian folder (a translation model), not an encoder");
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"convert", "--model", fixture("transformer_encoder"), "--dtype", "int8", "--out",
                                t.path + "/o"}),
      "model_type 'transformer_encoder' is not supported");
  EXPECT_FALSE(std::filesystem::exists(t.path + "/o"));
}

}  // namespace
}  // namespace tfm

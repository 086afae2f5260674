// The NomicBERT family (models/nomic_bert.cpp) against the PyTorch reference of modeling_hf_nomic_bert.py
// (scripts/make_nomic_bert_fixtures.py, tests/fixtures/nomic_bert: a sentence-transformers folder in
// nomic-embed-text-v1.5's layout): partial rotary, SwiGLU (fc11 / fc12 / fc2), no biases, fused Wqkv, post-norm,
// GPT-2 config keys, the prompts of config_sentence_transformers.json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/json_util.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "run_tfm.h"
#include "test_util.h"
#include "text/bert_tokenizer.h"

using namespace tfm;
using tfm::test::fixture;
using tfm::test::max_abs_diff;
using tfm::test::min_row_cosine;
using tfm::test::run_tfm_in;
using tfm::test::TempFolder;
using tfm::test::TfmRun;

namespace {
constexpr double kTol = 5e-5;

const nlohmann::json& encodings() {
  static const nlohmann::json j = load_json_file(fixture("nomic_bert/encodings.json"));
  return j;
}

EncoderConfig nomic_config(const nlohmann::json& patch = nlohmann::json::object()) {
  nlohmann::json j = load_json_file(fixture("nomic_bert/config.json"));
  for (auto& [k, v] : patch.items()) j[k] = v;
  return EncoderConfig::from_json(j, "config.json");
}

std::unique_ptr<EncoderModel> nomic_model(const nlohmann::json& patch = nlohmann::json::object(),
                                          ops::ComputeType ct = ops::ComputeType::F32) {
  SafeTensorsWeights w(fixture("nomic_bert/model.safetensors"));
  return make_encoder(nomic_config(patch), w, ct);
}
}  // namespace

// GPT-2 key names read as BERT's; n_inner rounded up to a multiple of 256 for the gated MLP (NomciBertGatedMLP).
TEST(NomicBertConfig, Gpt2KeysAndTheGatedWidth) {
  const EncoderConfig c = nomic_config();
  EXPECT_EQ(c.model_type, "nomic_bert");
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.intermediate_size, 256);  // n_inner 200
  EXPECT_EQ(c.max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-12);
}

// Every text, as is and with either prompt, and the padded batch, against the reference.
TEST(NomicBertGolden, LastHiddenStateMatchesPyTorch) {
  auto model = nomic_model();
  auto io = SafeTensors::open(fixture("nomic_bert/expected.safetensors"));
  for (const char* p : {"none", "query", "document"})
    for (size_t i = 0; i < encodings()["texts"].size(); ++i) {
      const std::string at = "_" + std::to_string(i);
      EncoderOutput out = model->forward(io.get(std::string(p) + "_input_ids" + at), Tensor(), Tensor());
      EXPECT_LE(max_abs_diff(out.last_hidden_state, io.get(std::string(p) + "_last_hidden_state" + at)), kTol)
          << p << " " << i;
    }
  const Tensor ids = io.get("batch_input_ids"), mask = io.get("batch_attention_mask");
  const Tensor want = io.get("batch_last_hidden_state");
  EncoderOutput padded = model->forward(ids, Tensor(), mask);
  EXPECT_GE(min_row_cosine(padded.last_hidden_state, want, mask), 1.0 - 1e-6);
  // The unpadded path: rotary positions restart in each sentence.
  EncoderOutput unpadded = model->forward_unpadded(ids, Tensor(), mask);
  EXPECT_GE(min_row_cosine(unpadded.last_hidden_state, want, mask), 1.0 - 1e-6);
  const int64_t L = ids.size(1), H = want.size(2);
  for (int64_t n = 0; n < ids.numel(); ++n) {
    if (!mask.i64()[n]) continue;
    EXPECT_TRUE(test::all_close(unpadded.last_hidden_state.f32() + n * H, want.f32() + n * H, H, 1e-4f))
        << "row " << n / L << " token " << n % L;
  }
}

// rotary_emb_fraction 1.0 (the published models') rotates every column: the reference of the same weights.
TEST(NomicBertGolden, FullRotaryFraction) {
  auto model = nomic_model({{"rotary_emb_fraction", 1.0}});
  auto io = SafeTensors::open(fixture("nomic_bert/expected.safetensors"));
  EncoderOutput out = model->forward(io.get("none_input_ids_0"), Tensor(), Tensor());
  EXPECT_LE(max_abs_diff(out.last_hidden_state, io.get("full_last_hidden_state_0")), kTol);
  // and it is not the partial one (the fraction is read).
  EXPECT_GT(max_abs_diff(out.last_hidden_state, io.get("none_last_hidden_state_0")), 0.05);
}

TEST(NomicBertDtypes, Bf16AndInt8TokenCosineToTheReference) {
  auto io = SafeTensors::open(fixture("nomic_bert/expected.safetensors"));
  for (ops::ComputeType ct : {ops::ComputeType::BF16, ops::ComputeType::I8}) {
    auto model = nomic_model(nlohmann::json::object(), ct);
    EncoderOutput out = model->forward(io.get("batch_input_ids"), Tensor(), io.get("batch_attention_mask"));
    const double cs = min_row_cosine(out.last_hidden_state, io.get("batch_last_hidden_state"),
                                     io.get("batch_attention_mask"));
    EXPECT_GE(cs, ct == ops::ComputeType::BF16 ? 0.9999 : 0.999) << ops::compute_type_name(ct);
  }
}

// What this implementation does not run is refused naming the key.
TEST(NomicBertBadConfig, UnsupportedOptionsAreRefusedNamingTheKey) {
  const std::pair<nlohmann::json, const char*> cases[] = {
      {{{"rotary_emb_interleaved", true}}, "rotary_emb_interleaved"},
      {{{"rotary_scaling_factor", 2.0}}, "rotary_scaling_factor"},
      {{{"prenorm", true}}, "prenorm"},
      {{{"activation_function", "glu"}}, "activation_function"},
      {{{"rotary_emb_fraction", 0.3}}, "rotary_emb_fraction"},
      {{{"moe_every_n_layers", 2}}, "moe_every_n_layers"},
  };
  for (const auto& [patch, key] : cases) {
    try {
      nomic_config(patch);
      ADD_FAILURE() << patch.dump() << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("key '") + key + "'"), std::string::npos) << e.what();
    }
  }
  // Biases the checkpoint lacks: the missing tensor is named.
  try {
    nomic_model({{"qkv_proj_bias", true}});
    ADD_FAILURE() << "qkv_proj_bias true accepted without the biases";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("encoder.layers.0.attn.Wqkv.bias"), std::string::npos) << e.what();
  }
}

// The folder's tokenizer gives Hugging Face's ids for the prompted texts.
TEST(NomicBertCli, TokenizerGivesTheReferenceIds) {
  const BertTokenizer tok = BertTokenizer::from_dir(fixture("nomic_bert"));
  for (const char* p : {"none", "query", "document"})
    for (const auto& e : encodings()["encodings"][p])
      EXPECT_EQ(tok.encode(e["text"].get<std::string>()).input_ids, e["input_ids"].get<std::vector<int64_t>>())
          << e["text"];
}

// tfm embed on the sentence-transformers folder: mean pooling + Normalize, with --prompt-name query / document
// (config_sentence_transformers.json "prompts") and without a prompt.
TEST(NomicBertCli, EmbedWithPromptNamesMatchesPyTorch) {
  TempFolder tmp;
  std::string lines;
  for (const auto& t : encodings()["texts"]) lines += t.get<std::string>() + "\n";
  test::spit(tmp.path + "/in.txt", lines);
  auto io = SafeTensors::open(fixture("nomic_bert/expected.safetensors"));
  for (const char* p : {"none", "query", "document"}) {
    SCOPED_TRACE(p);
    std::vector<std::string> args = {"embed", "--model", fixture("nomic_bert"), "-i", tmp.path + "/in.txt", "-o",
                                     tmp.path + "/e.npy", "-q"};
    if (std::string(p) != "none") args.insert(args.end(), {"--prompt-name", p});
    TfmRun r = run_tfm_in(tmp.path, args);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const Tensor e = load_npy(tmp.path + "/e.npy");
    ASSERT_EQ(e.numel(), 3 * 32);
    for (int64_t i = 0; i < 3; ++i) {
      const Tensor want = io.get(std::string(p) + "_embedding_" + std::to_string(i));
      EXPECT_TRUE(test::all_close(e.f32() + i * 32, want.f32(), 32, 1e-4f)) << i;
    }
  }
  TfmRun bad = run_tfm_in(tmp.path, {"embed", "--model", fixture("nomic_bert"), "-i", tmp.path + "/in.txt", "-o",
                                     tmp.path + "/e.npy", "--prompt-name", "passage"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("passage"), std::string::npos) << bad.describe();
}

// tfm encode on the folder in each dtype.
TEST(NomicBertCli, EncodeMatchesPyTorch) {
  TempFolder tmp;
  auto io = SafeTensors::open(fixture("nomic_bert/expected.safetensors"));
  const std::string text = encodings()["texts"][0];
  for (const char* dtype : {"fp32", "bf16", "int8"}) {
    TfmRun r = run_tfm_in(tmp.path, {"encode", "--model", fixture("nomic_bert"), "--dtype", dtype, "--threads", "1",
                                     "--text", text, "-o", tmp.path + "/h.npy"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const Tensor h = load_npy(tmp.path + "/h.npy"), want = io.get("none_last_hidden_state_0");
    if (std::string(dtype) == "fp32") {
      EXPECT_LE(max_abs_diff(h, want), kTol);
    } else {
      EXPECT_GE(min_row_cosine(h, want), std::string(dtype) == "bf16" ? 0.9999 : 0.999) << dtype;
    }
  }
}

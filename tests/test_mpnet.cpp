// MPNet base model and its sentence-transformers folder against the PyTorch reference of modeling_mpnet.py
// (fixtures from scripts/make_mpnet_fixtures.py, tests/fixtures/mpnet: all-mpnet-base-v2's layout, with a
// tokenizer.json of MPNet's kind made by npm tokenizers in scripts/make_mpnet_tokenizer.js).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/json_util.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "models/encoder.h"
#include "models/heads.h"
#include "models/mpnet.h"
#include "models/sentence_transformer.h"
#include "run_tfm.h"
#include "text/tokenizer/tokenizer.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::fixture;
using tfm::test::max_abs_diff;
using tfm::test::min_row_cosine;
using tfm::test::run_tfm_in;
using tfm::test::spit;
using tfm::test::TempFolder;
using tfm::test::TfmRun;

namespace {
Tensor rows_of_jsonl(const std::string& text) {
  std::vector<float> v;
  int64_t rows = 0, cols = 0;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    if (j.is_object()) j = j.at("embedding");
    cols = (int64_t)j.size();
    for (auto& x : j) v.push_back(x.get<float>());
    ++rows;
  }
  return Tensor::from_f32({rows, cols}, v);
}

constexpr double kTol = 2e-5;
}  // namespace

// The MPNet-kind tokenizer.json against npm tokenizers (scripts/make_mpnet_tokenizer.js): <s> A </s> for one text,
// <s> A </s> </s> B </s> with type ids 1 on the second segment for a pair.
TEST(MpnetTokenizer, TemplateEncodingsEqualHuggingFace) {
  HfTokenizer tok = HfTokenizer::from_file(fixture("mpnet/tokenizer.json"));
  nlohmann::json cases = load_json_file(fixture("mpnet/tokenizer_cases.json"));
  for (const auto& c : cases.at("cases")) {
    Encoding e = tok.encode(c.at("text").get<std::string>());
    EXPECT_EQ(e.input_ids, c.at("input_ids").get<std::vector<int64_t>>()) << c.at("text");
    EXPECT_EQ(e.attention_mask, c.at("attention_mask").get<std::vector<int64_t>>()) << c.at("text");
  }
  const auto& p = cases.at("pair");
  const std::string b = p.at("text_pair").get<std::string>();
  const std::string_view bv = b;
  Encoding e = tok.encode(p.at("text").get<std::string>(), &bv);
  EXPECT_EQ(e.input_ids, p.at("input_ids").get<std::vector<int64_t>>());
  EXPECT_EQ(e.token_type_ids, p.at("type_ids").get<std::vector<int64_t>>());
}

// torch's relative_position_bucket over relative positions -1100 .. 1100 (every bucket, both directions, the
// log range and the clamp at max_distance).
TEST(MpnetBuckets, RelativePositionBucketEqualsPyTorch) {
  auto io = SafeTensors::open(fixture("mpnet/expected.safetensors"));
  Tensor rel = io.get("relative_position"), bucket = io.get("bucket");
  ASSERT_EQ(rel.numel(), bucket.numel());
  int64_t wrong = 0;
  for (int64_t i = 0; i < rel.numel(); ++i) {
    const int64_t got = detail::mpnet_relative_position_bucket(rel.i64()[i], 32, 128);
    if (got != bucket.i64()[i] && wrong++ < 5)
      ADD_FAILURE() << "relative position " << rel.i64()[i] << ": bucket " << got << ", PyTorch " << bucket.i64()[i];
  }
  EXPECT_EQ(wrong, 0);
}

// The folder's config names MPNetForMaskedLM; model.safetensors holds the base model (unprefixed, with pooler and
// the int64 position_ids buffer), as all-mpnet-base-v2.
TEST(MpnetGolden, SentenceTransformersFolderLoadsAsBaseModelAndMatchesPyTorch) {
  auto model = load_encoder(fixture("mpnet"));
  EXPECT_EQ(model->config().model_type, "mpnet");
  auto io = SafeTensors::open(fixture("mpnet/expected.safetensors"));
  EncoderOutput one = model->forward(io.get("input_ids_single"), Tensor(), Tensor());
  EXPECT_LE(max_abs_diff(one.last_hidden_state, io.get("last_hidden_state_single")), kTol);
  Tensor mask = io.get("attention_mask");
  EncoderOutput batch = model->forward(io.get("input_ids"), Tensor(), mask);
  EXPECT_LE(max_abs_diff(batch.last_hidden_state, io.get("last_hidden_state")), kTol);
  ASSERT_TRUE(batch.pooler_output.defined());
  EXPECT_LE(max_abs_diff(batch.pooler_output, io.get("pooler_output")), kTol);
  // 60 tokens: more than 32 keys (the blocked attention kernel) and relative distances in the log buckets.
  EncoderOutput lng = model->forward(io.get("input_ids_long"), Tensor(), Tensor());
  EXPECT_LE(max_abs_diff(lng.last_hidden_state, io.get("last_hidden_state_long")), kTol);
  // all_layers: the last entry is last_hidden_state.
  EncoderOutput all = model->forward(io.get("input_ids_single"), Tensor(), Tensor(), true);
  ASSERT_EQ(all.hidden_states.size(0), 3);
  EXPECT_LE(max_abs_diff(all.last_hidden_state, io.get("last_hidden_state_single")), kTol);
}

// MPNetForMaskedLM's own file: "mpnet."-prefixed names, lm_head.* ignored, no pooler.
TEST(MpnetGolden, PrefixedMaskedLmFileLoadsTheBaseModel) {
  EncoderConfig c = EncoderConfig::load(fixture("mpnet/config.json"));
  EXPECT_EQ(c.pad_token_id, 1);
  EXPECT_EQ(c.relative_attention_num_buckets, 32);
  SafeTensorsWeights w(fixture("mpnet/model_mlm.safetensors"));
  auto model = make_encoder(c, w);
  auto io = SafeTensors::open(fixture("mpnet/expected.safetensors"));
  EncoderOutput out = model->forward(io.get("input_ids"), Tensor(), io.get("attention_mask"));
  EXPECT_LE(max_abs_diff(out.last_hidden_state, io.get("last_hidden_state")), kTol);
  EXPECT_FALSE(out.pooler_output.defined());
}

// MPNet has no token types: type ids (a pair's 1s) change nothing.
TEST(MpnetGolden, TokenTypeIdsAreIgnored) {
  auto model = load_encoder(fixture("mpnet"));
  auto io = SafeTensors::open(fixture("mpnet/expected.safetensors"));
  Tensor ids = io.get("input_ids_single");
  Tensor ones = Tensor::from_i64(ids.shape(), std::vector<int64_t>(ids.numel(), 1));
  EncoderOutput out = model->forward(ids, ones, Tensor());
  EXPECT_LE(max_abs_diff(out.last_hidden_state, io.get("last_hidden_state_single")), kTol);
}

// The relative bias is in the forward: a model whose bias table is zeroed differs from the reference (the
// fixture script asserts the zero-bias reference equals RoBERTa's, so this test can fail).
TEST(MpnetGolden, ZeroedRelativeBiasChangesTheOutput) {
  EncoderConfig c = EncoderConfig::load(fixture("mpnet/config.json"));
  auto st = SafeTensors::open(fixture("mpnet/model.safetensors"));
  TempFolder tmp;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : st.names()) {
    Tensor t = st.get(name);
    if (name == "encoder.relative_attention_bias.weight") t = Tensor::zeros(t.shape());
    tensors.emplace_back(name, t);
  }
  save_safetensors(tmp.path + "/m.safetensors", tensors);
  SafeTensorsWeights w(tmp.path + "/m.safetensors");
  auto model = make_encoder(c, w);
  auto io = SafeTensors::open(fixture("mpnet/expected.safetensors"));
  EncoderOutput out = model->forward(io.get("input_ids_single"), Tensor(), Tensor());
  EXPECT_GT(max_abs_diff(out.last_hidden_state, io.get("last_hidden_state_single")), 1e-2);
}

TEST(MpnetDtypes, Bf16AndInt8TokenCosineToFp32Reference) {
  EncoderConfig c = EncoderConfig::load(fixture("mpnet/config.json"));
  auto io = SafeTensors::open(fixture("mpnet/expected.safetensors"));
  Tensor mask = io.get("attention_mask");
  for (ops::ComputeType ct : {ops::ComputeType::BF16, ops::ComputeType::I8}) {
    SafeTensorsWeights w(fixture("mpnet/model.safetensors"));
    auto model = make_encoder(c, w, ct);
    EncoderOutput out = model->forward(io.get("input_ids"), Tensor(), mask);
    const double cs = min_row_cosine(out.last_hidden_state, io.get("last_hidden_state"), mask);
    EXPECT_GE(cs, ct == ops::ComputeType::BF16 ? 0.9999 : 0.999) << ops::compute_type_name(ct);
  }
}

TEST(MpnetBadInput, SequencePastThePositionsIsRefusedAndFewBucketsAreRefused) {
  auto model = load_encoder(fixture("mpnet"));
  // max_position_embeddings 64, padding_idx 1: positions 2..63 hold 62 tokens; 63 do not fit.
  EXPECT_NO_THROW(model->forward(Tensor::from_i64({1, 62}, std::vector<int64_t>(62, 5)), Tensor(), Tensor()));
  EXPECT_THROW(model->forward(Tensor::from_i64({1, 63}, std::vector<int64_t>(63, 5)), Tensor(), Tensor()),
               std::invalid_argument);
  nlohmann::json j = load_json_file(fixture("mpnet/config.json"));
  j["relative_attention_num_buckets"] = 16;
  EncoderConfig c = EncoderConfig::from_json(j, "config.json");
  SafeTensorsWeights w(fixture("mpnet/model.safetensors"));
  try {
    make_encoder(c, w);
    FAIL() << "accepted relative_attention_num_buckets 16";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("relative_attention_num_buckets"), std::string::npos) << e.what();
  }
}

// SentenceTransformer::load on the folder: mean pooling + Normalize equal sentence-transformers' output.
TEST(MpnetSentenceTransformer, EmbeddingsMatchPyTorch) {
  SentenceTransformer m = SentenceTransformer::load(fixture("mpnet"));
  auto e = SafeTensors::open(fixture("mpnet/expected.safetensors"));
  std::vector<std::string> sentences;
  std::stringstream ss(test::slurp(fixture("mpnet/sentences.txt")));
  for (std::string line; std::getline(ss, line);) sentences.push_back(line);
  ASSERT_EQ(sentences.size(), 4u);
  Tensor got = m.encode(sentences);
  EXPECT_LE(max_abs_diff(got, e.get("embeddings")), 1e-5);
}

// tfm encode: the tokenizer.json gives npm tokenizers' ids (<s> ... </s>), the forward the reference.
TEST(MpnetCli, EncodeMatchesPyTorch) {
  TempFolder tmp;
  TfmRun r = run_tfm_in(tmp.path, {"encode", "--model", fixture("mpnet"), "--threads", "1", "--text",
                                   "A man in a blue shirt is standing on a ladder.", "-o", tmp.path + "/h.npy"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto io = SafeTensors::open(fixture("mpnet/expected.safetensors"));
  Tensor ids = io.get("input_ids_single");
  std::string want = "input_ids: [";
  for (int64_t i = 0; i < ids.numel(); ++i) want += (i ? ", " : "") + std::to_string(ids.i64()[i]);
  EXPECT_NE(r.out.find(want + "]"), std::string::npos) << r.out;
  EXPECT_LE(max_abs_diff(load_npy(tmp.path + "/h.npy"), io.get("last_hidden_state_single")), kTol);
}

// tfm embed on the sentence-transformers folder, .npy and .jsonl, in every dtype it takes.
TEST(MpnetCli, EmbedMatchesSentenceTransformers) {
  TempFolder tmp;
  auto e = SafeTensors::open(fixture("mpnet/expected.safetensors"));
  const std::string in = fixture("mpnet/sentences.txt");
  TfmRun r = run_tfm_in(tmp.path, {"embed", "--model", fixture("mpnet"), "--input", in, "-o", tmp.path + "/v.npy",
                                   "--threads", "1", "--batch-size", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_LE(max_abs_diff(load_npy(tmp.path + "/v.npy"), e.get("embeddings")), 1e-5);
  r = run_tfm_in(tmp.path, {"embed", "--model", fixture("mpnet"), "--input", in, "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_LE(max_abs_diff(rows_of_jsonl(r.out), e.get("embeddings")), 1e-5);
}

// ------------------------------------------------------------------------------------------------ heads

// MPNetForSequenceClassification (MPNetClassificationHead on <s>), MPNetForTokenClassification and
// MPNetForMaskedLM (tied decoder) against modeling_mpnet.py's heads on the padded batch, fp32, and bf16 / int8
// bodies by cosine of the logits rows.
namespace {
double min_row_cosine(const Tensor& a, const Tensor& b, int64_t row) {
  const int64_t N = a.numel() / row;
  double worst = 1.0;
  for (int64_t n = 0; n < N; ++n) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t k = 0; k < row; ++k) {
      double x = a.f32()[n * row + k], y = b.f32()[n * row + k];
      ab += x * y, aa += x * x, bb += y * y;
    }
    const double cs = ab / std::sqrt(aa * bb);
    if (!(cs >= worst)) worst = std::isnan(cs) ? -2.0 : cs;
  }
  return worst;
}
}  // namespace

TEST(MpnetHeads, SequenceClassificationMatchesPyTorch) {
  EXPECT_EQ(detect_head_kind(fixture("mpnet_seqcls")), HeadKind::SequenceClassification);
  auto e = SafeTensors::open(fixture("mpnet_seqcls/expected.safetensors"));
  for (ops::ComputeType ct : {ops::ComputeType::F32, ops::ComputeType::BF16, ops::ComputeType::I8}) {
    TaskModel m = TaskModel::load(fixture("mpnet_seqcls"), HeadKind::SequenceClassification, ct);
    ASSERT_EQ(m.num_labels(), 3);
    EXPECT_EQ(m.head_config().id2label[2], "positive");
    Tensor got = m.sequence_logits(e.get("input_ids"), Tensor(), e.get("attention_mask"));
    if (ct == ops::ComputeType::F32)
      EXPECT_LE(max_abs_diff(got, e.get("logits")), 1e-4);
    else
      EXPECT_GE(min_row_cosine(got, e.get("logits"), 3), ct == ops::ComputeType::BF16 ? 0.9999 : 0.999)
          << ops::compute_type_name(ct);
  }
}

TEST(MpnetHeads, TokenClassificationMatchesPyTorch) {
  TaskModel m = TaskModel::load(fixture("mpnet_tokcls"), HeadKind::TokenClassification);
  auto e = SafeTensors::open(fixture("mpnet_tokcls/expected.safetensors"));
  Tensor mask = e.get("attention_mask");
  Tensor got = m.token_logits(e.get("input_ids"), Tensor(), mask);
  Tensor want = e.get("logits");
  ASSERT_EQ(got.shape(), want.shape());
  const int64_t C = want.size(2);
  double d = 0;
  for (int64_t n = 0; n < mask.numel(); ++n)  // real tokens (pad rows are not a pipeline output)
    if (mask.i64()[n])
      for (int64_t k = 0; k < C; ++k) d = std::max(d, (double)std::fabs(got.f32()[n * C + k] - want.f32()[n * C + k]));
  EXPECT_LE(d, 1e-4);
}

TEST(MpnetHeads, MaskedLmTiedDecoderMatchesPyTorch) {
  TaskModel m = TaskModel::load(fixture("mpnet_mlm"), HeadKind::MaskedLM);
  EXPECT_TRUE(m.tied_decoder());
  EXPECT_EQ(m.mask_token(), "<mask>");
  EXPECT_EQ(m.mask_token_id(), 2509);
  EXPECT_EQ(m.max_input_tokens(), 62);  // max_position_embeddings 64 less padding_idx 1 + 1
  auto e = SafeTensors::open(fixture("mpnet_mlm/expected.safetensors"));
  Tensor ids = e.get("input_ids");
  std::vector<std::pair<int64_t, int64_t>> pos;
  for (int64_t b = 0; b < ids.size(0); ++b) pos.push_back({b, 3});
  Tensor got = m.mlm_logits(ids, Tensor(), e.get("attention_mask"), pos);
  EXPECT_LE(max_abs_diff(got, e.get("logits")), 1e-4);
}

// tfm classify on the MPNet classifier: the pipeline's best label and softmax score from PyTorch's logits.
TEST(MpnetHeads, ClassifyCliMatchesPyTorch) {
  TempFolder tmp;
  auto e = SafeTensors::open(fixture("mpnet_seqcls/expected.safetensors"));
  Tensor logits = e.get("logits");
  std::vector<std::string> sentences;
  std::stringstream ss(test::slurp(fixture("mpnet/sentences.txt")));
  for (std::string line; std::getline(ss, line);) sentences.push_back(line);
  TfmRun r = run_tfm_in(tmp.path, {"classify", "--model", fixture("mpnet_seqcls"), "--input",
                                   fixture("mpnet/sentences.txt"), "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::stringstream out(r.out);
  const char* names[] = {"negative", "neutral", "positive"};
  for (int64_t b = 0; b < (int64_t)sentences.size(); ++b) {
    std::string line;
    ASSERT_TRUE((bool)std::getline(out, line)) << r.out;
    auto j = nlohmann::json::parse(line);
    if (j.is_array()) j = j[0];
    const float* l = logits.f32() + b * 3;
    int best = 0;
    for (int k = 1; k < 3; ++k) best = l[k] > l[best] ? k : best;
    double z = 0;
    for (int k = 0; k < 3; ++k) z += std::exp((double)l[k] - l[best]);
    EXPECT_EQ(j.at("label"), names[best]) << line;
    EXPECT_NEAR(j.at("score").get<double>(), 1.0 / z, 1e-4) << line;
  }
}

// Marian (OPUS-MT) and M2M100 / NLLB folders against the PyTorch reference of modeling_marian.py,
// modeling_m2m_100.py and transformers' generation (fixtures from scripts/make_marian_fixtures.py:
// tests/fixtures/{marian,m2m100,nllb}).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "decode/generation_config.h"
#include "decode/logits_process.h"
#include "decode/search.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "models/hf_seq2seq.h"
#include "models/seq2seq.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::fixture;

namespace {

std::unique_ptr<Seq2SeqModel> load_folder(const std::string& dir, ops::ComputeType ct = ops::ComputeType::F32) {
  const nlohmann::json j = load_json_file(dir + "/config.json");
  auto m = std::make_unique<Seq2SeqModel>(hf_seq2seq_config(j, dir + "/config.json"));
  m->load(dir + "/model.safetensors");
  m->prepare_inference(ct);
  return m;
}

// What Translator runs: the weights used from the mapped file, packed once, the file pages released.
std::unique_ptr<Seq2SeqModel> open_folder(const std::string& dir, ops::ComputeType ct = ops::ComputeType::F32) {
  const nlohmann::json j = load_json_file(dir + "/config.json");
  auto m = Seq2SeqModel::open(hf_seq2seq_config(j, dir + "/config.json"), dir + "/model.safetensors");
  m->prepare_inference(ct);
  return m;
}

std::vector<int64_t> ints(const Tensor& t) { return std::vector<int64_t>(t.i64(), t.i64() + t.numel()); }

class HfSeq2Seq : public ::testing::TestWithParam<std::string> {};

// Teacher-forced logits of a padded batch equal the reference's at every valid target position.
TEST_P(HfSeq2Seq, TeacherForcedLogitsMatchPyTorch) {
  const std::string dir = fixture(GetParam());
  auto model = load_folder(dir);
  SafeTensors ex = SafeTensors::open(dir + "/expected.safetensors");
  const Tensor src = ex.get("src"), dec = ex.get("dec_input"), want = ex.get("logits");
  const std::vector<int64_t> src_len = ints(ex.get("src_len")), tgt_len = ints(ex.get("tgt_len"));
  const int64_t B = src.size(0), Ls = src.size(1), Lt = dec.size(1), V = want.size(2);
  std::vector<int64_t> labels(B * Lt, 0);
  Seq2SeqBatch batch{src.i64(), src_len.data(), dec.i64(), labels.data(), tgt_len.data(), B, Ls, Lt};
  const Tensor got = model->forward_logits(batch);
  ASSERT_EQ(got.shape(), want.shape());
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < tgt_len[b]; ++t)
      for (int64_t v = 0; v < V; ++v) {
        const int64_t i = (b * Lt + t) * V + v;
        worst = std::max(worst, std::fabs((double)got.f32()[i] - want.f32()[i]));
      }
  EXPECT_LT(worst, 2e-4) << GetParam();
}

// Greedy and beam search (generation_config.json plus each run's overrides) equal transformers' generate:
// greedy tokens exactly; beam search's n-best list with its scores (HF's sum logprobs / length ** lp), and never a
// best hypothesis scoring below the reference's.
// Both ways of loading: the trainable model (parameter store) and the inference-only one over the mapped file.
TEST_P(HfSeq2Seq, GenerateMatchesReference) {
  const std::string dir = fixture(GetParam());
  for (bool opened : {false, true}) {
  SCOPED_TRACE(opened ? "Seq2SeqModel::open" : "Seq2SeqModel::load");
  auto model = opened ? open_folder(dir) : load_folder(dir);
  const nlohmann::json ex = load_json_file(dir + "/expected.json");
  const nlohmann::json config = load_json_file(dir + "/config.json");
  int runs = 0;
  for (const auto& c : ex["cases"]) {
    const std::vector<int64_t> src = c["source_ids"].get<std::vector<int64_t>>();
    const int64_t vl = (int64_t)src.size();
    for (const auto& run : c["runs"]) {
      nlohmann::json gen = ex["generation_config"];
      if (!ex["forced_bos_token_id"].is_null()) gen["forced_bos_token_id"] = ex["forced_bos_token_id"];
      for (auto it = run["options"].begin(); it != run["options"].end(); ++it) gen[it.key()] = it.value();
      const GenerationConfig g = GenerationConfig::from_json(config, gen, "expected.json");
      DecodeOptions opt = g.decode_options();
      // bad_words_ids and min_length: the logits processor (HF's NoBadWords / MinLength processors).
      LogitsProcessor proc(g.processor_options(), model->config().tgt_vocab_size);
      opt.logits_processor = &proc;
      const std::string what = GetParam() + " '" + c["source"].get<std::string>() + "' " + run["options"].dump();
      const auto want = run["tokens"].get<std::vector<std::vector<int64_t>>>();
      auto hyps = beam_search_hypotheses(*model, src.data(), &vl, 1, vl, opt)[0];
      if (g.num_beams == 1) {
        ASSERT_EQ(hyps.size(), 1u) << what;
        EXPECT_EQ(hyps[0].tokens, want[0]) << what;
        // HF's greedy search: the processors on the logits.
        EXPECT_EQ(generate_greedy(*model, src.data(), &vl, 1, vl, opt, &proc)[0].tokens, want[0]) << what;
      } else {
        const auto scores = run["scores"].get<std::vector<double>>();
        ASSERT_EQ(hyps.size(), want.size()) << what;
        EXPECT_GE(hyps[0].score, scores[0] - 1e-4) << what;  // never below the reference's best
        for (size_t k = 0; k < want.size(); ++k) {
          EXPECT_EQ(hyps[k].tokens, want[k]) << what << " hypothesis " << k;
          EXPECT_NEAR(hyps[k].score, scores[k], 1e-4) << what << " hypothesis " << k;
        }
      }
      ++runs;
    }
  }
  EXPECT_GT(runs, 20);
  }
}

// marian_trained: scripts/make_marian_trained_fixture.py (trained on fra-eng: real sentences, real </s>).
INSTANTIATE_TEST_SUITE_P(Folders, HfSeq2Seq, ::testing::Values("marian", "m2m100", "nllb", "marian_trained"));

TEST(HfSeq2SeqConfig, RejectsWhatItCannotRun) {
  nlohmann::json j = load_json_file(fixture("marian") + "/config.json");
  j["decoder_ffn_dim"] = 128;
  EXPECT_THROW(
      {
        try {
          hf_seq2seq_config(j, "config.json");
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("decoder_ffn_dim 128 differs"), std::string::npos) << e.what();
          throw;
        }
      },
      std::runtime_error);
  j = load_json_file(fixture("marian") + "/config.json");
  j.erase("d_model");
  EXPECT_THROW(hf_seq2seq_config(j, "config.json"), std::runtime_error);
  j = load_json_file(fixture("marian") + "/config.json");
  j["model_type"] = "bart";
  EXPECT_THROW(hf_seq2seq_config(j, "config.json"), std::runtime_error);
}

}  // namespace

// ------------------------------------------------------------------ tokenizers, Translator, CLI
#include "run_tfm.h"
#include "text/translation_tokenizer.h"
#include "tfm/convert.h"
#include "tfm/translator.h"

namespace {
using tfm::test::run_tfm_in;
using tfm::test::TempFolder;
using tfm::test::TfmRun;

// The tokenized sources of the fixture (MarianTokenizer / M2M100Tokenizer / NllbTokenizer as the reference wrote
// them from spm_encode's pieces and the folder's id maps).
TEST_P(HfSeq2Seq, TokenizerMatchesReference) {
  const std::string dir = fixture(GetParam());
  auto tok = TranslationTokenizer::load(dir, load_json_file(dir + "/config.json")["model_type"]);
  const nlohmann::json ex = load_json_file(dir + "/expected.json");
  for (const auto& c : ex["cases"])
    EXPECT_EQ(tok->encode_source(c["source"].get<std::string>()), c["source_ids"].get<std::vector<int64_t>>())
        << c["source"];
}

// Translator::translate_batch with the folder's defaults (generation_config.json) gives the reference's text;
// num_hypotheses returns the reference's n-best with its scores.
TEST_P(HfSeq2Seq, TranslatorUsesGenerationConfig) {
  const std::string dir = fixture(GetParam());
  Translator tr(dir);
  const nlohmann::json ex = load_json_file(dir + "/expected.json");
  std::vector<std::string> sources;
  for (const auto& c : ex["cases"]) sources.push_back(c["source"]);
  TranslateOptions o;
  o.num_hypotheses = ex["generation_config"]["num_beams"].get<int64_t>();
  const auto got = tr.translate_batch(sources, o);
  ASSERT_EQ(got.size(), sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto& run = ex["cases"][i]["runs"][1];  // options {}: generation_config.json as it is
    ASSERT_TRUE(run["options"].empty());
    EXPECT_EQ(got[i].text, run["text"].get<std::string>()) << sources[i];
    const auto want = run["tokens"].get<std::vector<std::vector<int64_t>>>();
    ASSERT_EQ(got[i].hypotheses.size(), want.size()) << sources[i];
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(got[i].hypotheses[k].ids, want[k]) << sources[i] << " hypothesis " << k;
      EXPECT_NEAR(got[i].hypotheses[k].score, run["scores"][k].get<double>(), 1e-4);
    }
  }
  o = TranslateOptions{};
  o.beam_size = 1;
  const auto greedy = tr.translate_batch(sources, o);
  for (size_t i = 0; i < sources.size(); ++i)
    EXPECT_EQ(greedy[i].ids, ex["cases"][i]["runs"][0]["tokens"][0].get<std::vector<int64_t>>()) << sources[i];
}

// `tfm translate --model DIR` prints the reference's translations, one a line; --scores adds a TAB and the score.
TEST_P(HfSeq2Seq, CliTranslatesLikeGenerate) {
  const std::string dir = fixture(GetParam());
  const nlohmann::json ex = load_json_file(dir + "/expected.json");
  std::string input, want, want_scored;
  for (const auto& c : ex["cases"]) {
    input += c["source"].get<std::string>() + "\n";
    want += c["runs"][1]["text"].get<std::string>() + "\n";
  }
  TempFolder tmp;
  TfmRun r = run_tfm_in(tmp.path, {"translate", "--model", dir, "--threads", "1"}, input);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, want);
  r = run_tfm_in(tmp.path, {"translate", "--model", dir, "--threads", "1", "--beam", "3", "--length-penalty", "0.6",
                            "--early-stopping", "false", "--scores"},
                 input);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::istringstream lines(r.out);
  std::string line;
  size_t i = 0;
  for (; std::getline(lines, line); ++i) {
    ASSERT_LT(i, ex["cases"].size());
    const auto& run = ex["cases"][i]["runs"][2];
    ASSERT_EQ(run["options"]["num_beams"], 3);
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    EXPECT_EQ(line.substr(0, tab), run["text"].get<std::string>());
    EXPECT_NEAR(std::stod(line.substr(tab + 1)), run["scores"][0].get<double>(), 1e-5);
  }
  EXPECT_EQ(i, ex["cases"].size());
}

TEST(HfTranslation, TargetLanguageErrors) {
  TempFolder tmp;
  TfmRun r = run_tfm_in(tmp.path, {"translate", "--model", fixture("m2m100"), "--target-lang", "xx", "Hello."});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown language 'xx'"), std::string::npos) << r.err;
  r = run_tfm_in(tmp.path, {"translate", "--model", fixture("marian"), "--target-lang", "deu", "Hello."});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("vocab.json has no token >>deu<<"), std::string::npos) << r.err;
  // M2M100 takes "fr" and "__fr__"; NLLB its codes.
  Translator m2m(fixture("m2m100"));
  TranslateOptions o;
  o.beam_size = 1;
  o.target_lang = "fr";
  const auto a = m2m.translate_batch({"Run!"}, o);
  o.target_lang = "__fr__";
  EXPECT_EQ(m2m.translate_batch({"Run!"}, o)[0].ids, a[0].ids);
  o.target_lang = "fra_Latn";
  EXPECT_THROW(m2m.translate_batch({"Run!"}, o), std::invalid_argument);
}

// --dtype bf16 / int8 and `tfm convert` folders: the same translations as fp32 on these tiny models is not
// guaranteed, so the check is on the teacher-forced logits (cosine) and that converted folders load and translate.
TEST_P(HfSeq2Seq, ReducedPrecisionAndConvert) {
  const std::string dir = fixture(GetParam());
  SafeTensors ex = SafeTensors::open(dir + "/expected.safetensors");
  const Tensor src = ex.get("src"), dec = ex.get("dec_input"), want = ex.get("logits");
  const std::vector<int64_t> src_len = ints(ex.get("src_len")), tgt_len = ints(ex.get("tgt_len"));
  const int64_t B = src.size(0), Ls = src.size(1), Lt = dec.size(1), V = want.size(2);
  std::vector<int64_t> labels(B * Lt, 0);
  Seq2SeqBatch batch{src.i64(), src_len.data(), dec.i64(), labels.data(), tgt_len.data(), B, Ls, Lt};
  TempFolder tmp;
  for (const std::string dtype : {"bf16", "int8"}) {
    const std::string out = tmp.path + "/" + dtype;
    ConvertOptions co;
    co.dtype = dtype;
    const ConvertSummary s = convert(dir, out, co);
    // Encoder layers: q, k, v, out_proj, fc1, fc2; decoder layers also encoder_attn q, k, v, out_proj.
    EXPECT_EQ(s.converted, 2 * 6 + 2 * 10) << dtype;
    auto model = load_folder(out);  // dequantised / widened to fp32 parameters
    const Tensor got = model->forward_logits(batch);
    double dot = 0, na = 0, nb = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < tgt_len[b]; ++t)
        for (int64_t v = 0; v < V; ++v) {
          const int64_t i = (b * Lt + t) * V + v;
          dot += (double)got.f32()[i] * want.f32()[i];
          na += (double)got.f32()[i] * got.f32()[i];
          nb += (double)want.f32()[i] * want.f32()[i];
        }
    EXPECT_GT(dot / std::sqrt(na * nb), 0.995) << dtype;
    TranslatorOptions to;
    to.dtype = dtype;
    Translator tr(out, to);
    EXPECT_EQ(tr.translate_batch({"Tom is happy."}).size(), 1u);
  }
}

}  // namespace

// ------------------------------------------------------------------ the trained Marian folder
// tests/fixtures/marian_trained (scripts/make_marian_trained_fixture.py): a small Marian trained on fra-eng with
// the PyTorch reference, its expected outputs from the reference's generate.
namespace {
nlohmann::json trained_expected() { return load_json_file(fixture("marian_trained") + "/expected.json"); }
}  // namespace

// Greedy and beam outputs end with </s> well before max_length, as the reference's did, and equal them: greedy
// exactly, the beam's best never scoring below the reference's best.
TEST(TrainedMarian, HypothesesEndWithEosBeforeMaxLength) {
  const nlohmann::json ex = trained_expected();
  const int64_t max_steps = ex["generation_config"]["max_length"].get<int64_t>() - 1;
  Translator tr(fixture("marian_trained"));
  std::vector<std::string> src;
  for (const auto& c : ex["cases"]) src.push_back(c["source"]);
  TranslateOptions o;
  o.num_hypotheses = ex["generation_config"]["num_beams"].get<int64_t>();
  const auto beam = tr.translate_batch(src, o);
  o = TranslateOptions{};
  o.beam_size = 1;
  const auto greedy = tr.translate_batch(src, o);
  for (size_t i = 0; i < src.size(); ++i) {
    const auto& runs = ex["cases"][i]["runs"];
    for (int k : {0, 1})  // the reference ended these with </s> (its hypotheses are shorter than the limit)
      for (const auto& t : runs[k]["tokens"]) EXPECT_LT((int64_t)t.size() + 1, max_steps) << src[i];
    EXPECT_EQ(greedy[i].ids, runs[0]["tokens"][0].get<std::vector<int64_t>>()) << src[i];
    EXPECT_TRUE(greedy[i].finished) << src[i];
    ASSERT_FALSE(beam[i].hypotheses.empty()) << src[i];
    for (const Translation& h : beam[i].hypotheses) {
      EXPECT_TRUE(h.finished) << src[i] << ": " << h.text;
      EXPECT_LT((int64_t)h.ids.size() + 1, max_steps) << src[i];
    }
    EXPECT_GE(beam[i].score, runs[1]["scores"][0].get<double>() - 1e-4) << src[i];
    EXPECT_EQ(beam[i].text, runs[1]["text"].get<std::string>()) << src[i];
  }
}

// Simple sentences come out as one of the French translations fra.txt gives for them (the reference's greedy
// outputs, which the fixture script checked against fra.txt).
TEST(TrainedMarian, SimpleSentencesComeOutInFrench) {
  const nlohmann::json ex = trained_expected();
  ASSERT_GE(ex["french"].size(), 6u);
  Translator tr(fixture("marian_trained"));
  TranslateOptions o;
  o.beam_size = 1;
  std::vector<std::string> src;
  for (const auto& f : ex["french"]) src.push_back(f["source"]);
  const auto got = tr.translate_batch(src, o);
  for (size_t i = 0; i < src.size(); ++i) {
    const auto& f = ex["french"][i];
    EXPECT_EQ(got[i].text, f["greedy"].get<std::string>()) << src[i];
    const auto refs = f["translations"].get<std::vector<std::string>>();
    EXPECT_NE(std::find(refs.begin(), refs.end(), got[i].text), refs.end()) << src[i] << " -> " << got[i].text;
  }
}

// Through the CLI: greedy (--beam 1) and the folder's defaults (beam 4) print the reference's translations.
TEST(TrainedMarian, CliTranslatesLikeTheReference) {
  const nlohmann::json ex = trained_expected();
  std::string input, greedy, beam;
  for (const auto& c : ex["cases"]) {
    input += c["source"].get<std::string>() + "\n";
    greedy += c["runs"][0]["text"].get<std::string>() + "\n";
    beam += c["runs"][1]["text"].get<std::string>() + "\n";
  }
  TempFolder tmp;
  TfmRun r = run_tfm_in(tmp.path, {"translate", "--model", fixture("marian_trained"), "--threads", "1", "--beam", "1"},
                        input);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, greedy);
  r = run_tfm_in(tmp.path, {"translate", "--model", fixture("marian_trained"), "--threads", "1"}, input);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, beam);
  // --attention-png on a Hugging Face folder.
  r = run_tfm_in(tmp.path, {"translate", "--model", fixture("marian_trained"), "--threads", "1", "--attention-png",
                            tmp.path + "/att.png", "Thank you."});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(std::filesystem::exists(tmp.path + "/att.png"));
}

// Sampling on a Hugging Face folder (transformers' do_sample on greedy search): reproducible for a seed whatever
// the batch, other seeds give other samples, top-k 1 is greedy; refused with a beam.
TEST(TrainedMarian, SamplingIsSeeded) {
  const nlohmann::json ex = trained_expected();
  Translator tr(fixture("marian_trained"));
  std::vector<std::string> src;
  for (const auto& c : ex["cases"]) src.push_back(c["source"]);
  TranslateOptions o;
  o.sampling_topk = 0;
  o.sampling_temperature = 1.5f;
  o.seed = 5;
  const auto a = tr.translate_batch(src, o), b = tr.translate_batch(src, o);
  const auto alone = tr.translate_batch({src[2]}, o);
  o.seed = 6;
  const auto c = tr.translate_batch(src, o);
  int differ = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(a[i].ids, b[i].ids) << src[i];
    differ += a[i].ids != c[i].ids;
  }
  EXPECT_EQ(alone[0].ids, a[2].ids);
  EXPECT_GT(differ, 0);
  o.sampling_topk = 5;
  o.sampling_topp = 0.9f;
  o.sampling_temperature = 1.0f;
  EXPECT_EQ(tr.translate_batch(src, o)[0].ids, tr.translate_batch(src, o)[0].ids);
  o.beam_size = 3;
  EXPECT_THROW(tr.translate_batch(src, o), std::invalid_argument);
  // top-k 1 through the sampler: the greedy search.
  o = TranslateOptions{};
  o.sampling_topk = 1;
  o.beam_size = 1;
  const auto greedy = tr.translate_batch(src, o);
  for (size_t i = 0; i < src.size(); ++i)
    EXPECT_EQ(greedy[i].ids, ex["cases"][i]["runs"][0]["tokens"][0].get<std::vector<int64_t>>());
  // The CLI's --sampling-* flags give the same samples.
  std::string input, want;
  o = TranslateOptions{};
  o.sampling_topk = 0;
  o.sampling_temperature = 1.5f;
  o.seed = 5;
  for (size_t i = 0; i < src.size(); ++i) input += src[i] + "\n", want += a[i].text + "\n";
  TempFolder tmp;
  TfmRun r = run_tfm_in(tmp.path, {"translate", "--model", fixture("marian_trained"), "--threads", "1",
                                   "--sampling-topk", "0", "--sampling-temperature", "1.5", "--seed", "5"},
                        input);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, want);
}

// Target texts on Hugging Face folders: score_batch (CTranslate2's score_batch) gives the greedy search's
// log-probability of its own output; a target prefix starts the translation; bad words are never generated.
TEST(TrainedMarian, ScoreTargetPrefixAndBadWords) {
  const nlohmann::json ex = trained_expected();
  Translator tr(fixture("marian_trained"));
  TranslateOptions o;
  o.beam_size = 1;
  o.return_scores = true;
  int scored = 0;
  for (const auto& f : ex["french"]) {  // outputs whose text encodes back to the same pieces
    const std::string src = f["source"];
    const auto g = tr.translate_batch({src}, o);
    if (tr.encode_target(g[0].text) != g[0].ids) continue;
    const auto sc = tr.score_batch({src}, {g[0].text});
    ASSERT_EQ(sc[0].log_probs.size(), g[0].ids.size() + 1) << src;
    // The search's logp renormalises without the banned <pad> (bad_words_ids [[pad]]): equal up to its mass.
    EXPECT_NEAR(sc[0].cumulated_score, g[0].logp, 1e-3) << src;
    EXPECT_LE(sc[0].cumulated_score, g[0].logp + 1e-6) << src;
    EXPECT_EQ(sc[0].tokens.back(), "</s>");
    ++scored;
  }
  EXPECT_GE(scored, 3);
  const std::string src = ex["french"][0]["source"];
  const auto g = tr.translate_batch({src}, o);
  o.return_scores = false;
  o.target_prefix = {"Je"};
  const auto p = tr.translate_batch({"I'm tired."}, o);
  EXPECT_EQ(p[0].text.rfind("Je", 0), 0u) << p[0].text;
  o.target_prefix.clear();
  ASSERT_FALSE(g[0].ids.empty());
  EXPECT_FALSE(tr.encode_target(g[0].text).empty());
  o.bad_words_ids = {{g[0].ids[0]}};  // the greedy output's first token
  const auto bad = tr.translate_batch({src}, o);
  ASSERT_FALSE(bad[0].ids.empty());
  EXPECT_NE(bad[0].ids[0], g[0].ids[0]) << bad[0].text;
}

// The inference-only model: no training entry points, and the load checks of Seq2SeqModel::load.
TEST(HfSeq2SeqOpen, RefusesTrainingAndChecksTheFile) {
  const std::string dir = fixture("marian");
  auto model = open_folder(dir);
  EXPECT_TRUE(model->inference_only());
  EXPECT_EQ(model->params().total(), 0);
  Seq2SeqBatch batch{};
  EXPECT_THROW(model->forward_backward(batch, nullptr), std::logic_error);
  EXPECT_THROW(model->forward_logits(batch), std::logic_error);
  EXPECT_THROW(model->prepare_inference(ops::ComputeType::F32), std::logic_error);  // once: packed copies only
  EXPECT_FALSE(load_folder(dir)->inference_only());
  // An extra tensor and a missing one are refused with the file's name, as load() refuses them.
  TempFolder t;
  SafeTensors st = SafeTensors::open(dir + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : st.names()) tensors.emplace_back(n, st.get(n));
  const nlohmann::json j = load_json_file(dir + "/config.json");
  const Seq2SeqConfig c = hf_seq2seq_config(j, dir + "/config.json");
  auto with = tensors;
  with.emplace_back("model.extra.weight", Tensor::zeros({2}));
  save_safetensors(t.path + "/extra.safetensors", with);
  try {
    Seq2SeqModel::open(c, t.path + "/extra.safetensors");
    ADD_FAILURE() << "no error for an unexpected tensor";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("extra.safetensors: unexpected tensor 'model.extra.weight'"),
              std::string::npos) << e.what();
  }
  auto without = tensors;
  without.erase(std::find_if(without.begin(), without.end(),
                             [](const auto& p) { return p.first == "model.decoder.layers.0.fc1.weight"; }));
  save_safetensors(t.path + "/missing.safetensors", without);
  try {
    Seq2SeqModel::open(c, t.path + "/missing.safetensors");
    ADD_FAILURE() << "no error for a missing tensor";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.safetensors: missing tensor 'model.decoder.layers.0.fc1.weight'"),
              std::string::npos) << e.what();
  }
}

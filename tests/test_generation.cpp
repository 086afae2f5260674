// Hugging Face logits processors, sampling, target prefixes and teacher-forced scores (src/decode/logits_process.h,
// tfm::Translator) against scripts/make_generation_fixtures.py:
//   tests/fixtures/generation/processors.json  processed scores of each processor / warper (PyTorch from HF's code)
//   tests/fixtures/generation/decoding.json    greedy / beam with processors, target prefixes and scores on
//                                              tests/fixtures/d2l_trained (the PyTorch reference modules)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "decode/logits_process.h"
#include "decode/search.h"
#include "models/seq2seq.h"
#include "test_util.h"
#include "tfm/translator.h"

namespace {
using tfm::test::fixture;

nlohmann::json load_json(const std::string& rel) {
  std::ifstream f(fixture(rel));
  if (!f) ADD_FAILURE() << "missing fixture " << rel << " (run scripts/make_generation_fixtures.py)";
  return nlohmann::json::parse(f);
}

tfm::LogitsProcessorOptions options_of(const nlohmann::json& j, int64_t eos) {
  tfm::LogitsProcessorOptions o;
  o.repetition_penalty = j.value("repetition_penalty", 1.0f);
  o.no_repeat_ngram_size = j.value("no_repeat_ngram_size", (int64_t)0);
  o.min_length = j.value("min_length", (int64_t)0);
  if (j.contains("bad_words_ids")) o.bad_words_ids = j["bad_words_ids"].get<std::vector<std::vector<int64_t>>>();
  o.temperature = j.value("temperature", 1.0f);
  o.top_k = j.value("top_k", (int64_t)0);
  o.top_p = j.value("top_p", 1.0f);
  o.eos_id = eos;
  return o;
}

tfm::TranslateOptions translate_options_of(const nlohmann::json& j) {
  tfm::TranslateOptions o;
  o.repetition_penalty = j.value("repetition_penalty", 1.0f);
  o.no_repeat_ngram_size = j.value("no_repeat_ngram_size", (int64_t)0);
  o.min_length = j.value("min_length", (int64_t)0);
  if (j.contains("bad_words_ids")) o.bad_words_ids = j["bad_words_ids"].get<std::vector<std::vector<int64_t>>>();
  return o;
}

const tfm::Translator& d2l() {
  static const tfm::Translator t(fixture("d2l_trained"));
  return t;
}
}  // namespace

// Each processor and warper, alone and all together, equals the PyTorch code written from logits_process.py.
TEST(LogitsProcessors, MatchTheHuggingFaceProcessors) {
  const auto fx = load_json("generation/processors.json");
  int cases = 0, changed = 0;
  for (const auto& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const int64_t V = c["vocab_size"];
    tfm::LogitsProcessorOptions o = options_of(c["options"], c["eos_id"]);
    o.do_sample = c["do_sample"];
    const tfm::LogitsProcessor p(o, V);
    const auto ids = c["input_ids"].get<std::vector<std::vector<int64_t>>>();
    for (size_t b = 0; b < ids.size(); ++b) {
      std::vector<float> x = c["scores"][b].get<std::vector<float>>();
      const std::vector<float> before = x;
      p.process(ids[b].data(), (int64_t)ids[b].size(), x.data());
      if (o.do_sample) p.warp(x.data());
      for (int64_t v = 0; v < V; ++v) {
        const auto& e = c["expected"][b][v];
        if (e.is_null()) {
          EXPECT_TRUE(std::isinf(x[v]) && x[v] < 0) << "row " << b << " token " << v << ": " << x[v];
        } else {
          const float want = e.get<float>();
          EXPECT_NEAR(x[v], want, 1e-5f * (1 + std::fabs(want))) << "row " << b << " token " << v;
        }
        changed += x[v] != before[v];
      }
    }
    ++cases;
  }
  EXPECT_EQ(cases, 13);
  EXPECT_GT(changed, 50);
}

// Sampling draws from the distribution the warpers define (HF: softmax of TemperatureLogitsWarper, TopKLogitsWarper
// and TopPLogitsWarper's scores, the reference's expected scores here): 40,000 seeded draws per row; a token the
// reference filtered (-inf) is never drawn, the others' frequencies lie within 5 standard deviations of their
// probability. Deterministic for the seed: a failure is a wrong distribution, not chance.
TEST(LogitsProcessors, SamplingFollowsTheWarpedDistribution) {
  const auto fx = load_json("generation/processors.json");
  int rows = 0;
  for (const auto& c : fx["cases"]) {
    if (!c["do_sample"].get<bool>()) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    const int64_t V = c["vocab_size"];
    tfm::LogitsProcessorOptions o = options_of(c["options"], c["eos_id"]);
    o.do_sample = true;
    o.seed = 17;
    tfm::LogitsProcessor p(o, V);
    const auto ids = c["input_ids"].get<std::vector<std::vector<int64_t>>>();
    const int64_t B = (int64_t)ids.size();
    std::vector<int64_t> src(B, 5), vl(B, 1);
    for (int64_t b = 0; b < B; ++b) src[b] = 4 + b;
    p.start(B, src.data(), vl.data(), 1);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> prob(V, 0.0);
      double mx = -INFINITY, total = 0;
      for (int64_t v = 0; v < V; ++v)
        if (!c["expected"][b][v].is_null()) mx = std::max(mx, c["expected"][b][v].get<double>());
      for (int64_t v = 0; v < V; ++v)
        if (!c["expected"][b][v].is_null()) total += prob[v] = std::exp(c["expected"][b][v].get<double>() - mx);
      for (double& q : prob) q /= total;
      constexpr int kDraws = 40000;
      std::vector<int> count(V, 0);
      const std::vector<float> scores = c["scores"][b].get<std::vector<float>>();
      for (int n = 0; n < kDraws; ++n) {
        std::vector<float> x = scores;
        p.process(ids[b].data(), (int64_t)ids[b].size(), x.data());
        ++count.at(p.next_token(b, x.data()));
      }
      for (int64_t v = 0; v < V; ++v) {
        const double f = (double)count[v] / kDraws;
        if (prob[v] == 0) {
          EXPECT_EQ(count[v], 0) << "row " << b << " token " << v << " was filtered by the reference";
        } else {
          EXPECT_NEAR(f, prob[v], 5 * std::sqrt(prob[v] * (1 - prob[v]) / kDraws) + 1e-9)
              << "row " << b << " token " << v;
        }
      }
      ++rows;
    }
  }
  EXPECT_GE(rows, 10);
}

TEST(LogitsProcessors, BadOptionsAreRefusedWithTheirValue) {
  auto refused = [](tfm::LogitsProcessorOptions o, const std::string& needle) {
    try {
      tfm::LogitsProcessor p(o, 10);
      ADD_FAILURE() << "accepted; expected " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  tfm::LogitsProcessorOptions o;
  o.repetition_penalty = 0;
  refused(o, "repetition_penalty must be a finite number > 0 (1 = off), got 0");
  o = {};
  o.no_repeat_ngram_size = -1;
  refused(o, "no_repeat_ngram_size must be >= 0");
  o = {};
  o.bad_words_ids = {{1}, {}};
  refused(o, "bad_words_ids[1] is empty");
  o = {};
  o.bad_words_ids = {{3, 10}};
  refused(o, "bad_words_ids[0]: id 10 is outside the target vocabulary [0, 10)");
  o = {};
  o.temperature = -1;
  refused(o, "temperature must be a finite number > 0, got -1");
  o = {};
  o.top_p = 1.5f;
  refused(o, "top_p must be in (0, 1], got 1.5");
  o = {};
  o.top_k = -2;
  refused(o, "top_k must be >= 0");
}

// Greedy decoding with processors on the raw logits (HF generate, num_beams 1), through tfm::Translator.
TEST(Generation, GreedyWithProcessorsEqualsTheReference) {
  const auto fx = load_json("generation/decoding.json");
  int sentences = 0;
  for (const auto& c : fx["greedy"]) {
    SCOPED_TRACE(c["options"].dump());
    const tfm::TranslateOptions o = translate_options_of(c["options"]);
    std::vector<std::string> src;
    for (const auto& s : c["sentences"]) src.push_back(s["src"]);
    const auto got = d2l().translate_batch(src, o);
    for (size_t i = 0; i < src.size(); ++i) {
      EXPECT_EQ(got[i].ids, c["sentences"][i]["pred_ids"].get<std::vector<int64_t>>()) << src[i];
      EXPECT_EQ(got[i].finished, c["sentences"][i]["finished"].get<bool>()) << src[i];
      // The fixture picked sentences where the processors change the output: without them it is plain greedy.
      const auto plain = d2l().translate_batch({src[i]});
      EXPECT_EQ(plain[0].ids, c["sentences"][i]["plain_ids"].get<std::vector<int64_t>>()) << src[i];
      ++sentences;
    }
  }
  EXPECT_GE(sentences, 20);
}

// Beam search with the processors on each beam's log-softmax scores (HF's beam search), with its score.
TEST(Generation, BeamWithProcessorsEqualsTheReference) {
  const auto fx = load_json("generation/decoding.json");
  int sentences = 0;
  for (const auto& c : fx["beam"]) {
    SCOPED_TRACE(c["options"].dump());
    tfm::TranslateOptions o = translate_options_of(c["options"]);
    o.beam_size = c["beam_size"];
    o.return_scores = true;
    for (const auto& s : c["sentences"]) {
      const auto got = d2l().translate_batch({s["src"].get<std::string>()}, o);
      EXPECT_EQ(got[0].ids, s["pred_ids"].get<std::vector<int64_t>>()) << s["src"];
      EXPECT_NEAR(got[0].logp, s["logp"].get<double>(), 1e-4) << s["src"];
      ++sentences;
    }
  }
  EXPECT_GE(sentences, 4);
}

// A target prefix is forced first, greedy and beam; the translation includes it; the beam's logp counts it.
TEST(Generation, TargetPrefixEqualsTheReference) {
  const auto fx = load_json("generation/decoding.json");
  ASSERT_GE(fx["prefix"].size(), 3u);
  std::vector<std::string> src, prefix;
  for (const auto& c : fx["prefix"]) {
    std::string p;
    for (const auto& w : c["prefix"]) {
      if (!p.empty()) p += ' ';
      p += w.get<std::string>();
    }
    src.push_back(c["src"]);
    prefix.push_back(p);
  }
  tfm::TranslateOptions o;
  o.target_prefix = prefix;
  const auto greedy = d2l().translate_batch(src, o);
  o.beam_size = 3;
  o.return_scores = true;
  const auto beam = d2l().translate_batch(src, o);
  for (size_t i = 0; i < src.size(); ++i) {
    const auto& c = fx["prefix"][i];
    EXPECT_EQ(greedy[i].ids, c["greedy_ids"].get<std::vector<int64_t>>()) << src[i];
    EXPECT_EQ(greedy[i].text.rfind(prefix[i], 0), 0u) << greedy[i].text;
    EXPECT_EQ(beam[i].ids, c["beam_ids"].get<std::vector<int64_t>>()) << src[i];
    EXPECT_NEAR(beam[i].logp, c["beam_logp"].get<double>(), 1e-4) << src[i];
  }
  o.target_prefix = {"je"};
  EXPECT_THROW(d2l().translate_batch(src, o), std::invalid_argument);  // one prefix for several sentences
  o.target_prefix.assign(src.size(), "a b c d e f g h i j k");
  try {
    d2l().translate_batch(src, o);
    ADD_FAILURE() << "a prefix of num_steps tokens was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("target_prefix"), std::string::npos) << e.what();
  }
}

// score_batch gives the reference's teacher-forced log-probabilities, <eos> included.
TEST(Generation, ScoreEqualsTheReferenceTeacherForcedLogProbs) {
  const auto fx = load_json("generation/decoding.json");
  std::vector<std::string> src, tgt;
  for (const auto& c : fx["score"])
    if (!c["tgt"].get<std::string>().empty()) src.push_back(c["src"]), tgt.push_back(c["tgt"]);
  ASSERT_GE(src.size(), 6u);
  const auto got = d2l().score_batch(src, tgt);
  size_t k = 0;
  for (const auto& c : fx["score"]) {
    if (c["tgt"].get<std::string>().empty()) continue;
    const auto want = c["log_probs"].get<std::vector<double>>();
    ASSERT_EQ(got[k].log_probs.size(), want.size()) << c["src"];
    double sum = 0;
    for (size_t t = 0; t < want.size(); ++t) {
      EXPECT_NEAR(got[k].log_probs[t], want[t], 1e-4 * (1 + std::fabs(want[t]))) << c["src"] << " token " << t;
      sum += want[t];
    }
    EXPECT_NEAR(got[k].cumulated_score, sum, 1e-3);
    EXPECT_NEAR(got[k].normalized_score, sum / want.size(), 1e-3);
    EXPECT_EQ(got[k].tokens.back(), "<eos>");
    ++k;
  }
  // The score of the greedy translation is the greedy search's logp (the same decoder steps).
  tfm::TranslateOptions o;
  o.return_scores = true;
  const auto tr = d2l().translate_batch({src[0]}, o);
  const auto sc = d2l().score_batch({src[0]}, {tr[0].text});
  EXPECT_NEAR(sc[0].cumulated_score, tr[0].logp, 1e-4);
  EXPECT_THROW(d2l().score_batch({"a"}, {}), std::invalid_argument);
  EXPECT_THROW(d2l().score_batch({"go ."}, {" "}), std::invalid_argument);
}

// Sampling with num_hypotheses N (CTranslate2's): N samples of each sentence, highest logp first, each its own
// stream; a sentence repeated within one call draws independently (its first occurrence as it alone), unless
// seed_per_sentence, which gives every repetition the sentence's own sample. Refused above 64; without sampling
// num_hypotheses stays bounded by the beam.
TEST(Generation, SamplingNumHypothesesAndRepeatedSentencesDrawIndependently) {
  const std::string s = "i am a teacher .";
  tfm::TranslateOptions o;
  o.sampling_topk = 0;
  o.sampling_temperature = 3.0f;
  o.seed = 11;
  const auto alone = d2l().translate_batch({s}, o);
  const auto rep = d2l().translate_batch({s, s, s, s}, o);
  EXPECT_EQ(rep[0].ids, alone[0].ids);
  std::set<std::vector<int64_t>> distinct;
  for (const auto& t : rep) distinct.insert(t.ids);
  EXPECT_GT(distinct.size(), 1u) << "repeated sentences of one call drew the same sample";
  EXPECT_EQ(d2l().translate_batch({s, s, s, s}, o)[3].ids, rep[3].ids) << "not reproducible";
  o.seed_per_sentence = true;
  for (const auto& t : d2l().translate_batch({s, s, s}, o)) EXPECT_EQ(t.ids, alone[0].ids);
  o.seed_per_sentence = false;

  o.num_hypotheses = 5;
  const auto n = d2l().translate_batch({s, "go ."}, o);
  ASSERT_EQ(n.size(), 2u);
  for (const auto& t : n) {
    ASSERT_EQ(t.hypotheses.size(), 5u);
    EXPECT_EQ(t.ids, t.hypotheses[0].ids);
    EXPECT_EQ(t.logp, t.hypotheses[0].logp);
    for (size_t h = 1; h < t.hypotheses.size(); ++h) EXPECT_GE(t.hypotheses[h - 1].logp, t.hypotheses[h].logp);
  }
  distinct.clear();
  bool has_first = false;  // sample 0 of the sentence is the one drawn alone with num_hypotheses 1
  for (const auto& h : n[0].hypotheses) distinct.insert(h.ids), has_first |= h.ids == alone[0].ids;
  EXPECT_GT(distinct.size(), 1u) << "the samples of one sentence are not independent";
  EXPECT_TRUE(has_first);
  // Each sample's logp is the model's log-probability of its tokens and <eos> (no processors): score_batch's.
  for (const auto& h : n[0].hypotheses) {
    if (!h.finished || h.text.find("<unk>") != std::string::npos) continue;  // the text must read back as h.ids
    EXPECT_NEAR(d2l().score_batch({s}, {h.text})[0].cumulated_score, h.logp, 1e-3) << h.text;
  }
  o.num_hypotheses = 65;
  EXPECT_THROW(d2l().translate_batch({s}, o), std::invalid_argument);
  tfm::TranslateOptions greedy;
  greedy.num_hypotheses = 2;
  EXPECT_THROW(d2l().translate_batch({s}, greedy), std::invalid_argument);
}

// Sampling: reproducible with a seed; a sentence's sample does not depend on its batch; seeds differ; top-k 1
// (a draw from the single best token) is greedy decoding.
TEST(Generation, SamplingIsSeededAndTopK1IsGreedy) {
  const auto fx = load_json("generation/decoding.json");
  std::vector<std::string> src;
  for (const auto& c : fx["greedy"])
    for (const auto& s : c["sentences"]) src.push_back(s["src"]);
  tfm::TranslateOptions o;
  o.sampling_topk = 0;
  o.sampling_temperature = 1.5f;
  o.seed = 7;
  const auto a = d2l().translate_batch(src, o), b = d2l().translate_batch(src, o);
  const auto alone = d2l().translate_batch({src[3]}, o);
  o.seed = 8;
  const auto c = d2l().translate_batch(src, o);
  const auto greedy = d2l().translate_batch(src);
  int differ_seed = 0, differ_greedy = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(a[i].ids, b[i].ids) << src[i];
    differ_seed += a[i].ids != c[i].ids;
    differ_greedy += a[i].ids != greedy[i].ids;
  }
  EXPECT_EQ(alone[0].ids, a[3].ids);
  EXPECT_GT(differ_seed, 0);
  EXPECT_GT(differ_greedy, 0);
  o.sampling_topk = 2;
  o.beam_size = 4;
  EXPECT_THROW(d2l().translate_batch(src, o), std::invalid_argument);

  // top-k 1 through the sampler itself (do_sample on): every draw is the argmax.
  tfm::Seq2SeqModel model(tfm::Seq2SeqConfig::from_json(
      nlohmann::json::parse(std::ifstream(fixture("d2l_trained/config.json"))), "config.json"));
  model.load(fixture("d2l_trained/model.safetensors"));
  tfm::LogitsProcessorOptions po;
  po.do_sample = true;
  po.top_k = 1;
  po.temperature = 0.5f;
  po.seed = 3;
  tfm::LogitsProcessor p(po, model.config().tgt_vocab_size);
  tfm::DecodeOptions opt;
  opt.max_steps = model.config().num_steps;
  opt.position_mode = tfm::PositionMode::kD2lStep;
  const int64_t B = 3, Ls = 10;
  std::vector<int64_t> ids(B * Ls, 1), vl = {3, 5, 2};
  for (int64_t r = 0; r < B; ++r)
    for (int64_t i = 0; i < vl[r]; ++i) ids[r * Ls + i] = 4 + (r * 7 + i * 3) % 150;
  for (int64_t r = 0; r < B; ++r) ids[r * Ls + vl[r] - 1] = 3;  // <eos>
  const auto sampled = tfm::generate_greedy(model, ids.data(), vl.data(), B, Ls, opt, &p);
  const auto plain = tfm::greedy_decode(model, ids.data(), vl.data(), B, Ls, opt);
  for (int64_t r = 0; r < B; ++r) EXPECT_EQ(sampled[r].tokens, plain[r]) << "row " << r;
}

// ------------------------------------------------------------------------------------------- the tfm CLI
#include "run_tfm.h"

namespace {
using tfm::test::run_tfm_in;
using tfm::test::slurp;
using tfm::test::spit;
using tfm::test::TempFolder;

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) v.push_back(l);
  return v;
}

// 1,300 lines (more than one 512-line chunk) of the reference predictions' sentences in a shuffled order with
// blank lines, and the reference translations they must give.
std::pair<std::string, std::vector<std::string>> mixed_input() {
  const auto fx = load_json("d2l_trained/predictions.json");
  std::string text;
  std::vector<std::string> want;
  const size_t n = fx["predictions"].size();
  for (size_t i = 0; i < 1300; ++i) {
    if (i % 17 == 5) {
      text += "\n";
      want.push_back("");
      continue;
    }
    const auto& p = fx["predictions"][(i * 7 + i / 5) % n];
    text += p["src"].get<std::string>() + "\n";
    want.push_back(p["pred"]);
  }
  return {text, want};
}
}  // namespace

// --input / --output: mixed lengths, small batches by --max-batch-tokens, several chunks: input order kept.
TEST(TranslateInput, StreamsAFileInInputOrder) {
  TempFolder dir;
  const auto [text, want] = mixed_input();
  spit(dir.path + "/in.txt", text);
  auto r = run_tfm_in(dir.path, {"translate", "--model", fixture("d2l_trained"), "--input", dir.path + "/in.txt",
                                 "--output", dir.path + "/out.txt", "--max-batch-tokens", "23", "--progress", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(lines_of(slurp(dir.path + "/out.txt")), want);
  EXPECT_NE(r.err.find("1300 sentences"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sentences/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("100%, ETA 00:00"), std::string::npos) << r.err;
  // stdin to stdout streams the same way (no progress without --progress when stderr is not a terminal).
  r = run_tfm_in(dir.path, {"translate", "--model", fixture("d2l_trained"), "--max-batch-tokens", "4096", "-q"}, text);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(lines_of(r.out), want);
  EXPECT_EQ(r.err, "");
}

// A failure part-way (invalid UTF-8 on line 1000, after the first chunks were written) leaves --output as it was.
TEST(TranslateInput, OutputIsWrittenAtomically) {
  TempFolder dir;
  auto [text, want] = mixed_input();
  size_t at = 0;
  for (int l = 0; l < 999; ++l) at = text.find('\n', at) + 1;
  text.insert(at, "caf\xc3 ");
  spit(dir.path + "/in.txt", text);
  spit(dir.path + "/out.txt", "old\n");
  auto r = run_tfm_in(dir.path, {"translate", "--model", fixture("d2l_trained"), "--input", dir.path + "/in.txt",
                                 "--output", dir.path + "/out.txt", "-q"});
  tfm::test::expect_one_line_error(r, "sentence 1000: invalid UTF-8");
  EXPECT_EQ(slurp(dir.path + "/out.txt"), "old\n");
  r = run_tfm_in(dir.path, {"translate", "--model", fixture("d2l_trained"), "--input", dir.path + "/none.txt"});
  tfm::test::expect_one_line_error(r, "--input " + dir.path + "/none.txt: no such file");
}

// The generation options on the command line give the reference's greedy output with processors.
TEST(TranslateInput, ProcessorOptionsOnTheCommandLine) {
  TempFolder dir;
  const auto fx = load_json("generation/decoding.json");
  int checked = 0;
  for (const auto& c : fx["greedy"]) {
    std::vector<std::string> args = {"translate", "--model", fixture("d2l_trained")};
    const auto& o = c["options"];
    if (o.contains("bad_words_ids")) continue;  // ids, not text: covered by the library test
    if (o.contains("no_repeat_ngram_size"))
      args.insert(args.end(), {"--no-repeat-ngram-size", std::to_string(o["no_repeat_ngram_size"].get<int>())});
    if (o.contains("repetition_penalty"))
      args.insert(args.end(), {"--repetition-penalty", std::to_string(o["repetition_penalty"].get<double>())});
    if (o.contains("min_length")) args.insert(args.end(), {"--min-length", std::to_string(o["min_length"].get<int>())});
    std::vector<std::string> want;
    for (const auto& s : c["sentences"]) {
      args.push_back(s["src"]);
      want.push_back(s["pred"]);
    }
    auto r = run_tfm_in(dir.path, args);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(lines_of(r.out), want) << o.dump();
    checked += (int)want.size();
  }
  EXPECT_GE(checked, 16);
  auto r = run_tfm_in(dir.path, {"translate", "--model", fixture("d2l_trained"), "--sampling-topk", "5", "--beam", "2",
                                 "go ."});
  tfm::test::expect_one_line_error(r, "it needs --beam 1");
}

// tfm score prints the reference's teacher-forced sums and means, from files or TAB-separated stdin.
TEST(ScoreCommand, PrintsTheReferenceLogLikelihood) {
  TempFolder dir;
  const auto fx = load_json("generation/decoding.json");
  std::string src, tgt, pairs;
  std::vector<double> sums, means;
  for (const auto& c : fx["score"]) {
    if (c["tgt"].get<std::string>().empty()) continue;
    src += c["src"].get<std::string>() + "\n";
    tgt += c["tgt"].get<std::string>() + "\n";
    pairs += c["src"].get<std::string>() + "\t" + c["tgt"].get<std::string>() + "\n";
    double s = 0;
    for (double x : c["log_probs"]) s += x;
    sums.push_back(s);
    means.push_back(s / c["log_probs"].size());
  }
  spit(dir.path + "/src.txt", src);
  spit(dir.path + "/tgt.txt", tgt);
  for (int mode = 0; mode < 2; ++mode) {
    auto r = mode == 0 ? run_tfm_in(dir.path, {"score", "--model", fixture("d2l_trained"), "--source",
                                               dir.path + "/src.txt", "--target", dir.path + "/tgt.txt"})
                       : run_tfm_in(dir.path, {"score", "--model", fixture("d2l_trained"), "--tokens"}, pairs);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const auto got = lines_of(r.out);
    ASSERT_EQ(got.size(), sums.size()) << r.out;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(std::stod(got[i]), sums[i], 1e-3) << got[i];
      EXPECT_NEAR(std::stod(got[i].substr(got[i].find('\t') + 1)), means[i], 1e-3) << got[i];
      if (mode == 1) {
        EXPECT_NE(got[i].find("<eos>="), std::string::npos) << got[i];
      }
    }
  }
  spit(dir.path + "/short.txt", "go .\n");
  auto r = run_tfm_in(dir.path, {"score", "--model", fixture("d2l_trained"), "--source", dir.path + "/src.txt",
                                 "--target", dir.path + "/short.txt"});
  tfm::test::expect_one_line_error(r, "score: --source " + dir.path + "/src.txt has " + std::to_string(sums.size()) +
                                         " lines but --target " + dir.path + "/short.txt has 1");
  r = run_tfm_in(dir.path, {"score", "--model", fixture("d2l_trained")}, "go .\n");
  tfm::test::expect_one_line_error(r, "stdin line 1: expected 'source<TAB>target'");
}

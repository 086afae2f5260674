// Every encoder family through every command in every dtype (issue 21): one table of families (BERT, RoBERTa /
// XLM-RoBERTa, DistilBERT, MPNet, ModernBERT, ELECTRA, DeBERTa-v3) x the commands encode, embed (a
// sentence-transformers folder built around the family's checkpoint), classify, fill-mask, rerank and serve (/embed,
// /embed_all, /predict, /rerank) x fp32 / bf16 / int8, against the PyTorch references of
// scripts/make_family_head_fixtures.py, make_electra_fixtures.py and make_deberta_fixtures.py
// (tests/fixtures/family_heads; fill-mask where the family has a masked-LM head; the texts are encodings.json's, the
// ids Hugging Face tokenizers gave).
// fp32 equals the reference (atol 1e-4); in bf16 / int8 every token vector and embedding keeps a cosine >= 0.9999 /
// >= 0.999 to it, logits stay within 2% / 8% of the reference logits' norm (rerank's raw scores twice that) and
// masked-LM probabilities within 0.03 / 0.06 where the reference has a clear winner. tfm.Encoder and
// tfm.Classifier: python/tests/test_family_matrix.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "io/json_util.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "run_tfm.h"
#include "serve_client.h"
#include "test_util.h"
#include "text/bert_tokenizer.h"

using namespace tfm;
using nlohmann::json;
using tfm::test::cosine;
using tfm::test::fixture;
using tfm::test::run_tfm_in;
using tfm::test::TempFolder;
using tfm::test::TfmRun;

namespace {

struct Family {
  const char* name;
  const char* tokenizer;  // encodings.json set of the folders' tokenizer
  const char* seqcls;     // sequence classifier; expected.safetensors also holds its body's classify_hidden_<i>
  const char* cross;      // one or two labels: rerank
  const char* mlm;        // masked LM: fill_logits_<i> at the masks of fill text i; null: no masked-LM head
};
const Family kFamilies[] = {
    {"bert", "wordpiece", "bert_seqcls", "bert_seqcls", "bert_mlm"},
    {"roberta", "bpe_bytelevel", "roberta_seqcls", "xlmr_cross", "roberta_mlm"},
    {"distilbert", "wordpiece", "distilbert_seqcls", "distilbert_seqcls", "distilbert_mlm"},
    {"mpnet", "mpnet", "mpnet_seqcls", "mpnet_seqcls", "mpnet_mlm"},
    {"modernbert", "bpe_bytelevel", "modernbert_seqcls", "modernbert_seqcls", "modernbert_mlm"},
    {"electra", "wordpiece", "electra_seqcls", "electra_seqcls", nullptr},
    {"deberta-v2", "deberta_v3", "deberta_seqcls", "deberta_seqcls", nullptr},
};

struct Dtype {
  const char* name;
  double min_cosine;  // token vectors and embeddings against the fp32 reference
  double logit_tol;   // |logits - reference| <= logit_tol * max(1, |reference|) (fp32: 1e-4 per value)
  double prob_tol;    // masked-LM probabilities
};
const Dtype kDtypes[] = {{"fp32", 1.0, 0.0, 1e-4}, {"bf16", 0.9999, 0.02, 0.03}, {"int8", 0.999, 0.08, 0.06}};
constexpr float kAtol = 1e-4f;

std::string fh(const std::string& name) { return fixture("family_heads/" + name); }

const json& encodings(const std::string& set) {
  static const json j = load_json_file(fh("encodings.json"));
  return j["tokenizers"][set];
}

std::vector<std::string> texts_of(const json& group) {
  std::vector<std::string> v;
  for (const auto& e : group) v.push_back(e["text"]);
  return v;
}

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<json> json_lines(const std::string& out) {
  std::vector<json> v;
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty()) v.push_back(json::parse(line));
  return v;
}

// Token vectors got [L, H] against the reference want [L, H]: equal in fp32, else cosine per row.
void expect_tokens(const float* got, const float* want, int64_t L, int64_t H, const Dtype& dt, const std::string& at) {
  if (std::string(dt.name) == "fp32") {
    EXPECT_TRUE(test::all_close(got, want, L * H, kAtol, kAtol)) << at;
    return;
  }
  for (int64_t l = 0; l < L; ++l) EXPECT_GE(cosine(got + l * H, want + l * H, H), dt.min_cosine) << at << " token " << l;
}

// Logits (or raw scores) against the reference; `scale` widens the bf16 / int8 bound (rerank's raw score of a
// two-label cross-encoder is a difference of two logits, carrying both errors).
void expect_logits(const std::vector<double>& got, const std::vector<double>& want, const Dtype& dt,
                   const std::string& at, double scale = 1.0) {
  ASSERT_EQ(got.size(), want.size()) << at;
  double norm = 0, err = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    norm += want[k] * want[k], err += (got[k] - want[k]) * (got[k] - want[k]);
    if (std::string(dt.name) == "fp32") {
      EXPECT_NEAR(got[k], want[k], 1e-4 + 1e-4 * std::fabs(want[k])) << at << "[" << k << "]";
    }
  }
  EXPECT_LE(std::sqrt(err), scale * dt.logit_tol * std::max(1.0, std::sqrt(norm)) + 1e-4) << at;
}

std::vector<double> row(const Tensor& t, int64_t r) {
  const int64_t C = t.size(-1);
  return std::vector<double>(t.f32() + r * C, t.f32() + (r + 1) * C);
}

// The reference's rerank score without activation: the logit (one label) or logit 1 - logit 0 (two).
double raw_pair_score(const Tensor& logits) {
  return logits.size(-1) == 1 ? logits.f32()[0] : logits.f32()[1] - logits.f32()[0];
}

// L2-normalised mean over tokens of classify_hidden_<i>: sentence-transformers' mean Pooling + Normalize.
std::vector<float> normalized_mean(const Tensor& h) {
  const int64_t L = h.size(1), H = h.size(2);
  std::vector<double> m(H, 0.0);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t c = 0; c < H; ++c) m[c] += h.f32()[l * H + c] / (double)L;
  double n = 0;
  for (double v : m) n += v * v;
  std::vector<float> out(H);
  for (int64_t c = 0; c < H; ++c) out[c] = (float)(m[c] / std::sqrt(n));
  return out;
}

// A sentence-transformers folder around `src` (all-mpnet-base-v2's layout: the checkpoint at the root, then
// 1_Pooling mean and 2_Normalize).
std::string st_folder(const std::string& src, const std::string& dst, int64_t hidden) {
  namespace fs = std::filesystem;
  fs::create_directories(dst + "/1_Pooling");
  fs::create_directories(dst + "/2_Normalize");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    fs::create_symlink(src + "/" + f, dst + "/" + f);
  test::spit(dst + "/modules.json",
             json::array({{{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
                          {{"idx", 1}, {"name", "1"}, {"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}},
                          {{"idx", 2}, {"name", "2"}, {"path", "2_Normalize"},
                           {"type", "sentence_transformers.models.Normalize"}}})
                 .dump());
  test::spit(dst + "/sentence_bert_config.json", json({{"max_seq_length", 32}, {"do_lower_case", false}}).dump());
  test::spit(dst + "/1_Pooling/config.json",
             json({{"word_embedding_dimension", hidden}, {"pooling_mode_cls_token", false},
                   {"pooling_mode_mean_tokens", true}, {"pooling_mode_max_tokens", false},
                   {"pooling_mode_mean_sqrt_len_tokens", false}})
                 .dump());
  return dst;
}

std::vector<std::string> labels_of(const std::string& dir) {
  const json c = load_json_file(dir + "/config.json");
  std::vector<std::string> labels(c["id2label"].size());
  for (auto& [k, v] : c["id2label"].items()) labels.at(std::stoul(k)) = v;
  return labels;
}

// What one family's checks read: the texts and the reference outputs.
struct Reference {
  std::vector<std::string> texts, fill_texts, passages;
  std::string query;
  std::vector<Tensor> hidden, logits, pair_logits, fill_ids, fill_logits;
  std::vector<std::string> labels;
  int64_t H = 0;

  explicit Reference(const Family& f) {
    const json& e = encodings(f.tokenizer);
    texts = texts_of(e["classify"]);
    fill_texts = texts_of(e["fill"]);
    passages = e["passages"].get<std::vector<std::string>>();
    query = e["query"];
    auto s = SafeTensors::open(fh(std::string(f.seqcls) + "/expected.safetensors"));
    for (size_t i = 0; i < texts.size(); ++i) {
      hidden.push_back(s.get("classify_hidden_" + std::to_string(i)));
      logits.push_back(s.get("classify_logits_" + std::to_string(i)));
    }
    auto c = SafeTensors::open(fh(std::string(f.cross) + "/expected.safetensors"));
    for (size_t i = 0; i < passages.size(); ++i) pair_logits.push_back(c.get("pairs_logits_" + std::to_string(i)));
    if (f.mlm) {
      auto m = SafeTensors::open(fh(std::string(f.mlm) + "/expected.safetensors"));
      for (size_t i = 0; i < fill_texts.size(); ++i) {
        fill_ids.push_back(m.get("fill_input_ids_" + std::to_string(i)));
        fill_logits.push_back(m.get("fill_logits_" + std::to_string(i)));
      }
    }
    labels = labels_of(fh(f.seqcls));
    H = hidden[0].size(2);
  }
};

// Candidates {token, score} of one mask against softmax(logits row): the top 5 in fp32, else each score close
// and a clear winner kept.
void expect_fill(const json& got, const float* logits, int64_t V, const Dtype& dt, const std::string& at) {
  std::vector<double> p(V);
  const double mx = *std::max_element(logits, logits + V);
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += p[v] = std::exp((double)logits[v] - mx);
  for (double& x : p) x /= sum;
  std::vector<int64_t> order(V);
  for (int64_t v = 0; v < V; ++v) order[v] = v;
  std::partial_sort(order.begin(), order.begin() + 5, order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  ASSERT_TRUE(got.is_array() && got.size() == 5) << at << ": " << got.dump();
  // bf16 / int8 are held to the reference only where it has a clear winner: between two near-equal candidates a
  // small shift of their logits moves much probability from one to the other.
  const bool fp32 = std::string(dt.name) == "fp32", clear = p[order[0]] > 1.5 * p[order[1]];
  for (size_t k = 0; k < 5; ++k) {
    const int64_t tok = got[k]["token"];
    ASSERT_TRUE(tok >= 0 && tok < V) << at;
    if (fp32 || clear) {
      EXPECT_NEAR(got[k]["score"].get<double>(), p[tok], dt.prob_tol) << at << " candidate " << k;
    }
    if (fp32) {
      EXPECT_EQ(tok, order[k]) << at << " candidate " << k;
    }
  }
  if (clear) {
    EXPECT_EQ(got[0]["token"].get<int64_t>(), order[0]) << at;
  }
}

void check_cli(const Family& f, const Reference& ref, const Dtype& dt, const std::string& tmp) {
  const std::string tag = std::string(f.name) + " " + dt.name;
  const int64_t H = ref.H;
  {  // encode: the padded batch's real rows
    SCOPED_TRACE("encode");
    std::vector<std::string> args = {"encode", "--model", fh(f.seqcls), "--dtype", dt.name, "-o", tmp + "/h.npy"};
    for (const auto& t : ref.texts) args.insert(args.end(), {"--text", t});
    TfmRun r = run_tfm_in(tmp, args);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    Tensor h = load_npy(tmp + "/h.npy");
    ASSERT_EQ(h.ndim(), 3);
    ASSERT_EQ(h.size(0), (int64_t)ref.texts.size());
    for (size_t i = 0; i < ref.texts.size(); ++i) {
      const int64_t L = ref.hidden[i].size(1);
      ASSERT_GE(h.size(1), L);
      expect_tokens(h.f32() + i * h.size(1) * H, ref.hidden[i].f32(), L, H, dt, tag + " text " + std::to_string(i));
    }
  }
  {  // embed through a sentence-transformers folder (the unpadded forward: three lengths in one batch)
    SCOPED_TRACE("embed");
    const std::string st = st_folder(fh(f.seqcls), tmp + "/st_" + f.name + "_" + dt.name, H);
    test::spit(tmp + "/texts.txt", ref.texts[0] + "\n" + ref.texts[1] + "\n" + ref.texts[2] + "\n");
    TfmRun r = run_tfm_in(tmp, {"embed", "--model", st, "-i", tmp + "/texts.txt", "-o", tmp + "/e.npy", "--dtype",
                                dt.name, "-q"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    Tensor e = load_npy(tmp + "/e.npy");
    ASSERT_EQ(e.numel(), (int64_t)ref.texts.size() * H);
    for (size_t i = 0; i < ref.texts.size(); ++i) {
      const std::vector<float> want = normalized_mean(ref.hidden[i]);
      if (std::string(dt.name) == "fp32")
        EXPECT_TRUE(test::all_close(e.f32() + i * H, want.data(), H, kAtol)) << tag << " text " << i;
      else
        EXPECT_GE(cosine(e.f32() + i * H, want.data(), H), dt.min_cosine) << tag << " text " << i;
    }
  }
  {  // classify: every label's logit
    SCOPED_TRACE("classify");
    TfmRun r = run_tfm_in(tmp, cat({"classify", "--model", fh(f.seqcls), "--dtype", dt.name, "--all-scores",
                                    "--function-to-apply", "none"},
                                   ref.texts));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    std::vector<json> lines = json_lines(r.out);
    ASSERT_EQ(lines.size(), ref.texts.size()) << r.out;
    for (size_t i = 0; i < lines.size(); ++i) {
      std::vector<double> got(ref.labels.size(), NAN);
      for (const auto& x : lines[i]) {
        const auto at = std::find(ref.labels.begin(), ref.labels.end(), x["label"].get<std::string>());
        ASSERT_NE(at, ref.labels.end()) << lines[i].dump();
        got[at - ref.labels.begin()] = x["score"];
      }
      expect_logits(got, row(ref.logits[i], 0), dt, tag + " text " + std::to_string(i));
    }
  }
  if (f.mlm) {  // fill-mask: the top 5 at every mask
    SCOPED_TRACE("fill-mask");
    TfmRun r = run_tfm_in(tmp, cat({"fill-mask", "--model", fh(f.mlm), "--dtype", dt.name}, ref.fill_texts));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    std::vector<json> lines = json_lines(r.out);
    ASSERT_EQ(lines.size(), ref.fill_texts.size()) << r.out;
    for (size_t i = 0; i < lines.size(); ++i) {
      const Tensor& lg = ref.fill_logits[i];
      const int64_t P = lg.size(0), V = lg.size(1);
      for (int64_t m = 0; m < P; ++m)
        expect_fill(P == 1 ? lines[i] : lines[i][m], lg.f32() + m * V, V, dt,
                    tag + " text " + std::to_string(i) + " mask " + std::to_string(m));
    }
  }
  {  // rerank: raw scores of (query, passage)
    SCOPED_TRACE("rerank");
    TfmRun r = run_tfm_in(tmp, cat({"rerank", "--model", fh(f.cross), "--dtype", dt.name, "--raw-scores", "--query",
                                    ref.query},
                                   ref.passages));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const json got = json::parse(r.out);
    ASSERT_EQ(got.size(), ref.passages.size()) << r.out;
    for (const auto& x : got) {
      const int64_t i = x["index"];
      expect_logits({x["score"].get<double>()}, {raw_pair_score(ref.pair_logits.at(i))}, dt,
                    tag + " passage " + std::to_string(i), 2.0);
    }
  }
}

// Parses POST `path` with `body` on a server, expecting 200.
json post(test::ServeProcess& s, const std::string& path, const json& body) {
  test::Reply r = test::http("POST", s.url(path), body.dump());
  EXPECT_EQ(r.status, 200) << path << ": " << r.body;
  return r.j();
}

void check_rerank_route(test::ServeProcess& s, const Reference& ref, const Dtype& dt, const std::string& tag) {
  const json got = post(s, "/rerank", {{"query", ref.query}, {"texts", ref.passages}, {"raw_scores", true}});
  ASSERT_TRUE(got.is_array() && got.size() == ref.passages.size()) << got.dump();
  for (const auto& x : got)
    expect_logits({x["score"].get<double>()}, {raw_pair_score(ref.pair_logits.at(x["index"].get<int64_t>()))}, dt,
                  tag + " /rerank", 2.0);
}

void check_serve(const Family& f, const Reference& ref, const Dtype& dt) {
  const std::string tag = std::string(f.name) + " " + dt.name;
  const int64_t H = ref.H;
  test::ServeProcess s({"--model", fh(f.seqcls), "--dtype", dt.name, "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  EXPECT_EQ(test::http("GET", s.url("/info")).j()["dtype"], dt.name);
  // /embed: mean pooling, normalised (text-embeddings-inference's default).
  const json emb = post(s, "/embed", {{"inputs", ref.texts}});
  ASSERT_TRUE(emb.is_array() && emb.size() == ref.texts.size()) << emb.dump();
  // /embed_all: every token's vector.
  const json all = post(s, "/embed_all", {{"inputs", ref.texts}});
  ASSERT_TRUE(all.is_array() && all.size() == ref.texts.size()) << all.dump();
  json batch = json::array();
  for (const auto& t : ref.texts) batch.push_back(json::array({t}));
  const json pred = post(s, "/predict", {{"inputs", batch}, {"raw_scores", true}});
  ASSERT_TRUE(pred.is_array() && pred.size() == ref.texts.size()) << pred.dump();
  for (size_t i = 0; i < ref.texts.size(); ++i) {
    const std::string at = tag + " text " + std::to_string(i);
    const std::vector<float> want = normalized_mean(ref.hidden[i]);
    const std::vector<float> got = emb[i].get<std::vector<float>>();
    ASSERT_EQ((int64_t)got.size(), H);
    if (std::string(dt.name) == "fp32")
      EXPECT_TRUE(test::all_close(got.data(), want.data(), H, kAtol)) << at << " /embed";
    else
      EXPECT_GE(cosine(got.data(), want.data(), H), dt.min_cosine) << at << " /embed";
    const int64_t L = ref.hidden[i].size(1);
    ASSERT_EQ((int64_t)all[i].size(), L) << at;
    std::vector<float> tokens;
    for (const auto& v : all[i]) {
      const std::vector<float> t = v.get<std::vector<float>>();
      tokens.insert(tokens.end(), t.begin(), t.end());
    }
    ASSERT_EQ((int64_t)tokens.size(), L * H);
    expect_tokens(tokens.data(), ref.hidden[i].f32(), L, H, dt, at + " /embed_all");
    std::vector<double> logits(ref.labels.size(), NAN);
    for (const auto& x : pred[i]) {
      const auto k = std::find(ref.labels.begin(), ref.labels.end(), x["label"].get<std::string>());
      ASSERT_NE(k, ref.labels.end()) << pred[i].dump();
      logits[k - ref.labels.begin()] = x["score"];
    }
    expect_logits(logits, row(ref.logits[i], 0), dt, at + " /predict");
  }
  if (std::string(f.cross) == f.seqcls) check_rerank_route(s, ref, dt, tag);
  EXPECT_EQ(s.terminate(), 0) << s.log();
  if (std::string(f.cross) != f.seqcls) {
    test::ServeProcess c({"--model", fh(f.cross), "--dtype", dt.name, "--quiet"});
    ASSERT_TRUE(c.wait_ready()) << c.log();
    check_rerank_route(c, ref, dt, tag);
    EXPECT_EQ(c.terminate(), 0) << c.log();
  }
}

}  // namespace

// The folders' tokenizers give the ids the references took (so the commands below run on the reference inputs).
TEST(FamilyMatrix, TokenizersGiveTheReferenceIds) {
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.name);
    const Reference ref(f);
    const BertTokenizer tok = BertTokenizer::from_dir(fh(f.seqcls));
    for (size_t i = 0; i < ref.texts.size(); ++i)
      EXPECT_EQ((int64_t)tok.encode(ref.texts[i]).input_ids.size(), ref.hidden[i].size(1)) << ref.texts[i];
    if (!f.mlm) continue;
    const BertTokenizer mlm = BertTokenizer::from_dir(fh(f.mlm));
    for (size_t i = 0; i < ref.fill_texts.size(); ++i) {
      const Tensor& ids = ref.fill_ids[i];
      EXPECT_EQ(mlm.encode(ref.fill_texts[i]).input_ids, std::vector<int64_t>(ids.i64(), ids.i64() + ids.numel()))
          << ref.fill_texts[i];
    }
  }
}

// encode / embed / classify / fill-mask / rerank for every family in every dtype.
TEST(FamilyMatrix, EveryCommandEveryDtype) {
  TempFolder t;
  for (const Family& f : kFamilies) {
    const Reference ref(f);
    for (const Dtype& dt : kDtypes) {
      SCOPED_TRACE(std::string(f.name) + " " + dt.name);
      check_cli(f, ref, dt, t.path);
    }
  }
}

// tfm serve --dtype: /embed, /embed_all, /predict and /rerank for every family in every dtype.
TEST(FamilyMatrix, ServeEveryRouteEveryDtype) {
  for (const Family& f : kFamilies) {
    const Reference ref(f);
    for (const Dtype& dt : kDtypes) {
      SCOPED_TRACE(std::string(f.name) + " " + dt.name);
      check_serve(f, ref, dt);
    }
  }
}

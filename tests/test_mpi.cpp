// Data-parallel training over Open MPI (src/dist, train_recipe under mpirun): the token-count shards, dropout
// masks keyed by sentence, 2 ranks == 1 rank, replicas identical after every step, rank 1 writes nothing, TCP
// on loopback, a killed or hung rank ends the job, and --resume continues; the same for tfm finetune's four
// tasks (MpiFinetune.*). Launched as
// `mpirun --oversubscribe --bind-to none --allow-run-as-root -np 2` with one OpenMP thread per rank on a tiny
// model (each run takes seconds). Skipped, saying why, where mpirun is missing or tfm was built without MPI (and
// the two-namespace test where network namespaces cannot be made).
#include "test_paths.h"
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "core/rng.h"
#include "dist/communicator.h"
#include "dist/shard.h"
#include "io/safetensors.h"
#include "models/seq2seq.h"
#include "ops/dropout.h"
#include "run_tfm.h"
#include "tfm/finetune.h"
#include "test_util.h"

using namespace tfm;
namespace fs = std::filesystem;

namespace {

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int sh(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + (WIFSIGNALED(rc) ? WTERMSIG(rc) : 0);
}

bool have_mpirun() { return sh("command -v mpirun > /dev/null 2>&1") == 0; }

// The reason to skip, or "" when the MPI tests can run.
std::string skip_reason() {
  if (!dist::built_with_mpi()) return "tfm was built without MPI (TFM_MPI=OFF or no libopenmpi-dev)";
  if (!have_mpirun()) return "mpirun not found (scripts/install-deps.sh installs openmpi-bin)";
  return "";
}

struct Dirs {
  std::string root;
  Dirs(const char* name) : root(::testing::TempDir() + "/mpi_" + name + "_" + std::to_string(::getpid())) {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~Dirs() { fs::remove_all(root); }
};

// A tiny recipe: a few batches an epoch, so 20 steps cross epoch ends (validation on rank 0, broadcast).
// attention_bias is off: the bias of W_k has a gradient that is exactly zero in exact arithmetic (softmax ignores
// a shift shared by all keys), so the computed one is rounding noise, which Adam scales up to +-lr per step;
// it differs between any two summation orders (also between thread counts) and would hide the comparison.
std::string write_config(const std::string& dir, int64_t stop_after_steps, int64_t epochs = 3, int64_t max_tokens = 1200) {
  nlohmann::json j = {{"data_dir", test::data_dir()}, {"train_limit", 200}, {"valid_limit", 8},
                      {"attention_bias", false},
                      {"vocab_size", 500},  {"num_hiddens", 16},   {"num_layers", 1},
                      {"num_heads", 2},     {"ffn_num_hiddens", 32}, {"max_len", 40},
                      {"num_steps", 12},    {"max_tokens", max_tokens},   {"epochs", epochs},
                      {"warmup_steps", 5},  {"checkpoint_every", 5}, {"dropout", 0.1},
                      {"patience", 100},    {"stop_after_steps", stop_after_steps}};
  const std::string p = dir + "/config.json";
  std::ofstream(p) << j.dump(2);
  return p;
}

// Under AddressSanitizer (make test-sanitize) the ranks skip leak checking only: Open MPI's own allocations
// outlive MPI_Finalize.
const std::string kMpirun = "OMP_NUM_THREADS=1 ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 "
                            "mpirun --oversubscribe --bind-to none --allow-run-as-root -x OMP_NUM_THREADS "
                            "-x ASAN_OPTIONS -x TFM_DATA_DIR -x TFM_TRACE_DIST -x TFM_COLLECTIVE_TIMEOUT ";

std::string tfm_train(const std::string& args) {
  return std::string(TFM_BINARY) + " train --threads 1 --no-progress " + args;
}

std::map<std::string, std::vector<float>> checkpoint_params(const std::string& path) {
  std::map<std::string, std::vector<float>> m;
  SafeTensors st = SafeTensors::open(path);
  for (const auto& n : st.names()) {
    if (n.rfind("model.", 0) != 0) continue;
    Tensor t = st.get(n);
    m[n].assign(t.f32(), t.f32() + t.numel());
  }
  return m;
}

int64_t checkpoint_step(const std::string& path) {
  SafeTensors st = SafeTensors::open(path);
  return nlohmann::json::parse(st.metadata()["state"].get<std::string>())["step"].get<int64_t>();
}

// Largest |a - b| over all parameters (infinity when the names or sizes differ).
double max_abs_diff(const std::map<std::string, std::vector<float>>& a, const std::map<std::string, std::vector<float>>& b) {
  if (a.size() != b.size() || a.empty()) return INFINITY;
  double worst = 0;
  for (const auto& [n, x] : a) {
    auto it = b.find(n);
    if (it == b.end() || it->second.size() != x.size()) return INFINITY;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, (double)std::fabs(x[i] - it->second[i]));
  }
  return worst;
}

// "shard step S rank R: i j k" and "replica-hash step S rank R H" lines of a TFM_TRACE_DIST=1 run.
struct Trace {
  std::map<std::pair<int64_t, int>, std::vector<int64_t>> shards;
  std::map<std::pair<int64_t, int>, std::string> hashes;
};
Trace parse_trace(const std::string& text) {
  Trace t;
  std::istringstream in(text);
  std::string line;
  static const std::regex shard_re(R"(^shard step (\d+) rank (\d+):(.*)$)"), hash_re(R"(^replica-hash step (\d+) rank (\d+) ([0-9a-f]+)$)");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, shard_re)) {
      std::istringstream ids(m[3].str());
      std::vector<int64_t> v;
      for (int64_t i; ids >> i;) v.push_back(i);
      t.shards[{std::stoll(m[1]), std::stoi(m[2])}] = v;
    } else if (std::regex_match(line, m, hash_re)) {
      t.hashes[{std::stoll(m[1]), std::stoi(m[2])}] = m[3];
    }
  }
  return t;
}

}  // namespace

TEST(MpiShards, DisjointCompleteAndBalancedByTokens) {
  Rng rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int64_t> tokens(rng.below(40));
    int64_t total = 0, biggest = 0;
    for (auto& t : tokens) t = 1 + (int64_t)rng.below(60), total += t, biggest = std::max(biggest, t);
    for (int n = 1; n <= 5; ++n) {
      int64_t next = 0;
      for (int r = 0; r < n; ++r) {
        auto [b, e] = dist::shard_range(tokens, n, r);
        ASSERT_EQ(b, next) << "shards must be contiguous, in rank order, without gaps or overlap";
        ASSERT_LE(b, e);
        int64_t mine = 0;
        for (int64_t i = b; i < e; ++i) mine += tokens[i];
        // Balanced: within one row (the largest) of an equal share.
        EXPECT_LE(std::fabs((double)mine - (double)total / n), (double)biggest + 1e-9) << "rank " << r << " of " << n;
        next = e;
      }
      ASSERT_EQ(next, (int64_t)tokens.size()) << "every row must belong to a rank";
    }
  }
  // One row, two ranks: one share is empty (that rank still joins the collectives).
  auto r0 = dist::shard_range({10}, 2, 0), r1 = dist::shard_range({10}, 2, 1);
  EXPECT_EQ((r0.second - r0.first) + (r1.second - r1.first), 1);
  EXPECT_EQ(r0.second, r1.first);
  EXPECT_THROW(dist::shard_range({1, 2}, 2, 2), std::invalid_argument);
}

// Shards balanced by padded work: contiguous and complete like shard_range, and with a target token costing 100
// source tokens (the output projection) the ten rows of equal target length split five and five, where a split by
// token count gives the rank with the shorter sources more rows.
TEST(MpiShards, PaddedWorkSplitIsContiguousCompleteAndBalanced) {
  Rng rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t rows = (int64_t)rng.below(40);
    std::vector<int64_t> src(rows), tgt(rows);
    for (int64_t i = 0; i < rows; ++i) src[i] = 1 + (int64_t)rng.below(60), tgt[i] = 1 + (int64_t)rng.below(60);
    const double sc = 1 + rng.below(4), tc = 1 + rng.below(8);
    auto cost = [&](int64_t b, int64_t e) {
      int64_t ls = 0, lt = 0;
      for (int64_t i = b; i < e; ++i) ls = std::max(ls, src[i]), lt = std::max(lt, tgt[i]);
      return (double)(e - b) * (sc * ls + tc * lt);
    };
    for (int n = 1; n <= 5; ++n) {
      int64_t next = 0;
      for (int r = 0; r < n; ++r) {
        auto [b, e] = dist::shard_range_padded(src, tgt, sc, tc, n, r);
        ASSERT_EQ(b, next) << "shards must be contiguous, in rank order, without gaps or overlap";
        ASSERT_LE(b, e);
        next = e;
      }
      ASSERT_EQ(next, rows) << "every row must belong to a rank";
    }
    // Two ranks: the split with the smallest larger share (by brute force over every boundary).
    auto [b, e] = dist::shard_range_padded(src, tgt, sc, tc, 2, 0);
    EXPECT_EQ(b, 0);
    double best = 1e300;
    for (int64_t k = 0; k <= rows; ++k) best = std::min(best, std::max(cost(0, k), cost(k, rows)));
    EXPECT_EQ(std::max(cost(0, e), cost(e, rows)), best) << "trial " << trial;
  }
  std::vector<int64_t> src(10), tgt(10, 10), tokens(10);
  for (int64_t i = 0; i < 10; ++i) src[i] = i + 1, tokens[i] = src[i] + tgt[i];
  EXPECT_EQ(dist::shard_range_padded(src, tgt, 1, 100, 2, 0), (std::pair<int64_t, int64_t>{0, 5}));
  EXPECT_EQ(dist::shard_range_padded(src, tgt, 1, 100, 2, 1), (std::pair<int64_t, int64_t>{5, 10}));
  EXPECT_GT(dist::shard_range(tokens, 2, 0).second, 5) << "by token count, rank 0 takes more of the short rows";
  EXPECT_THROW(dist::shard_range_padded({1, 2}, {1}, 1, 1, 2, 0), std::invalid_argument);
  EXPECT_THROW(dist::shard_range_padded({1}, {1}, 0, 1, 2, 0), std::invalid_argument);
  EXPECT_THROW(dist::shard_range_padded({1}, {1}, 1, 1, 2, 2), std::invalid_argument);
}

// A communicator of 2 "ranks" that records the non-blocking sums it is asked to start (and sums nothing).
struct RecordingComm final : dist::Communicator {
  std::vector<std::pair<int64_t, int64_t>> started;  // [begin, end) offsets into `base`, in start order
  const float* base = nullptr;
  int progressed = 0, waited = 0;
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  void all_reduce_sum(float*, int64_t) override { ADD_FAILURE() << "blocking all-reduce"; }
  void all_reduce_sum(double*, int64_t) override {}
  void start_all_reduce_sum(float* data, int64_t n) override { started.push_back({data - base, data - base + n}); }
  void progress() override { ++progressed; }
  void wait_all() override { ++waited; }
  void broadcast(void*, int64_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int, const std::string& m) override { throw std::runtime_error(m); }
  void send(const void*, int64_t, int, int, double) override {}
  void receive(void*, int64_t, int, int, double) override {}
  void post_progress(int64_t, bool) override {}
  bool poll_progress(std::vector<int64_t>&, std::vector<char>&) override { return false; }
};

TEST(MpiBuckets, StartFromTheEndAsTheyBecomeFinalAndCoverTheBufferOnce) {
  std::vector<float> g(25);
  RecordingComm comm;
  comm.base = g.data();
  dist::BucketedAllReduce sum(comm, g.data(), 25, 10);  // buckets [15, 25), [5, 15), [0, 5)
  sum.ready_from(20);  // no whole bucket final yet
  EXPECT_TRUE(comm.started.empty());
  sum.ready_from(15);
  ASSERT_EQ(comm.started.size(), 1u);
  EXPECT_EQ(comm.started[0], (std::pair<int64_t, int64_t>{15, 25}));
  sum.ready_from(3);  // [5, 15) is final, [0, 5) not yet
  ASSERT_EQ(comm.started.size(), 2u);
  EXPECT_EQ(comm.started[1], (std::pair<int64_t, int64_t>{5, 15}));
  EXPECT_EQ(comm.waited, 0);
  sum.finish();
  ASSERT_EQ(comm.started.size(), 3u);
  EXPECT_EQ(comm.started[2], (std::pair<int64_t, int64_t>{0, 5}));
  EXPECT_EQ(comm.waited, 1);
  EXPECT_GE(comm.progressed, 3);
  EXPECT_THROW(dist::BucketedAllReduce(comm, g.data(), 25, 0), std::invalid_argument);
  EXPECT_THROW(dist::BucketedAllReduce(comm, g.data(), 25, dist::Communicator::chunk_elements() + 1),
               std::invalid_argument);
}

// Each offset forward_backward reports must be final: the gradients from it on equal the finished backward's,
// for both block layouts and with the tied embedding (offset 0, finished last).
TEST(MpiBuckets, ReportedGradientsAreFinalInBothLayouts) {
  for (bool pre_ln : {false, true}) {
    Seq2SeqConfig c;
    c.src_vocab_size = c.tgt_vocab_size = 23;
    c.num_layers = 3;
    c.norm_first = pre_ln;
    c.shared_embeddings = pre_ln;
    c.dropout = 0.0;
    Seq2SeqModel m(c);
    Rng rng(7);
    m.init(rng);
    const int64_t B = 3, L = 5;
    std::vector<int64_t> src(B * L), dec(B * L), lab(B * L), svl = {5, 3, 4}, tvl = {4, 5, 2};
    for (int64_t i = 0; i < B * L; ++i) src[i] = 3 + i % 19, lab[i] = 4 + (i * 7) % 18, dec[i] = i % L ? lab[i - 1] : 1;
    Seq2SeqBatch b{src.data(), svl.data(), dec.data(), lab.data(), tvl.data(), B, L, L};
    nn::ParamStore& P = m.params();
    std::vector<std::pair<int64_t, std::vector<float>>> seen;  // offset, gradients [offset, n) at that moment
    P.zero_grad();
    m.forward_backward(b, nullptr, 0.1f, true, 0, [&](int64_t off) {
      seen.push_back({off, std::vector<float>(P.all_grad().begin() + off, P.all_grad().end())});
    });
    ASSERT_GE(seen.size(), (size_t)(2 * c.num_layers + 1)) << "pre_ln " << pre_ln;
    EXPECT_EQ(seen.back().first, 0);
    for (size_t k = 0; k < seen.size(); ++k) {
      if (k) {
        EXPECT_LT(seen[k].first, seen[k - 1].first) << "offsets decrease";
      }
      const std::vector<float> final_part(P.all_grad().begin() + seen[k].first, P.all_grad().end());
      EXPECT_EQ(seen[k].second, final_part) << "pre_ln " << pre_ln << ": gradients from offset " << seen[k].first
                                            << " changed after they were reported final";
    }
    double sq = 0;
    for (float x : P.all_grad()) sq += (double)x * x;
    EXPECT_GT(sq, 0.0);
  }
}

TEST(MpiShards, KeyedDropoutMaskFollowsTheSentenceNotTheBatchOrPadding) {
  // Sentence 42 in a batch with sentence 7, padded to L = 5, and alone, padded to L = 3: its first 3 positions
  // must get the same mask; so must its attention weights (heads 2) for the positions both layouts hold.
  const int64_t C = 8;
  Rng rng(1);
  RowKeys two{99, {7, 42}}, one{99, {42}};
  std::vector<float> m2(2 * 5 * C), m1(1 * 3 * C);
  rng.set_row_keys(&two);
  ops::dropout_mask(m2.data(), (int64_t)m2.size(), 0.5f, rng);
  rng.set_row_keys(&one);
  ops::dropout_mask(m1.data(), (int64_t)m1.size(), 0.5f, rng);
  for (int64_t j = 0; j < 3 * C; ++j) ASSERT_EQ(m1[j], m2[5 * C + j]) << j;
  int zeros = 0;
  for (float v : m1) zeros += v == 0.0f;
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, 3 * C);
  ops::AttentionDropoutDims d2{2, 5, 6}, d1{2, 3, 4};
  std::vector<float> a2(2 * 2 * 5 * 6), a1(2 * 3 * 4);
  rng.set_row_keys(&two);
  ops::dropout_mask(a2.data(), (int64_t)a2.size(), 0.5f, rng, &d2);
  rng.set_row_keys(&one);
  ops::dropout_mask(a1.data(), (int64_t)a1.size(), 0.5f, rng, &d1);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t q = 0; q < 3; ++q)
      for (int64_t k = 0; k < 4; ++k)
        ASSERT_EQ(a1[(h * 3 + q) * 4 + k], a2[2 * 5 * 6 + (h * 5 + q) * 6 + k]) << h << " " << q << " " << k;
  // Another step (key) gives another mask.
  RowKeys other{100, {42}};
  std::vector<float> m3(3 * C);
  rng.set_row_keys(&other);
  ops::dropout_mask(m3.data(), (int64_t)m3.size(), 0.5f, rng);
  EXPECT_NE(m1, m3);
}

// 2 ranks (one of them given another --out, which must stay unwritten) vs 1 rank, same global batches.
TEST(Mpi, TwoRanksMatchOneRankAndKeepIdenticalReplicas) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("pair");
  const std::string cfg = write_config(d.root, 20);
  ASSERT_EQ(0, sh("TFM_TRACE_DIST=1 " + tfm_train("--config " + cfg + " --out " + d.root + "/one") + " 2> " +
                  d.root + "/one.log"))
      << read_all(d.root + "/one.log");
  const std::string two = "TFM_TRACE_DIST=1 " + kMpirun + "-np 1 " + tfm_train("--config " + cfg + " --out " + d.root + "/two") +
                          " : -np 1 " + tfm_train("--config " + cfg + " --out " + d.root + "/rank1_out");
  ASSERT_EQ(0, sh("cd " + d.root + " && " + two + " > " + d.root + "/two.log 2>&1")) << read_all(d.root + "/two.log");
  EXPECT_FALSE(fs::exists(d.root + "/rank1_out")) << "rank 1 must not write (or create) its --out";
  for (const auto& e : fs::directory_iterator(d.root))
    EXPECT_TRUE(std::set<std::string>({"config.json", "one", "two", "one.log", "two.log"}).count(e.path().filename()))
        << "unexpected file " << e.path();
  EXPECT_EQ(20, checkpoint_step(d.root + "/two/checkpoint.safetensors"));
  const double diff = max_abs_diff(checkpoint_params(d.root + "/one/checkpoint.safetensors"),
                                   checkpoint_params(d.root + "/two/checkpoint.safetensors"));
  std::printf("max |2 ranks - 1 rank| after 20 steps: %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);
  EXPECT_NE(read_all(d.root + "/two/train_log.csv").find(",2\n"), std::string::npos) << "the log records world_size";

  const Trace t1 = parse_trace(read_all(d.root + "/one.log")), t2 = parse_trace(read_all(d.root + "/two.log"));
  int64_t nonempty1 = 0;
  for (int64_t s = 1; s <= 20; ++s) {
    ASSERT_TRUE(t2.hashes.count({s, 0}) && t2.hashes.count({s, 1})) << "no replica hash for step " << s;
    EXPECT_EQ(t2.hashes.at({s, 0}), t2.hashes.at({s, 1})) << "replicas differ after step " << s;
    // The two shards are disjoint and together are exactly the one-rank run's global batch.
    ASSERT_TRUE(t1.shards.count({s, 0}) && t2.shards.count({s, 0}) && t2.shards.count({s, 1})) << s;
    std::vector<int64_t> both = t2.shards.at({s, 0});
    both.insert(both.end(), t2.shards.at({s, 1}).begin(), t2.shards.at({s, 1}).end());
    EXPECT_EQ(both, t1.shards.at({s, 0})) << "step " << s;
    EXPECT_EQ(std::set<int64_t>(both.begin(), both.end()).size(), both.size()) << "step " << s;
    nonempty1 += !t2.shards.at({s, 1}).empty();
  }
  EXPECT_GT(nonempty1, 10) << "rank 1 should hold about half of most batches";
  // The gradient sum ran in several buckets, overlapping the backward pass (dist::BucketedAllReduce).
  std::smatch m;
  const std::string log2 = read_all(d.root + "/two.log");
  ASSERT_TRUE(std::regex_search(log2, m, std::regex(R"(gradient buckets rank 0: (\d+) of)"))) << log2;
  EXPECT_GT(std::stoll(m[1]), 1);
}

// The gradient of each step, not only its direction: with clipping off, Adam's first moment after step t is
// m_t = beta1 m_{t-1} + (1 - beta1) g_t, so the summed gradients of 2 ranks must give 1 rank's m_t (and second
// moment) at every step. Adam with a binding clip ignores a constant factor (a gradient divided by world_size
// twice still trains the same weights), the moments do not.
TEST(Mpi, TwoRanksSumToTheOneRankGradientAtEveryStep) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("grad");
  const std::string cfg = write_config(d.root, 3);
  const std::string set = " --set clip_norm=1e30";
  auto moments = [&](const std::string& dir, const char* name) {
    Tensor t = SafeTensors::open(dir + "/checkpoint.safetensors").get(name);
    return std::vector<double>(t.f32(), t.f32() + t.numel());
  };
  for (int64_t steps : {1, 3}) {
    SCOPED_TRACE("steps " + std::to_string(steps));
    const std::string stop = set + " --set stop_after_steps=" + std::to_string(steps);
    const std::string one = d.root + "/one" + std::to_string(steps), two = d.root + "/two" + std::to_string(steps);
    ASSERT_EQ(0, sh(tfm_train("--config " + cfg + stop + " --out " + one) + " 2> " + d.root + "/one.log"))
        << read_all(d.root + "/one.log");
    ASSERT_EQ(0, sh(kMpirun + "-np 2 " + tfm_train("--config " + cfg + stop + " --out " + two) + " > " + d.root +
                    "/two.log 2>&1"))
        << read_all(d.root + "/two.log");
    for (const char* name : {"optim.exp_avg", "optim.exp_avg_sq"}) {
      const std::vector<double> a = moments(one, name), b = moments(two, name);
      ASSERT_EQ(a.size(), b.size());
      double diff = 0, norm = 0;
      for (size_t i = 0; i < a.size(); ++i) diff += (a[i] - b[i]) * (a[i] - b[i]), norm += a[i] * a[i];
      ASSERT_GT(norm, 0.0);
      std::printf("%s after %lld steps: |2 ranks - 1 rank| / |1 rank| = %.3g\n", name, (long long)steps,
                  std::sqrt(diff / norm));
      EXPECT_LE(std::sqrt(diff / norm), 1e-4) << name;
    }
  }
}

// Validation shared out by batch over the ranks (batch k on rank k mod 2): the loss and BLEU of every row, as one
// rank computes them (the weights agree within the 2-rank tolerance, so the values do to within it).
TEST(Mpi, SharedValidationGivesOneRanksLossAndBleu) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("valid");
  const std::string cfg = write_config(d.root, 0, 1, 80);  // small batches: several validation batches
  ASSERT_EQ(0, sh(tfm_train("--config " + cfg + " --out " + d.root + "/one") + " 2> " + d.root + "/one.log"))
      << read_all(d.root + "/one.log");
  ASSERT_EQ(0, sh(kMpirun + "-np 2 " + tfm_train("--config " + cfg + " --out " + d.root + "/two") + " > " + d.root +
                  "/two.log 2>&1"))
      << read_all(d.root + "/two.log");
  auto last_row = [&](const std::string& dir) {  // epoch,step,train_loss,valid_loss,valid_bleu,...
    std::istringstream in(read_all(dir + "/train_log.csv"));
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    std::vector<std::string> f;
    std::stringstream ss(last);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    return f;
  };
  const auto one = last_row(d.root + "/one"), two = last_row(d.root + "/two");
  ASSERT_GE(one.size(), 5u);
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(one[0], "1");
  EXPECT_NEAR(std::stod(two[3]), std::stod(one[3]), 1e-4 * std::fabs(std::stod(one[3]))) << "valid_loss";
  EXPECT_EQ(two[4], one[4]) << "valid_bleu";
  EXPECT_GT(std::stod(one[3]), 0.0);
}

// Batches of one or two sentences: some steps give rank 1 nothing; it must still join every collective.
TEST(Mpi, EmptyShareStillJoinsTheCollectives) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("empty");
  const std::string cfg = write_config(d.root, 12, 3, 80);
  ASSERT_EQ(0, sh("TFM_TRACE_DIST=1 TFM_COLLECTIVE_TIMEOUT=30 " + kMpirun + "-np 2 " +
                  tfm_train("--config " + cfg + " --out " + d.root + "/two") + " > " + d.root + "/two.log 2>&1"))
      << read_all(d.root + "/two.log");
  const Trace t = parse_trace(read_all(d.root + "/two.log"));
  int empty = 0;
  for (int64_t s = 1; s <= 12; ++s) {
    ASSERT_TRUE(t.shards.count({s, 0}) && t.shards.count({s, 1})) << s;
    empty += t.shards.at({s, 0}).empty() || t.shards.at({s, 1}).empty();
    ASSERT_TRUE(t.hashes.count({s, 0}) && t.hashes.count({s, 1})) << s;
    EXPECT_EQ(t.hashes.at({s, 0}), t.hashes.at({s, 1})) << "step " << s;
  }
  EXPECT_GT(empty, 0) << "the test needs steps with an empty share";
  EXPECT_EQ(12, checkpoint_step(d.root + "/two/checkpoint.safetensors"));
}

TEST(Mpi, TcpOnLoopbackMatchesOneRank) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("tcp");
  const std::string cfg = write_config(d.root, 20);
  ASSERT_EQ(0, sh(tfm_train("--config " + cfg + " --out " + d.root + "/one") + " 2> " + d.root + "/one.log"))
      << read_all(d.root + "/one.log");
  // Only the TCP transport (no shared memory), on the loopback interface.
  ASSERT_EQ(0, sh(kMpirun + "--mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -np 2 " +
                  tfm_train("--config " + cfg + " --out " + d.root + "/two") + " > " + d.root + "/two.log 2>&1"))
      << read_all(d.root + "/two.log");
  const double diff = max_abs_diff(checkpoint_params(d.root + "/one/checkpoint.safetensors"),
                                   checkpoint_params(d.root + "/two/checkpoint.safetensors"));
  std::printf("max |2 ranks over TCP - 1 rank| after 20 steps: %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);
}

// Resume on the same rank count is bit-exact; on another rank count it continues within tolerance.
TEST(Mpi, ResumeIsBitExactWithTheSameRanksAndCloseWithAnother) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("resume");
  const std::string cfg = write_config(d.root, 20);
  auto two = [&](const std::string& args, const std::string& log) {
    return sh(kMpirun + "-np 2 " + tfm_train(args) + " > " + d.root + "/" + log + " 2>&1");
  };
  ASSERT_EQ(0, two("--config " + cfg + " --out " + d.root + "/full", "full.log")) << read_all(d.root + "/full.log");
  ASSERT_EQ(0, two("--config " + cfg + " --set stop_after_steps=9 --out " + d.root + "/split", "split.log"))
      << read_all(d.root + "/split.log");
  fs::copy(d.root + "/split", d.root + "/other", fs::copy_options::recursive);
  ASSERT_EQ(0, two("--resume " + d.root + "/split --set stop_after_steps=20", "resume.log")) << read_all(d.root + "/resume.log");
  ASSERT_EQ(0, sh(tfm_train("--resume " + d.root + "/other --set stop_after_steps=20") + " > " + d.root +
                  "/other.log 2>&1"))
      << read_all(d.root + "/other.log");
  EXPECT_NE(read_all(d.root + "/other.log").find("written by world_size 2, continuing with world_size 1"), std::string::npos);
  const auto full = checkpoint_params(d.root + "/full/checkpoint.safetensors");
  EXPECT_EQ(0.0, max_abs_diff(full, checkpoint_params(d.root + "/split/checkpoint.safetensors")))
      << "resume on the same 2 ranks must be bit-exact";
  const double diff = max_abs_diff(full, checkpoint_params(d.root + "/other/checkpoint.safetensors"));
  std::printf("max |resumed on 1 rank - 2 ranks throughout|: %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);
}

// Two simulated hosts: network namespaces joined only by a veth pair, made here and removed at the end. mpirun
// runs in namespace A (host 10.231.x.1, rank 0) and starts the daemon of "host" 10.231.x.2 through an rsh agent
// that enters namespace B (with its own hostname) instead of ssh; the ranks talk TCP over the veth link only.
TEST(Mpi, TwoHostsInNetworkNamespacesJoinedByVethMatchOneRank) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string id = std::to_string(::getpid() % 100000);
  const std::string na = "tfm_mpi_a" + id, nb = "tfm_mpi_b" + id, va = "tfma" + id, vb = "tfmb" + id;
  if (sh("ip netns add " + na + " > /dev/null 2>&1") != 0) GTEST_SKIP() << "'ip netns add' is not permitted here";
  struct Cleanup {
    std::string na, nb, va;
    ~Cleanup() {
      sh("ip netns del " + na + " 2>/dev/null; ip netns del " + nb + " 2>/dev/null; ip link del " + va + " 2>/dev/null");
    }
  } cleanup{na, nb, va};
  if (sh("command -v unshare > /dev/null") != 0) GTEST_SKIP() << "unshare (util-linux) not found";
  const std::string net = "10.231." + std::to_string(::getpid() % 250);
  if (sh("ip netns add " + nb + " && ip link add " + va + " type veth peer name " + vb + " && ip link set " +
                  va + " netns " + na + " && ip link set " + vb + " netns " + nb + " && ip -n " + na + " addr add " +
                  net + ".1/24 dev " + va + " && ip -n " + nb + " addr add " + net + ".2/24 dev " + vb + " && ip -n " +
                  na + " link set " + va + " up && ip -n " + nb + " link set " + vb + " up && ip -n " + na +
                  " link set lo up && ip -n " + nb + " link set lo up") != 0)
    GTEST_SKIP() << "could not make the veth pair between the namespaces here";
  Dirs d("netns");
  const std::string cfg = write_config(d.root, 20);
  std::ofstream(d.root + "/agent.sh") << "#!/bin/sh\n# rsh agent: host $1 is network namespace " << nb
                                      << "\nshift\nexec ip netns exec " << nb
                                      << " unshare --uts sh -c \"hostname tfm-host-b; $*\"\n";
  fs::permissions(d.root + "/agent.sh", fs::perms::owner_all);
  std::ofstream(d.root + "/hosts") << net << ".1 slots=1\n" << net << ".2 slots=1\n";
  ASSERT_EQ(0, sh(tfm_train("--config " + cfg + " --out " + d.root + "/one") + " 2> " + d.root + "/one.log"))
      << read_all(d.root + "/one.log");
  const std::string sub = net + ".0/24";
  const std::string cmd = "ip netns exec " + na + " env " + kMpirun + "--hostfile " + d.root + "/hosts --mca plm_rsh_agent " +
                          d.root + "/agent.sh --mca btl self,tcp --mca btl_tcp_if_include " + sub +
                          " --mca oob_tcp_if_include " + sub + " -np 2 " +
                          tfm_train("--config " + cfg + " --out " + d.root + "/two");
  ASSERT_EQ(0, sh(cmd + " > " + d.root + "/two.log 2>&1")) << read_all(d.root + "/two.log");
  const double diff = max_abs_diff(checkpoint_params(d.root + "/one/checkpoint.safetensors"),
                                   checkpoint_params(d.root + "/two/checkpoint.safetensors"));
  std::printf("max |2 hosts over veth - 1 rank| after 20 steps: %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);
  // The gradients crossed the link: host B received at least 20 steps of the flat gradient buffer (4 bytes each).
  const std::string rx = d.root + "/rx";
  ASSERT_EQ(0, sh("ip netns exec " + nb + " cat /sys/class/net/" + vb + "/statistics/rx_bytes > " + rx));
  const int64_t params = [&] {
    int64_t n = 0;
    for (const auto& [name, v] : checkpoint_params(d.root + "/one/checkpoint.safetensors")) n += (int64_t)v.size();
    return n;
  }();
  EXPECT_GT(std::stoll(read_all(rx)), 20 * params * 4) << "parameters: " << params;
}

// An error on rank 0 alone (its --out is not empty) must end rank 1 too, which is waiting in a collective.
TEST(Mpi, AnErrorOnOneRankEndsEveryRankWithItsMessage) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("error");
  const std::string cfg = write_config(d.root, 4);
  fs::create_directories(d.root + "/busy");
  std::ofstream(d.root + "/busy/notes.txt") << "someone's file";
  const int rc = sh("TFM_COLLECTIVE_TIMEOUT=60 " + kMpirun + "-np 2 " +
                    tfm_train("--config " + cfg + " --out " + d.root + "/busy") + " > " + d.root + "/run.log 2>&1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(read_all(d.root + "/run.log").find("rank 0 of 2: " + d.root + "/busy already exists and is not an empty folder"),
            std::string::npos)
      << read_all(d.root + "/run.log");
  // The d2l trainer is one process: refused under mpirun rather than run twice into one folder.
  const int rc2 = sh(kMpirun + "-np 2 " + tfm_train("--data " + test::data_dir() + "/fra-eng/fra.txt --out " + d.root +
                                                   "/d2l") + " > " + d.root + "/d2l.log 2>&1");
  EXPECT_NE(rc2, 0);
  EXPECT_NE(read_all(d.root + "/d2l.log").find("the d2l trainer (--data) runs as one process"), std::string::npos)
      << read_all(d.root + "/d2l.log");
  EXPECT_FALSE(fs::exists(d.root + "/d2l"));
}

namespace {
// Starts `cmd` (a shell line) in the background; returns its pid.
pid_t spawn(const std::string& cmd) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  return pid;
}
// Waits up to `seconds` for pid; returns its exit code, or -1 on timeout (the process group is then killed).
int wait_for(pid_t pid, double seconds) {
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
      kill(-pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}
// Polls `log` until it holds "rank 1 pid N" and `ckpt` exists; returns N (0 on timeout).
pid_t wait_for_rank1(const std::string& log, const std::string& ckpt, double seconds) {
  static const std::regex re(R"(rank 1 pid (\d+))");
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    std::smatch m;
    std::string text = read_all(log);
    if (std::regex_search(text, m, re) && fs::exists(ckpt)) return (pid_t)std::stol(m[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}
}  // namespace

TEST(Mpi, KilledRankEndsTheJobAndResumeContinues) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("kill");
  const std::string cfg = write_config(d.root, 0, 1000);  // would run for a long time
  const std::string log = d.root + "/run.log", ckpt = d.root + "/run/checkpoint.safetensors";
  pid_t job = spawn("TFM_TRACE_DIST=1 " + kMpirun + "-np 2 " + tfm_train("--config " + cfg + " --out " + d.root + "/run") +
                    " > " + log + " 2>&1");
  pid_t rank1 = wait_for_rank1(log, ckpt, 120);
  ASSERT_GT(rank1, 0) << read_all(log);
  ASSERT_EQ(0, kill(rank1, SIGKILL));
  const int rc = wait_for(job, 60);
  EXPECT_NE(rc, -1) << "the job must end by itself once a rank died";
  EXPECT_NE(rc, 0) << "a job that lost a rank must exit non-zero";
  // Resume from the last complete checkpoint, on 2 ranks, for 3 more steps.
  const int64_t at = checkpoint_step(ckpt);
  ASSERT_EQ(0, sh(kMpirun + "-np 2 " + tfm_train("--resume " + d.root + "/run --set stop_after_steps=" +
                                                std::to_string(at + 3)) + " > " + d.root + "/resume.log 2>&1"))
      << read_all(d.root + "/resume.log");
  EXPECT_EQ(at + 3, checkpoint_step(ckpt));
}

TEST(Mpi, HungRankIsEndedByTheCollectiveTimeout) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("hang");
  const std::string cfg = write_config(d.root, 0, 1000);
  const std::string log = d.root + "/run.log", ckpt = d.root + "/run/checkpoint.safetensors";
  pid_t job = spawn("TFM_TRACE_DIST=1 TFM_COLLECTIVE_TIMEOUT=10 " + kMpirun + "-np 2 " +
                    tfm_train("--config " + cfg + " --out " + d.root + "/run") + " > " + log + " 2>&1");
  pid_t rank1 = wait_for_rank1(log, ckpt, 120);
  ASSERT_GT(rank1, 0) << read_all(log);
  // Alive but silent. (The 10 s deadline leaves room for rank 0's subword training and validation on a busy
  // machine, during which rank 1 waits in a broadcast.)
  ASSERT_EQ(0, kill(rank1, SIGSTOP));
  const int rc = wait_for(job, 60);
  kill(rank1, SIGKILL);  // in case it survived
  EXPECT_NE(rc, -1) << "the job must end by itself when a rank hangs";
  EXPECT_NE(rc, 0);
  EXPECT_NE(read_all(log).find("no answer from the other ranks"), std::string::npos) << read_all(log);
}

// Batch inference under mpirun (issue 24 item 6): `mpirun -np 2 tfm embed / translate --input FILE` give the one
// process's output byte for byte (every rank takes whole chunks, so the batches are the same), each rank's own
// shard with --output-shards, and a rank that fails or dies fails the job with no output file left.
namespace {
const std::string kIn = "--threads 1 -q ";

std::string tfm_cmd(const std::string& args) { return std::string(TFM_BINARY) + " " + args; }

// `n` lines cycling through st_mean's 8 sentences in a scrambled order; row i is sentence order[i].
std::vector<int64_t> write_sentences(const std::string& path, int64_t n, const std::string& blank_every = "") {
  std::vector<std::string> s;
  std::istringstream in(read_all(test::fixture("st_mean/sentences.txt")));
  for (std::string line; std::getline(in, line);) s.push_back(line);
  std::vector<int64_t> order;
  std::string text;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = (i * 5 + i / 8) % 8;
    order.push_back(k);
    text += s[(size_t)k] + "\n";
    if (!blank_every.empty() && i % 7 == 3) text += blank_every + "\n";
  }
  std::ofstream(path, std::ios::binary) << text;
  return order;
}

// No file of the folder is a leftover of an interrupted write (write_file_atomic's NAME.tmp.PID).
bool has_temp_files(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

// Max |got - want[order[i]]| over the rows of an embed .npy against sentence-transformers' embeddings.
double embed_error(const std::string& npy, const std::vector<int64_t>& order) {
  SafeTensors e = SafeTensors::open(test::fixture("st_mean/expected.safetensors"));
  Tensor want = e.get("embeddings");
  const std::string bytes = read_all(npy);
  const int64_t D = want.size(1);
  if (bytes.size() != 128 + order.size() * D * sizeof(float)) return INFINITY;
  const float* got = reinterpret_cast<const float*>(bytes.data() + 128);
  double worst = 0;
  for (size_t i = 0; i < order.size(); ++i)
    for (int64_t k = 0; k < D; ++k)
      worst = std::max(worst, (double)std::fabs(got[i * D + k] - want.f32()[order[i] * D + k]));
  return worst;
}
}  // namespace

TEST(MpiInfer, EmbedOnTwoRanksIsOneRanksOutputByteForByte) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("embed");
  const std::string in = d.root + "/in.txt", model = test::fixture("st_mean");
  const std::vector<int64_t> order = write_sentences(in, 45);
  for (const std::string ext : {".npy", ".jsonl"}) {
    const std::string args = "embed " + kIn + "--model " + model + " -i " + in + " --chunk-lines 4 --batch-size 3 -o ";
    ASSERT_EQ(0, sh(tfm_cmd(args + d.root + "/one" + ext) + " 2> " + d.root + "/one.log")) << read_all(d.root + "/one.log");
    ASSERT_EQ(0, sh(kMpirun + "-np 2 " + tfm_cmd(args + d.root + "/two" + ext) + " > " + d.root + "/two.log 2>&1"))
        << read_all(d.root + "/two.log");
    const std::string one = read_all(d.root + "/one" + ext), two = read_all(d.root + "/two" + ext);
    ASSERT_FALSE(one.empty());
    EXPECT_TRUE(one == two) << ext << ": 2 ranks wrote other bytes than 1 rank";
    ASSERT_EQ(0, sh(kMpirun + "-np 3 " + tfm_cmd(args + d.root + "/three" + ext) + " > " + d.root + "/three.log 2>&1"))
        << read_all(d.root + "/three.log");
    EXPECT_TRUE(one == read_all(d.root + "/three" + ext)) << ext << ": 3 ranks wrote other bytes than 1 rank";
  }
  // The rows are sentence-transformers' (PyTorch reference, scripts/make_embed_fixtures.py).
  EXPECT_LE(embed_error(d.root + "/two.npy", order), 1e-5);
  // --skip-empty: the blank lines fall in both ranks' ranges; rows and OUT.lines.txt as one rank writes them.
  write_sentences(in, 45, "  ");
  const std::string args = "embed " + kIn + "--model " + model + " -i " + in + " --chunk-lines 4 --skip-empty -o ";
  ASSERT_EQ(0, sh(tfm_cmd(args + d.root + "/s1.npy") + " 2> " + d.root + "/s1.log")) << read_all(d.root + "/s1.log");
  ASSERT_EQ(0, sh(kMpirun + "-np 2 " + tfm_cmd(args + d.root + "/s2.npy") + " > " + d.root + "/s2.log 2>&1"))
      << read_all(d.root + "/s2.log");
  EXPECT_TRUE(read_all(d.root + "/s1.npy") == read_all(d.root + "/s2.npy"));
  EXPECT_EQ(read_all(d.root + "/s1.lines.txt"), read_all(d.root + "/s2.lines.txt"));
  EXPECT_LE(embed_error(d.root + "/s2.npy", order), 1e-5);
  // The summary line (rank 0 alone) counts every rank's rows and skipped lines.
  ASSERT_EQ(0, sh(kMpirun + "-np 2 " + tfm_cmd("embed --threads 1 --model " + model + " -i " + in +
                                               " --chunk-lines 4 --skip-empty -o " + d.root + "/s3.npy") +
                  " > " + d.root + "/s3.log 2>&1"));
  const std::string log = read_all(d.root + "/s3.log");
  EXPECT_NE(log.find("embedded 45 sentences"), std::string::npos) << log;
  EXPECT_NE(log.find("skipped 6 empty lines"), std::string::npos) << log;
  EXPECT_EQ(log.find("embedded", log.find("embedded") + 1), std::string::npos) << "one summary line: " << log;
}

TEST(MpiInfer, OutputShardsHoldEachRanksContiguousLines) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("shards");
  const std::string in = d.root + "/in.txt", model = test::fixture("st_mean");
  const std::vector<int64_t> order = write_sentences(in, 30);
  const std::string args = "embed --threads 1 --model " + model + " -i " + in + " --chunk-lines 4 --output-shards -o ";
  ASSERT_EQ(0, sh(kMpirun + "-np 2 " + tfm_cmd(args + d.root + "/e.npy") + " > " + d.root + "/run.log 2>&1"))
      << read_all(d.root + "/run.log");
  EXPECT_FALSE(fs::exists(d.root + "/e.npy"));
  const std::string a = d.root + "/e-00001-of-00002.npy", b = d.root + "/e-00002-of-00002.npy";
  ASSERT_TRUE(fs::exists(a) && fs::exists(b)) << read_all(d.root + "/run.log");
  // Rank 0 names the line range of each shard; the shards are the first and the last rows, in order.
  static const std::regex range_re(R"(\(lines 1-(\d+), (\d+)-30\))");
  std::smatch m;
  const std::string log = read_all(d.root + "/run.log");
  ASSERT_TRUE(std::regex_search(log, m, range_re)) << log;
  const int64_t split = std::stoll(m[1]);
  EXPECT_EQ(std::stoll(m[2]), split + 1);
  EXPECT_EQ(split % 4, 0) << "a shard ends at a chunk boundary";
  EXPECT_GT(split, 4);
  EXPECT_LT(split, 26) << "the bytes are split roughly in half";
  EXPECT_LE(embed_error(a, std::vector<int64_t>(order.begin(), order.begin() + split)), 1e-5);
  EXPECT_LE(embed_error(b, std::vector<int64_t>(order.begin() + split, order.end())), 1e-5);
  // One process: one shard, the whole output.
  ASSERT_EQ(0, sh(tfm_cmd(args + d.root + "/one.npy") + " 2> " + d.root + "/one.log")) << read_all(d.root + "/one.log");
  EXPECT_LE(embed_error(d.root + "/one-00001-of-00001.npy", order), 1e-5);
  // Translations too: the shards are the one output cut at the ranks' boundary.
  const std::string src = d.root + "/src.txt";
  {
    std::ofstream f(src);
    for (int i = 0; i < 1100; ++i) f << (i % 3 == 0 ? "go ." : i % 3 == 1 ? "i lost ." : "he's calm .") << "\n";
  }
  const std::string targs = "translate --threads 1 -q --model " + test::fixture("d2l_trained") + " --input " + src;
  ASSERT_EQ(0, sh(tfm_cmd(targs + " -o " + d.root + "/t.txt") + " 2> " + d.root + "/t.log")) << read_all(d.root + "/t.log");
  ASSERT_EQ(0, sh(kMpirun + "-np 2 " + tfm_cmd(targs + " --output-shards -o " + d.root + "/t.txt") + " > " + d.root +
                  "/ts.log 2>&1"))
      << read_all(d.root + "/ts.log");
  const std::string ta = read_all(d.root + "/t-00001-of-00002.txt"), tb = read_all(d.root + "/t-00002-of-00002.txt");
  EXPECT_FALSE(ta.empty());
  EXPECT_FALSE(tb.empty());
  EXPECT_TRUE(ta + tb == read_all(d.root + "/t.txt"));
  EXPECT_EQ(std::count(ta.begin(), ta.end(), '\n') % 512, 0) << "rank 0's shard is whole 512-line chunks";
}

TEST(MpiInfer, TranslateOnTwoRanksIsOneRanksOutputByteForByte) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("translate");
  // The PyTorch reference's greedy predictions of the d2l model (tests/fixtures/d2l_trained/predictions.json).
  const nlohmann::json p = nlohmann::json::parse(read_all(test::fixture("d2l_trained/predictions.json")));
  const std::string in = d.root + "/in.txt";
  std::vector<std::string> want;
  {
    std::ofstream f(in);
    const size_t n = p["predictions"].size();
    for (size_t i = 0; i < 1300; ++i) {
      const nlohmann::json& e = p["predictions"][(i * 7) % n];
      f << e["src"].get<std::string>() << "\n";
      want.push_back(e["pred"].get<std::string>());
    }
  }
  const std::string args = "translate --threads 1 -q --model " + test::fixture("d2l_trained") + " --input " + in;
  ASSERT_EQ(0, sh(tfm_cmd(args + " -o " + d.root + "/one.txt") + " 2> " + d.root + "/one.log"))
      << read_all(d.root + "/one.log");
  ASSERT_EQ(0, sh(kMpirun + "-np 2 " + tfm_cmd(args + " -o " + d.root + "/two.txt") + " > " + d.root + "/two.log 2>&1"))
      << read_all(d.root + "/two.log");
  const std::string one = read_all(d.root + "/one.txt"), two = read_all(d.root + "/two.txt");
  EXPECT_TRUE(one == two) << "2 ranks wrote other bytes than 1 rank";
  std::istringstream got(two);
  size_t i = 0, same = 0;
  for (std::string line; std::getline(got, line); ++i) same += i < want.size() && line == want[i];
  EXPECT_EQ(i, want.size());
  EXPECT_EQ(same, want.size()) << "translations differ from the PyTorch reference's predictions";
  // To stdout (rank 0 writes it; the other ranks print nothing).
  ASSERT_EQ(0, sh(kMpirun + "-np 2 " + tfm_cmd(args) + " > " + d.root + "/out.txt 2> " + d.root + "/err.log"))
      << read_all(d.root + "/err.log");
  EXPECT_TRUE(read_all(d.root + "/out.txt") == one);
}

TEST(MpiInfer, AFailingOrDyingRankFailsTheJobAndLeavesNoFile) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("fail");
  const std::string in = d.root + "/in.txt", model = test::fixture("st_mean");
  write_sentences(in, 40);
  {  // line 38 (rank 1's range) is not UTF-8
    std::ofstream f(in, std::ios::app);
    f << "bad \xff\xfe line\nlast line\n";
  }
  const std::string args = "embed --threads 1 --model " + model + " -i " + in + " --chunk-lines 4 -o ";
  int rc = sh("TFM_COLLECTIVE_TIMEOUT=60 " + kMpirun + "-np 2 " + tfm_cmd(args + d.root + "/o.npy") + " > " + d.root +
              "/bad.log 2>&1");
  EXPECT_NE(rc, 0);
  std::string log = read_all(d.root + "/bad.log");
  EXPECT_NE(log.find("tfm: error: rank 1 of 2: " + in + ": line 41: text is not valid UTF-8"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(d.root + "/o.npy"));
  // Shards: none is written when one rank fails.
  rc = sh("TFM_COLLECTIVE_TIMEOUT=60 " + kMpirun + "-np 2 " + tfm_cmd(args + d.root + "/s.npy --output-shards") +
          " > " + d.root + "/shards.log 2>&1");
  EXPECT_NE(rc, 0);
  EXPECT_FALSE(fs::exists(d.root + "/s-00001-of-00002.npy")) << read_all(d.root + "/shards.log");
  EXPECT_FALSE(fs::exists(d.root + "/s-00002-of-00002.npy"));
  // Rank 1 cannot read its model (MPMD: each rank its own command line).
  write_sentences(in, 40);
  test::link_folder(model, d.root + "/broken", {{"model.safetensors", ""}});
  std::ofstream(d.root + "/broken/model.safetensors") << "not a safetensors file";
  rc = sh("TFM_COLLECTIVE_TIMEOUT=60 " + kMpirun + "-np 1 " + tfm_cmd(args + d.root + "/m.npy") + " : -np 1 " +
          tfm_cmd("embed --threads 1 --model " + d.root + "/broken -i " + in + " --chunk-lines 4 -o " + d.root + "/m.npy") +
          " > " + d.root + "/model.log 2>&1");
  EXPECT_NE(rc, 0);
  log = read_all(d.root + "/model.log");
  EXPECT_NE(log.find("tfm: error: rank 1 of 2: " + d.root + "/broken/model.safetensors"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(d.root + "/m.npy"));
  // Rank 1 dies (a process that ends without a word): mpirun ends the job; rank 0 writes nothing.
  rc = sh("TFM_COLLECTIVE_TIMEOUT=60 " + kMpirun + "-np 1 " + tfm_cmd(args + d.root + "/k.npy") +
          " : -np 1 sh -c 'kill -9 $$' > " + d.root + "/kill.log 2>&1");
  EXPECT_NE(rc, 0) << read_all(d.root + "/kill.log");
  EXPECT_FALSE(fs::exists(d.root + "/k.npy"));
  EXPECT_FALSE(has_temp_files(d.root)) << "a partial output was left";
  // Under mpirun the input must be a file each rank reads.
  rc = sh(kMpirun + "-np 2 " + tfm_cmd("embed --threads 1 --model " + model + " -i - -o " + d.root + "/x.npy") + " < " +
          in + " > " + d.root + "/stdin.log 2>&1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(read_all(d.root + "/stdin.log").find("the input must be a file"), std::string::npos)
      << read_all(d.root + "/stdin.log");
}

// Data-parallel fine-tuning (issue 25): `mpirun -np 2 tfm finetune` on each task equals one process on the same
// global batches (dropout on: its masks are keyed by example), rank 1 writes nothing, a rank that fails or dies
// fails the run, and a one-process run's saved state resumes on two ranks.
namespace {

std::string tfm_finetune(const std::string& args) {
  return std::string(TFM_BINARY) + " finetune --threads 1 --no-progress " + args;
}

// Largest |a - b| over the tensors of two safetensors files but the key biases (their gradient is rounding
// noise, which AdamW scales to +-lr a step; see tests/finetune_test_util.h); infinity when the names differ.
double max_weight_diff(const std::string& a_path, const std::string& b_path) {
  const SafeTensors a = SafeTensors::open(a_path), b = SafeTensors::open(b_path);
  if (a.names() != b.names() || a.names().empty()) return INFINITY;
  double worst = 0;
  for (const auto& n : a.names()) {
    if (n.find("attention.self.key.bias") != std::string::npos) continue;
    const Tensor x = a.get(n), y = b.get(n);
    if (x.numel() != y.numel()) return INFINITY;
    for (int64_t i = 0; i < x.numel(); ++i) worst = std::max(worst, (double)std::fabs(x.f32()[i] - y.f32()[i]));
  }
  return worst;
}

// Column `col` of every row of a train_log.csv but its header.
std::vector<double> log_column(const std::string& path, size_t col) {
  std::istringstream in(read_all(path));
  std::string line;
  std::getline(in, line);
  std::vector<double> v;
  while (std::getline(in, line)) {
    std::istringstream cells(line);
    std::string cell;
    for (size_t c = 0; c <= col && std::getline(cells, cell, ','); ++c) {
    }
    v.push_back(std::stod(cell));
  }
  return v;
}

// One process, then 2 ranks (rank 1 given another --out, which must stay unwritten), with the same `args`;
// the weights of `weights` (relative to --out) and every step's loss must agree.
void expect_two_ranks_match_one(const Dirs& d, const std::string& args, const std::string& weights = "model.safetensors") {
  ASSERT_EQ(0, sh(tfm_finetune(args + " --out " + d.root + "/one") + " > " + d.root + "/one.log 2>&1"))
      << read_all(d.root + "/one.log");
  const std::string two = "TFM_TRACE_DIST=1 " + kMpirun + "-np 1 " + tfm_finetune(args + " --out " + d.root + "/two") +
                          " : -np 1 " + tfm_finetune(args + " --out " + d.root + "/rank1_out");
  ASSERT_EQ(0, sh("cd " + d.root + " && " + two + " > " + d.root + "/two.log 2>&1")) << read_all(d.root + "/two.log");
  EXPECT_FALSE(fs::exists(d.root + "/rank1_out")) << "rank 1 must not write (or create) its --out";
  const double diff = max_weight_diff(d.root + "/one/" + weights, d.root + "/two/" + weights);
  std::printf("max |2 ranks - 1 rank| of the fine-tuned weights: %.3g\n", diff);
  EXPECT_LE(diff, 2e-5);
  const std::vector<double> l1 = log_column(d.root + "/one/train_log.csv", 2),
                            l2 = log_column(d.root + "/two/train_log.csv", 2);
  ASSERT_EQ(l1.size(), l2.size());
  ASSERT_GE(l1.size(), 4u);
  for (size_t i = 0; i < l1.size(); ++i) EXPECT_NEAR(l1[i], l2[i], 1e-5 * (1 + std::fabs(l1[i]))) << "step " << i + 1;
  // Replicas identical after every step, and both ranks held a share of some steps.
  const Trace t = parse_trace(read_all(d.root + "/two.log"));
  for (int64_t s = 1; s <= (int64_t)l1.size(); ++s) {
    ASSERT_TRUE(t.hashes.count({s, 0}) && t.hashes.count({s, 1})) << "no replica hash for step " << s;
    EXPECT_EQ(t.hashes.at({s, 0}), t.hashes.at({s, 1})) << "replicas differ after step " << s;
  }
  EXPECT_EQ(read_all(d.root + "/two.log").find("wrote "), read_all(d.root + "/two.log").rfind("wrote "))
      << "only rank 0 reports";
}

void write_classify_data(const std::string& dir) {
  const char* subjects[] = {"the cat", "the dog", "the man", "the house", "the park", "people"};
  const char* fillers[] = {"is", "is very", "has a"};
  std::ostringstream train;
  train << "text,label\n";
  int i = 0;
  for (const char* s : subjects)
    for (const char* f : fillers) {
      const bool pos = (i++ % 2) == 0;
      train << '"' << s << ' ' << f << ' ' << (pos ? "good" : "bad") << "\"," << (pos ? "pos" : "neg") << "\n";
    }
  std::ofstream(dir + "/train.csv") << train.str();
  std::ofstream(dir + "/eval.csv") << "text,label\nthe car is good,pos\nthe car is bad,neg\n";
}

}  // namespace

TEST(MpiFinetune, ClassifyOnTwoRanksMatchesOneProcess) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("ft_cls");
  write_classify_data(d.root);
  // 18 rows, batch 5 (shares of 2 and 3 rows), accumulation 2: the last step of an epoch has one micro-batch.
  expect_two_ranks_match_one(d, "--model " + test::fixture("heads_seqcls") + " --train " + d.root + "/train.csv --eval " +
                                    d.root + "/eval.csv --epochs 2 --batch-size 5 --gradient-accumulation-steps 2 "
                                    "--lr 1e-3 --warmup-steps 1 --weight-decay 0.01 --seed 3");
}

TEST(MpiFinetune, TokenClassifyOnTwoRanksMatchesOneProcess) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("ft_tok");
  std::ostringstream train;
  const char* locs[] = {"paris", "london", "england", "france"};
  const char* pers[] = {"man", "friends", "men"};
  for (const char* p : pers)
    for (const char* l : locs) {
      train << "{\"tokens\": [\"the\", \"" << p << "\", \"is\", \"in\", \"" << l
            << "\"], \"tags\": [\"O\", \"B-PER\", \"O\", \"O\", \"B-LOC\"]}\n";
      train << "{\"tokens\": [\"" << l << "\", \"has\", \"a\", \"park\"], \"tags\": [\"B-LOC\", \"O\", \"O\", \"O\"]}\n";
    }
  std::ofstream(d.root + "/train.jsonl") << train.str();
  // Labelled tokens differ between the shares: each share's mean is weighted by its count of them.
  expect_two_ranks_match_one(d, "--task token-classify --model " + test::fixture("heads_tokcls") + " --train " + d.root +
                                    "/train.jsonl --epochs 2 --batch-size 7 --lr 1e-3 --seed 5");
}

TEST(MpiFinetune, MaskedLMOnTwoRanksMatchesOneProcess) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("ft_mlm");
  std::ostringstream train;
  train << "text\n";
  const char* s[] = {"the cat sat on the mat", "the dog is in the park", "people live in london",
                     "the capital of france is paris", "the man has a red car", "friends watch football"};
  for (int r = 0; r < 3; ++r)
    for (const char* t : s) train << t << "\n";
  std::ofstream(d.root + "/train.csv") << train.str();
  // The masks are drawn for the whole micro-batch on every rank, so they are one process's.
  expect_two_ranks_match_one(d, "--task mlm --model " + test::fixture("heads_mlm") + " --train " + d.root +
                                    "/train.csv --eval " + d.root + "/train.csv --epochs 2 --batch-size 6 "
                                    "--gradient-accumulation-steps 2 --mlm-probability 0.3 --lr 1e-3 --seed 2");
}

TEST(MpiFinetune, EmbedOnTwoRanksMatchesOneProcessOnTheGlobalBatch) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("ft_emb");
  const char* a[] = {"the cat sat on the mat.", "paris is the capital of france.", "two men are playing football",
                     "what time is it?", "the dog is in the house", "people live in the red house"};
  const char* p[] = {"a cat is on the mat", "the capital of france is paris", "men playing football", "the time",
                     "a dog in a house", "people in a red house"};
  std::ostringstream train;
  train << "anchor,positive,negative\n";
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 6; ++i) train << a[i] << "," << p[i] << "," << p[(i + 1 + r) % 6] << "\n";
  std::ofstream(d.root + "/train.csv") << train.str();
  // MultipleNegativesRankingLoss over the gathered embeddings: every anchor's negatives are the candidates of the
  // whole batch of 4, as one process (gather_across_devices=True).
  expect_two_ranks_match_one(d, "--task embed --model " + test::fixture("st_mean") + " --train " + d.root +
                                    "/train.csv --eval " + d.root + "/train.csv --epochs 2 --batch-size 4 "
                                    "--lr 1e-3 --seed 4");
}

TEST(MpiFinetune, AFailingRankFailsTheRunWithItsMessage) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("ft_fail");
  write_classify_data(d.root);
  const std::string args = "--model " + test::fixture("heads_seqcls") + " --epochs 2 --batch-size 4 --out " + d.root + "/o";
  // Rank 1 alone cannot read its training file; rank 0 would wait for it in the first collective.
  const int rc = sh("TFM_COLLECTIVE_TIMEOUT=60 " + kMpirun + "-np 1 " + tfm_finetune(args + " --train " + d.root +
                    "/train.csv") + " : -np 1 " + tfm_finetune(args + " --train " + d.root + "/missing.csv") + " > " +
                    d.root + "/run.log 2>&1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(read_all(d.root + "/run.log").find("rank 1 of 2: " + d.root + "/missing.csv"), std::string::npos)
      << read_all(d.root + "/run.log");
  EXPECT_FALSE(fs::exists(d.root + "/o/model.safetensors"));
}

TEST(MpiFinetune, KilledRankEndsTheRun) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("ft_kill");
  write_classify_data(d.root);
  const std::string log = d.root + "/run.log", state = d.root + "/run/trainer_state.safetensors";
  pid_t job = spawn("TFM_TRACE_DIST=1 " + kMpirun + "-np 2 " +
                    tfm_finetune("--model " + test::fixture("heads_seqcls") + " --train " + d.root +
                                 "/train.csv --epochs 100000 --batch-size 4 --save-steps 1 --out " + d.root + "/run") +
                    " > " + log + " 2>&1");
  pid_t rank1 = wait_for_rank1(log, state, 120);
  ASSERT_GT(rank1, 0) << read_all(log);
  ASSERT_EQ(0, kill(rank1, SIGKILL));
  const int rc = wait_for(job, 60);
  EXPECT_NE(rc, -1) << "the job must end by itself once a rank died";
  EXPECT_NE(rc, 0) << "a job that lost a rank must exit non-zero";
  EXPECT_FALSE(fs::exists(d.root + "/run/model.safetensors"));
}

TEST(MpiFinetune, TwoRanksResumeAOneProcessState) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Dirs d("ft_resume");
  write_classify_data(d.root);
  FinetuneOptions o;
  o.train_file = d.root + "/train.csv";
  o.eval_file = d.root + "/eval.csv";
  o.epochs = 3;
  o.batch_size = 4;  // 5 steps an epoch
  o.learning_rate = 1e-3;
  o.save_steps = 2;
  o.threads = 1;
  o.out_dir = d.root + "/whole";
  finetune(test::fixture("heads_seqcls"), o);
  o.out_dir = d.root + "/stopped";
  o.progress = [](const FinetuneProgress& p) {
    if (!p.epoch_end && p.step == 7) throw std::runtime_error("stopped");
  };
  EXPECT_THROW(finetune(test::fixture("heads_seqcls"), o), std::runtime_error);  // saved at 2, 4, 5 and 6
  ASSERT_TRUE(fs::exists(o.out_dir + "/trainer_state.safetensors"));
  ASSERT_EQ(0, sh(kMpirun + "-np 2 " + tfm_finetune("--model " + test::fixture("heads_seqcls") + " --train " +
                                                   o.train_file + " --eval " + o.eval_file + " --epochs 3 "
                                                   "--batch-size 4 --lr 1e-3 --save-steps 2 --resume --out " +
                                                   o.out_dir) + " > " + d.root + "/resume.log 2>&1"))
      << read_all(d.root + "/resume.log");
  EXPECT_NE(read_all(d.root + "/resume.log").find("resumed from step 6"), std::string::npos)
      << read_all(d.root + "/resume.log");
  EXPECT_LE(max_weight_diff(d.root + "/whole/model.safetensors", o.out_dir + "/model.safetensors"), 2e-5);
  EXPECT_EQ(log_column(d.root + "/whole/train_log.csv", 0), log_column(o.out_dir + "/train_log.csv", 0));
}

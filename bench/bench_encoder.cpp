// Encoder inference benchmark: latency, GEMM throughput and peak memory of EncoderModel::forward.
//
//   bench_encoder MODEL_DIR [--threads 2] [--warmup 2] [--reps 10] [--shapes 1x128,8x128,1x512]
//                 [--sgemm] [--breakdown]
//
// MODEL_DIR holds a Hugging Face config.json and model.safetensors (weights used in place from the mmap, as
// load_encoder does). For each shape [B, L] (batch, tokens) it runs forward on random input_ids (no padding,
// token_type_ids zero) `warmup` times, then `reps` timed times, and prints one JSON line:
//
//   {"kind":"encoder","B":8,"L":128,"median_ms":..,"min_ms":..,"gflops":..,"gflop":..,"peak_rss_mb":..,...}
//
// gflop counts the GEMM work only: per layer per token 2*(4*H*H + 2*H*I) for the Q/K/V/output and the two FFN
// projections, plus 2*2*L*H for Q K^T and P V. gflops = gflop / median seconds. peak_rss_mb is VmHWM of
// /proc/self/status (MiB) after the shape ran, so it is cumulative over the shapes run so far; it includes the
// mmapped weight pages that forward touched.
//
// --dtype loads the model with that compute type (load_encoder; ops/gemm.h PackedLinear). "isa" is oneDNN's
// run-time ISA and "int8_weight_max" 127 (8-bit int8 weights, VNNI / AMX) or 63 (7-bit, without VNNI).
// ONEDNN_MAX_CPU_ISA=AVX2 (or AVX512_CORE) in the environment runs oneDNN's kernels of a CPU without VNNI (and
// without AVX512_BF16) on any CPU: int8 with 7-bit weights, as on Zen 3.
// --sgemm prints {"kind":"sgemm",...}: ops::gemm (plain dnnl_sgemm) for 1024x3072x768 (x[N, in] @ W[out, in]^T),
// and {"kind":"packed_gemm","dtype":..}: the same product on weights packed once (oneDNN matmul, PackedLinear)
// for fp32, bf16 and int8; the fp32 figure is the ceiling the encoder's GEMMs can reach with these threads.
// --breakdown prints {"kind":"breakdown",...}: per-op time of the real forward (packed weights, --dtype): QKV
// GEMM, attention, output GEMM, add + LayerNorm, FFN GEMMs (bias + activation fused), embeddings, pooler, and
// "other", from the model's OpTimer sections (core/profile.h), per shape; then {"kind":"breakdown_total",...}.
// The kernel ISA of our own kernels (ops/isa.h) is printed with it: TFM_ISA=avx2 selects the baseline copies.
// --batches FILE (instead of --shapes): a length mix, one sentence per line as space-separated token ids
// (special tokens included), cut into batches of --batch-size (32) in file order; each batch is padded to its
// longest sentence and run as `tfm embed` runs it (EncoderModel::forward_unpadded: the layers on the real tokens
// only), or as the padded batch with --padded (EncoderModel::forward with attention_mask). One timed rep runs
// every batch; prints {"kind":"length_mix","mode":"unpadded"|"padded","batches":..,"sentences":..,
// "real_tokens":..,"padded_tokens":..,"median_ms":.. (one pass over all batches),"min_ms":..,"checksum":..}.
// bench/length_mix.sh drives it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/threading.h"
#include "models/encoder.h"
#include "ops/gemm.h"
#include "nn/weights.h"
#include "nn/layers.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/isa.h"
#include "core/profile.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model_dir;
  int threads = 2;
  int warmup = 2;
  int reps = 10;
  std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 128}, {8, 128}, {1, 512}};
  bool sgemm = false;
  bool breakdown = false;
  std::string dtype = "fp32";
  std::string batches;  // --batches FILE: the length mix
  int batch_size = 32;
  bool padded = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_encoder: %s\nusage: bench_encoder MODEL_DIR [--threads N] [--warmup N] [--reps N] "
               "[--shapes BxL,BxL,...] [--dtype fp32|bf16|int8] [--sgemm] [--breakdown]\n"
               "       [--batches FILE [--batch-size 32] [--padded]]\n",
               why.c_str());
  std::exit(2);
}

int parse_int(const std::string& flag, const std::string& s) {
  try {
    size_t pos = 0;
    int v = std::stoi(s, &pos);
    if (pos != s.size() || v < 0) throw std::invalid_argument(s);
    return v;
  } catch (const std::exception&) {
    usage(flag + " expects a non-negative integer, got '" + s + "'");
  }
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") o.threads = parse_int(a, value());
    else if (a == "--warmup") o.warmup = parse_int(a, value());
    else if (a == "--reps") o.reps = std::max(1, parse_int(a, value()));
    else if (a == "--sgemm") o.sgemm = true;
    else if (a == "--dtype") o.dtype = value();
    else if (a == "--breakdown") o.breakdown = true;
    else if (a == "--batches") o.batches = value();
    else if (a == "--batch-size") o.batch_size = std::max(1, parse_int(a, value()));
    else if (a == "--padded") o.padded = true;
    else if (a == "--shapes") {
      o.shapes.clear();
      std::stringstream ss(value());
      std::string item;
      while (std::getline(ss, item, ',')) {
        size_t x = item.find('x');
        if (x == std::string::npos) usage("shape '" + item + "' is not BxL");
        int64_t b = parse_int("--shapes", item.substr(0, x)), l = parse_int("--shapes", item.substr(x + 1));
        if (b <= 0 || l <= 0) usage("shape '" + item + "' must be positive");
        o.shapes.push_back({b, l});
      }
    } else if (!a.empty() && a[0] == '-') usage("unknown option " + a);
    else if (o.model_dir.empty()) o.model_dir = a;
    else usage("unexpected argument " + a);
  }
  if (o.model_dir.empty() && !o.sgemm) usage("MODEL_DIR is required");
  return o;
}

// A field of /proc/self/status ("VmHWM", "VmRSS", "RssFile", ...) in MiB, or -1 if absent.
double proc_status_mb(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.compare(0, key.size() + 1, key + ":") == 0) {
      std::istringstream is(line.substr(key.size() + 1));
      double kb = 0;
      is >> kb;
      return kb / 1024.0;
    }
  }
  return -1.0;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median seconds of `reps` calls of fn after `warmup` untimed calls.
std::vector<double> time_calls(int warmup, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  return t;
}

// GEMM flops of one forward over [B, L] (see the header comment).
double encoder_gflop(const tfm::EncoderConfig& c, int64_t B, int64_t L) {
  double H = (double)c.hidden_size, I = (double)c.intermediate_size;
  double per_token = 2.0 * (4.0 * H * H + 2.0 * H * I) + 2.0 * 2.0 * (double)L * H;
  return per_token * (double)(B * L) * (double)c.num_hidden_layers * 1e-9;
}

tfm::Tensor random_ids(int64_t B, int64_t L, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> ids(B * L);
  for (auto& id : ids) id = dist(rng);
  return tfm::Tensor::from_i64({B, L}, ids);
}

void run_sgemm(const Options& o) {
  const int M = 1024, N = 3072, K = 768;  // x[M, K] @ W[N, K]^T, the intermediate.dense GEMM of [8, 128]
  std::vector<float> a((size_t)M * K), w((size_t)N * K), c((size_t)M * N);
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : a) x = u(rng);
  for (auto& x : w) x = u(rng) * 0.036f;
  double gflop = 2.0 * M * N * K * 1e-9;
  auto report = [&](const char* kind, const char* dtype, const std::vector<double>& t) {
    double med = median(t), best = *std::min_element(t.begin(), t.end());
    std::printf(
        "{\"kind\":\"%s\",\"dtype\":\"%s\",\"M\":%d,\"N\":%d,\"K\":%d,\"threads\":%d,\"median_ms\":%.3f,"
        "\"min_ms\":%.3f,\"gflops\":%.1f,\"best_gflops\":%.1f,\"isa\":\"%s\"}\n",
        kind, dtype, M, N, K, o.threads, med * 1e3, best * 1e3, gflop / med, gflop / best,
        tfm::ops::cpu_isa_name().c_str());
    std::fflush(stdout);
  };
  // Plain dnnl_sgemm (what training and unpacked products use).
  report("sgemm", "fp32", time_calls(3, std::max(o.reps, 20), [&] {
           tfm::ops::gemm(false, true, M, N, K, 1.0f, a.data(), K, w.data(), K, 0.0f, c.data(), N);
         }));
  // The ceiling the encoder's packed GEMMs can reach: oneDNN matmul on weights reordered once (PackedLinear).
  for (auto ct : {tfm::ops::ComputeType::F32, tfm::ops::ComputeType::BF16, tfm::ops::ComputeType::I8}) {
    tfm::ops::PackedLinear lin(w.data(), nullptr, K, N, ct);
    report("packed_gemm", tfm::ops::compute_type_name(ct),
           time_calls(3, std::max(o.reps, 20), [&] { lin.forward(c.data(), a.data(), M); }));
  }
}

// Per-op time of the real inference forward (packed weights, the model's --dtype): the OpTimer sections of
// src/models/bert.cpp (core/profile.h), summed over `reps` forwards after warm-up and divided by reps. A section
// covers all layers; GEMM sections report GFLOP/s. "other" is the forward's wall time outside every section.
void run_breakdown(const Options& o, tfm::EncoderModel& model, int64_t B, int64_t L) {
  using namespace tfm;
  const EncoderConfig& c = model.config();
  Tensor ids = random_ids(B, L, c.vocab_size, (uint64_t)(B * 1000 + L));
  for (int i = 0; i < std::max(1, o.warmup); ++i) model.forward(ids, Tensor(), Tensor());
  const int reps = std::max(o.reps, 5);
  reset_op_profile();
  set_op_profiling(true);
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) model.forward(ids, Tensor(), Tensor());
  double total = seconds_since(t0) / reps;
  set_op_profiling(false);
  const double H = (double)c.hidden_size, I = (double)c.intermediate_size, N = (double)(B * L);
  const double NL = (double)c.num_hidden_layers;
  const std::map<std::string, double> gflop = {
      {"qkv_gemm", 2.0 * N * 3 * H * H * NL * 1e-9},     {"attention", 2.0 * 2.0 * N * (double)L * H * NL * 1e-9},
      {"attn_out_gemm", 2.0 * N * H * H * NL * 1e-9},    {"ffn_in_gemm_act", 2.0 * N * H * I * NL * 1e-9},
      {"ffn_out_gemm", 2.0 * N * H * I * NL * 1e-9}};
  double covered = 0;
  auto print = [&](const std::string& name, double sec, int64_t calls) {
    auto g = gflop.find(name);
    double gf = g != gflop.end() && sec > 0 ? g->second / sec : 0.0;
    std::printf(
        "{\"kind\":\"breakdown\",\"dtype\":\"%s\",\"isa\":\"%s\",\"B\":%lld,\"L\":%lld,\"section\":\"%s\","
        "\"calls_per_forward\":%.1f,\"ms_per_layer\":%.4f,\"ms_all_layers\":%.3f,\"share\":%.3f,\"gflops\":%.1f}\n",
        o.dtype.c_str(), ops::kernel_isa_name(ops::kernel_isa()), (long long)B, (long long)L, name.c_str(),
        (double)calls / reps, sec * 1e3 / NL, sec * 1e3, total > 0 ? sec / total : 0.0, gf);
  };
  for (const OpStat& st : op_profile()) {
    double sec = st.seconds / reps;
    covered += sec;
    print(st.name, sec, st.calls);
  }
  print("other", std::max(0.0, total - covered), reps);
  std::printf("{\"kind\":\"breakdown_total\",\"dtype\":\"%s\",\"B\":%lld,\"L\":%lld,\"forward_ms\":%.3f}\n",
              o.dtype.c_str(), (long long)B, (long long)L, total * 1e3);
  std::fflush(stdout);
}

// The length mix of --batches: every batch padded to its longest sentence, with its attention_mask.
void run_length_mix(const Options& o, const tfm::EncoderModel& model) {
  std::ifstream f(o.batches);
  if (!f) throw std::runtime_error("cannot read --batches file " + o.batches);
  std::vector<std::vector<int64_t>> sents;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::vector<int64_t> ids;
    int64_t id;
    while (is >> id) ids.push_back(id);
    if (!ids.empty()) sents.push_back(std::move(ids));
  }
  if (sents.empty()) throw std::runtime_error(o.batches + " holds no sentence");
  struct Batch {
    tfm::Tensor ids, mask;
  };
  std::vector<Batch> batches;
  int64_t real = 0, padded = 0;
  for (size_t s0 = 0; s0 < sents.size(); s0 += (size_t)o.batch_size) {
    const size_t n = std::min(sents.size() - s0, (size_t)o.batch_size);
    int64_t L = 0;
    for (size_t i = 0; i < n; ++i) L = std::max(L, (int64_t)sents[s0 + i].size());
    std::vector<int64_t> ids(n * L, 0), mask(n * L, 0);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < sents[s0 + i].size(); ++j) {
        ids[i * L + j] = sents[s0 + i][j];
        mask[i * L + j] = 1;
        ++real;
      }
    padded += (int64_t)n * L;
    batches.push_back({tfm::Tensor::from_i64({(int64_t)n, L}, ids), tfm::Tensor::from_i64({(int64_t)n, L}, mask)});
  }
  double sum = 0;
  auto t = time_calls(o.warmup, o.reps, [&] {
    sum = 0;
    for (const Batch& b : batches) {
      tfm::EncoderOutput out = o.padded ? model.forward(b.ids, tfm::Tensor(), b.mask)
                                        : model.forward_unpadded(b.ids, tfm::Tensor(), b.mask);
      const float* h = out.last_hidden_state.f32();  // real tokens only (padding differs between the modes)
      const int64_t* m = b.mask.i64();
      const int64_t H = out.last_hidden_state.size(-1);
      for (int64_t r = 0; r < b.mask.numel(); ++r)
        if (m[r]) sum += h[r * H];
    }
  });
  std::printf(
      "{\"kind\":\"length_mix\",\"dtype\":\"%s\",\"mode\":\"%s\",\"batch_size\":%d,\"batches\":%zu,"
      "\"sentences\":%zu,\"real_tokens\":%lld,\"padded_tokens\":%lld,\"reps\":%d,\"median_ms\":%.3f,"
      "\"min_ms\":%.3f,\"checksum\":%.6g,\"kernel_isa\":\"%s\"}\n",
      o.dtype.c_str(), o.padded ? "padded" : "unpadded", o.batch_size, batches.size(), sents.size(), (long long)real,
      (long long)padded, o.reps, median(t) * 1e3, *std::min_element(t.begin(), t.end()) * 1e3, sum,
      tfm::ops::kernel_isa_name(tfm::ops::kernel_isa()));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_args(argc, argv);
  tfm::set_num_threads(o.threads);
  try {
    if (o.sgemm) run_sgemm(o);
    if (o.model_dir.empty()) return 0;

    double rss0 = proc_status_mb("VmRSS");
    auto t0 = Clock::now();
    std::unique_ptr<tfm::EncoderModel> model = tfm::load_encoder(o.model_dir, tfm::ops::parse_compute_type(o.dtype));
    double load_s = seconds_since(t0);
    const tfm::EncoderConfig& c = model->config();
    std::ifstream wf(o.model_dir + "/model.safetensors", std::ios::binary | std::ios::ate);
    double weights_mb = (double)wf.tellg() / (1024.0 * 1024.0);
    std::printf(
        "{\"kind\":\"model\",\"dtype\":\"%s\",\"dir\":\"%s\",\"layers\":%lld,\"hidden\":%lld,\"heads\":%lld,\"intermediate\":%lld,"
        "\"threads\":%d,\"weights_mb\":%.1f,\"load_ms\":%.1f,\"rss_before_load_mb\":%.1f,\"rss_after_load_mb\":%.1f}\n",
        o.dtype.c_str(), o.model_dir.c_str(), (long long)c.num_hidden_layers, (long long)c.hidden_size,
        (long long)c.num_attention_heads, (long long)c.intermediate_size, tfm::get_num_threads(), weights_mb,
        load_s * 1e3, rss0, proc_status_mb("VmRSS"));
    std::fflush(stdout);

    if (!o.batches.empty()) {
      run_length_mix(o, *model);
      return 0;
    }
    for (auto [B, L] : o.shapes) {
      tfm::Tensor ids = random_ids(B, L, c.vocab_size, (uint64_t)(B * 1000 + L));
      tfm::EncoderOutput out;
      auto t = time_calls(o.warmup, o.reps, [&] { out = model->forward(ids, tfm::Tensor(), tfm::Tensor()); });
      double med = median(t), best = *std::min_element(t.begin(), t.end());
      double gflop = encoder_gflop(c, B, L);
      // A checksum keeps the work observable and catches NaNs.
      double sum = 0;
      const float* h = out.last_hidden_state.f32();
      for (int64_t i = 0; i < out.last_hidden_state.numel(); ++i) sum += h[i];
      std::printf(
          "{\"kind\":\"encoder\",\"dtype\":\"%s\",\"B\":%lld,\"L\":%lld,\"reps\":%d,\"median_ms\":%.3f,\"min_ms\":%.3f,"
          "\"gflop\":%.3f,\"gflops\":%.1f,\"peak_rss_mb\":%.1f,\"rss_mb\":%.1f,\"weights_mb\":%.1f,"
          "\"checksum\":%.6g,\"isa\":\"%s\",\"int8_weight_max\":%d}\n",
          o.dtype.c_str(), (long long)B, (long long)L, o.reps, med * 1e3, best * 1e3, gflop, gflop / med, proc_status_mb("VmHWM"),
          proc_status_mb("VmRSS"), weights_mb, sum, tfm::ops::cpu_isa_name().c_str(), tfm::ops::int8_weight_max());
      std::fflush(stdout);
    }
    if (o.breakdown)
      for (auto [B, L] : o.shapes) run_breakdown(o, *model, B, L);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_encoder: %s\n", e.what());
    return 1;
  }
  return 0;
}

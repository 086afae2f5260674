#include "train/recipe.h"

#include "ops/gemm.h"
#include "ops/gemm_bf16.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "core/format.h"
#include "core/profile.h"
#include "core/rng.h"
#include "decode/search.h"
#include "dist/communicator.h"
#include "dist/shard.h"
#include "eval/corpus_bleu.h"
#include "io/atomic_file.h"
#include "io/json_util.h"
#include "io/plot.h"
#include "io/safetensors.h"
#include "models/seq2seq.h"
#include "text/subword.h"
#include "io/text_file.h"
#include "train/optim.h"
#include "train/replicas.h"

namespace tfm {

double inverse_sqrt_lr(double peak, int64_t warmup, int64_t step) {
  if (step < 1) step = 1;
  if (warmup < 1) return peak / std::sqrt((double)step);
  return peak * std::min((double)step / warmup, std::sqrt((double)warmup / step));
}

// ---------------------------------------------------------------- config

// The language code a corpus file's name ends in: "multi30k/train.en.gz" -> "en" (2 or 3 lowercase letters before
// an optional .gz), else "".
static std::string language_suffix(std::string name) {
  if (name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0) name.resize(name.size() - 3);
  const size_t dot = name.rfind('.'), slash = name.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  const std::string code = name.substr(dot + 1);
  if (code.size() < 2 || code.size() > 3) return "";
  for (char c : code)
    if (c < 'a' || c > 'z') return "";
  return code;
}

const std::vector<std::string>& RecipeConfig::known_keys() {
  static const std::vector<std::string> known = {
      "data_dir", "train_src", "train_tgt", "valid_src", "valid_tgt", "source_lang", "target_lang", "train_limit",
      "valid_limit", "vocab_size",
      "subword_type", "num_hiddens", "num_layers", "num_heads", "ffn_num_hiddens", "dropout", "norm_first",
      "shared_embeddings", "attention_bias", "activation", "max_len", "num_steps", "max_tokens", "epochs", "lr",
      "warmup_steps", "beta1", "beta2", "adam_eps", "weight_decay", "adamw", "label_smoothing", "clip_norm", "seed",
      "patience", "time_limit_minutes", "checkpoint_every", "stop_after_steps", "threads", "precision", "comment"};
  return known;
}

RecipeConfig RecipeConfig::from_json(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object()) throw std::runtime_error(file + ": expected a JSON object");
  RecipeConfig c;
  const std::vector<std::string>& known = known_keys();
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find(known.begin(), known.end(), it.key()) == known.end())
      throw std::runtime_error(file + ": unknown key '" + it.key() + "'");
  c.data_dir = json_string_or(j, "data_dir", "", file);
  c.train_src = json_string_or(j, "train_src", c.train_src, file);
  c.train_tgt = json_string_or(j, "train_tgt", c.train_tgt, file);
  c.valid_src = json_string_or(j, "valid_src", c.valid_src, file);
  c.valid_tgt = json_string_or(j, "valid_tgt", c.valid_tgt, file);
  c.source_lang = json_string_or(j, "source_lang", language_suffix(c.train_src), file);
  c.target_lang = json_string_or(j, "target_lang", language_suffix(c.train_tgt), file);
  c.train_limit = json_int_or(j, "train_limit", c.train_limit, file);
  c.valid_limit = json_int_or(j, "valid_limit", c.valid_limit, file);
  c.vocab_size = json_int_or(j, "vocab_size", c.vocab_size, file);
  c.subword_type = json_string_or(j, "subword_type", c.subword_type, file);
  c.num_hiddens = json_int_or(j, "num_hiddens", c.num_hiddens, file);
  c.num_layers = json_int_or(j, "num_layers", c.num_layers, file);
  c.num_heads = json_int_or(j, "num_heads", c.num_heads, file);
  c.ffn_num_hiddens = json_int_or(j, "ffn_num_hiddens", c.ffn_num_hiddens, file);
  c.dropout = json_number_or(j, "dropout", c.dropout, file);
  c.norm_first = json_bool_or(j, "norm_first", c.norm_first, file);
  c.shared_embeddings = json_bool_or(j, "shared_embeddings", c.shared_embeddings, file);
  c.attention_bias = json_bool_or(j, "attention_bias", c.attention_bias, file);
  c.activation = json_string_or(j, "activation", c.activation, file);
  c.max_len = json_int_or(j, "max_len", c.max_len, file);
  c.num_steps = json_int_or(j, "num_steps", c.num_steps, file);
  c.max_tokens = json_int_or(j, "max_tokens", c.max_tokens, file);
  c.epochs = json_int_or(j, "epochs", c.epochs, file);
  c.lr = json_number_or(j, "lr", c.lr, file);
  c.warmup_steps = json_int_or(j, "warmup_steps", c.warmup_steps, file);
  c.beta1 = json_number_or(j, "beta1", c.beta1, file);
  c.beta2 = json_number_or(j, "beta2", c.beta2, file);
  c.adam_eps = json_number_or(j, "adam_eps", c.adam_eps, file);
  c.weight_decay = json_number_or(j, "weight_decay", c.weight_decay, file);
  c.adamw = json_bool_or(j, "adamw", c.adamw, file);
  c.label_smoothing = (float)json_number_or(j, "label_smoothing", c.label_smoothing, file);
  c.clip_norm = json_number_or(j, "clip_norm", c.clip_norm, file);
  const int64_t seed = json_int_or(j, "seed", (int64_t)c.seed, file);
  if (seed < 0) throw std::runtime_error(file + ": key 'seed' must be >= 0, found " + std::to_string(seed));
  c.seed = (uint64_t)seed;
  c.patience = json_int_or(j, "patience", c.patience, file);
  c.time_limit_minutes = json_number_or(j, "time_limit_minutes", c.time_limit_minutes, file);
  c.checkpoint_every = json_int_or(j, "checkpoint_every", c.checkpoint_every, file);
  c.stop_after_steps = json_int_or(j, "stop_after_steps", c.stop_after_steps, file);
  c.threads = (int)json_int_or(j, "threads", c.threads, file);
  c.precision = json_string_or(j, "precision", c.precision, file);
  if (c.precision != "fp32" && c.precision != "bf16")
    throw std::runtime_error(file + ": key 'precision' must be 'fp32' or 'bf16', found '" + c.precision + "'");
  auto positive = [&](const char* k, double v) {
    if (!(v > 0)) throw std::runtime_error(file + ": key '" + k + "' must be positive");
  };
  positive("vocab_size", (double)c.vocab_size);
  positive("max_len", (double)c.max_len);
  positive("num_steps", (double)c.num_steps);
  positive("max_tokens", (double)c.max_tokens);
  positive("epochs", (double)c.epochs);
  positive("lr", c.lr);
  positive("checkpoint_every", (double)c.checkpoint_every);
  auto at_least = [&](const char* k, double v, double lo) {
    if (!(v >= lo)) throw std::runtime_error(file + ": key '" + k + "' must be >= " + std::to_string((int)lo));
  };
  positive("adam_eps", c.adam_eps);
  positive("clip_norm", c.clip_norm);
  at_least("patience", (double)c.patience, 1);
  for (auto [k, v] : {std::pair<const char*, double>{"warmup_steps", (double)c.warmup_steps},
                      {"weight_decay", c.weight_decay}, {"time_limit_minutes", c.time_limit_minutes},
                      {"stop_after_steps", (double)c.stop_after_steps}, {"train_limit", (double)c.train_limit},
                      {"valid_limit", (double)c.valid_limit}, {"threads", (double)c.threads}})
    at_least(k, v, 0);
  if (!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1))
    throw std::runtime_error(file + ": keys 'beta1' and 'beta2' must be in [0, 1)");
  if (c.max_len < c.num_steps)
    throw std::runtime_error(file + ": max_len (" + std::to_string(c.max_len) + ") must be at least num_steps (" +
                             std::to_string(c.num_steps) + ")");
  if (c.max_len > c.max_tokens / 2)  // not 2 * max_len: a huge max_len would overflow (found by fuzz_config)
    throw std::runtime_error(file + ": max_tokens (" + std::to_string(c.max_tokens) +
                             ") must hold at least one pair of max_len (" + std::to_string(c.max_len) + ") tokens");
  if (!(c.label_smoothing >= 0 && c.label_smoothing < 1))
    throw std::runtime_error(file + ": key 'label_smoothing' must be in [0, 1)");
  return c;
}

// The shortest decimal that reads back as this float: label_smoothing 0.1f is written 0.1, not 0.10000000149011612.
static double shortest_decimal(float f) {
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof buf, f);
  return std::strtod(std::string(buf, res.ptr).c_str(), nullptr);
}

nlohmann::json RecipeConfig::to_json() const {
  return {{"data_dir", data_dir},       {"train_src", train_src},
          {"train_tgt", train_tgt},     {"valid_src", valid_src},
          {"valid_tgt", valid_tgt},     {"source_lang", source_lang},
          {"target_lang", target_lang}, {"train_limit", train_limit},
          {"valid_limit", valid_limit}, {"vocab_size", vocab_size},
          {"subword_type", subword_type}, {"num_hiddens", num_hiddens},
          {"num_layers", num_layers},   {"num_heads", num_heads},
          {"ffn_num_hiddens", ffn_num_hiddens}, {"dropout", dropout},
          {"norm_first", norm_first},   {"shared_embeddings", shared_embeddings},
          {"attention_bias", attention_bias}, {"activation", activation},
          {"max_len", max_len},         {"num_steps", num_steps},
          {"max_tokens", max_tokens},   {"epochs", epochs},
          {"lr", lr},                   {"warmup_steps", warmup_steps},
          {"beta1", beta1},             {"beta2", beta2},
          {"adam_eps", adam_eps},       {"weight_decay", weight_decay},
          {"adamw", adamw},             {"label_smoothing", shortest_decimal(label_smoothing)},
          {"clip_norm", clip_norm},     {"seed", seed},
          {"patience", patience},       {"time_limit_minutes", time_limit_minutes},
          {"checkpoint_every", checkpoint_every}, {"stop_after_steps", stop_after_steps},
          {"threads", threads}, {"precision", precision}};
}

// ---------------------------------------------------------------- data

namespace {

std::string resolve(const std::string& dir, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return dir + "/" + p;
}

struct Encoded {
  std::vector<std::vector<int64_t>> src, tgt;  // ids + <eos>, at most max_len
  std::vector<std::string> tgt_text;           // raw reference sentences
};

// The pairs of two parallel files, encoded. With several ranks each encodes a contiguous share of the lines and
// the shares are exchanged (every rank then holds what one process encodes alone: the encoding is per line), so
// the start-up of a data-parallel run does not repeat the whole corpus's subword encoding on every rank.
Encoded encode_pairs(const SubwordModel& spm, const std::string& src_path, const std::string& tgt_path,
                     int64_t limit, int64_t max_len, dist::Communicator& comm) {
  std::vector<std::string> s = read_lines(src_path), t = read_lines(tgt_path);
  if (s.size() != t.size())
    throw std::runtime_error(src_path + " has " + std::to_string(s.size()) + " lines but " + tgt_path + " has " +
                             std::to_string(t.size()) + "; parallel files must align line by line");
  if (limit > 0 && (size_t)limit < s.size()) s.resize(limit), t.resize(limit);
  Encoded e;
  auto enc = [&](const std::string& line) {
    std::vector<int64_t> ids = spm.encode(line);
    if ((int64_t)ids.size() > max_len - 1) ids.resize(max_len - 1);
    ids.push_back(spm.eos_id());
    return ids;
  };
  const int64_t n = (int64_t)s.size(), world = comm.world_size();
  e.src.resize(n);
  e.tgt.resize(n);
  auto share = [&](int64_t r) { return std::pair<int64_t, int64_t>{n * r / world, n * (r + 1) / world}; };
  const auto [lo, hi] = share(comm.rank());
  for (int64_t i = lo; i < hi; ++i) {
    e.src[i] = enc(s[i]);
    e.tgt[i] = enc(t[i]);
  }
  if (world > 1) {
    // Each rank's share as int32 values: per pair the source length, the target length, then both id lists.
    for (int64_t r = 0; r < world; ++r) {
      const auto [a, b] = share(r);
      std::vector<int32_t> packed;
      if (r == comm.rank())
        for (int64_t i = a; i < b; ++i) {
          packed.push_back((int32_t)e.src[i].size());
          packed.push_back((int32_t)e.tgt[i].size());
          packed.insert(packed.end(), e.src[i].begin(), e.src[i].end());
          packed.insert(packed.end(), e.tgt[i].begin(), e.tgt[i].end());
        }
      int64_t count = (int64_t)packed.size();
      comm.broadcast(&count, sizeof count, (int)r);
      packed.resize((size_t)count);
      if (count > 0) comm.broadcast(packed.data(), count * (int64_t)sizeof(int32_t), (int)r);
      if (r == comm.rank()) continue;
      size_t at = 0;
      for (int64_t i = a; i < b; ++i) {
        const size_t ls = (size_t)packed[at], lt = (size_t)packed[at + 1];
        at += 2;
        e.src[i].assign(packed.begin() + at, packed.begin() + at + ls);
        at += ls;
        e.tgt[i].assign(packed.begin() + at, packed.begin() + at + lt);
        at += lt;
      }
    }
  }
  e.tgt_text = std::move(t);
  return e;
}

// Length-bucketed batches: pairs sorted by length, cut so that rows * (longest src + longest tgt) <= max_tokens.
std::vector<std::vector<int64_t>> make_batches(const Encoded& d, int64_t max_tokens) {
  std::vector<int64_t> idx(d.src.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = (int64_t)i;
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    return std::make_pair(d.tgt[a].size(), d.src[a].size()) < std::make_pair(d.tgt[b].size(), d.src[b].size());
  });
  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> cur;
  size_t ls = 0, lt = 0;
  for (int64_t i : idx) {
    size_t nls = std::max(ls, d.src[i].size()), nlt = std::max(lt, d.tgt[i].size());
    if (!cur.empty() && (int64_t)((cur.size() + 1) * (nls + nlt)) > max_tokens) {
      batches.push_back(cur);
      cur.clear();
      nls = d.src[i].size();
      nlt = d.tgt[i].size();
    }
    cur.push_back(i);
    ls = nls;
    lt = nlt;
  }
  if (!cur.empty()) batches.push_back(cur);
  return batches;
}

struct BatchArrays {
  std::vector<int64_t> src, src_valid, dec, labels, tgt_valid;
  Seq2SeqBatch view;
};

void fill_batch(BatchArrays& a, const Encoded& d, const std::vector<int64_t>& rows, int64_t pad, int64_t bos) {
  const int64_t B = (int64_t)rows.size();
  int64_t Ls = 0, Lt = 0;
  for (int64_t r : rows) Ls = std::max<int64_t>(Ls, d.src[r].size()), Lt = std::max<int64_t>(Lt, d.tgt[r].size());
  a.src.assign(B * Ls, pad);
  a.dec.assign(B * Lt, pad);
  a.labels.assign(B * Lt, pad);
  a.src_valid.resize(B);
  a.tgt_valid.resize(B);
  for (int64_t b = 0; b < B; ++b) {
    const auto& s = d.src[rows[b]];
    const auto& t = d.tgt[rows[b]];
    std::copy(s.begin(), s.end(), a.src.begin() + b * Ls);
    std::copy(t.begin(), t.end(), a.labels.begin() + b * Lt);
    a.dec[b * Lt] = bos;  // teacher forcing: <bos> + labels[:-1]
    std::copy(t.begin(), t.end() - 1, a.dec.begin() + b * Lt + 1);
    a.src_valid[b] = (int64_t)s.size();
    a.tgt_valid[b] = (int64_t)t.size();
  }
  a.view = Seq2SeqBatch{a.src.data(), a.src_valid.data(), a.dec.data(), a.labels.data(), a.tgt_valid.data(), B, Ls, Lt};
}

// The order of batches in an epoch: a permutation from a generator seeded by (seed, epoch), so a resumed run
// recomputes it without stored state.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  Rng rng(seed * 0x9E3779B97F4A7C15ull + (uint64_t)epoch);
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng.below((uint64_t)i + 1)]);
  return order;
}

Seq2SeqConfig model_config(const RecipeConfig& c, int64_t vocab) {
  Seq2SeqConfig m;
  m.num_hiddens = c.num_hiddens;
  m.num_layers = c.num_layers;
  m.num_heads = c.num_heads;
  m.ffn_num_hiddens = c.ffn_num_hiddens;
  m.dropout = c.dropout;
  m.num_steps = c.num_steps;
  m.src_vocab_size = m.tgt_vocab_size = vocab;
  m.max_len = std::max(c.max_len, c.num_steps) + 1;
  m.decode_positions = "absolute";
  m.norm_first = c.norm_first;
  m.shared_embeddings = c.shared_embeddings;
  m.attention_bias = c.attention_bias;
  m.activation = c.activation;
  return Seq2SeqConfig::from_json(m.to_json(), "training config");  // same validation as a config.json
}

struct Validation {
  double loss = 0, bleu = 0;
};

// Validation loss and BLEU, the batches shared out over the ranks (batch k on rank k mod world_size): every rank
// returns the values one process computes alone, bit for bit. Per-batch losses travel in batch order (an all-reduce
// of vectors that are zero except at a rank's own batches adds only zeros) and are summed in that order; the
// hypotheses go to rank 0, which scores BLEU and broadcasts it.
Validation validate(Seq2SeqModel& model, const SubwordModel& spm, const Encoded& valid,
                    const std::vector<std::vector<int64_t>>& batches, int64_t num_steps, dist::Communicator& comm) {
  const int rank = comm.rank(), world = comm.world_size();
  const int64_t nb = (int64_t)batches.size();
  Validation v;
  std::vector<double> batch_loss(nb, 0.0), batch_tok(nb, 0.0);
  BatchArrays a;
  std::vector<std::string> hyps(valid.src.size());
  DecodeOptions opt;
  opt.max_steps = num_steps;
  opt.bos_id = spm.bos_id();
  opt.eos_id = spm.eos_id();
  for (int64_t k = rank; k < nb; k += world) {
    const std::vector<int64_t>& rows = batches[k];
    fill_batch(a, valid, rows, spm.pad_id(), spm.bos_id());
    // Loss without dropout or smoothing; gradients are computed and discarded by the caller's zero_grad.
    LossResult r = model.forward_backward(a.view, nullptr, 0.0f, /*token_mean=*/false);
    batch_loss[k] = r.token_loss_sum;
    batch_tok[k] = (double)r.num_tokens;
    auto out = greedy_decode(model, a.src.data(), a.src_valid.data(), a.view.batch, a.view.src_len, opt);
    for (size_t b = 0; b < rows.size(); ++b) hyps[rows[b]] = spm.decode(out[b]);
  }
  model.params().zero_grad();
  if (world > 1) {
    comm.all_reduce_sum(batch_loss);
    comm.all_reduce_sum(batch_tok);
    // Each rank's hypotheses to rank 0: lengths, then the bytes, of its batches' rows in batch order.
    constexpr int kTag = 7;
    for (int src = 1; src < world; ++src) {
      if (rank != 0 && rank != src) continue;
      std::vector<int64_t> lens;
      std::string bytes;
      for (int64_t k = src; k < nb; k += world)
        for (int64_t row : batches[k]) {
          lens.push_back(rank == 0 ? 0 : (int64_t)hyps[row].size());
          if (rank != 0) bytes += hyps[row];
        }
      if (lens.empty()) continue;
      if (rank == src) {
        int64_t total = (int64_t)bytes.size();
        comm.send(lens.data(), (int64_t)(lens.size() * sizeof(int64_t)), 0, kTag);
        comm.send(&total, sizeof total, 0, kTag);
        if (total > 0) comm.send(bytes.data(), total, 0, kTag);
        continue;
      }
      int64_t total = 0;
      comm.receive(lens.data(), (int64_t)(lens.size() * sizeof(int64_t)), src, kTag);
      comm.receive(&total, sizeof total, src, kTag);
      bytes.resize((size_t)total);
      if (total > 0) comm.receive(bytes.data(), total, src, kTag);
      size_t at = 0, i = 0;
      for (int64_t k = src; k < nb; k += world)
        for (int64_t row : batches[k]) {
          hyps[row] = bytes.substr(at, (size_t)lens[i]);
          at += (size_t)lens[i++];
        }
    }
  }
  double loss = 0, ntok = 0;
  for (int64_t k = 0; k < nb; ++k) loss += batch_loss[k], ntok += batch_tok[k];
  v.loss = loss / std::max<double>(ntok, 1.0);
  if (rank == 0) v.bleu = corpus_bleu(hyps, valid.tgt_text).score;
  if (world > 1) comm.broadcast(&v.bleu, sizeof v.bleu, 0);
  return v;
}


}  // namespace

// ---------------------------------------------------------------- checkpoints

TrainState read_checkpoint(const std::string& path, nn::ParamStore& params, Adam& adam, int64_t num_batches) {
  SafeTensors ck = SafeTensors::open(path);
  if (!ck.metadata().contains("state"))
    throw std::runtime_error(path + ": not a training checkpoint (no 'state' metadata)");
  TrainState s;
  try {
    nlohmann::json st = nlohmann::json::parse(ck.metadata()["state"].get<std::string>());
    auto read_f32 = [&](const std::string& name, int64_t numel, float* dst) {
      if (ck.dtype_of(name) != "F32") throw std::runtime_error("tensor '" + name + "' is " + ck.dtype_of(name) + ", not F32");
      Tensor t = ck.get(name);
      if (t.numel() != numel)
        throw std::runtime_error("tensor '" + name + "' has " + std::to_string(t.numel()) + " elements, expected " +
                                 std::to_string(numel));
      // Non-finite weights or moments would only surface later as a "diverged" run pointing at this file.
      const float* p = t.f32();
      for (int64_t i = 0; i < numel; ++i)
        if (!std::isfinite(p[i]) || (name == "optim.exp_avg_sq" && p[i] < 0))
          throw std::runtime_error("tensor '" + name + "' has " + (std::isfinite(p[i]) ? "a negative" : "a non-finite") +
                                   " value at element " + std::to_string(i));
      std::copy(p, p + numel, dst);
    };
    for (const auto& e : params.entries()) read_f32("model." + e.name, e.numel, params.all_data().data() + e.offset);
    read_f32("optim.exp_avg", params.total(), adam.exp_avg().data());
    read_f32("optim.exp_avg_sq", params.total(), adam.exp_avg_sq().data());
    // json_int/json_number check range and type and name the key (a float 1e30 cast to int64 is undefined).
    s.step = json_int(st, "step", "state");
    s.epoch = json_int(st, "epoch", "state");
    s.batch_pos = json_int(st, "batch_pos", "state");
    s.bad_epochs = json_int(st, "bad_epochs", "state");
    s.best_epoch = json_int(st, "best_epoch", "state");
    s.best_bleu = json_number(st, "best_bleu", "state");
    s.elapsed = json_number(st, "elapsed", "state");
    s.tokens = json_int(st, "tokens", "state");
    s.log = st.at("log");
    // The running sums of the epoch in progress (absent in checkpoints written before they were kept).
    s.epoch_loss = st.contains("epoch_loss") ? json_number(st, "epoch_loss", "state") : 0.0;
    s.epoch_tokens = st.contains("epoch_tokens") ? json_int(st, "epoch_tokens", "state") : 0;
    s.epoch_seconds = st.contains("epoch_seconds") ? json_number(st, "epoch_seconds", "state") : 0.0;
    s.dropout_rng = st.at("dropout_rng").get<std::string>();
    s.world_size = st.contains("world_size") ? json_int(st, "world_size", "state") : 1;
    Rng probe;
    probe.set_state(s.dropout_rng);  // throws on a corrupt generator state
    // The training loop indexes the epoch's batch order with batch_pos and reads every field of every log row.
    // Upper bounds keep step arithmetic (lr schedule, limits) far from overflow.
    if (s.step < 0 || s.step > (int64_t(1) << 40) || s.epoch < 1 || s.epoch > (int64_t(1) << 30) || s.batch_pos < 0 || s.batch_pos > num_batches || s.bad_epochs < 0 ||
        s.best_epoch < 0 || s.best_epoch >= s.epoch || s.tokens < 0 || s.world_size < 1 || !(s.elapsed >= 0) || !std::isfinite(s.elapsed) ||
        !(s.epoch_loss >= 0) || !std::isfinite(s.epoch_loss) || s.epoch_tokens < 0 || s.epoch_tokens > s.tokens ||
        !(s.epoch_seconds >= 0) || !std::isfinite(s.epoch_seconds))
      throw std::runtime_error("state out of range (step " + std::to_string(s.step) + ", epoch " +
                               std::to_string(s.epoch) + ", batch_pos " + std::to_string(s.batch_pos) + " of " +
                               std::to_string(num_batches) + " batches, bad_epochs " + std::to_string(s.bad_epochs) +
                               ", best_epoch " + std::to_string(s.best_epoch) + ", tokens " +
                               std::to_string(s.tokens) + ")");
    if (!s.log.is_array()) throw std::runtime_error(std::string("'log' must be an array, found ") + s.log.type_name());
    for (size_t i = 0; i < s.log.size(); ++i)
      for (const char* k : {"epoch", "step", "train_loss", "valid_loss", "valid_bleu", "lr", "tokens_per_sec", "elapsed"})
        if (!s.log[i].is_object() || !s.log[i].contains(k) || !s.log[i][k].is_number())
          throw std::runtime_error("log row " + std::to_string(i) + " has no number '" + k + "'");
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": corrupt checkpoint: " + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(path + ": corrupt checkpoint: " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": corrupt checkpoint state: " + e.what());
  }
  adam.set_steps(s.step);
  return s;
}

// ---------------------------------------------------------------- training

namespace {

// Throws, before anything is written, when a data file is missing: the message says where the files are looked for
// and how to point the recipe elsewhere (the relative paths and data_dir are easy to get wrong).
void check_data_files(const RecipeConfig& cfg, const std::string& data_dir_source) {
  for (const std::string* rel : {&cfg.train_src, &cfg.train_tgt, &cfg.valid_src, &cfg.valid_tgt}) {
    const std::string path = resolve(cfg.data_dir, *rel);
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) continue;  // a folder or FIFO fails later, naming the path
    std::string where = (*rel)[0] == '/' ? std::string("an absolute path")
                                         : "'" + *rel + "' relative to data_dir " + cfg.data_dir + ", " +
                                               data_dir_source;
    throw std::runtime_error("training data not found: " + path + " (" + where +
                             "); set TFM_DATA_DIR or --set data_dir=DIR to the folder that holds it, e.g. DIR after "
                             "'tfm data download multi30k --to DIR/multi30k'");
  }
}

// Set by request_training_stop (a signal handler); read after every optimizer step.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "request_training_stop must be async-signal-safe");

// The recipe; *wrote is set once it starts writing into a fresh out_dir.
RecipeResult run_recipe(const RecipeConfig& cfg_in, const std::string& out, bool resume, bool progress,
                         const std::function<void(const RecipeProgress&)>& on_progress, bool* wrote);

}  // namespace

void request_training_stop(int signo) { g_stop_signal.store(signo); }
int training_stop_requested() { return g_stop_signal.load(); }

RecipeResult train_recipe(const RecipeConfig& cfg_in, const std::string& out, bool resume, bool progress) {
  return train_recipe(cfg_in, out, resume, progress, {});
}

RecipeResult train_recipe(const RecipeConfig& cfg_in, const std::string& out, bool resume, bool progress,
                          const std::function<void(const RecipeProgress&)>& on_progress) {
  namespace fs = std::filesystem;
  bool wrote = false;
  std::error_code ec;
  const bool out_existed = fs::exists(out, ec);
  try {
    return run_recipe(cfg_in, out, resume, progress, on_progress, &wrote);
  } catch (...) {
    // A fresh run that failed before its first checkpoint (missing data, a SentencePiece error, an early
    // divergence) leaves nothing behind: otherwise its train_config.json makes the retry say "already exists",
    // --resume say "no checkpoint", and --overwrite is refused. The folder was empty or absent at the start.
    if (wrote && !fs::exists(out + "/checkpoint.safetensors", ec)) {
      for (const char* f : {"train_config.json", "spm.model", "config.json", "model.safetensors", "train_log.csv",
                            "loss.png"})
        fs::remove(out + "/" + f, ec);
      if (!out_existed) fs::remove(out, ec);  // only if empty
    }
    throw;
  }
}

namespace {

// Gradient all-reduce buckets (dist::BucketedAllReduce): an eighth of the parameters, between 1 Ki and 1 Mi floats
// (4 MiB), so that the Multi30k model's 30 MB of gradients start in 8 sums, the first after the last decoder
// block's backward (PyTorch DDP's buckets are 25 MB, for models a hundred times larger), and a test-size model
// still uses several.
int64_t gradient_bucket_elements(int64_t parameters) {
  return std::clamp<int64_t>(parameters / 8, int64_t(1) << 10, int64_t(1) << 20);
}

RecipeResult run_recipe(const RecipeConfig& cfg_in, const std::string& out, bool resume, bool progress,
                         const std::function<void(const RecipeProgress&)>& on_progress, bool* wrote) {
  namespace fs = std::filesystem;
  // Data parallelism: only rank 0 ("lead") touches out_dir; it sends the others what they need.
  dist::Communicator& comm = dist::world();
  const int rank = comm.rank(), world_size = comm.world_size();
  const bool lead = rank == 0;
  progress = progress && lead;
  const bool trace_dist = std::getenv("TFM_TRACE_DIST") && *std::getenv("TFM_TRACE_DIST") == '1';
  if (trace_dist) std::fprintf(stderr, "rank %d pid %d\n", rank, (int)getpid());
  // Before anything is written: a bf16 run on a CPU without bf16 instructions is refused.
  if (cfg_in.precision == "bf16") ops::require_bf16_gemm();
  RecipeConfig cfg = cfg_in;
  std::string data_dir_source = "set by the config's data_dir";
  if (cfg.data_dir.empty()) {
    const char* d = std::getenv("TFM_DATA_DIR");
    cfg.data_dir = d && *d ? d : "../shared/data";
    data_dir_source = d && *d ? "from $TFM_DATA_DIR" : "the default ../shared/data relative to the current folder";
  }
  cfg.data_dir = std::filesystem::absolute(cfg.data_dir).lexically_normal().string();
  const std::string ckpt_path = out + "/checkpoint.safetensors", spm_path = out + "/spm.model";
  if (!lead) {
    // The recipe as rank 0 resolved it (its data_dir must hold the same files on every host).
    std::string j;
    comm.broadcast(j, 0);
    cfg = RecipeConfig::from_json(nlohmann::json::parse(j), "rank 0's train_config.json");
  } else if (resume) {
    if (!fs::exists(ckpt_path))
      throw std::runtime_error(out + ": no checkpoint.safetensors to resume from (start a run without --resume)");
    RecipeConfig saved = RecipeConfig::from_json(load_json_file(out + "/train_config.json"), out + "/train_config.json");
    // The recipe is the saved one; only the run controls of this invocation apply.
    saved.stop_after_steps = cfg_in.stop_after_steps;
    if (cfg_in.time_limit_minutes > 0) saved.time_limit_minutes = cfg_in.time_limit_minutes;
    if (cfg_in.resume_epochs > 0) saved.epochs = cfg_in.resume_epochs;
    cfg = saved;
    check_data_files(cfg, "from " + out + "/train_config.json");
    // The run controls of this invocation are the run's now: train_config.json says what it runs with.
    write_file_atomic(out + "/train_config.json", cfg.to_json().dump(2) + "\n");
  } else {
    if (fs::exists(ckpt_path))
      throw std::runtime_error(out + " already holds a checkpoint; pass --resume to continue it, or use another --out");
    // The run writes config.json and model.safetensors: never over another model (or anything else).
    std::error_code ec;
    if (fs::exists(out, ec) && fs::is_directory(out, ec) && !fs::is_empty(out, ec))
      throw std::runtime_error(out + " already exists and is not an empty folder; choose a new --out");
    check_data_files(cfg, data_dir_source);
    *wrote = true;
    make_dirs(out);
    write_file_atomic(out + "/train_config.json", cfg.to_json().dump(2) + "\n");
  }
  if (lead && world_size > 1) {
    std::string j = cfg.to_json().dump();
    comm.broadcast(j, 0);
  }
  auto t_start = std::chrono::steady_clock::now();
  if (lead && (!resume || !fs::exists(spm_path))) {
    std::vector<std::string> text = read_lines(resolve(cfg.data_dir, cfg.train_src));
    std::vector<std::string> tgt = read_lines(resolve(cfg.data_dir, cfg.train_tgt));
    if (cfg.train_limit > 0 && (size_t)cfg.train_limit < text.size()) text.resize(cfg.train_limit), tgt.resize(cfg.train_limit);
    text.insert(text.end(), tgt.begin(), tgt.end());
    SubwordTrainOptions so;
    so.vocab_size = cfg.vocab_size;
    so.model_type = cfg.subword_type;
    so.num_threads = 1;  // SentencePiece's multi-threaded trainer is not deterministic
    if (progress) std::fprintf(stderr, "training a %lld-piece joint %s subword model on %zu sentences\n",
                               (long long)cfg.vocab_size, cfg.subword_type.c_str(), text.size());
    try {
      train_subword_model(text, spm_path, so);
    } catch (const std::exception& e) {
      // SentencePiece's message ("Internal: ./src/x.cc(580) [check] Text.") advises spm_train settings such as
      // character_coverage that the recipe does not have: keep its text, drop that advice, say what the recipe has.
      std::string msg = e.what();
      if (size_t p = msg.rfind("] "); p != std::string::npos) msg = msg.substr(p + 2);
      for (const std::string advice : {" Increase vocab_size or decrease character_coverage with --character_coverage "
                                       "option.", " Increase vocab_size or decrease character_coverage."})
        if (size_t p = msg.find(advice); p != std::string::npos) msg.erase(p, advice.size());
      throw std::runtime_error("SentencePiece cannot train a " + std::to_string(cfg.vocab_size) + "-piece subword "
                               "model on " + std::to_string(text.size()) + " sentences: " + msg + " Change the "
                               "recipe's vocab_size (--set vocab_size=N) or use more sentences (train_limit)");
    }
  }
  std::string spm_bytes = lead ? read_whole_file(spm_path) : std::string();
  comm.broadcast(spm_bytes, 0);
  SubwordModel spm = SubwordModel::from_bytes(spm_bytes, spm_path);
  Encoded train = encode_pairs(spm, resolve(cfg.data_dir, cfg.train_src), resolve(cfg.data_dir, cfg.train_tgt),
                               cfg.train_limit, cfg.max_len, comm);
  Encoded valid = encode_pairs(spm, resolve(cfg.data_dir, cfg.valid_src), resolve(cfg.data_dir, cfg.valid_tgt),
                               cfg.valid_limit, cfg.max_len, comm);
  auto batches = make_batches(train, cfg.max_tokens);
  auto valid_batches = make_batches(valid, cfg.max_tokens);
  const int64_t nb = (int64_t)batches.size();

  Seq2SeqConfig mcfg = model_config(cfg, spm.vocab_size());
  Seq2SeqModel model(mcfg);
  model.set_precision(ops::parse_compute_type(cfg.precision));
  nn::ParamStore& P = model.params();
  AdamOptions ao;
  ao.lr = (float)cfg.lr;
  ao.beta1 = (float)cfg.beta1;
  ao.beta2 = (float)cfg.beta2;
  ao.eps = (float)cfg.adam_eps;
  ao.weight_decay = (float)cfg.weight_decay;
  ao.decoupled_weight_decay = cfg.adamw;
  Adam adam(P.total(), ao);
  Rng dropout_rng(cfg.seed ^ 0xD1B54A32D192ED03ull);
  // Masks keyed by (seed, step, sentence): the same whichever rank holds a sentence (see RowKeys).
  RowKeys drop_keys;
  dropout_rng.set_row_keys(&drop_keys);

  // Training state (all of it is in the checkpoint).
  int64_t epoch = 1, batch_pos = 0, step = 0, bad_epochs = 0, best_epoch = 0;
  double best_bleu = -1, elapsed_before = 0;
  int64_t tokens_done = 0;
  // This invocation's training steps alone (batch to update; no subword training, validation or checkpoints).
  double step_seconds = 0;
  int64_t step_tokens = 0;
  nlohmann::json log_rows = nlohmann::json::array();
  // The epoch in progress: sums over its batches so far, and its seconds of training before this invocation.
  double ep_loss = 0, ep_seconds_before = 0;
  int64_t ep_tok = 0;
  auto ep_t0 = std::chrono::steady_clock::now();
  auto ep_seconds = [&] {
    return ep_seconds_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - ep_t0).count();
  };
  if (resume && lead) {
    TrainState st = read_checkpoint(ckpt_path, P, adam, nb);
    if (cfg_in.resume_epochs > 0 && st.epoch > cfg_in.resume_epochs + 1)
      throw std::invalid_argument("epochs=" + std::to_string(cfg_in.resume_epochs) + ": the run has already trained " +
                                  std::to_string(st.epoch - 1) + " epochs; give more to extend it");
    // A finished run's checkpoint points at epoch epochs + 1; anything later is not this run's.
    if (st.epoch > cfg.epochs + 1)
      throw std::runtime_error(ckpt_path + ": corrupt checkpoint: epoch " + std::to_string(st.epoch) +
                               " is past the run's " + std::to_string(cfg.epochs) + " epochs");
    step = st.step;
    epoch = st.epoch;
    batch_pos = st.batch_pos;
    bad_epochs = st.bad_epochs;
    best_epoch = st.best_epoch;
    best_bleu = st.best_bleu;
    elapsed_before = st.elapsed;
    tokens_done = st.tokens;
    log_rows = st.log;
    dropout_rng.set_state(st.dropout_rng);
    ep_loss = st.epoch_loss;
    ep_tok = st.epoch_tokens;
    ep_seconds_before = st.epoch_seconds;
    if (progress) std::fprintf(stderr, "resuming at epoch %lld, batch %lld/%lld, step %lld\n", (long long)epoch,
                               (long long)batch_pos, (long long)nb, (long long)step);
    if (st.world_size != world_size)  // said even with --no-progress
      std::fprintf(stderr, "the checkpoint was written by world_size %lld, continuing with world_size %d: same global batches and "
                   "dropout masks, equal to a %lld-rank run within floating-point tolerance (not bit for bit)\n",
                   (long long)st.world_size, world_size, (long long)st.world_size);
  } else if (!resume) {
    Rng init_rng(cfg.seed);
    model.init(init_rng);
  }
  if (world_size > 1) {
    // Rank 0's weights (and, on resume, optimizer state and position) on every rank.
    comm.broadcast(P.all_data(), 0);
    if (resume) {
      comm.broadcast(adam.exp_avg(), 0);
      comm.broadcast(adam.exp_avg_sq(), 0);
      std::string j = lead ? nlohmann::json{{"step", step}, {"epoch", epoch}, {"batch_pos", batch_pos},
                                            {"bad_epochs", bad_epochs}, {"best_epoch", best_epoch},
                                            {"best_bleu", best_bleu}, {"elapsed", elapsed_before},
                                            {"tokens", tokens_done}, {"log", log_rows},
                                            {"dropout_rng", dropout_rng.state()}}.dump()
                           : std::string();
      comm.broadcast(j, 0);
      if (!lead) {
        nlohmann::json st = nlohmann::json::parse(j);
        step = st["step"], epoch = st["epoch"], batch_pos = st["batch_pos"], bad_epochs = st["bad_epochs"];
        best_epoch = st["best_epoch"], best_bleu = st["best_bleu"], elapsed_before = st["elapsed"];
        tokens_done = st["tokens"], log_rows = st["log"];
        dropout_rng.set_state(st["dropout_rng"].get<std::string>());
        adam.set_steps(step);
      }
    }
    if (progress)
      std::fprintf(stderr, "data-parallel training on %d ranks: %lld tokens per update across all ranks\n",
                   world_size, (long long)cfg.max_tokens);
  }

  auto save_checkpoint = [&](double elapsed) {
    if (!lead) return;
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (auto& [name, t] : P.named_tensors()) tensors.emplace_back("model." + name, t);
    tensors.emplace_back("optim.exp_avg", Tensor::view_of(adam.exp_avg().data(), {P.total()}, DType::F32, nullptr));
    tensors.emplace_back("optim.exp_avg_sq",
                         Tensor::view_of(adam.exp_avg_sq().data(), {P.total()}, DType::F32, nullptr));
    nlohmann::json st = {{"step", step},         {"epoch", epoch},       {"batch_pos", batch_pos},
                         {"bad_epochs", bad_epochs}, {"best_epoch", best_epoch}, {"best_bleu", best_bleu},
                         {"elapsed", elapsed},   {"tokens", tokens_done}, {"log", log_rows},
                         {"dropout_rng", dropout_rng.state()}, {"epoch_loss", ep_loss}, {"epoch_tokens", ep_tok},
                         {"epoch_seconds", ep_seconds()}, {"world_size", world_size}};
    save_safetensors(ckpt_path, tensors, nlohmann::json{{"state", st.dump()}, {"format", "tfm-checkpoint-1"}});
  };
  auto write_logs = [&]() {
    if (!lead) return;
    std::ostringstream csv;
    csv << "epoch,step,train_loss,valid_loss,valid_bleu,lr,tokens_per_sec,elapsed_s,world_size\n";
    std::vector<double> tr, va;
    for (const auto& r : log_rows) {
      csv << r["epoch"] << "," << r["step"] << "," << r["train_loss"] << "," << r["valid_loss"] << ","
          << r["valid_bleu"] << "," << r["lr"] << "," << r["tokens_per_sec"] << "," << r["elapsed"] << ","
          << r.value("world_size", 1) << "\n";
      tr.push_back(r["train_loss"].get<double>());
      va.push_back(r["valid_loss"].get<double>());
    }
    write_file_atomic(out + "/train_log.csv", csv.str());
    if (!tr.empty())
      write_line_plot(out + "/loss.png", LinePlot{"Loss per epoch", "epoch", "loss", {{"train", tr}, {"validation", va}}});
  };

  BatchArrays a;
  std::vector<int64_t> src_lens, tgt_lens;
  // Work per padded token of a shard, in multiply-adds of the forward (the backward's are proportional): a source
  // token goes through the encoder layers and the decoder's cross-attention keys and values, a target token
  // through the decoder layers and the output projection over the vocabulary (here 1.7x a source token's).
  // Shards are balanced by it (dist::shard_range_padded): a split by token count alone gives the rank with the
  // shorter rows more rows, so more target tokens and more padding, and the other rank waits at the all-reduce.
  const double layer_cost = (double)mcfg.num_layers * (6.0 * mcfg.num_hiddens * mcfg.num_hiddens +
                                                       2.0 * mcfg.num_hiddens * mcfg.ffn_num_hiddens);
  const double src_cost = layer_cost, tgt_cost = layer_cost + (double)mcfg.num_hiddens * mcfg.tgt_vocab_size;
  // In-process shards of this rank's share (train/replicas.h), split by padded work as the ranks split the global
  // batch; each with its own dropout keys (the same masks per sentence as one shard gets).
  ReplicaSet replicas(model);
  std::vector<BatchArrays> part_arrays;
  std::vector<RowKeys> part_keys;
  std::vector<Rng> part_rngs;
  const bool tty = isatty(2);
  if (trace_dist && world_size > 1) {
    const int64_t b = gradient_bucket_elements(P.total());
    std::fprintf(stderr, "gradient buckets rank %d: %lld of %lld floats\n", rank, (long long)((P.total() + b - 1) / b),
                 (long long)b);
  }
  RecipeResult res;
  auto now_s = [&] { return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(); };
  bool stop = false;
  for (; epoch <= cfg.epochs && !stop; ++epoch, batch_pos = 0) {
    std::vector<int64_t> order = epoch_order(nb, cfg.seed, epoch);
    ep_t0 = std::chrono::steady_clock::now();
    const int64_t ep_start_pos = batch_pos, ep_start_tok = ep_tok;
    for (; batch_pos < nb; ++batch_pos) {
      const auto step_t0 = std::chrono::steady_clock::now();
      OpTimer t_batch("step: batch + zero_grad");  // the training profile (TFM_PROFILE=1): printed at the end
      // This rank's share of the global batch, by padded work; gradients are divided by the global batch's
      // target tokens, so summing the ranks' gradients gives the global batch's.
      const std::vector<int64_t>& global = batches[order[batch_pos]];
      src_lens.clear();
      tgt_lens.clear();
      int64_t global_tgt = 0;
      for (int64_t i : global) {
        src_lens.push_back((int64_t)train.src[i].size());
        tgt_lens.push_back((int64_t)train.tgt[i].size());
        global_tgt += (int64_t)train.tgt[i].size();
      }
      const auto [s0, s1] = dist::shard_range_padded(src_lens, tgt_lens, src_cost, tgt_cost, world_size, rank);
      const std::vector<int64_t> shard(global.begin() + s0, global.begin() + s1);
      if (trace_dist) {
        std::string ids;
        for (int64_t i : shard) ids.append(1, ' ').append(std::to_string(i));
        std::fprintf(stderr, "shard step %lld rank %d:%s\n", (long long)step + 1, rank, ids.c_str());
      }
      P.zero_grad();
      t_batch.stop();
      LossResult r;
      // The gradient sum over the ranks, bucket by bucket while the backward pass still runs.
      dist::BucketedAllReduce grad_sum(comm, P.all_grad().data(), P.total(), gradient_bucket_elements(P.total()));
      if (!shard.empty()) {  // an empty share still joins the all-reduce below
        drop_keys.key = (cfg.seed + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(step + 1) * 0xD1B54A32D192ED03ull;
        drop_keys.rows.assign(shard.begin(), shard.end());
        drop_keys.calls = 0;
        const int parts = replica_shards(model, (int64_t)shard.size());
        if (parts == 1) {
          fill_batch(a, train, shard, spm.pad_id(), spm.bos_id());
          r = model.forward_backward(a.view, &dropout_rng, cfg.label_smoothing, /*token_mean=*/true, global_tgt,
                                     [&](int64_t offset) { grad_sum.ready_from(offset); });
        } else {  // the rank's gradients are whole only after the replicas' sum: the all-reduce starts then
          const std::vector<int64_t> part_src(src_lens.begin() + s0, src_lens.begin() + s1),
              part_tgt(tgt_lens.begin() + s0, tgt_lens.begin() + s1);
          part_arrays.resize(parts);
          part_keys.resize(parts);
          part_rngs.resize(parts);
          std::vector<char> empty(parts);
          for (int p = 0; p < parts; ++p) {
            const auto [p0, p1] = dist::shard_range_padded(part_src, part_tgt, src_cost, tgt_cost, parts, p);
            empty[p] = p0 == p1;
            const std::vector<int64_t> rows(shard.begin() + p0, shard.begin() + p1);
            part_keys[p] = drop_keys;
            part_keys[p].rows.assign(rows.begin(), rows.end());
            part_rngs[p].set_row_keys(&part_keys[p]);
            if (!empty[p]) fill_batch(part_arrays[p], train, rows, spm.pad_id(), spm.bos_id());
          }
          r = replicas.run(parts, [&](int p, Seq2SeqModel& m) {
            return empty[p] ? LossResult{}
                            : m.forward_backward(part_arrays[p].view, &part_rngs[p], cfg.label_smoothing,
                                                 /*token_mean=*/true, global_tgt);
          });
        }
      }
      // Any rank over the time limit, or asked to stop by a signal, stops every rank (after this step).
      bool time_up = cfg.time_limit_minutes > 0 && now_s() > cfg.time_limit_minutes * 60;
      int stop_signal = g_stop_signal.load();
      if (world_size > 1) {
        OpTimer t_wait("step: all-reduce wait");
        grad_sum.finish();
        std::vector<double> sums = {r.loss_sum, r.token_loss_sum, (double)r.num_tokens, time_up ? 1.0 : 0.0,
                                    (double)stop_signal};
        comm.all_reduce_sum(sums);
        r.loss_sum = sums[0], r.token_loss_sum = sums[1], r.num_tokens = (int64_t)sums[2];
        time_up = sums[3] > 0;
        if (!stop_signal && sums[4] > 0) stop_signal = SIGTERM;  // another rank's (mpirun forwards it to all)
      }
      OpTimer t_norm("step: gradient norm");
      double norm = grad_norm(P);  // clipping is applied inside adam.step (grad_scale)
      t_norm.stop();
      if (!std::isfinite(r.loss_sum) || !std::isfinite(norm))
        throw std::runtime_error("training diverged: non-finite " + std::string(std::isfinite(r.loss_sum) ? "gradient" : "loss") +
                                 " at step " + std::to_string(step + 1) + " (epoch " + std::to_string(epoch) + "); " +
                                 (fs::exists(ckpt_path) ? "the last good checkpoint is " + ckpt_path
                                                        : std::string("no checkpoint had been written yet, so the "
                                                                      "run's files were removed")) +
                                 " (try a lower lr)");
      ++step;
      OpTimer t_adam("step: optimizer");
      adam.step(P, (float)inverse_sqrt_lr(cfg.lr, cfg.warmup_steps, step), clip_scale(norm, cfg.clip_norm));
      t_adam.stop();
      step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_t0).count();
      step_tokens += r.num_tokens;
      if (trace_dist) {
        // Replicas must stay bit-identical: every rank prints its hash, and a mismatch with rank 0 stops the run.
        uint64_t h = dist::fnv1a(P.all_data().data(), P.total() * (int64_t)sizeof(float)), h0 = h;
        std::fprintf(stderr, "replica-hash step %lld rank %d %016llx\n", (long long)step, rank, (unsigned long long)h);
        comm.broadcast(&h0, sizeof h0, 0);
        if (h0 != h)
          throw std::runtime_error("replicas diverged at step " + std::to_string(step) + ": rank " +
                                   std::to_string(rank) + "'s parameters differ from rank 0's");
      }
      ep_loss += r.token_loss_sum;
      ep_tok += r.num_tokens;
      tokens_done += r.num_tokens;
      // Speed and ETA from this invocation's part of the epoch.
      double ep_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - ep_t0).count();
      if (progress && (tty ? true : (batch_pos + 1) % std::max<int64_t>(1, nb / 10) == 0)) {
        double done = (double)(batch_pos + 1 - ep_start_pos), left = (double)(nb - batch_pos - 1);
        std::fprintf(stderr, "%sepoch %lld/%lld batch %lld/%lld loss %.3f lr %.2e %.0f tok/s ETA(epoch) %s%s",
                     tty ? "\r" : "", (long long)epoch, (long long)cfg.epochs, (long long)batch_pos + 1,
                     (long long)nb, ep_loss / std::max<int64_t>(ep_tok, 1),
                     inverse_sqrt_lr(cfg.lr, cfg.warmup_steps, step), (ep_tok - ep_start_tok) / std::max(ep_s, 1e-9),
                     format_duration(ep_s / done * left).c_str(), tty ? "   " : "\n");
      }
      if (on_progress)
        on_progress({false, epoch, cfg.epochs, batch_pos + 1, nb, step, ep_loss / std::max<int64_t>(ep_tok, 1),
                     inverse_sqrt_lr(cfg.lr, cfg.warmup_steps, step), ep_tok / std::max(ep_s, 1e-9), 0, 0});
      bool steps_up = cfg.stop_after_steps > 0 && step >= cfg.stop_after_steps;
      if (step % cfg.checkpoint_every == 0 || time_up || steps_up || stop_signal) {
        OpTimer t_ckpt("checkpoint");
        batch_pos++;  // position of the next batch
        save_checkpoint(now_s());
        batch_pos--;
      }
      if (stop_signal) {
        stop = true;
        res.stopped_early = true;
        res.stopped_by_signal = stop_signal;
        res.stopped_in_epoch = epoch;
        if (lead)  // also without progress: the user pressed Ctrl-C and must learn what was kept
          std::fprintf(stderr, "\n%s: stopped after step %lld (epoch %lld, batch %lld/%lld); checkpoint saved in %s; "
                       "continue with 'tfm train --resume %s'\n",
                       stop_signal == SIGINT ? "interrupted (SIGINT)" : stop_signal == SIGTERM ? "terminated (SIGTERM)"
                                                                                              : "stopped by a signal",
                       (long long)step, (long long)epoch, (long long)batch_pos + 1, (long long)nb, ckpt_path.c_str(),
                       out.c_str());
        break;
      }
      if (time_up || steps_up) {
        stop = true;
        res.stopped_early = true;
        res.stopped_in_epoch = epoch;
        if (progress) std::fprintf(stderr, "\n%s; checkpoint saved\n", time_up ? "time limit reached" : "step limit reached");
        break;
      }
    }
    if (stop) break;
    if (progress && tty) std::fprintf(stderr, "\n");
    // End of epoch: validation, best model, early stopping, logs, checkpoint.
    const Validation v = validate(model, spm, valid, valid_batches, cfg.num_steps, comm);  // shared by the ranks
    const double ep_s = ep_seconds();
    log_rows.push_back({{"epoch", epoch}, {"step", step}, {"train_loss", ep_loss / std::max<int64_t>(ep_tok, 1)},
                        {"valid_loss", v.loss}, {"valid_bleu", v.bleu},
                        {"lr", inverse_sqrt_lr(cfg.lr, cfg.warmup_steps, step)},
                        {"tokens_per_sec", ep_tok / std::max(ep_s, 1e-9)}, {"elapsed", now_s()},
                        {"world_size", world_size}});
    if (progress)
      std::fprintf(stderr, "epoch %lld: train loss %.3f, valid loss %.3f, valid BLEU %.2f%s\n", (long long)epoch,
                   ep_loss / std::max<int64_t>(ep_tok, 1), v.loss, v.bleu, v.bleu > best_bleu ? " (best)" : "");
    if (v.bleu > best_bleu) {
      best_bleu = v.bleu;
      best_epoch = epoch;
      bad_epochs = 0;
      if (lead) {
        model.save(out + "/model.safetensors");  // before config.json, as in the d2l trainer
        write_file_atomic(out + "/config.json", [&] {
          nlohmann::json j = mcfg.to_json();
          j["tokenizer"] = "sentencepiece";
          if (!cfg.source_lang.empty()) j["source_lang"] = cfg.source_lang;
          if (!cfg.target_lang.empty()) j["target_lang"] = cfg.target_lang;
          return j.dump(2) + "\n";
        }());
      }
    } else {
      ++bad_epochs;
    }
    write_logs();
    ep_loss = 0, ep_tok = 0, ep_seconds_before = 0;
    ep_t0 = std::chrono::steady_clock::now();
    batch_pos = nb;
    int64_t e = epoch;
    epoch = e + 1;  // the checkpoint points at the start of the next epoch
    batch_pos = 0;
    save_checkpoint(now_s());
    epoch = e;
    if (on_progress)  // after the epoch's checkpoint, so a callback that stops the run loses nothing
      on_progress({true, epoch, cfg.epochs, nb, nb, step, ep_loss / std::max<int64_t>(ep_tok, 1),
                   inverse_sqrt_lr(cfg.lr, cfg.warmup_steps, step), ep_tok / std::max(ep_s, 1e-9), v.loss, v.bleu});
    if (bad_epochs >= cfg.patience) {
      if (progress) std::fprintf(stderr, "no better validation BLEU for %lld %s: stopping early\n", (long long)bad_epochs,
                                 bad_epochs == 1 ? "epoch" : "epochs");
      res.stopped_early = true;
      ++epoch;
      break;
    }
  }
  res.best_valid_bleu = best_bleu;
  res.best_epoch = best_epoch;
  res.epochs_run = (int64_t)log_rows.size();
  res.steps = step;
  res.seconds = now_s();
  res.invocation_seconds = res.seconds - elapsed_before;
  res.train_tokens_per_sec = tokens_done / std::max(res.seconds, 1e-9);
  res.step_tokens_per_sec = step_tokens / std::max(step_seconds, 1e-9);
  if (op_profiling()) {  // TFM_PROFILE=1: where this invocation's training steps went, on each rank
    std::fprintf(stderr, "training profile, rank %d: %.3f s in the training steps; sections in %s seconds of the "
                 "thread that ran them (replica threads add up; TFM_PROFILE=cpu: CPU time, else wall):\n", rank,
                 step_seconds, op_profiling_cpu_time() ? "CPU" : "wall");
    for (const OpStat& st : op_profile())
      std::fprintf(stderr, "  %-36s %9.3f s %7lld calls\n", st.name.c_str(), st.seconds, (long long)st.calls);
  }
  return res;
}

}  // namespace

}  // namespace tfm

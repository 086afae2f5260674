#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "core/format.h"
#include "core/rng.h"
#include "io/atomic_file.h"
#include "io/plot.h"
#include "models/seq2seq.h"
#include "text/nmt_data.h"
#include "text/vocab.h"
#include "train/optim.h"

namespace tfm {

namespace {

void save_model_folder(const std::string& dir, Seq2SeqModel& model, const Vocab& src, const Vocab& tgt,
                       const TrainOptions& o) {
  make_dirs(dir);
  // Largest file first and config.json last: a full disk then fails before the folder's config changes, so a
  // previous model stays loadable (its config still matches its weights).
  model.save(dir + "/model.safetensors");
  src.save(dir + "/src_vocab.txt");
  tgt.save(dir + "/tgt_vocab.txt");
  nlohmann::json config = model.config().to_json();
  if (!o.source_lang.empty()) config["source_lang"] = o.source_lang;
  if (!o.target_lang.empty()) config["target_lang"] = o.target_lang;
  write_file_atomic(dir + "/config.json", config.dump(2) + "\n");
}


}  // namespace

namespace {

// Rows [0, B) of `rows` as a teacher-forced batch in `buf`.
Seq2SeqBatch fill_shard(TrainBatchBuffers::Shard& buf, const NmtArrays& arrays, const int64_t* rows, int64_t B,
                        int64_t bos) {
  const int64_t L = arrays.num_steps;
  buf.src.resize(B * L);
  buf.lab.resize(B * L);
  buf.dec.resize(B * L);
  buf.src_vl.resize(B);
  buf.tgt_vl.resize(B);
  // Trim the batch to its longest valid source and target: keys past every valid length are masked and
  // later decoder positions are invisible to earlier ones, so the valid positions compute the same values
  // while padding costs nothing (d2l pads everything to num_steps).
  int64_t Ls = 1, Lt = 1;
  for (int64_t b = 0; b < B; ++b) {
    Ls = std::max(Ls, std::min(L, arrays.src_valid_len[rows[b]]));
    Lt = std::max(Lt, std::min(L, arrays.tgt_valid_len[rows[b]]));
  }
  for (int64_t b = 0; b < B; ++b) {
    const int64_t r = rows[b];
    std::copy_n(arrays.src.begin() + r * L, Ls, buf.src.begin() + b * Ls);
    std::copy_n(arrays.tgt.begin() + r * L, Lt, buf.lab.begin() + b * Lt);
    buf.src_vl[b] = arrays.src_valid_len[r];
    buf.tgt_vl[b] = arrays.tgt_valid_len[r];
    buf.dec[b * Lt] = bos;  // teacher forcing: <bos> + Y[:, :-1]
    std::copy_n(arrays.tgt.begin() + r * L, Lt - 1, buf.dec.begin() + b * Lt + 1);
  }
  Seq2SeqBatch batch{buf.src.data(), buf.src_vl.data(), buf.dec.data(), buf.lab.data(), buf.tgt_vl.data(), B, Ls, Lt};
  batch.loss_len = L;
  return batch;
}

}  // namespace

LossResult train_step(Seq2SeqModel& model, Adam& adam, const NmtArrays& arrays, const std::vector<int64_t>& rows,
                      int64_t bos, const TrainOptions& o, Rng* dropout_rng, TrainBatchBuffers& buf) {
  const int64_t B = (int64_t)rows.size();
  const int shards = replica_shards(model, B);
  buf.shards.resize(shards);
  nn::ParamStore& P = model.params();
  P.zero_grad();
  LossResult lr;
  if (shards == 1) {
    lr = model.forward_backward(fill_shard(buf.shards[0], arrays, rows.data(), B, bos), dropout_rng,
                                o.label_smoothing);
  } else {
    std::vector<Seq2SeqBatch> batches(shards);
    for (int s = 0; s < shards; ++s) {
      const int64_t b0 = B * s / shards, b1 = B * (s + 1) / shards;
      batches[s] = fill_shard(buf.shards[s], arrays, rows.data() + b0, b1 - b0, bos);
    }
    buf.shard_rngs.resize(shards);
    if (dropout_rng)
      for (int s = 1; s < shards; ++s) buf.shard_rngs[s] = Rng(dropout_rng->next_u64());
    if (!buf.replicas || &buf.replicas->model() != &model) buf.replicas = std::make_unique<ReplicaSet>(model);
    lr = buf.replicas->run(shards, [&](int s, Seq2SeqModel& m) {
      Rng* rng = !dropout_rng ? nullptr : s == 0 ? dropout_rng : &buf.shard_rngs[s];
      return m.forward_backward(batches[s], rng, o.label_smoothing);
    });
  }
  if (!std::isfinite(lr.loss_sum)) return lr;
  adam.step(P, adam.options().lr, clip_scale(grad_norm(P), o.grad_clip));  // clipping fused into the update
  return lr;
}

TrainResult train_seq2seq(const TrainOptions& o) {
  if (o.out.empty()) throw std::invalid_argument("--out is required");
  if (o.batch_size < 1) throw std::invalid_argument("batch_size must be at least 1");
  if (o.epochs < 1) throw std::invalid_argument("epochs must be at least 1");
  if (!(o.lr > 0)) throw std::invalid_argument("lr must be positive");
  if (!(o.label_smoothing >= 0 && o.label_smoothing < 1))
    throw std::invalid_argument("label_smoothing must be in [0, 1)");
  // Training replaces config.json and model.safetensors: never silently over another model (or anything else).
  std::error_code ec;
  if (!o.overwrite && std::filesystem::exists(o.out, ec) &&
      (!std::filesystem::is_directory(o.out, ec) || !std::filesystem::is_empty(o.out, ec)))
    throw std::invalid_argument("--out '" + o.out + "' already exists and is not an empty folder; choose a new " +
                                "folder, or pass --overwrite to replace the model in it");
  // Even with --overwrite: a recipe run's spm.model and checkpoint would sit beside a d2l model and break it.
  for (const char* f : {"spm.model", "checkpoint.safetensors"})
    if (std::filesystem::exists(o.out + "/" + f, ec))
      throw std::invalid_argument("--out '" + o.out + "' holds a subword recipe run (" + f +
                                  "); the d2l trainer will not write over it, choose another folder");
  ParallelCorpus corpus = read_nmt_file(o.data, o.num_examples);
  if (!corpus.skipped_lines.empty() && o.progress)
    std::fprintf(stderr, "warning: %s: skipped %zu line(s) without exactly one TAB (first: line %lld)\n",
                 o.data.c_str(), corpus.skipped_lines.size(), (long long)corpus.skipped_lines[0]);
  const std::vector<std::string> reserved = {"<pad>", "<bos>", "<eos>"};
  Vocab src_vocab(corpus.source, 2, reserved), tgt_vocab(corpus.target, 2, reserved);
  NmtArrays arrays = build_arrays_nmt(corpus, src_vocab, tgt_vocab, o.num_steps);
  const int64_t N = arrays.size();

  Seq2SeqConfig cfg;
  cfg.num_hiddens = o.num_hiddens;
  cfg.num_layers = o.num_layers;
  cfg.num_heads = o.num_heads;
  cfg.ffn_num_hiddens = o.ffn_num_hiddens;
  cfg.dropout = o.dropout;
  cfg.num_steps = o.num_steps;
  cfg.src_vocab_size = src_vocab.size();
  cfg.tgt_vocab_size = tgt_vocab.size();
  cfg.decode_positions = "absolute";
  cfg = Seq2SeqConfig::from_json(cfg.to_json(), "training options");  // same validation as a config.json

  Seq2SeqModel model(cfg);
  Rng init_rng(o.seed);
  model.init(init_rng);
  Rng dropout_rng(o.seed ^ 0x9E3779B97F4A7C15ull);
  BatchSampler sampler(N, o.batch_size, o.seed);
  Adam adam(model.params().total(), AdamOptions{(float)o.lr});
  nn::ParamStore& P = model.params();
  std::vector<float> last_good = P.all_data();

  const int64_t bos = tgt_vocab["<bos>"];
  TrainBatchBuffers buffers;
  std::ostringstream log;
  log << "epoch,loss,token_loss,tokens_per_sec\n";
  std::vector<double> curve;
  TrainResult res;
  const bool tty = isatty(2);
  auto t0 = std::chrono::steady_clock::now();
  int64_t total_tokens = 0;
  for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
    auto e0 = std::chrono::steady_clock::now();
    double loss_sum = 0, token_loss_sum = 0;
    int64_t ntok = 0;
    for (const auto& idx : sampler.epoch()) {
      LossResult lr = train_step(model, adam, arrays, idx, bos, o, cfg.dropout > 0 ? &dropout_rng : nullptr, buffers);
      if (!std::isfinite(lr.loss_sum)) {
        P.all_data() = last_good;
        save_model_folder(o.out, model, src_vocab, tgt_vocab, o);
        throw std::runtime_error("training diverged: the loss became " + std::to_string(lr.loss_sum) + " in epoch " +
                                 std::to_string(epoch) + " (try a lower --lr); the weights from the end of epoch " +
                                 std::to_string(epoch - 1) + " are saved in " + o.out);
      }
      loss_sum += lr.loss_sum;
      token_loss_sum += lr.token_loss_sum;
      ntok += lr.num_tokens;
    }
    last_good = P.all_data();
    total_tokens += ntok;
    auto now = std::chrono::steady_clock::now();
    double epoch_s = std::chrono::duration<double>(now - e0).count();
    double elapsed = std::chrono::duration<double>(now - t0).count();
    res.loss = loss_sum / std::max<int64_t>(ntok, 1);
    res.token_loss = token_loss_sum / std::max<int64_t>(ntok, 1);
    res.epochs_run = epoch;
    double tps = ntok / std::max(epoch_s, 1e-9);
    curve.push_back(res.loss);
    log << epoch << "," << res.loss << "," << res.token_loss << "," << tps << "\n";
    if (o.progress) {
      double eta = elapsed / epoch * (o.epochs - epoch);
      int width = 24, filled = (int)(width * epoch / o.epochs);
      std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
      bool line_due = tty || epoch == o.epochs || epoch % std::max<int64_t>(1, o.epochs / 10) == 0;
      if (line_due)
        std::fprintf(stderr, "%s[%s] epoch %lld/%lld loss %.4f token_loss %.4f %.0f tok/s ETA %s%s",
                     tty ? "\r" : "", bar.c_str(), (long long)epoch, (long long)o.epochs, res.loss, res.token_loss,
                     tps, format_duration(eta).c_str(), tty && epoch < o.epochs ? "" : "\n");
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.tokens_per_sec = total_tokens / std::max(res.seconds, 1e-9);
  save_model_folder(o.out, model, src_vocab, tgt_vocab, o);
  write_file_atomic(o.out + "/train_log.csv", log.str());
  write_line_plot(o.out + "/loss.png", LinePlot{"Training loss", "epoch", "loss", {{"train", curve}}});
  return res;
}

}  // namespace tfm

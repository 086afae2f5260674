// tfm finetune --task embed: a sentence-transformers folder trained on (anchor, positive [, negative]) or
// (sentence1, sentence2, score) rows, written back as a sentence-transformers folder.
#include "api/finetune_embed.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include "api/common.h"
#include "core/rng.h"
#include "dist/communicator.h"
#include "dist/shard.h"
#include "io/atomic_file.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "io/table.h"
#include "ops/gemm.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "models/sentence_transformer.h"
#include "text/bert_tokenizer.h"
#include "train/finetune_embed.h"

namespace fs = std::filesystem;

namespace tfm::api {

FinetuneHyperparameters finetune_hyperparameters(const FinetuneOptions& o, int64_t total_steps,
                                                 const TrainingDropouts& dropouts) {
  FinetuneHyperparameters hp;
  hp.learning_rate = o.learning_rate;
  hp.weight_decay = o.weight_decay;
  hp.adam_beta1 = o.adam_beta1;
  hp.adam_beta2 = o.adam_beta2;
  hp.adam_epsilon = o.adam_epsilon;
  hp.max_grad_norm = o.max_grad_norm;
  hp.total_steps = total_steps;
  hp.warmup_steps = o.warmup_steps > 0 ? o.warmup_steps : (int64_t)std::ceil(o.warmup_ratio * (double)total_steps);
  hp.dropout = dropouts.body;
  hp.attention_dropout = dropouts.attention;
  hp.head_dropout = dropouts.head;
  hp.seed = o.seed;
  return hp;
}

int64_t finetune_steps_per_epoch(const FinetuneOptions& o, int64_t examples) {
  const int64_t micro = (examples + o.batch_size - 1) / o.batch_size;
  return (micro + o.gradient_accumulation_steps - 1) / o.gradient_accumulation_steps;
}

namespace {

// One example: the token ids of each of its texts (column order of the loss), and its score.
struct TextsExample {
  std::vector<std::vector<int64_t>> ids;
  float score = 0;
};

// The loss the data's columns call for, and those columns in the loss's order.
struct EmbedData {
  EmbeddingLoss loss = EmbeddingLoss::MultipleNegativesRanking;
  std::vector<std::string> columns;  // anchor, positive [, negative] | sentence1, sentence2
  std::vector<TextsExample> examples;
};

std::string column_list(const Table& t) {
  std::string cols;
  for (const auto& c : t.columns) cols += (cols.empty() ? "" : ", ") + c;
  return cols;
}

EmbedData read_embed_data(const std::string& path, const BertTokenizer& tok, bool lower, int64_t max_len,
                          const EmbedData* like) {
  const Table t = read_table(path);
  EmbedData d;
  if (t.column("anchor") >= 0 && t.column("positive") >= 0) {
    d.columns = {"anchor", "positive"};
    if (t.column("negative") >= 0) d.columns.push_back("negative");
  } else if (t.column("sentence1") >= 0 && t.column("sentence2") >= 0 && t.column("score") >= 0) {
    d.loss = EmbeddingLoss::CosineSimilarity;
    d.columns = {"sentence1", "sentence2"};
  } else {
    throw std::invalid_argument(path + ": --task embed needs columns anchor, positive [, negative] "
                                "(MultipleNegativesRankingLoss) or sentence1, sentence2, score (CosineSimilarityLoss); "
                                "it has " + column_list(t));
  }
  if (like && like->loss != d.loss)
    throw std::invalid_argument(path + ": the evaluation data has other columns (" + column_list(t) +
                                ") than the training data's loss takes (" + like->columns[0] + ", ...)");
  const int64_t score_col = t.column("score");
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const std::string where = path + ": line " + std::to_string(t.line_of_row[r]);
    TextsExample ex;
    for (const std::string& c : d.columns) {
      std::string text = t.rows[r][t.column(c)];
      if (text.find_first_not_of(" \t\r\n") == std::string::npos)
        throw std::invalid_argument(where + ": empty " + c);
      if (lower) text = lower_like_python(text);
      try {
        ex.ids.push_back(tok.encode(text, nullptr, true, max_len).input_ids);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(where + ": " + e.what());
      }
    }
    if (d.loss == EmbeddingLoss::CosineSimilarity) {
      const std::string& s = t.rows[r][score_col];
      size_t used = 0;
      double v = NAN;
      try {
        v = std::stod(s, &used);
      } catch (const std::exception&) {
      }
      if (used != s.size() || !std::isfinite(v))
        throw std::invalid_argument(where + ": score '" + s + "' is not a finite number");
      ex.score = (float)v;
    }
    d.examples.push_back(std::move(ex));
  }
  return d;
}

// Columns [first, first + count) of examples idx, padded into one batch (SentenceBatch's row order).
SentenceBatch make_batch(const EmbedData& d, const std::vector<int64_t>& idx, size_t first, size_t count,
                         int64_t pad_id) {
  SentenceBatch b;
  b.B = (int64_t)idx.size();
  b.columns = (int64_t)count;
  for (size_t c = first; c < first + count; ++c)
    for (int64_t i : idx) b.L = std::max<int64_t>(b.L, (int64_t)d.examples[i].ids[c].size());
  b.input_ids.assign(b.rows() * b.L, pad_id);
  b.token_type_ids.assign(b.rows() * b.L, 0);
  b.attention_mask.assign(b.rows() * b.L, 0.0f);
  int64_t row = 0;
  for (size_t c = first; c < first + count; ++c)
    for (int64_t i : idx) {
      const std::vector<int64_t>& ids = d.examples[i].ids[c];
      std::copy(ids.begin(), ids.end(), b.input_ids.begin() + row * b.L);
      std::fill(b.attention_mask.begin() + row * b.L, b.attention_mask.begin() + row * b.L + (int64_t)ids.size(), 1.0f);
      ++row;
    }
  if (d.loss == EmbeddingLoss::CosineSimilarity)
    for (int64_t i : idx) b.scores.push_back(d.examples[i].score);
  return b;
}

// Embeddings [N, D] of column `col` of every example, in batches.
std::vector<float> embed_column(SentenceEmbeddingTrainer& t, const EmbedData& d, size_t col, int64_t batch,
                                int64_t pad_id) {
  std::vector<float> out;
  for (size_t s = 0; s < d.examples.size(); s += (size_t)batch) {
    std::vector<int64_t> idx;
    for (size_t i = s; i < std::min(d.examples.size(), s + (size_t)batch); ++i) idx.push_back((int64_t)i);
    const std::vector<float> e = t.embed(make_batch(d, idx, col, 1, pad_id));
    out.insert(out.end(), e.begin(), e.end());
  }
  return out;
}

}  // namespace

namespace {
// Ranks 1..n, ties given their average rank (scipy.stats.rankdata, as spearmanr uses).
std::vector<double> average_ranks(const std::vector<double>& x) {
  std::vector<size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[order[k]] = (double)(i + j) / 2.0 + 1.0;
    i = j + 1;
  }
  return r;
}

}  // namespace

double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = (double)a.size();
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i] / n, mb += b[i] / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  return pearson(average_ranks(a), average_ranks(b));
}

namespace {

struct EmbedEval {
  double loss = 0, accuracy = 0, mrr = 0, spearman = 0;
};

EmbedEval evaluate(SentenceEmbeddingTrainer& t, const EmbedData& d, int64_t batch, int64_t pad_id) {
  EmbedEval e;
  const int64_t N = (int64_t)d.examples.size(), D = t.dimension();
  std::vector<float> emb = embed_column(t, d, 0, batch, pad_id), second = embed_column(t, d, 1, batch, pad_id);
  emb.insert(emb.end(), second.begin(), second.end());  // [2N, D]: the first column, then the second
  std::vector<float> grad(emb.size());
  if (d.loss == EmbeddingLoss::CosineSimilarity) {
    std::vector<float> scores(N), cos(N);
    for (int64_t i = 0; i < N; ++i) scores[i] = d.examples[i].score;
    e.loss = cosine_similarity_loss(emb.data(), scores.data(), N, D, grad.data(), cos.data());
    e.spearman = spearman(std::vector<double>(cos.begin(), cos.end()), std::vector<double>(scores.begin(), scores.end()));
    return e;
  }
  // Every anchor against every eval positive: MultipleNegativesRankingLoss over them, and the rank of its own
  // positive by cosine similarity (1 + the positives scoring strictly higher).
  e.loss = multiple_negatives_ranking_loss(emb.data(), N, 2, D, 20.0, grad.data());
  std::vector<float> a(N * D), p(N * D), na(N), np(N), sim(N * N);
  l2_normalize_forward(a.data(), na.data(), emb.data(), N, D, 1e-12f);
  l2_normalize_forward(p.data(), np.data(), emb.data() + N * D, N, D, 1e-12f);
  ops::gemm(false, true, N, N, D, 1.0f, a.data(), D, p.data(), D, 0.0f, sim.data(), N);
  for (int64_t i = 0; i < N; ++i) {
    const float own = sim[i * N + i];
    int64_t rank = 1;
    for (int64_t j = 0; j < N; ++j) rank += sim[i * N + j] > own;
    e.accuracy += rank == 1 ? 1.0 : 0.0;
    e.mrr += 1.0 / (double)rank;
  }
  e.accuracy /= (double)N;
  e.mrr /= (double)N;
  return e;
}

std::string under(const std::string& dir, const std::string& rel) { return rel.empty() ? dir : dir + "/" + rel; }

void copy_file_atomic(const std::string& from, const std::string& to) { write_file_atomic(to, read_whole_file(from)); }

// The output folder: the input's module list and configs, the Transformer's config and tokenizer files, and the
// trained weights.
void write_folder(const std::string& model_dir, const SentenceTransformerLayout& lay, const std::string& out,
                  SentenceEmbeddingTrainer& trainer) {
  std::error_code ec;
  make_dirs(out);
  for (const char* f : {"modules.json", "config_sentence_transformers.json"})
    if (fs::is_regular_file(model_dir + "/" + f, ec)) copy_file_atomic(model_dir + "/" + f, out + "/" + f);
  make_dirs(under(out, lay.pooling_path));
  copy_file_atomic(under(model_dir, lay.pooling_path) + "/config.json", under(out, lay.pooling_path) + "/config.json");
  if (lay.normalize) make_dirs(under(out, lay.normalize_path));
  const std::string tdir = under(out, lay.transformer_path);
  make_dirs(tdir);
  if (!lay.sentence_bert_config.empty())  // read from the Transformer's folder, else from the root
    copy_file_atomic(lay.sentence_bert_config,
                     (lay.sentence_bert_config == lay.transformer_dir + "/sentence_bert_config.json" ? tdir : out) +
                         "/sentence_bert_config.json");
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
                        "added_tokens.json"})
    if (fs::is_regular_file(lay.transformer_dir + "/" + f, ec))
      copy_file_atomic(lay.transformer_dir + "/" + f, tdir + "/" + f);
  save_safetensors(tdir + "/model.safetensors", trainer.state_dict(), {{"format", "pt"}});
}

}  // namespace

FinetuneSummary finetune_embed(const std::string& model_dir, const FinetuneOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const SentenceTransformerLayout lay = read_sentence_transformer_layout(model_dir);
  if (!lay.has_pooling)
    throw std::invalid_argument(model_dir + " is not a sentence-transformers folder (no modules.json with a Pooling "
                                "module); --task embed trains one");
  if (!lay.dense_paths.empty())
    throw std::invalid_argument(model_dir + ": a Dense module follows the Pooling; --task embed trains "
                                "Transformer -> Pooling -> [Normalize] folders only");
  const std::string cfg_path = lay.transformer_dir + "/config.json";
  require_file(cfg_path);
  require_weights(lay.transformer_dir);
  const nlohmann::json cfg_json = load_json_file(cfg_path);
  const EncoderConfig config = EncoderConfig::from_json(cfg_json, cfg_path);
  check_finetune_family(config.model_type, lay.transformer_dir);
  const BertTokenizer tok = BertTokenizer::from_dir(lay.transformer_dir);
  int64_t max_len = lay.max_seq_length > 0 ? lay.max_seq_length
                                           : std::min(config.max_position_embeddings, tok.model_max_length());
  max_len = std::min({max_len, o.max_length, config.max_input_tokens()});
  const EmbedData train = read_embed_data(o.train_file, tok, lay.do_lower_case, max_len, nullptr);
  EmbedData eval;
  if (!o.eval_file.empty()) eval = read_embed_data(o.eval_file, tok, lay.do_lower_case, max_len, &train);
  const bool mnrl = train.loss == EmbeddingLoss::MultipleNegativesRanking;
  if (mnrl && o.batch_size < 2)
    throw std::invalid_argument("MultipleNegativesRankingLoss takes its negatives from the batch: --batch-size must "
                                "be at least 2");
  FinetuneSummary summary;
  summary.loss = mnrl ? "MultipleNegativesRankingLoss" : "CosineSimilarityLoss";
  summary.train_examples = (int64_t)train.examples.size();
  summary.eval_examples = (int64_t)eval.examples.size();

  const int64_t steps_per_epoch = finetune_steps_per_epoch(o, summary.train_examples);
  // The body's dropouts (training_dropouts: BERT hidden_dropout_prob and attention_probs_dropout_prob; ModernBERT
  // reads its own keys); no head.
  const FinetuneHyperparameters hp = finetune_hyperparameters(
      o, steps_per_epoch * o.epochs, training_dropouts(cfg_json, HeadKind::TokenClassification, cfg_path));
  CheckpointWeights weights(lay.transformer_dir);
  SentenceEmbeddingTrainer trainer(config, weights, lay.pooling, lay.normalize, train.loss, hp);
  trainer.set_precision(o.precision == "bf16" ? ops::ComputeType::BF16 : ops::ComputeType::F32);
  const int64_t pad_id = std::max<int64_t>(0, config.pad_token_id);
  dist::Communicator& comm = dist::world();
  const int world_size = comm.world_size(), rank = comm.rank();

  FinetuneTask task;
  task.params = &trainer.params();
  task.optimizer = &trainer.optimizer();
  task.dropout_rng = &trainer.dropout_rng();
  task.num_examples = summary.train_examples;
  task.eval_columns = mnrl ? std::vector<std::string>{"eval_loss", "eval_accuracy", "eval_mrr"}
                           : std::vector<std::string>{"eval_loss", "eval_spearman"};
  task.has_eval = !eval.examples.empty();
  const int64_t columns = (int64_t)train.columns.size(), D = trainer.dimension();
  task.micro_step = [&](const std::vector<int64_t>& idx, float scale, Rng&, RowKeys& keys) -> double {
    // This rank's examples (balanced by tokens) through the model; every rank's embeddings gathered (a sum of
    // zero-padded copies: exact); the loss of the whole micro-batch, so that each anchor's in-batch negatives are
    // every candidate of the global micro-batch (MultipleNegativesRankingLoss(gather_across_devices=True)); each
    // rank backpropagates its own rows. Rank 0 reports the loss.
    const int64_t B = (int64_t)idx.size();
    std::vector<int64_t> tokens;
    for (int64_t i : idx) {
      int64_t n = 0;
      for (const auto& ids : train.examples[i].ids) n += (int64_t)ids.size();
      tokens.push_back(n);
    }
    const auto [r0, r1] = dist::shard_range(tokens, world_size, rank);
    const std::vector<int64_t> mine(idx.begin() + r0, idx.begin() + r1);
    const int64_t b = (int64_t)mine.size();
    std::vector<float> all(columns * B * D, 0.0f);
    if (b > 0) {
      keys.rows.clear();
      for (int64_t c = 0; c < columns; ++c)
        for (int64_t i : mine) keys.rows.push_back((uint64_t)i * (uint64_t)columns + (uint64_t)c);
      keys.calls = 0;
      const std::vector<float>& emb = trainer.forward_embeddings(make_batch(train, mine, 0, columns, pad_id), true);
      for (int64_t c = 0; c < columns; ++c)
        std::copy(emb.begin() + c * b * D, emb.begin() + (c + 1) * b * D, all.begin() + (c * B + r0) * D);
    }
    comm.all_reduce_sum(all.data(), (int64_t)all.size());
    std::vector<float> scores, demb(all.size());
    for (int64_t i : idx) scores.push_back(train.examples[i].score);
    const double loss = trainer.loss_of_embeddings(all.data(), B, columns, mnrl ? nullptr : scores.data(), demb.data());
    if (b > 0) {
      std::vector<float> own(columns * b * D);
      for (int64_t c = 0; c < columns; ++c)
        std::copy(demb.begin() + (c * B + r0) * D, demb.begin() + (c * B + r1) * D, own.begin() + c * b * D);
      trainer.backward_embeddings(own.data(), scale);
    }
    return rank == 0 ? loss : 0.0;
  };
  task.evaluate = [&] {
    const EmbedEval e = evaluate(trainer, eval, std::max<int64_t>(o.batch_size, 32), pad_id);
    EvalResult r;
    r.loss = e.loss;
    r.accuracy = e.accuracy;
    if (mnrl) {
      r.metrics = {{"eval_loss", e.loss}, {"eval_accuracy", e.accuracy}, {"eval_mrr", e.mrr}};
      r.score = e.accuracy, r.tie = e.mrr;
    } else {
      r.metrics = {{"eval_loss", e.loss}, {"eval_spearman", e.spearman}};
      r.score = e.spearman, r.tie = -e.loss;
    }
    return r;
  };
  task.write_model = [&] { write_folder(model_dir, lay, o.out_dir, trainer); };
  run_finetune_loop(o, task, run_fingerprint(o, summary.train_examples, {summary.loss}), summary);
  summary.out_dir = o.out_dir;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace tfm::api

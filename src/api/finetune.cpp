#include "tfm/finetune.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>

#include "api/common.h"
#include "api/finetune_embed.h"
#include "core/rng.h"
#include "io/atomic_file.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "io/table.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "tfm/tokenizer.h"
#include "train/finetune.h"

namespace fs = std::filesystem;

namespace tfm {
namespace {

struct Example {
  std::vector<int64_t> ids, types;
  int64_t label = 0;
};

void check_options(const FinetuneOptions& o) {
  if (o.task == "token-classify" || o.task == "mlm")
    throw std::invalid_argument("--task " + o.task + " is not implemented yet; only 'classify' and 'embed' are");
  if (o.task != "classify" && o.task != "embed")
    throw std::invalid_argument("unknown task '" + o.task + "' (classify, token-classify, embed or mlm)");
  if (o.train_file.empty()) throw std::invalid_argument("a training file is required (--train FILE)");
  if (o.out_dir.empty()) throw std::invalid_argument("an output folder is required (--out DIR)");
  auto positive = [](const char* what, double v) {
    if (!(v > 0) || !std::isfinite(v)) throw std::invalid_argument(std::string(what) + " must be a positive number");
  };
  if (o.epochs < 1 || o.epochs > 100000) throw std::invalid_argument("epochs must be from 1 to 100000");
  if (o.batch_size < 1 || o.batch_size > 65536) throw std::invalid_argument("batch_size must be from 1 to 65536");
  positive("learning_rate", o.learning_rate);
  positive("adam_epsilon", o.adam_epsilon);
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay))
    throw std::invalid_argument("weight_decay must be a number >= 0");
  if (!(o.adam_beta1 >= 0 && o.adam_beta1 < 1) || !(o.adam_beta2 >= 0 && o.adam_beta2 < 1))
    throw std::invalid_argument("adam betas must be in [0, 1)");
  if (!(o.warmup_ratio >= 0 && o.warmup_ratio <= 1)) throw std::invalid_argument("warmup_ratio must be in [0, 1]");
  if (o.warmup_steps < 0) throw std::invalid_argument("warmup_steps must be >= 0");
  if (!std::isfinite(o.max_grad_norm)) throw std::invalid_argument("max_grad_norm must be finite");
  if (o.max_length < 2) throw std::invalid_argument("max_length must be at least 2");
  api::check_threads(o.threads);
}

bool is_integer(const std::string& s) {
  if (s.empty()) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return s.size() < 18;
}

// The label set in id order (see FinetuneOptions::labels).
std::vector<std::string> label_set(const FinetuneOptions& o, const nlohmann::json& config, const Table& train) {
  const int64_t col = train.column(o.label_column);
  std::set<std::string> seen;
  for (const auto& r : train.rows) seen.insert(r[col]);
  if (!o.labels.empty()) {
    std::set<std::string> given(o.labels.begin(), o.labels.end());
    if (given.size() != o.labels.size()) throw std::invalid_argument("--labels names a label twice");
    return o.labels;
  }
  if (config.contains("id2label") && config["id2label"].is_object() && !config["id2label"].empty()) {
    std::vector<std::string> names(config["id2label"].size());
    bool ok = true;
    for (auto& [k, v] : config["id2label"].items()) {
      if (!is_integer(k) || !v.is_string()) {
        ok = false;
        break;
      }
      const int64_t i = std::stoll(k);
      if (i < 0 || i >= (int64_t)names.size()) {
        ok = false;
        break;
      }
      names[i] = v.get<std::string>();
    }
    if (ok)
      for (const auto& s : seen) ok &= std::find(names.begin(), names.end(), s) != names.end();
    if (ok) return names;
  }
  std::vector<std::string> labels(seen.begin(), seen.end());
  if (std::all_of(labels.begin(), labels.end(), is_integer))
    std::sort(labels.begin(), labels.end(), [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); });
  if (labels.size() < 2)
    throw std::invalid_argument(o.train_file + ": column '" + o.label_column + "' has only one label ('" +
                                (labels.empty() ? "" : labels[0]) + "'); classification needs at least two");
  return labels;
}

std::vector<Example> read_examples(const std::string& path, const FinetuneOptions& o, const Tokenizer& tok,
                                   const std::map<std::string, int64_t>& label_id, const Table* given = nullptr) {
  Table local;
  if (!given) local = read_table(path);
  const Table& t = given ? *given : local;
  const int64_t tc = t.column(o.text_column), pc = t.column(o.text_pair_column), lc = t.column(o.label_column);
  std::string cols;
  for (const auto& c : t.columns) cols += (cols.empty() ? "" : ", ") + c;
  if (tc < 0) throw std::invalid_argument(path + ": no column '" + o.text_column + "' (columns: " + cols + ")");
  if (lc < 0) throw std::invalid_argument(path + ": no column '" + o.label_column + "' (columns: " + cols + ")");
  TokenizeOptions to;
  to.max_length = o.max_length;
  to.return_offsets = false;
  std::vector<Example> out;
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const std::string where = path + ": line " + std::to_string(t.line_of_row[r]);
    const std::string& text = t.rows[r][tc];
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw std::invalid_argument(where + ": empty text");
    auto it = label_id.find(t.rows[r][lc]);
    if (it == label_id.end()) {
      std::string names;
      for (const auto& [k, v] : label_id) names += (names.empty() ? "" : ", ") + k;
      throw std::invalid_argument(where + ": label '" + t.rows[r][lc] + "' is not in the label set (" + names + ")");
    }
    TextEncoding e;
    try {
      e = pc >= 0 && !t.rows[r][pc].empty() ? tok.encode_pair(text, t.rows[r][pc], to) : tok.encode(text, to);
    } catch (const std::invalid_argument& ex) {
      throw std::invalid_argument(where + ": " + ex.what());
    }
    out.push_back(Example{e.input_ids, e.token_type_ids, it->second});
  }
  return out;
}

ClassificationBatch make_batch(const std::vector<Example>& ex, const std::vector<int64_t>& idx, int64_t pad_id) {
  ClassificationBatch b;
  b.B = (int64_t)idx.size();
  for (int64_t i : idx) b.L = std::max<int64_t>(b.L, (int64_t)ex[i].ids.size());
  b.input_ids.assign(b.B * b.L, pad_id);
  b.token_type_ids.assign(b.B * b.L, 0);
  b.attention_mask.assign(b.B * b.L, 0.0f);
  for (int64_t r = 0; r < b.B; ++r) {
    const Example& e = ex[idx[r]];
    for (size_t l = 0; l < e.ids.size(); ++l) {
      b.input_ids[r * b.L + l] = e.ids[l];
      b.token_type_ids[r * b.L + l] = l < e.types.size() ? e.types[l] : 0;
      b.attention_mask[r * b.L + l] = 1.0f;
    }
    b.labels.push_back(e.label);
  }
  return b;
}

struct EvalResult {
  double loss = 0, accuracy = 0, macro_f1 = 0;
};

EvalResult evaluate(SequenceClassificationTrainer& t, const std::vector<Example>& ex, int64_t batch, int64_t pad_id) {
  const int64_t C = t.num_labels();
  std::vector<int64_t> pred, gold;
  double loss = 0;
  for (size_t s = 0; s < ex.size(); s += (size_t)batch) {
    std::vector<int64_t> idx;
    for (size_t i = s; i < std::min(ex.size(), s + (size_t)batch); ++i) idx.push_back((int64_t)i);
    const ClassificationBatch b = make_batch(ex, idx, pad_id);
    const std::vector<float> logits = t.logits(b);
    for (int64_t r = 0; r < b.B; ++r) {
      const float* z = logits.data() + r * C;
      const int64_t arg = std::max_element(z, z + C) - z;
      double mx = z[arg], sum = 0;
      for (int64_t c = 0; c < C; ++c) sum += std::exp((double)z[c] - mx);
      loss += std::log(sum) + mx - z[b.labels[r]];
      pred.push_back(arg);
      gold.push_back(b.labels[r]);
    }
  }
  EvalResult e;
  const double n = (double)gold.size();
  e.loss = loss / n;
  std::vector<double> tp(C), fp(C), fn(C);
  std::set<int64_t> present;
  int64_t correct = 0;
  for (size_t i = 0; i < gold.size(); ++i) {
    present.insert(gold[i]);
    present.insert(pred[i]);
    if (gold[i] == pred[i]) {
      ++correct;
      tp[gold[i]] += 1;
    } else {
      fp[pred[i]] += 1;
      fn[gold[i]] += 1;
    }
  }
  e.accuracy = (double)correct / n;
  // sklearn f1_score(average="macro"): the mean over the labels present in gold or predictions; 0 where undefined.
  double f1 = 0;
  for (int64_t c : present) {
    const double d = 2 * tp[c] + fp[c] + fn[c];
    f1 += d > 0 ? 2 * tp[c] / d : 0.0;
  }
  e.macro_f1 = f1 / (double)present.size();
  return e;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) throw std::runtime_error(path + ": read error");
  return ss.str();
}

}  // namespace

FinetuneSummary finetune(const std::string& model_dir, const FinetuneOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  check_options(o);
  api::require_dir(model_dir, "model folder");
  if (o.task != "embed") {  // a sentence-transformers folder may keep its Transformer in a subfolder
    api::require_file(model_dir + "/config.json");
    api::require_weights(model_dir);
  }
  api::require_file(o.train_file);
  if (!o.eval_file.empty()) api::require_file(o.eval_file);
  std::error_code ec;
  if (fs::exists(o.out_dir, ec)) {
    if (!fs::is_directory(o.out_dir, ec)) throw std::invalid_argument("--out '" + o.out_dir + "' is a file");
    if (!fs::is_empty(o.out_dir, ec) && !o.overwrite)
      throw std::invalid_argument("--out '" + o.out_dir +
                                  "' already exists and is not an empty folder; choose a new folder, or pass --overwrite");
    if (fs::equivalent(o.out_dir, model_dir, ec))
      throw std::invalid_argument("--out is the model folder itself; choose another folder");
  }
  api::apply_threads(o.threads);
  if (o.task == "embed") return api::finetune_embed(model_dir, o);
  const std::string cfg_path = model_dir + "/config.json";
  const nlohmann::json cfg_json = load_json_file(cfg_path);
  const EncoderConfig config = EncoderConfig::from_json(cfg_json, cfg_path);
  if (config.model_type != "bert")
    throw std::invalid_argument(model_dir + ": model_type '" + config.model_type +
                                "': fine-tuning supports bert so far");
  const Tokenizer tok(model_dir);
  const Table train = read_table(o.train_file);
  if (train.column(o.label_column) < 0)
    throw std::invalid_argument(o.train_file + ": no column '" + o.label_column + "'");
  FinetuneSummary summary;
  summary.labels = label_set(o, cfg_json, train);
  std::map<std::string, int64_t> label_id;
  for (size_t i = 0; i < summary.labels.size(); ++i) label_id[summary.labels[i]] = (int64_t)i;
  const std::vector<Example> train_ex = read_examples(o.train_file, o, tok, label_id, &train);
  std::vector<Example> eval_ex;
  if (!o.eval_file.empty()) eval_ex = read_examples(o.eval_file, o, tok, label_id);
  summary.train_examples = (int64_t)train_ex.size();
  summary.eval_examples = (int64_t)eval_ex.size();

  const int64_t steps_per_epoch = ((int64_t)train_ex.size() + o.batch_size - 1) / o.batch_size;
  // BertForSequenceClassification: classifier_dropout if set, else hidden_dropout_prob (the body's dropout).
  const FinetuneHyperparameters hp = api::finetune_hyperparameters(
      o, steps_per_epoch * o.epochs, json_number_or(cfg_json, "hidden_dropout_prob", 0.1, cfg_path));
  const double init_range = json_number_or(cfg_json, "initializer_range", 0.02, cfg_path);
  CheckpointWeights weights(model_dir);
  SequenceClassificationTrainer trainer(config, weights, (int64_t)summary.labels.size(), hp, init_range);
  const int64_t pad_id = config.pad_token_id;

  Rng shuffle(o.seed);
  std::vector<int64_t> order(train_ex.size());
  std::vector<float> best;
  double best_acc = -1, best_loss = INFINITY;
  std::string log = "epoch,step,train_loss,lr,eval_loss,eval_accuracy,eval_macro_f1\n";
  for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
    std::iota(order.begin(), order.end(), 0);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[shuffle.below(i)]);  // Fisher-Yates
    double loss_sum = 0;
    const auto te = std::chrono::steady_clock::now();
    int64_t seen = 0;
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      std::vector<int64_t> idx(order.begin() + s * o.batch_size,
                               order.begin() + std::min<int64_t>((int64_t)order.size(), (s + 1) * o.batch_size));
      const double loss = trainer.train_step(make_batch(train_ex, idx, pad_id));
      loss_sum += loss;
      seen += (int64_t)idx.size();
      if (o.progress) {
        FinetuneProgress p;
        p.epoch = epoch;
        p.epochs = o.epochs;
        p.step = trainer.steps();
        p.total_steps = hp.total_steps;
        p.train_loss = loss_sum / (double)(s + 1);
        p.lr = trainer.last_lr();
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - te).count();
        p.examples_per_sec = sec > 0 ? (double)seen / sec : 0;
        o.progress(p);
      }
    }
    summary.final_train_loss = loss_sum / (double)steps_per_epoch;
    FinetuneProgress p;
    p.epoch_end = true;
    p.epoch = epoch;
    p.epochs = o.epochs;
    p.step = trainer.steps();
    p.total_steps = hp.total_steps;
    p.train_loss = summary.final_train_loss;
    p.lr = trainer.last_lr();
    std::ostringstream row;
    row.precision(8);
    row << epoch << ',' << trainer.steps() << ',' << summary.final_train_loss << ',' << trainer.last_lr() << ',';
    if (!eval_ex.empty()) {
      const EvalResult e = evaluate(trainer, eval_ex, std::max<int64_t>(o.batch_size, 32), pad_id);
      p.eval_loss = e.loss;
      p.eval_accuracy = e.accuracy;
      p.eval_macro_f1 = e.macro_f1;
      row << e.loss << ',' << e.accuracy << ',' << e.macro_f1;
      if (e.accuracy > best_acc || (e.accuracy == best_acc && e.loss < best_loss)) {
        best_acc = e.accuracy;
        best_loss = e.loss;
        best = trainer.params().all_data();
        summary.best_epoch = epoch;
        summary.best_eval_accuracy = e.accuracy;
        summary.best_eval_macro_f1 = e.macro_f1;
        summary.best_eval_loss = e.loss;
      }
    } else {
      row << ",,";
      summary.best_epoch = epoch;
    }
    log += row.str() + "\n";
    if (o.progress) o.progress(p);
  }
  summary.steps = trainer.steps();
  if (!best.empty()) trainer.params().all_data() = best;

  // The folder: written only now, every file atomically.
  fs::create_directories(o.out_dir);
  nlohmann::json out_cfg = cfg_json;
  out_cfg["architectures"] = {"BertForSequenceClassification"};
  nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
  for (size_t i = 0; i < summary.labels.size(); ++i) {
    id2label[std::to_string(i)] = summary.labels[i];
    label2id[summary.labels[i]] = (int64_t)i;
  }
  out_cfg["id2label"] = id2label;
  out_cfg["label2id"] = label2id;
  if (out_cfg.contains("num_labels")) out_cfg["num_labels"] = (int64_t)summary.labels.size();
  write_file_atomic(o.out_dir + "/config.json", out_cfg.dump(2) + "\n");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"})
    if (fs::is_regular_file(model_dir + "/" + f, ec)) write_file_atomic(o.out_dir + "/" + f, read_bytes(model_dir + "/" + f));
  save_safetensors(o.out_dir + "/model.safetensors", trainer.params().named_tensors(), {{"format", "pt"}});
  write_file_atomic(o.out_dir + "/train_log.csv", log);
  summary.out_dir = o.out_dir;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace tfm

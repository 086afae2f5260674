#include "tfm/finetune.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "api/common.h"
#include "api/finetune_embed.h"
#include "core/rng.h"
#include "dist/communicator.h"
#include "dist/shard.h"
#include "eval/seqeval.h"
#include "io/atomic_file.h"
#include "io/json_util.h"
#include "io/plot.h"
#include "io/safetensors.h"
#include "io/table.h"
#include "models/checkpoint_weights.h"
#include "models/heads.h"
#include "models/encoder.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "ops/softmax.h"
#include "tfm/tokenizer.h"
#include "train/finetune.h"
#include "train/group_texts.h"

namespace fs = std::filesystem;

namespace tfm {
namespace {

const char* kStateFile = "trainer_state.safetensors";
// Set by request_finetune_stop (from a signal handler or watcher thread); read after every optimizer step.
std::atomic<int> finetune_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "request_finetune_stop must be async-signal-safe");

// One training or evaluation example, tokenized. labels: {label} (classify), one per token with -100
// (token-classify), empty (mlm: drawn per batch; regression). target: {value} for regression, else empty.
// special: the post-processor's special tokens (mlm never masks them).
struct Example {
  std::vector<int64_t> ids, types, labels;
  std::vector<float> target;
  std::vector<bool> special;
};

// ---------------------------------------------------------------- options and data

void check_options(const FinetuneOptions& o) {
  if (o.task != "classify" && o.task != "token-classify" && o.task != "mlm" && o.task != "embed")
    throw std::invalid_argument("unknown task '" + o.task + "' (classify, token-classify, embed or mlm)");
  if (o.train_file.empty()) throw std::invalid_argument("a training file is required (--train FILE)");
  if (o.out_dir.empty()) throw std::invalid_argument("an output folder is required (--out DIR)");
  auto positive = [](const char* what, double v) {
    if (!(v > 0) || !std::isfinite(v)) throw std::invalid_argument(std::string(what) + " must be a positive number");
  };
  if (o.epochs < 1 || o.epochs > 100000) throw std::invalid_argument("epochs must be from 1 to 100000");
  if (o.batch_size < 1 || o.batch_size > 65536) throw std::invalid_argument("batch_size must be from 1 to 65536");
  if (o.gradient_accumulation_steps < 1 || o.gradient_accumulation_steps > 65536)
    throw std::invalid_argument("gradient_accumulation_steps must be from 1 to 65536");
  if (o.save_steps < 0) throw std::invalid_argument("save_steps must be >= 0");
  positive("learning_rate", o.learning_rate);
  positive("adam_epsilon", o.adam_epsilon);
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay))
    throw std::invalid_argument("weight_decay must be a number >= 0");
  if (!(o.adam_beta1 >= 0 && o.adam_beta1 < 1) || !(o.adam_beta2 >= 0 && o.adam_beta2 < 1))
    throw std::invalid_argument("adam betas must be in [0, 1)");
  if (!(o.warmup_ratio >= 0 && o.warmup_ratio <= 1)) throw std::invalid_argument("warmup_ratio must be in [0, 1]");
  if (o.warmup_steps < 0) throw std::invalid_argument("warmup_steps must be >= 0");
  if (!std::isfinite(o.max_grad_norm)) throw std::invalid_argument("max_grad_norm must be finite");
  if (o.precision != "fp32" && o.precision != "bf16")
    throw std::invalid_argument("precision must be 'fp32' or 'bf16', not '" + o.precision + "'");
  // Before anything is loaded or written (FinetuneModel::set_precision would refuse it too, later).
  if (o.precision == "bf16" && !ops::bf16_gemm_available())
    throw std::runtime_error("--precision bf16 needs a CPU with bf16 instructions (AVX512_BF16 or AMX); this one "
                             "reports " + ops::cpu_isa_name() + ": use --precision fp32");
  if (!(o.mlm_probability > 0 && o.mlm_probability < 1)) throw std::invalid_argument("mlm_probability must be in (0, 1)");
  if (o.max_length < (o.task == "token-classify" ? 3 : 2))
    throw std::invalid_argument("max_length must be at least " + std::string(o.task == "token-classify" ? "3" : "2"));
  if (o.group_texts && o.task != "mlm")
    throw std::invalid_argument("--group-texts concatenates the texts of masked-LM training; it is for --task mlm only");
  if (!o.problem_type.empty() && o.problem_type != "regression" && o.problem_type != "single_label_classification")
    throw std::invalid_argument("problem_type must be 'regression' or 'single_label_classification', not '" +
                                o.problem_type + "'");
  if (!o.problem_type.empty() && o.task != "classify")
    throw std::invalid_argument("--problem-type is for --task classify, not '" + o.task + "'");
  if (o.problem_type == "regression" && !o.labels.empty())
    throw std::invalid_argument("--labels names the classes of a classifier; regression (--problem-type regression) "
                                "has one output and no classes");
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

std::string column_list(const Table& t) {
  std::string cols;
  for (const auto& c : t.columns) cols += (cols.empty() ? "" : ", ") + c;
  return cols;
}

int64_t require_column(const Table& t, const std::string& path, const std::string& name) {
  const int64_t c = t.column(name);
  if (c < 0) throw std::invalid_argument(path + ": no column '" + name + "' (columns: " + column_list(t) + ")");
  return c;
}

// Every column the task reads (classify: text and label, unless regression options make the label numeric, still
// a column; token-classify: tokens and tags; mlm: text), checked before the labels are: a file without its text
// column is told so, not that its labels are too few.
void require_task_columns(const FinetuneOptions& o, const Table& t, const std::string& path) {
  if (o.task == "classify") {
    require_column(t, path, o.text_column);
    require_column(t, path, o.label_column);
  } else if (o.task == "token-classify") {
    require_column(t, path, o.tokens_column);
    require_column(t, path, o.tags_column);
  } else if (o.task == "mlm") {
    require_column(t, path, o.text_column);
  }
}

// Fails early, before any training, when `dir` (--out) cannot be created or written: its nearest existing
// ancestor must be a folder this process may write into.
void require_creatable_folder(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(dir), ec);
  if (ec) p = fs::path(dir);
  while (!p.empty() && !fs::exists(p, ec)) {
    const fs::path parent = p.parent_path();
    if (parent == p) break;
    p = parent;
  }
  if (p.empty()) p = ".";
  if (!fs::is_directory(p, ec))
    throw std::invalid_argument("--out '" + dir + "' cannot be created: '" + p.string() + "' is not a folder");
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    throw std::invalid_argument("--out '" + dir + "' cannot be written: no write permission on '" + p.string() +
                                "' (" + std::strerror(errno) + ")");
}

// A list cell: a JSON array (of strings or numbers: a number's JSON text), or items separated by whitespace.
std::vector<std::string> parse_list(const std::string& cell, const std::string& where) {
  std::vector<std::string> out;
  const size_t first = cell.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && cell[first] == '[') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(cell);
    } catch (const nlohmann::json::exception&) {
      throw std::invalid_argument(where + ": not a valid JSON list: " + cell.substr(0, 60));
    }
    if (!j.is_array()) throw std::invalid_argument(where + ": not a JSON list");
    for (const auto& v : j) out.push_back(v.is_string() ? v.get<std::string>() : v.dump());
    return out;
  }
  std::istringstream ss(cell);
  std::string w;
  while (ss >> w) out.push_back(w);
  return out;
}

// The label set in id order (see FinetuneOptions::labels), from the labels `seen` in the training data.
std::vector<std::string> label_set(const FinetuneOptions& o, const nlohmann::json& config, const std::set<std::string>& seen,
                                   const std::string& column) {
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
    throw std::invalid_argument(o.train_file + ": column '" + column + "' has only one label ('" +
                                (labels.empty() ? "" : labels[0]) + "'); classification needs at least two");
  return labels;
}

std::set<std::string> seen_labels(const FinetuneOptions& o, const Table& train) {
  std::set<std::string> seen;
  if (o.task == "classify") {
    const int64_t col = require_column(train, o.train_file, o.label_column);
    for (const auto& r : train.rows) seen.insert(r[col]);
  } else if (o.task == "token-classify") {
    const int64_t col = require_column(train, o.train_file, o.tags_column);
    for (size_t r = 0; r < train.rows.size(); ++r)
      for (const auto& t : parse_list(train.rows[r][col], o.train_file + ": line " + std::to_string(train.line_of_row[r])))
        seen.insert(t);
  }
  return seen;
}

int64_t label_id_of(const std::map<std::string, int64_t>& label_id, const std::string& label, const std::string& where) {
  auto it = label_id.find(label);
  if (it == label_id.end()) {
    std::string names;
    for (const auto& [k, v] : label_id) names += (names.empty() ? "" : ", ") + k;
    throw std::invalid_argument(where + ": label '" + label + "' is not in the label set (" + names + ")");
  }
  return it->second;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// A label cell as a regression target: a finite number (strtod, surrounding spaces allowed).
std::optional<double> parse_number(const std::string& s) {
  const char* begin = s.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin || !blank(std::string(end)) || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Whether --task classify trains a regression (num_labels 1, MSELoss), as Hugging Face decides it: the option
// (--problem-type), else config.json's problem_type "regression", else the label column as run_glue.py reads it:
// a float column (every label a number, one at least written with a decimal point or an exponent) is
// regression, an integer or text column classification.
bool is_regression(const FinetuneOptions& o, const nlohmann::json& config, const Table& train) {
  if (o.task != "classify") return false;
  if (!o.problem_type.empty()) return o.problem_type == "regression";
  if (config.contains("problem_type") && config["problem_type"] == "regression") return true;  // checked at load
  if (!o.labels.empty()) return false;
  const int64_t col = require_column(train, o.train_file, o.label_column);
  bool fractional = false;
  for (const auto& r : train.rows) {
    if (!parse_number(r[col])) return false;
    fractional |= r[col].find_first_of(".eE") != std::string::npos;
  }
  return fractional && !train.rows.empty();
}

Example from_encoding(const TextEncoding& e) {
  Example ex;
  ex.ids = e.input_ids;
  ex.types = e.token_type_ids;
  ex.special = e.special;
  return ex;
}

// classify: text [, text_pair] and label (regression: a number); mlm: text (a row an example, or with group_texts
// blocks of max_length tokens cut from the concatenated texts).
std::vector<Example> read_text_examples(const std::string& path, const Table& t, const FinetuneOptions& o,
                                        const Tokenizer& tok, const std::map<std::string, int64_t>& label_id,
                                        bool regression) {
  const bool classify = o.task == "classify";
  const int64_t tc = require_column(t, path, o.text_column);
  const int64_t pc = classify ? t.column(o.text_pair_column) : -1;
  const int64_t lc = classify ? require_column(t, path, o.label_column) : -1;
  TokenizeOptions to;
  to.max_length = o.group_texts ? 0 : o.max_length;  // group_texts: no truncation, blocks of max_length
  to.return_offsets = false;
  std::vector<Example> out;
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const std::string where = path + ": line " + std::to_string(t.line_of_row[r]);
    const std::string& text = t.rows[r][tc];
    if (blank(text)) throw std::invalid_argument(where + ": empty text");
    TextEncoding e;
    try {
      e = pc >= 0 && !t.rows[r][pc].empty() ? tok.encode_pair(text, t.rows[r][pc], to) : tok.encode(text, to);
    } catch (const std::invalid_argument& ex) {
      throw std::invalid_argument(where + ": " + ex.what());
    }
    Example ex = from_encoding(e);
    if (classify && regression) {
      const std::optional<double> v = parse_number(t.rows[r][lc]);
      if (!v)
        throw std::invalid_argument(where + ": label '" + t.rows[r][lc] + "' in column '" + o.label_column +
                                    "' is not a number; regression (problem_type \"regression\") needs a numeric "
                                    "value on every row");
      ex.target = {(float)*v};
    } else if (classify) {
      ex.labels = {label_id_of(label_id, t.rows[r][lc], where)};
    }
    out.push_back(std::move(ex));
  }
  if (!o.group_texts) return out;
  std::vector<TokenizedText> texts(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    texts[i].input_ids = std::move(out[i].ids);
    texts[i].token_type_ids = std::move(out[i].types);
    texts[i].special_tokens_mask = std::move(out[i].special);
  }
  out.clear();
  for (TokenizedText& b : group_texts(texts, o.max_length)) {
    Example ex;
    ex.ids = std::move(b.input_ids);
    ex.types = std::move(b.token_type_ids);
    ex.special = std::move(b.special_tokens_mask);
    out.push_back(std::move(ex));
  }
  return out;
}

// token-classify: tokenizer(words, is_split_into_words=True, truncation=True, max_length) and
// tokenize_and_align_labels (label_all_tokens=False): each word tokenized on its own, the sub-tokens concatenated
// between the post-processor's special tokens, the word's label on its first sub-token, -100 elsewhere. A word is
// tokenized as it would be after a space (the tokens of "a " + word less those of "a"): what run_ner.py's
// add_prefix_space=True gives byte-level BPE (RoBERTa: "Ġparis", as in a sentence); WordPiece and SentencePiece
// tokenize a word alike either way.
std::vector<Example> read_token_examples(const std::string& path, const Table& t, const FinetuneOptions& o,
                                         const Tokenizer& tok, const std::map<std::string, int64_t>& label_id) {
  const int64_t wc = require_column(t, path, o.tokens_column), gc = require_column(t, path, o.tags_column);
  // The special tokens around a text: those before and after the tokens of a one-word encoding.
  const TextEncoding frame = tok.encode("a");
  size_t lead = 0, trail = 0;
  while (lead < frame.special.size() && frame.special[lead]) ++lead;
  while (trail < frame.special.size() - lead && frame.special[frame.special.size() - 1 - trail]) ++trail;
  TokenizeOptions word_opts;
  word_opts.add_special_tokens = false;
  word_opts.return_offsets = false;
  const size_t lead_word = tok.encode("a", word_opts).input_ids.size();
  std::vector<Example> out;
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const std::string where = path + ": line " + std::to_string(t.line_of_row[r]);
    const std::vector<std::string> words = parse_list(t.rows[r][wc], where + ": column '" + o.tokens_column + "'");
    const std::vector<std::string> tags = parse_list(t.rows[r][gc], where + ": column '" + o.tags_column + "'");
    if (words.empty()) throw std::invalid_argument(where + ": no tokens");
    if (words.size() != tags.size())
      throw std::invalid_argument(where + ": " + std::to_string(words.size()) + " tokens but " +
                                  std::to_string(tags.size()) + " tags");
    Example ex;
    for (size_t i = 0; i < lead; ++i) {
      ex.ids.push_back(frame.input_ids[i]);
      ex.types.push_back(frame.token_type_ids[i]);
      ex.labels.push_back(kIgnoreLabel);
      ex.special.push_back(true);
    }
    const size_t room = (size_t)o.max_length - lead - trail;
    for (size_t w = 0; w < words.size(); ++w) {
      const int64_t y = label_id_of(label_id, tags[w], where);
      TextEncoding e;
      try {
        e = tok.encode("a " + words[w], word_opts);
      } catch (const std::invalid_argument& ex2) {
        throw std::invalid_argument(where + ": " + ex2.what());
      }
      for (size_t k = lead_word; k < e.input_ids.size() && ex.ids.size() - lead < room; ++k) {
        ex.ids.push_back(e.input_ids[k]);
        ex.types.push_back(0);
        ex.labels.push_back(k == lead_word ? y : kIgnoreLabel);
        ex.special.push_back(false);
      }
    }
    for (size_t i = frame.special.size() - trail; i < frame.special.size(); ++i) {
      ex.ids.push_back(frame.input_ids[i]);
      ex.types.push_back(frame.token_type_ids[i]);
      ex.labels.push_back(kIgnoreLabel);
      ex.special.push_back(true);
    }
    out.push_back(std::move(ex));
  }
  return out;
}

std::vector<Example> read_examples(const std::string& path, const Table& t, const FinetuneOptions& o,
                                   const Tokenizer& tok, const std::map<std::string, int64_t>& label_id,
                                   bool regression) {
  return o.task == "token-classify" ? read_token_examples(path, t, o, tok, label_id)
                                    : read_text_examples(path, t, o, tok, label_id, regression);
}

// A padded batch of examples idx: labels [B] (one per example) or [B, L] (-100 on padding); special [B, L]
// (padding is special).
FinetuneBatch make_batch(const std::vector<Example>& ex, const std::vector<int64_t>& idx, int64_t pad_id,
                         std::vector<bool>* special = nullptr) {
  FinetuneBatch b;
  b.B = (int64_t)idx.size();
  for (int64_t i : idx) b.L = std::max<int64_t>(b.L, (int64_t)ex[i].ids.size());
  b.input_ids.assign(b.B * b.L, pad_id);
  b.token_type_ids.assign(b.B * b.L, 0);
  b.attention_mask.assign(b.B * b.L, 0.0f);
  const bool per_token = !ex.empty() && ex[idx[0]].labels.size() > 1;
  if (per_token) b.labels.assign(b.B * b.L, kIgnoreLabel);
  if (special) special->assign(b.B * b.L, true);
  for (int64_t r = 0; r < b.B; ++r) {
    const Example& e = ex[idx[r]];
    for (size_t l = 0; l < e.ids.size(); ++l) {
      b.input_ids[r * b.L + l] = e.ids[l];
      b.token_type_ids[r * b.L + l] = l < e.types.size() ? e.types[l] : 0;
      b.attention_mask[r * b.L + l] = 1.0f;
      if (per_token) b.labels[r * b.L + l] = e.labels[l];
      if (special) (*special)[r * b.L + l] = l < e.special.size() && e.special[l];
    }
    if (!per_token && !e.labels.empty()) b.labels.push_back(e.labels[0]);
    if (!e.target.empty()) b.targets.push_back(e.target[0]);
  }
  return b;
}

std::vector<int64_t> range_of(size_t begin, size_t end) {
  std::vector<int64_t> idx(end - begin);
  std::iota(idx.begin(), idx.end(), (int64_t)begin);
  return idx;
}

// ---------------------------------------------------------------- evaluation

using api::EvalResult;

double log_softmax_nll(const float* z, int64_t C, int64_t y) { return ops::logsumexp(z, C) - z[y]; }

// The eval examples in padded batches of `batch`, in order.
std::vector<FinetuneBatch> eval_batches(const std::vector<Example>& ex, int64_t batch, int64_t pad_id) {
  std::vector<FinetuneBatch> out;
  for (size_t s = 0; s < ex.size(); s += (size_t)batch)
    out.push_back(make_batch(ex, range_of(s, std::min(ex.size(), s + (size_t)batch)), pad_id));
  return out;
}

EvalResult evaluate_classify(SequenceClassificationTrainer& t, const std::vector<Example>& ex, int64_t batch,
                             int64_t pad_id) {
  const int64_t C = t.num_labels();
  std::vector<int64_t> pred, gold;
  double loss = 0;
  for (const FinetuneBatch& b : eval_batches(ex, batch, pad_id)) {
    const std::vector<float> logits = t.logits(b);
    for (int64_t r = 0; r < b.B; ++r) {
      const float* z = logits.data() + r * C;
      loss += log_softmax_nll(z, C, b.labels[r]);
      pred.push_back(std::max_element(z, z + C) - z);
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
  e.score = e.accuracy;
  e.tie = -e.loss;
  e.metrics = {{"eval_loss", e.loss}, {"eval_accuracy", e.accuracy}, {"eval_macro_f1", e.macro_f1}};
  return e;
}

// Regression: eval_loss (MSELoss), and run_glue.py's stsb metrics, eval_pearson and eval_spearmanr (scipy's
// pearsonr and spearmanr of the predictions against the targets). The best epoch has the lowest loss (the
// Trainer's default metric_for_best_model), ties the higher Pearson correlation.
EvalResult evaluate_regression(SequenceClassificationTrainer& t, const std::vector<Example>& ex, int64_t batch,
                               int64_t pad_id) {
  std::vector<double> pred, gold;
  double loss = 0;
  for (const FinetuneBatch& b : eval_batches(ex, batch, pad_id)) {
    const std::vector<float> values = t.logits(b);
    for (int64_t r = 0; r < b.B; ++r) {
      const double d = (double)values[r] - (double)b.targets[r];
      loss += d * d;
      pred.push_back(values[r]);
      gold.push_back(b.targets[r]);
    }
  }
  EvalResult e;
  e.loss = loss / (double)gold.size();
  const double r = api::pearson(pred, gold), rho = api::spearman(pred, gold);
  e.score = -e.loss;
  e.tie = r;
  e.metrics = {{"eval_loss", e.loss}, {"eval_pearson", r}, {"eval_spearmanr", rho}};
  return e;
}

EvalResult evaluate_tokens(TokenClassificationTrainer& t, const std::vector<Example>& ex, int64_t batch,
                           int64_t pad_id, const std::vector<std::string>& labels) {
  const int64_t C = t.num_labels();
  std::vector<std::vector<std::string>> gold_seqs, pred_seqs;
  double loss = 0;
  int64_t count = 0, correct = 0;
  for (const FinetuneBatch& b : eval_batches(ex, batch, pad_id)) {
    const std::vector<float> logits = t.logits(b);
    for (int64_t r = 0; r < b.B; ++r) {
      std::vector<std::string> g, p;
      for (int64_t l = 0; l < b.L; ++l) {
        const int64_t y = b.labels[r * b.L + l];
        if (y == kIgnoreLabel) continue;
        const float* z = logits.data() + (r * b.L + l) * C;
        const int64_t arg = std::max_element(z, z + C) - z;
        loss += log_softmax_nll(z, C, y);
        ++count;
        correct += arg == y;
        g.push_back(labels[y]);
        p.push_back(labels[arg]);
      }
      gold_seqs.push_back(std::move(g));
      pred_seqs.push_back(std::move(p));
    }
  }
  EvalResult e;
  e.loss = count ? loss / (double)count : 0.0;
  e.accuracy = count ? (double)correct / (double)count : 0.0;
  const SeqevalScores sq = seqeval_scores(gold_seqs, pred_seqs);
  e.score = sq.f1;
  e.tie = -e.loss;
  e.metrics = {{"eval_loss", e.loss},      {"eval_accuracy", e.accuracy}, {"eval_precision", sq.precision},
               {"eval_recall", sq.recall}, {"eval_f1", sq.f1}};
  return e;
}

EvalResult evaluate_mlm(MaskedLMTrainer& t, const std::vector<FinetuneBatch>& batches) {
  double loss = 0;
  int64_t count = 0;
  for (const FinetuneBatch& b : batches) {
    int64_t n = 0;
    loss += t.loss_sum(b, &n);
    count += n;
  }
  EvalResult e;
  e.loss = count ? loss / (double)count : 0.0;
  e.score = -e.loss;
  e.tie = -e.loss;
  e.metrics = {{"eval_loss", e.loss}, {"eval_perplexity", std::exp(e.loss)}};
  return e;
}

std::vector<std::string> eval_columns(const std::string& task, bool regression) {
  if (task == "classify" && regression) return {"eval_loss", "eval_pearson", "eval_spearmanr"};
  if (task == "classify") return {"eval_loss", "eval_accuracy", "eval_macro_f1"};
  if (task == "token-classify") return {"eval_loss", "eval_accuracy", "eval_precision", "eval_recall", "eval_f1"};
  return {"eval_loss", "eval_perplexity"};
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) throw std::runtime_error(path + ": read error");
  return ss.str();
}

std::string fmt(double v) {
  std::ostringstream s;
  s.precision(8);
  s << v;
  return s.str();
}

// ---------------------------------------------------------------- output folder and training state

// The head a task trains: classify, token-classify, mlm.
HeadKind head_kind_of(const std::string& task) {
  return task == "classify"         ? HeadKind::SequenceClassification
         : task == "token-classify" ? HeadKind::TokenClassification
                                    : HeadKind::MaskedLM;
}

// The Hugging Face folder: config.json, model.safetensors, the tokenizer files (each written atomically).
// Regression (one output): problem_type "regression" and id2label {0: "LABEL_0"}, as Hugging Face saves it; a
// classifier trained from a regression folder gets problem_type "single_label_classification".
void write_model_folder(const std::string& model_dir, const FinetuneOptions& o, const nlohmann::json& cfg_json,
                        const std::vector<std::string>& labels, bool regression, nn::ParamStore& params) {
  std::error_code ec;
  fs::create_directories(o.out_dir);
  nlohmann::json out_cfg = cfg_json;
  out_cfg["architectures"] = {
      trained_architecture(read_model_type(cfg_json, model_dir + "/config.json", "bert"), head_kind_of(o.task))};
  if (o.task != "mlm") {
    nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
    for (size_t i = 0; i < labels.size(); ++i) {
      id2label[std::to_string(i)] = labels[i];
      label2id[labels[i]] = (int64_t)i;
    }
    out_cfg["id2label"] = id2label;
    out_cfg["label2id"] = label2id;
    if (regression)
      out_cfg["problem_type"] = "regression";
    else if (o.task == "classify" && out_cfg.contains("problem_type"))
      out_cfg["problem_type"] = "single_label_classification";
    if (out_cfg.contains("num_labels")) out_cfg["num_labels"] = (int64_t)labels.size();
  }
  write_file_atomic(o.out_dir + "/config.json", out_cfg.dump(2) + "\n");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json", "vocab.json",
                        "merges.txt", "sentencepiece.bpe.model", "added_tokens.json"})
    if (fs::is_regular_file(model_dir + "/" + f, ec)) write_file_atomic(o.out_dir + "/" + f, read_bytes(model_dir + "/" + f));
  save_safetensors(o.out_dir + "/model.safetensors", params.named_tensors(), {{"format", "pt"}});
}

}  // namespace

namespace api {

// The options a checkpoint must have been written with to be resumed.
nlohmann::json run_fingerprint(const FinetuneOptions& o, int64_t train_examples, const std::vector<std::string>& labels) {
  return {{"task", o.task},
          {"train_examples", train_examples},
          {"epochs", o.epochs},
          {"batch_size", o.batch_size},
          {"gradient_accumulation_steps", o.gradient_accumulation_steps},
          {"learning_rate", o.learning_rate},
          {"weight_decay", o.weight_decay},
          {"warmup_ratio", o.warmup_ratio},
          {"warmup_steps", o.warmup_steps},
          {"max_grad_norm", o.max_grad_norm},
          {"max_length", o.max_length},
          {"mlm_probability", o.mlm_probability},
          {"group_texts", o.group_texts},
          {"seed", o.seed},
          {"precision", o.precision},
          {"labels", labels}};
}

}  // namespace api

namespace {

// Where a run stands: what a checkpoint stores besides the weights and AdamW's moments.
struct RunState {
  int64_t epoch = 1;                 // the current epoch (1-based)
  int64_t micro = 0;                 // micro-batches of this epoch done
  std::string shuffle_at_epoch;      // the shuffling generator before this epoch's permutation
  double epoch_loss = 0;             // sum of this epoch's step losses
  int64_t epoch_steps = 0;
  std::string log;                   // train_log.csv so far
  std::vector<double> epoch_train, epoch_eval;  // loss.png's curves
  double best_score = -INFINITY, best_tie = -INFINITY;
  int64_t best_epoch = 0;
  std::vector<std::pair<std::string, double>> best_metrics;
};

// The trainer's part of a training state: its parameters, AdamW (moments, step, last rate) and dropout generator.
struct TrainerParts {
  nn::ParamStore& params;
  FinetuneOptimizer& optimizer;
  Rng& dropout_rng;
};

nlohmann::json state_json(const TrainerParts& m, const RunState& s, const Rng& mask_rng,
                          const nlohmann::json& fingerprint) {
  nlohmann::json best = nlohmann::json::array();
  for (const auto& [k, v] : s.best_metrics) best.push_back({k, v});
  auto finite_or_null = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  return {{"fingerprint", fingerprint},
          {"step", m.optimizer.steps()},
          {"last_lr", m.optimizer.last_lr()},
          {"epoch", s.epoch},
          {"micro", s.micro},
          {"shuffle_at_epoch", s.shuffle_at_epoch},
          {"dropout_rng", m.dropout_rng.state()},
          {"mask_rng", mask_rng.state()},
          {"epoch_loss", s.epoch_loss},
          {"epoch_steps", s.epoch_steps},
          {"log", s.log},
          {"epoch_train", s.epoch_train},
          {"epoch_eval", s.epoch_eval},
          {"best_score", finite_or_null(s.best_score)},
          {"best_tie", finite_or_null(s.best_tie)},
          {"best_epoch", s.best_epoch},
          {"best_metrics", best}};
}

// The inverse of state_json (the optimizer's step and rate, the generators and the run's position and history).
void apply_state_json(const nlohmann::json& st, TrainerParts& m, RunState& s, Rng& mask_rng) {
  m.optimizer.restore(st.at("step").get<int64_t>(), st.at("last_lr").get<double>());
  m.dropout_rng.set_state(st.at("dropout_rng").get<std::string>());
  mask_rng.set_state(st.at("mask_rng").get<std::string>());
  s.epoch = st.at("epoch");
  s.micro = st.at("micro");
  s.shuffle_at_epoch = st.at("shuffle_at_epoch");
  s.epoch_loss = st.at("epoch_loss");
  s.epoch_steps = st.at("epoch_steps");
  s.log = st.at("log");
  s.epoch_train = st.at("epoch_train").get<std::vector<double>>();
  s.epoch_eval = st.at("epoch_eval").get<std::vector<double>>();
  s.best_score = st.at("best_score").is_null() ? -INFINITY : st.at("best_score").get<double>();
  s.best_tie = st.at("best_tie").is_null() ? -INFINITY : st.at("best_tie").get<double>();
  s.best_epoch = st.at("best_epoch");
  s.best_metrics.clear();
  for (const auto& kv : st.at("best_metrics")) s.best_metrics.emplace_back(kv[0].get<std::string>(), kv[1].get<double>());
}

void save_state(const std::string& path, const TrainerParts& m, const RunState& s, const Rng& mask_rng,
                const nlohmann::json& fingerprint) {
  nn::ParamStore& p = m.params;
  auto tensors = p.named_tensors();
  Adam& adam = m.optimizer.adam();
  tensors.emplace_back("optimizer.exp_avg", Tensor::view_of(adam.exp_avg().data(), {p.total()}, DType::F32, nullptr));
  tensors.emplace_back("optimizer.exp_avg_sq",
                       Tensor::view_of(adam.exp_avg_sq().data(), {p.total()}, DType::F32, nullptr));
  save_safetensors(path, tensors, {{"format", "pt"}, {"tfm_trainer_state", state_json(m, s, mask_rng, fingerprint).dump()}});
}

// Reads the parameters and AdamW's moments of the state at `path` into m and returns the rest (state_json's
// object) after checking that it was written with `fingerprint`.
nlohmann::json load_state(const std::string& path, TrainerParts& m, const nlohmann::json& fingerprint) {
  const SafeTensors file = SafeTensors::open(path);
  if (!file.metadata().contains("tfm_trainer_state"))
    throw std::invalid_argument(path + ": not a tfm finetune training state");
  const nlohmann::json st = nlohmann::json::parse(file.metadata()["tfm_trainer_state"].get<std::string>());
  const nlohmann::json& saved = st.at("fingerprint");
  for (auto& [k, v] : fingerprint.items())
    if (!saved.contains(k) || saved[k] != v)
      throw std::invalid_argument("--resume: " + path + " was written with " + k + " " +
                                  (saved.contains(k) ? saved[k].dump() : "(none)") + ", this run has " + v.dump() +
                                  "; pass the same options, or drop --resume");
  nn::ParamStore& p = m.params;
  for (const auto& e : p.entries()) {
    Tensor t = file.get(e.name);
    if (t.numel() != e.numel) throw std::invalid_argument(path + ": tensor " + e.name + " has another shape");
    std::memcpy(p.data(p.index_of(e.name)), t.f32(), sizeof(float) * e.numel);
  }
  Adam& adam = m.optimizer.adam();
  for (auto [name, dst] : {std::pair{"optimizer.exp_avg", &adam.exp_avg()}, std::pair{"optimizer.exp_avg_sq", &adam.exp_avg_sq()}}) {
    Tensor t = file.get(name);
    if (t.numel() != p.total()) throw std::invalid_argument(path + ": " + name + " has another size");
    std::memcpy(dst->data(), t.f32(), sizeof(float) * p.total());
  }
  return st;
}

void write_log_and_plot(const std::string& out_dir, const RunState& s) {
  write_file_atomic(out_dir + "/train_log.csv", s.log);
  LinePlot plot{"Fine-tuning loss", "epoch", "loss", {{"train", s.epoch_train}}};
  if (!s.epoch_eval.empty()) plot.series.push_back({"eval", s.epoch_eval});
  if (!s.epoch_train.empty()) write_line_plot(out_dir + "/loss.png", plot);
}

// The number of terms of a batch's mean loss in rows [r0, r1): the rows (labels [B]), or their labelled tokens
// (labels [B, L]).
int64_t loss_terms(const FinetuneBatch& b, int64_t r0, int64_t r1) {
  if ((int64_t)b.labels.size() != b.B * b.L || b.L == 0) return r1 - r0;
  int64_t n = 0;
  for (int64_t i = r0 * b.L; i < r1 * b.L; ++i) n += b.labels[i] != kIgnoreLabel;
  return n;
}

// Rows [r0, r1) of a padded batch, padded to their own longest row (the whole batch when that is all of it).
FinetuneBatch batch_rows(FinetuneBatch&& b, int64_t r0, int64_t r1) {
  if (r0 == 0 && r1 == b.B) return std::move(b);
  const bool per_token = (int64_t)b.labels.size() == b.B * b.L && b.L > 0;
  int64_t L = 1;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t l = b.L - 1; l >= L; --l)
      if (b.attention_mask[r * b.L + l] != 0.0f) {
        L = l + 1;
        break;
      }
  FinetuneBatch s;
  s.B = r1 - r0;
  s.L = L;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t at = r * b.L;
    s.input_ids.insert(s.input_ids.end(), b.input_ids.begin() + at, b.input_ids.begin() + at + L);
    s.token_type_ids.insert(s.token_type_ids.end(), b.token_type_ids.begin() + at, b.token_type_ids.begin() + at + L);
    s.attention_mask.insert(s.attention_mask.end(), b.attention_mask.begin() + at, b.attention_mask.begin() + at + L);
    if (per_token) s.labels.insert(s.labels.end(), b.labels.begin() + at, b.labels.begin() + at + L);
  }
  if (!per_token && !b.labels.empty()) s.labels.assign(b.labels.begin() + r0, b.labels.begin() + r1);
  if (!b.targets.empty()) s.targets.assign(b.targets.begin() + r0, b.targets.begin() + r1);
  return s;
}

// finetune() on this process (one rank of an mpirun job, or the only one).
FinetuneSummary finetune_on_this_rank(const std::string& model_dir, const FinetuneOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  FinetuneOptions o = options;
  check_options(o);
  api::require_dir(model_dir, "model folder");
  if (o.task != "embed") {  // a sentence-transformers folder may keep its Transformer in a subfolder
    api::require_file(model_dir + "/config.json");
    api::require_weights(model_dir);
  }
  api::require_file(o.train_file);
  if (!o.eval_file.empty()) api::require_file(o.eval_file);
  const std::string state_path = o.out_dir + "/" + kStateFile;
  std::error_code ec;
  dist::Communicator& comm = dist::world();
  const int world_size = comm.world_size(), rank = comm.rank();
  if (rank != 0) {
    // Only rank 0 reads or writes out_dir (it may not even be shared with the other ranks' hosts).
  } else if (o.resume) {
    if (!fs::is_regular_file(state_path, ec)) {
      if (fs::is_regular_file(o.out_dir + "/train_log.csv", ec) && fs::is_regular_file(o.out_dir + "/config.json", ec))
        throw std::invalid_argument("--resume: the run in " + o.out_dir + " finished and has no training state (" +
                                    kStateFile + " is removed when a run completes); to train it further, "
                                    "fine-tune again with it as the model and a new output folder");
      throw std::invalid_argument("--resume: " + o.out_dir + " has no training state (" + kStateFile + ") to resume from");
    }
  } else if (fs::exists(o.out_dir, ec)) {
    if (!fs::is_directory(o.out_dir, ec)) throw std::invalid_argument("--out '" + o.out_dir + "' is a file");
    if (!fs::is_empty(o.out_dir, ec) && !o.overwrite)
      throw std::invalid_argument("--out '" + o.out_dir +
                                  "' already exists and is not an empty folder; choose a new folder, pass --overwrite to "
                                  "replace it, or --resume to continue a stopped run");
    if (fs::equivalent(o.out_dir, model_dir, ec))
      throw std::invalid_argument("--out is the model folder itself; choose another folder");
  }
  if (rank == 0) require_creatable_folder(o.out_dir);
  api::apply_threads(o.threads);
  if (o.task == "embed") return api::finetune_embed(model_dir, o);
  const std::string cfg_path = model_dir + "/config.json";
  const nlohmann::json cfg_json = load_json_file(cfg_path);
  const EncoderConfig config = EncoderConfig::from_json(cfg_json, cfg_path);
  check_finetune_family(config.model_type, model_dir);
  checked_problem_type(cfg_json, cfg_path);  // problem_type and id2label well-formed
  // As run_glue.py caps max_seq_length at the tokenizer's model_max_length: at most the longest input the model
  // takes (the default 128 on a model of 64 positions trains at 64).
  o.max_length = std::min(o.max_length, config.max_input_tokens());
  const Tokenizer tok(model_dir);
  const Table train = read_table(o.train_file);
  require_task_columns(o, train, o.train_file);
  FinetuneSummary summary;
  const bool regression = is_regression(o, cfg_json, train);
  if (regression) {
    summary.labels = {"LABEL_0"};  // one output, named as Hugging Face names it
    summary.loss = "MSELoss";
  }
  if (!regression && o.task != "mlm")
    summary.labels = label_set(o, cfg_json, seen_labels(o, train), o.task == "classify" ? o.label_column : o.tags_column);
  std::map<std::string, int64_t> label_id;
  for (size_t i = 0; i < summary.labels.size(); ++i) label_id[summary.labels[i]] = (int64_t)i;
  const std::vector<Example> train_ex = read_examples(o.train_file, train, o, tok, label_id, regression);
  std::vector<Example> eval_ex;
  if (!o.eval_file.empty())
    eval_ex = read_examples(o.eval_file, read_table(o.eval_file), o, tok, label_id, regression);
  summary.train_examples = (int64_t)train_ex.size();
  summary.eval_examples = (int64_t)eval_ex.size();
  int64_t mask_id = -1;
  if (o.task == "mlm") {
    for (const char* m : {"[MASK]", "<mask>"})
      if (mask_id < 0) mask_id = tok.token_to_id(m);
    if (mask_id < 0) throw std::invalid_argument(model_dir + ": the tokenizer has no mask token ([MASK]); mlm needs one");
  }

  const int64_t steps_per_epoch = api::finetune_steps_per_epoch(o, (int64_t)train_ex.size());
  // The family's dropouts (training_dropouts): the body's, the attention probabilities', and the head's
  // (classifier_dropout and the like).
  const HeadKind kind = head_kind_of(o.task);
  const FinetuneHyperparameters hp =
      api::finetune_hyperparameters(o, steps_per_epoch * o.epochs, training_dropouts(cfg_json, kind, cfg_path));
  const double init_range = json_number_or(cfg_json, "initializer_range", 0.02, cfg_path);
  CheckpointWeights weights(model_dir);
  std::unique_ptr<FinetuneModel> model;
  SequenceClassificationTrainer* seqcls = nullptr;
  TokenClassificationTrainer* tokcls = nullptr;
  MaskedLMTrainer* mlm = nullptr;
  const int64_t C = (int64_t)summary.labels.size();
  if (o.task == "classify") {
    model = std::make_unique<SequenceClassificationTrainer>(config, weights, C, hp, init_range);
    seqcls = static_cast<SequenceClassificationTrainer*>(model.get());
  } else if (o.task == "token-classify") {
    model = std::make_unique<TokenClassificationTrainer>(config, weights, C, hp, init_range);
    tokcls = static_cast<TokenClassificationTrainer*>(model.get());
  } else {
    model = std::make_unique<MaskedLMTrainer>(config, weights, hp, init_range);
    mlm = static_cast<MaskedLMTrainer*>(model.get());
  }
  model->set_precision(o.precision == "bf16" ? ops::ComputeType::BF16 : ops::ComputeType::F32);
  const int64_t pad_id = config.pad_token_id;
  const int64_t eval_batch = std::max<int64_t>(o.batch_size, 32);
  // mlm: the eval texts masked once, from a generator of their own.
  std::vector<FinetuneBatch> eval_mlm;
  if (mlm && !eval_ex.empty()) {
    Rng eval_rng(o.seed ^ 0x9e3779b97f4a7c15ull);
    for (size_t s = 0; s < eval_ex.size(); s += (size_t)eval_batch) {
      std::vector<bool> special;
      FinetuneBatch b = make_batch(eval_ex, range_of(s, std::min(eval_ex.size(), s + (size_t)eval_batch)), pad_id, &special);
      mask_tokens_for_mlm(b, special, mask_id, config.vocab_size, o.mlm_probability, eval_rng);
      eval_mlm.push_back(std::move(b));
    }
  }
  auto evaluate = [&]() -> EvalResult {
    if (seqcls && regression) return evaluate_regression(*seqcls, eval_ex, eval_batch, pad_id);
    if (seqcls) return evaluate_classify(*seqcls, eval_ex, eval_batch, pad_id);
    if (tokcls) return evaluate_tokens(*tokcls, eval_ex, eval_batch, pad_id, summary.labels);
    return evaluate_mlm(*mlm, eval_mlm);
  };

  api::FinetuneTask task;
  task.params = &model->params();
  task.optimizer = &model->optimizer();
  task.dropout_rng = &model->dropout_rng();
  task.num_examples = (int64_t)train_ex.size();
  task.eval_columns = eval_columns(o.task, regression);
  task.has_eval = !eval_ex.empty();
  task.micro_step = [&](const std::vector<int64_t>& idx, float scale, Rng& data_rng, RowKeys& keys) -> double {
    // The whole micro-batch (and its masking) on every rank, then this rank's rows, balanced by tokens; the
    // share's mean loss weighted by its fraction of the micro-batch's loss terms (rows, or labelled tokens).
    std::vector<bool> special;
    FinetuneBatch b = make_batch(train_ex, idx, pad_id, mlm ? &special : nullptr);
    if (mlm) mask_tokens_for_mlm(b, special, mask_id, config.vocab_size, o.mlm_probability, data_rng);
    std::vector<int64_t> tokens;
    for (int64_t i : idx) tokens.push_back((int64_t)train_ex[i].ids.size());
    const auto [r0, r1] = dist::shard_range(tokens, world_size, rank);
    const int64_t total = loss_terms(b, 0, b.B), mine = loss_terms(b, r0, r1);
    if (mine == 0) return 0.0;  // nothing of the loss here (an empty share, or no labelled token)
    keys.rows.assign(idx.begin() + r0, idx.begin() + r1);
    keys.calls = 0;
    const double share = (double)mine / (double)total;
    return share * model->accumulate_gradients(batch_rows(std::move(b), r0, r1), scale * (float)share, /*dropout=*/true);
  };
  task.evaluate = evaluate;
  task.write_model = [&] { write_model_folder(model_dir, o, cfg_json, summary.labels, regression, model->params()); };
  nlohmann::json fingerprint = api::run_fingerprint(o, summary.train_examples, summary.labels);
  if (regression) fingerprint["problem_type"] = "regression";
  api::run_finetune_loop(o, task, fingerprint, summary);
  summary.out_dir = o.out_dir;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace

void request_finetune_stop(int signo) { finetune_stop_signal.store(signo); }

FinetuneSummary finetune(const std::string& model_dir, const FinetuneOptions& o) {
  try {
    return finetune_on_this_rank(model_dir, o);
  } catch (const std::exception& e) {
    // Under mpirun the other ranks would wait in a collective: end them all now, with the message.
    if (dist::world().world_size() > 1) dist::world().abort(1, e.what());
    throw;
  }
}

namespace api {

void run_finetune_loop(const FinetuneOptions& o, const FinetuneTask& task, const nlohmann::json& fingerprint,
                       FinetuneSummary& summary) {
  dist::Communicator& comm = dist::world();
  const int world_size = comm.world_size();
  const bool lead = comm.rank() == 0;
  const std::string state_path = o.out_dir + "/" + kStateFile;
  // TFM_TRACE_DIST=1, as the recipe: each rank's pid, and its parameters' hash after every step (checked equal).
  const bool trace_dist = std::getenv("TFM_TRACE_DIST") && std::string(std::getenv("TFM_TRACE_DIST")) == "1";
  if (trace_dist) std::fprintf(stderr, "rank %d pid %d\n", comm.rank(), (int)getpid());
  const int64_t micro_per_epoch = (task.num_examples + o.batch_size - 1) / o.batch_size;
  const int64_t accum = o.gradient_accumulation_steps;
  const int64_t steps_per_epoch = finetune_steps_per_epoch(o, task.num_examples);
  nn::ParamStore& params = *task.params;
  FinetuneOptimizer& opt = *task.optimizer;
  TrainerParts parts{params, opt, *task.dropout_rng};
  Rng shuffle(o.seed), mask_rng(o.seed + 1);
  RunState rs;
  const std::vector<std::string>& cols = task.eval_columns;
  rs.log = "step,epoch,loss,lr,grad_norm";
  for (const auto& c : cols) rs.log += "," + c;
  rs.log += "\n";
  rs.shuffle_at_epoch = shuffle.state();
  if (o.resume) {  // rank 0 reads the state; every rank applies it
    std::string st = lead ? load_state(state_path, parts, fingerprint).dump() : std::string();
    if (world_size > 1) {
      comm.broadcast(st, 0);
      comm.broadcast(opt.adam().exp_avg(), 0);
      comm.broadcast(opt.adam().exp_avg_sq(), 0);
    }
    apply_state_json(nlohmann::json::parse(st), parts, rs, mask_rng);
    shuffle.set_state(rs.shuffle_at_epoch);
    summary.resumed_from_step = opt.steps();
  }
  if (world_size > 1) comm.broadcast(params.all_data(), 0);  // rank 0's weights on every rank
  auto save = [&] {
    if (!lead) return;
    fs::create_directories(o.out_dir);
    save_state(state_path, parts, rs, mask_rng, fingerprint);
    write_log_and_plot(o.out_dir, rs);
  };
  // Dropout masks keyed by (seed, step, micro-batch of the step, row): the same whichever rank holds a row.
  RowKeys keys;
  task.dropout_rng->set_row_keys(&keys);
  struct Unkey {
    Rng* rng;
    ~Unkey() { rng->set_row_keys(nullptr); }
  } unkey{task.dropout_rng};

  std::vector<int64_t> order(task.num_examples);
  for (; rs.epoch <= o.epochs; ++rs.epoch) {
    rs.shuffle_at_epoch = shuffle.state();
    std::iota(order.begin(), order.end(), 0);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[shuffle.below(i)]);  // Fisher-Yates
    const auto te = std::chrono::steady_clock::now();
    int64_t seen = 0;
    while (rs.micro < micro_per_epoch) {
      // One optimizer step over the next (up to) `accum` micro-batches, each loss divided by their number.
      const int64_t group = std::min(accum, micro_per_epoch - rs.micro);
      const auto step_start = std::chrono::steady_clock::now();
      bool saved = false;  // the state was saved after this step
      params.zero_grad();
      double step_loss = 0;
      for (int64_t g = 0; g < group; ++g, ++rs.micro) {
        std::vector<int64_t> idx(order.begin() + rs.micro * o.batch_size,
                                 order.begin() + std::min<int64_t>((int64_t)order.size(), (rs.micro + 1) * o.batch_size));
        keys.key = (o.seed + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(opt.steps() + 1) * 0xD1B54A32D192ED03ull ^
                   (uint64_t)(g + 1) * 0x94D049BB133111EBull;
        step_loss += task.micro_step(idx, 1.0f / (float)group, mask_rng, keys) / (double)group;
        seen += (int64_t)idx.size();  // the global micro-batch: every rank's share
      }
      if (world_size > 1) {
        comm.all_reduce_sum(params.all_grad());
        comm.all_reduce_sum(&step_loss, 1);
      }
      if (!std::isfinite(step_loss))
        throw std::runtime_error("the training loss is not finite (" + std::to_string(step_loss) + ") at step " +
                                 std::to_string(opt.steps() + 1));
      const double norm = opt.step(params);
      summary.step_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
      if (trace_dist) {
        uint64_t h = dist::fnv1a(params.all_data().data(), params.total() * (int64_t)sizeof(float)), h0 = h;
        std::fprintf(stderr, "replica-hash step %lld rank %d %016llx\n", (long long)opt.steps(), comm.rank(),
                     (unsigned long long)h);
        comm.broadcast(&h0, sizeof h0, 0);
        if (h0 != h)
          throw std::runtime_error("replicas diverged at step " + std::to_string(opt.steps()) + ": rank " +
                                   std::to_string(comm.rank()) + "'s parameters differ from rank 0's");
      }
      rs.epoch_loss += step_loss;
      ++rs.epoch_steps;
      const bool epoch_done = rs.micro == micro_per_epoch;
      std::string row = std::to_string(opt.steps()) + "," + fmt((double)opt.steps() / (double)steps_per_epoch) +
                        "," + fmt(step_loss) + "," + fmt(opt.last_lr()) + "," + fmt(norm);
      FinetuneProgress p;
      p.epoch = rs.epoch;
      p.epochs = o.epochs;
      p.step = opt.steps();
      p.total_steps = steps_per_epoch * o.epochs;
      p.train_loss = rs.epoch_loss / (double)rs.epoch_steps;
      p.lr = opt.last_lr();
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - te).count();
      p.examples_per_sec = sec > 0 ? (double)seen / sec : 0;
      FinetuneProgress pe = p;
      if (epoch_done) {
        summary.final_train_loss = rs.epoch_loss / (double)rs.epoch_steps;
        rs.epoch_train.push_back(summary.final_train_loss);
        pe.epoch_end = true;
        pe.train_loss = summary.final_train_loss;
        if (task.has_eval) {
          EvalResult e;
          if (lead) e = task.evaluate();
          if (world_size > 1) {  // rank 0's metrics on every rank, so that all agree on the best epoch
            std::vector<double> v = {e.loss, e.accuracy, e.macro_f1, e.score, e.tie};
            for (const auto& kv : e.metrics) v.push_back(kv.second);
            v.resize(5 + cols.size());
            comm.broadcast(v.data(), (int64_t)(v.size() * sizeof(double)), 0);
            e.loss = v[0], e.accuracy = v[1], e.macro_f1 = v[2], e.score = v[3], e.tie = v[4];
            e.metrics.clear();
            for (size_t c = 0; c < cols.size(); ++c) e.metrics.emplace_back(cols[c], v[5 + c]);
          }
          for (const auto& [k, v] : e.metrics) {
            row += ',';
            row += fmt(v);
          }
          rs.epoch_eval.push_back(e.loss);
          pe.eval_loss = e.loss;
          pe.eval_accuracy = e.accuracy;
          pe.eval_macro_f1 = e.macro_f1;
          pe.eval_metrics = e.metrics;
          for (const auto& [k, v] : e.metrics) {
            if (k == "eval_mrr") pe.eval_mrr = v;
            if (k == "eval_spearman" || k == "eval_spearmanr") pe.eval_spearman = v;
          }
          if (e.score > rs.best_score || (e.score == rs.best_score && e.tie > rs.best_tie)) {
            rs.best_score = e.score;
            rs.best_tie = e.tie;
            rs.best_epoch = rs.epoch;
            rs.best_metrics = e.metrics;
            if (lead) task.write_model();
          }
        } else {
          for (size_t c = 0; c < cols.size(); ++c) row += ",";
          rs.best_epoch = rs.epoch;
        }
      } else {
        for (size_t c = 0; c < cols.size(); ++c) row += ",";
      }
      rs.log += row + "\n";
      if (epoch_done) {
        rs.micro = 0;
        rs.epoch_loss = 0;
        rs.epoch_steps = 0;
        if (rs.epoch < o.epochs) {
          ++rs.epoch;  // the state saved is that of the next epoch's start
          rs.shuffle_at_epoch = shuffle.state();
          save();
          saved = true;
          --rs.epoch;
        }
      } else if (o.save_steps > 0 && opt.steps() % o.save_steps == 0) {
        save();
        saved = true;
      }
      if (o.progress && lead) o.progress(p);
      if (epoch_done && o.progress && lead) o.progress(pe);
      // A stop request ends the run at this step boundary with its state saved (rank 0's request, so every rank
      // stops at the same step); the last step of the last epoch finishes the run instead.
      int stop = finetune_stop_signal.load();
      if (world_size > 1) comm.broadcast(&stop, sizeof stop, 0);
      if (stop != 0 && !(epoch_done && rs.epoch == o.epochs)) {
        if (!epoch_done && !saved) save();
        summary.stopped_by_signal = stop;
        break;
      }
      if (epoch_done) break;
    }
    if (summary.stopped_by_signal) break;
  }
  summary.steps = opt.steps();
  if (lead && !summary.stopped_by_signal) {
    if (!task.has_eval) task.write_model();
    write_log_and_plot(o.out_dir, rs);
    std::error_code ec;
    fs::remove(state_path, ec);
  }
  if (world_size > 1) comm.barrier();  // every rank returns once rank 0's files are complete
  summary.best_epoch = rs.best_epoch;
  summary.best_eval_metrics = rs.best_metrics;
  for (const auto& [k, v] : rs.best_metrics) {
    if (k == "eval_loss") summary.best_eval_loss = v;
    if (k == "eval_accuracy") summary.best_eval_accuracy = v;
    if (k == "eval_macro_f1") summary.best_eval_macro_f1 = v;
    if (k == "eval_mrr") summary.best_eval_mrr = v;
    if (k == "eval_spearman" || k == "eval_spearmanr") summary.best_eval_spearman = v;
  }
}

}  // namespace api

}  // namespace tfm

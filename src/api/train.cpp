// tfm::train over train/recipe (`tfm train --config / --resume`) and tfm::train_d2l over train/trainer
// (`tfm train --data`).
#include "tfm/train.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <tuple>
#include <stdexcept>

#include "api/common.h"
#include "dist/communicator.h"
#include "io/json_util.h"
#include "train/recipe.h"
#include "train/trainer.h"

namespace tfm {

std::vector<std::string> recipe_keys() { return RecipeConfig::known_keys(); }

void request_train_stop(int signo) { request_training_stop(signo); }

TrainSummary train(const std::string& config_path, const std::string& out_dir, const TrainRunOptions& o) {
  api::check_threads(o.threads);
  if (out_dir.empty()) throw std::invalid_argument("out_dir is empty");
  if (o.resume && !config_path.empty())
    throw std::invalid_argument("resume continues the run in " + out_dir +
                                " with its saved train_config.json; pass an empty config_path");
  if (!o.resume && config_path.empty()) throw std::invalid_argument("config_path is empty");
  nlohmann::json j = nlohmann::json::object();
  if (!config_path.empty()) {
    api::require_file(config_path);
    j = load_json_file(config_path);
  } else {
    api::require_dir(out_dir, "run folder");
  }
  // The file alone first: a bad value there is the file's (std::runtime_error); one that appears only with the
  // overrides is the caller's (std::invalid_argument).
  if (!config_path.empty()) (void)RecipeConfig::from_json(j, config_path);
  const std::vector<std::string>& known = RecipeConfig::known_keys();
  for (const auto& [key, val] : o.overrides) {
    if (key.empty()) throw std::invalid_argument("override with an empty key");
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string names;
      for (const auto& k : known)
        if (k != "comment") names += (names.empty() ? "" : ", ") + k;
      throw std::invalid_argument("override '" + key + "': unknown recipe key (keys: " + names + ")");
    }
    if (o.resume && key != "stop_after_steps" && key != "time_limit_minutes" && key != "epochs")
      throw std::invalid_argument("resume continues with the run's saved train_config.json; override '" + key +
                                  "' cannot change it (only epochs, stop_after_steps and time_limit_minutes apply)");
    try {
      j[key] = nlohmann::json::parse(val);  // numbers, true/false
    } catch (const nlohmann::json::exception&) {
      j[key] = val;  // plain strings
    }
  }
  RecipeConfig rc;
  try {
    rc = RecipeConfig::from_json(j, !o.config_name.empty() ? o.config_name
                                    : config_path.empty()    ? "overrides"
                                    : o.overrides.empty()    ? config_path
                                                             : config_path + " with overrides");
  } catch (const std::runtime_error& e) {
    if (o.overrides.empty()) throw;
    throw std::invalid_argument(e.what());
  }
  // The run folder's state, in words for every interface (the recipe's own messages name tfm train's options).
  // One process only: under mpirun rank 0's recipe checks it and ends every rank with the message.
  if (dist::world().world_size() == 1) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const bool has_ckpt = fs::exists(out_dir + "/checkpoint.safetensors", ec);
    if (o.resume && !has_ckpt)
      throw std::runtime_error(out_dir + ": no checkpoint.safetensors to resume from (start a run without "
                               "resume)");
    if (!o.resume && has_ckpt)
      throw std::runtime_error(out_dir + " already holds a checkpoint; continue it with resume (tfm train "
                               "--resume DIR; Python resume=True), or train into another folder");
    if (!o.resume && fs::is_directory(out_dir, ec) && !fs::is_empty(out_dir, ec))
      throw std::runtime_error(out_dir + " already exists and is not an empty folder; choose a new output folder");
  }
  if (o.threads > 0) rc.threads = o.threads;
  if (o.resume && j.contains("epochs")) rc.resume_epochs = rc.epochs;  // extend the run
  api::apply_threads(rc.threads);
  std::function<void(const RecipeProgress&)> cb;
  if (o.progress)
    cb = [&](const RecipeProgress& p) {
      TrainProgress q;
      q.epoch_end = p.epoch_end, q.epoch = p.epoch, q.epochs = p.epochs, q.batch = p.batch;
      q.num_batches = p.num_batches, q.step = p.step, q.train_loss = p.train_loss, q.lr = p.lr;
      q.tokens_per_sec = p.tokens_per_sec, q.valid_loss = p.valid_loss, q.valid_bleu = p.valid_bleu;
      o.progress(q);
    };
  RecipeResult r;
  try {
    r = train_recipe(rc, out_dir, o.resume, o.print_progress, cb);
  } catch (const std::exception& e) {
    // Under mpirun the other ranks would wait in a collective: end them all now, with the message.
    if (dist::world().world_size() > 1) dist::world().abort(1, e.what());
    // The recipe checks its data files before writing anything: "training data not found: PATH (where...); how".
    const std::string msg = e.what(), prefix = "training data not found: ";
    if (msg.rfind(prefix, 0) == 0 && msg.find(" (") != std::string::npos) {
      const size_t end = msg.find(" (");
      throw FileNotFoundError(msg.substr(0, end) + ": no such file" + msg.substr(end));
    }
    throw;
  }
  TrainSummary s;
  s.best_valid_bleu = r.best_valid_bleu, s.best_epoch = r.best_epoch, s.epochs_run = r.epochs_run;
  s.steps = r.steps, s.seconds = r.seconds, s.tokens_per_sec = r.train_tokens_per_sec;
  s.invocation_seconds = r.invocation_seconds;
  s.step_tokens_per_sec = r.step_tokens_per_sec;
  s.stopped_early = r.stopped_early;
  s.stopped_by_signal = r.stopped_by_signal;
  s.stopped_in_epoch = r.stopped_in_epoch;
  return s;
}

namespace {

// Tatoeba's pair files as manythings.org names them: "fra.txt" (in fra-eng/) holds English, TAB, French. The
// ISO 639-3 code of the name -> its ISO 639-1 code (what LibreTranslate and the served models use).
std::pair<std::string, std::string> tatoeba_languages(const std::string& path) {
  static const std::map<std::string, std::string> iso1 = {
      {"ara", "ar"}, {"bul", "bg"}, {"cat", "ca"}, {"ces", "cs"}, {"cmn", "zh"}, {"dan", "da"}, {"deu", "de"},
      {"ell", "el"}, {"est", "et"}, {"fin", "fi"}, {"fra", "fr"}, {"heb", "he"}, {"hin", "hi"}, {"hun", "hu"},
      {"ind", "id"}, {"ita", "it"}, {"jpn", "ja"}, {"kor", "ko"}, {"lit", "lt"}, {"nld", "nl"}, {"nob", "nb"},
      {"pes", "fa"}, {"pol", "pl"}, {"por", "pt"}, {"ron", "ro"}, {"rus", "ru"}, {"slk", "sk"}, {"spa", "es"},
      {"swe", "sv"}, {"tha", "th"}, {"tur", "tr"}, {"ukr", "uk"}, {"vie", "vi"}};
  std::string name = std::filesystem::path(path).filename().string();
  for (const char* ext : {".gz", ".txt"})
    if (name.size() > std::strlen(ext) && name.compare(name.size() - std::strlen(ext), std::strlen(ext), ext) == 0)
      name.resize(name.size() - std::strlen(ext));
  auto it = iso1.find(name);
  if (it == iso1.end()) return {};
  return {"en", it->second};
}

}  // namespace

D2lTrainSummary train_d2l(const D2lTrainOptions& o) {
  api::check_threads(o.threads);
  if (!o.data.empty()) api::require_file(o.data);  // FileNotFoundError, as every missing input
  if (dist::world().world_size() > 1)
    throw std::invalid_argument("the d2l trainer runs as one process; data-parallel training under mpirun is the "
                                "subword recipe (tfm::train)");
  TrainOptions t;
  t.data = o.data, t.out = o.out, t.num_examples = o.num_examples, t.num_steps = o.num_steps;
  t.num_hiddens = o.num_hiddens, t.num_layers = o.num_layers, t.num_heads = o.num_heads;
  t.ffn_num_hiddens = o.ffn_num_hiddens, t.dropout = o.dropout, t.batch_size = o.batch_size, t.lr = o.lr;
  t.epochs = o.epochs, t.seed = o.seed, t.label_smoothing = o.label_smoothing, t.progress = o.progress;
  t.overwrite = o.overwrite;
  if (o.source_lang.empty() != o.target_lang.empty())
    throw std::invalid_argument("give both source_lang and target_lang (--source-lang, --target-lang), or neither");
  for (const std::string* code : {&o.source_lang, &o.target_lang})
    if (code->size() > 16 || code->find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
                                 std::string::npos)
      throw std::invalid_argument("language code '" + *code + "' is not a code such as en, fr or fra_Latn (letters, "
                                  "digits, '_' and '-', at most 16)");
  if (!o.source_lang.empty() && o.source_lang == o.target_lang)
    throw std::invalid_argument("source_lang and target_lang are both '" + o.source_lang + "'");
  if (o.source_lang.empty()) {
    std::tie(t.source_lang, t.target_lang) = tatoeba_languages(o.data);
  } else {
    t.source_lang = o.source_lang, t.target_lang = o.target_lang;
  }
  api::apply_threads(o.threads);
  const TrainResult r = train_seq2seq(t);
  D2lTrainSummary s;
  s.loss = r.loss, s.token_loss = r.token_loss, s.tokens_per_sec = r.tokens_per_sec, s.seconds = r.seconds;
  s.epochs_run = r.epochs_run;
  s.source_lang = t.source_lang, s.target_lang = t.target_lang;
  return s;
}

}  // namespace tfm

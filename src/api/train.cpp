// tfm::train over train/recipe: the `tfm train --config / --resume` path of tools/tfm/cmd_train.cpp.
#include "tfm/train.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "api/common.h"
#include "io/json_util.h"
#include "train/recipe.h"

namespace tfm {

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
    rc = RecipeConfig::from_json(j, config_path.empty() ? "overrides" : config_path + " with overrides");
  } catch (const std::runtime_error& e) {
    if (o.overrides.empty()) throw;
    throw std::invalid_argument(e.what());
  }
  // The run folder's state, in this API's words (the recipe's own messages name tfm train's --resume and --out).
  {
    namespace fs = std::filesystem;
    std::error_code ec;
    const bool has_ckpt = fs::exists(out_dir + "/checkpoint.safetensors", ec);
    if (o.resume && !has_ckpt)
      throw std::runtime_error(out_dir + ": no checkpoint.safetensors to resume from (start a run with "
                                  "resume false)");
    if (!o.resume && has_ckpt)
      throw std::runtime_error(out_dir + " already holds a checkpoint; continue it with resume (Python: "
                                  "resume=True), or give another out_dir");
    if (!o.resume && fs::is_directory(out_dir, ec) && !fs::is_empty(out_dir, ec))
      throw std::runtime_error(out_dir + " already exists and is not an empty folder; give a new out_dir");
  }
  if (o.threads > 0) rc.threads = o.threads;
  if (o.resume && j.contains("epochs")) rc.resume_epochs = rc.epochs;  // extend the run
  if (!o.resume) {  // data files named by the config, checked before anything is written
    std::string data_dir = rc.data_dir;
    if (data_dir.empty()) {
      const char* d = std::getenv("TFM_DATA_DIR");
      data_dir = d && *d ? d : "../shared/data";
    }
    for (const std::string& f : {rc.train_src, rc.train_tgt, rc.valid_src, rc.valid_tgt})
      api::require_file(std::filesystem::path(f).is_absolute() ? f : data_dir + "/" + f);
  }
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
  RecipeResult r = train_recipe(rc, out_dir, o.resume, o.print_progress, cb);
  TrainSummary s;
  s.best_valid_bleu = r.best_valid_bleu, s.best_epoch = r.best_epoch, s.epochs_run = r.epochs_run;
  s.steps = r.steps, s.seconds = r.seconds, s.tokens_per_sec = r.train_tokens_per_sec;
  s.stopped_early = r.stopped_early;
  return s;
}

}  // namespace tfm

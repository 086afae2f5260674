#include <algorithm>
#include <map>

#include "serve/server_core.h"

namespace tfm::serve {

using nlohmann::json;

// English names of ISO 639-1 codes, as LibreTranslate's /languages gives them.
std::string language_name(const std::string& code) {
  static const std::map<std::string, std::string> names = {
      {"ar", "Arabic"},    {"bg", "Bulgarian"}, {"ca", "Catalan"},    {"cs", "Czech"},      {"da", "Danish"},
      {"de", "German"},    {"el", "Greek"},     {"en", "English"},    {"es", "Spanish"},    {"et", "Estonian"},
      {"fa", "Persian"},   {"fi", "Finnish"},   {"fr", "French"},     {"ga", "Irish"},      {"he", "Hebrew"},
      {"hi", "Hindi"},     {"hu", "Hungarian"}, {"id", "Indonesian"}, {"it", "Italian"},    {"ja", "Japanese"},
      {"ko", "Korean"},    {"lt", "Lithuanian"}, {"lv", "Latvian"},   {"nb", "Norwegian"},  {"nl", "Dutch"},
      {"pl", "Polish"},    {"pt", "Portuguese"}, {"ro", "Romanian"},  {"ru", "Russian"},    {"sk", "Slovak"},
      {"sl", "Slovenian"}, {"sv", "Swedish"},   {"th", "Thai"},       {"tr", "Turkish"},    {"uk", "Ukrainian"},
      {"vi", "Vietnamese"}, {"zh", "Chinese"}};
  auto it = names.find(code);
  return it == names.end() ? code : it->second;
}

// The pair serving source -> target ("auto": the first pair into target), or 422 naming the pairs served.
size_t Server::route(const std::string& source, const std::string& target) const {
  std::string served;
  for (const Pair& p : pairs_) served += (served.empty() ? "" : ", ") + p.source + " -> " + p.target;
  const char* what = pairs_.size() == 1 ? "this model translates " : "this server translates ";
  bool source_known = source == "auto";
  for (size_t i = 0; i < pairs_.size(); ++i) {
    source_known |= pairs_[i].source == source;
    if ((source == "auto" || pairs_[i].source == source) && pairs_[i].target == target) return i;
  }
  for (size_t i = 0; i < pairs_.size(); ++i) {  // multilingual folders: any of their languages
    const Pair& p = pairs_[i];
    if (p.languages.empty()) continue;
    served += ", " + std::to_string(p.languages.size()) + " languages (" + p.model + ")";
    source_known |= p.speaks(source);
    if ((source == "auto" || p.speaks(source)) && p.speaks(target) && source != target) return i;
  }
  if (!source_known)
    throw validation_error("`source` '" + excerpt(source) + "' is not supported: " + what + served + " (GET /languages)");
  throw validation_error("`target` '" + excerpt(target) + "' is not supported: " + what + served + " (GET /languages)");
}

std::vector<Task> Server::translate_texts(const TranslateRequest& r, const std::vector<std::string>& texts,
                                          const std::vector<std::string>& sources, const std::vector<size_t>& origin,
                                          const httplib::Request& req) {
  const auto t0 = std::chrono::steady_clock::now();
  // One group per (pair, source): a multilingual folder translates into `target` (its forced first token) from
  // the group's source.
  struct Group {
    size_t pair;
    std::string source;
    TranslateOptions langs;
    int64_t generation = 0;  // 0: none
  };
  std::vector<Group> groups;
  std::vector<size_t> group_of(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const size_t pair = route(sources[i], r.target);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const Group& g) { return g.pair == pair && g.source == sources[i]; });
    if (it == groups.end()) {
      Group g{pair, sources[i], {}};
      if (!pairs_[pair].languages.empty() && pairs_[pair].speaks(r.target)) {
        g.langs.target_lang = r.target;
        if (pairs_[pair].speaks(sources[i])) g.langs.source_lang = sources[i];
      }
      groups.push_back(std::move(g));
      it = groups.end() - 1;
    }
    group_of[i] = size_t(it - groups.begin());
  }
  std::vector<Task> tasks(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const Group& g = groups[group_of[i]];
    try {
      tasks[i].ids = pairs_[g.pair].backend->encode_source(texts[i], r.truncate.value_or(o_.auto_truncate), g.langs);
    } catch (const ApiError& e) {
      throw validation_error(std::string("`q") + (r.single ? "" : "[" + std::to_string(origin[i]) + "]") + "`: " +
                             e.what());
    }
    tasks[i].key = BatchKey{.op = BatchKey::Op::Translate, .pair = (int64_t)g.pair, .beam_size = r.beam_size};
    tasks[i].tokens = (int64_t)tasks[i].ids.size();
    if (!r.target_prefix.empty()) tasks[i].target_prefix = r.target_prefix[origin[i]];
  }
  observe_tokenization(seconds_since(t0));
  // Generation fields: this request's tasks batch on their own (one key per group), with its options.
  struct Forget {  // the options go when the request ends, however it ends
    Server* s;
    std::vector<int64_t> generations;
    ~Forget() {
      std::lock_guard<std::mutex> lock(s->custom_mu_);
      for (int64_t g : generations) s->custom_.erase(g);
    }
  } forget{this, {}};
  for (Group& g : groups) {
    const bool multilingual = !pairs_[g.pair].languages.empty();
    if (!r.generation && !multilingual && r.alternatives == 0) continue;
    TranslationBackend& backend = *pairs_[g.pair].backend;
    TranslateOptions o = g.langs;
    o.beam_size = r.beam_size;
    if (r.alternatives > 0) {  // LibreTranslate's alternatives: the beam's next best hypotheses (or more samples)
      o.num_hypotheses = r.alternatives + 1;
      if (r.sampling_topk == 1) o.beam_size = std::max(o.beam_size, o.num_hypotheses);
    }
    o.sampling_topk = r.sampling_topk;
    o.sampling_topp = (float)r.sampling_topp;
    o.sampling_temperature = (float)r.sampling_temperature;
    o.seed = r.seed;
    o.seed_per_sentence = r.seed_per_sentence;
    o.repetition_penalty = (float)r.repetition_penalty;
    o.no_repeat_ngram_size = r.no_repeat_ngram_size;
    o.min_length = r.min_length;
    o.max_steps = r.max_new_tokens;
    o.length_penalty = (float)r.length_penalty;
    o.early_stopping = r.early_stopping;
    o.forced_eos = r.forced_eos;
    o.bad_words_ids = r.bad_words_ids;
    for (const std::string& w : r.bad_words) {
      std::vector<int64_t> ids = backend.encode_target(w);
      if (ids.empty()) throw validation_error("`bad_words`: '" + excerpt(w) + "' has no target token");
      o.bad_words_ids.push_back(std::move(ids));
    }
    if (o.sampling_topk != 1 && o.beam_size > 1)
      throw validation_error("`sampling_topk` " + std::to_string(o.sampling_topk) +
                             " samples one token a step; it needs `beam_size` 1");
    std::lock_guard<std::mutex> lock(custom_mu_);
    g.generation = ++next_custom_;
    custom_[g.generation] = {g.pair, o};
    forget.generations.push_back(g.generation);
  }
  for (size_t i = 0; i < texts.size(); ++i)
    if (const int64_t gen = groups[group_of[i]].generation)
      tasks[i].key = BatchKey{.op = BatchKey::Op::Generation, .generation = gen};
  if (!tasks.empty()) run_queued(tasks, req);
  return tasks;
}

void Server::translate_routes() {
  if (!translation_) {
    not_for_this_model("/translate", "a translation model");
    not_for_this_model("/attention", "a translation model");
    svr_.Get("/languages", guard([this](const httplib::Request&, httplib::Response& res) {
               send_error(res, 404, "not_found", "/languages needs a translation model; this server runs an "
                                                 "embedding model (" + model_type_ + ")");
             }, false));
    return;
  }
  add("POST", "/translate", "LibreTranslate /translate (JSON or form body; format text or html; source auto)",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              const TranslateRequest r = parse_translate_request(json_body(req, true), limits_, o_.max_beam_size);
              const LibreTranslateInput in = libretranslate_input(r);  // detection, html text nodes
              std::vector<Task> tasks = translate_texts(r, in.texts, in.sources, in.origin, req);
              send_json(res, 200, libretranslate_output(r, in, tasks, has_field(req, "alternatives")));
            }, true));
  add("POST", "/attention", "the web page's attention maps",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              const AttentionRequest r = parse_attention_request(json_body(req), limits_, o_.max_beam_size);
              std::vector<Task> tasks(1);
              tasks[0].key = BatchKey{.op = BatchKey::Op::Attention, .beam_size = r.beam_size};
              tasks[0].ids = translator_->encode_source(r.q, o_.auto_truncate);
              tasks[0].tokens = (int64_t)tasks[0].ids.size();
              run_queued(tasks, req);
              res.set_content(tasks[0].json, "application/json");
            }, true));
  add("GET", "/languages", "LibreTranslate /languages",
      guard([this](const httplib::Request&, httplib::Response& res) {
             json out = json::array();  // LibreTranslate: one entry per source language with its targets
             for (const Pair& p : pairs_) {
               auto it = std::find_if(out.begin(), out.end(), [&](const json& e) { return e["code"] == p.source; });
               if (it == out.end())
                 out.push_back({{"code", p.source}, {"name", language_name(p.source)},
                                {"targets", json::array({p.target})}});
               else
                 (*it)["targets"].push_back(p.target);
             }
             for (const Pair& p : pairs_)  // a multilingual folder: each of its languages into the others
               for (const std::string& code : p.languages) {
                 auto it = std::find_if(out.begin(), out.end(), [&](const json& e) { return e["code"] == code; });
                 if (it == out.end()) {
                   out.push_back({{"code", code}, {"name", language_name(code)}, {"targets", json::array()}});
                   it = out.end() - 1;
                 }
                 for (const std::string& t : p.languages)
                   if (t != code && std::find((*it)["targets"].begin(), (*it)["targets"].end(), t) ==
                                        (*it)["targets"].end())
                     (*it)["targets"].push_back(t);
               }
             for (const Pair& p : pairs_) {  // every language served, a target-only one without targets
               auto it = std::find_if(out.begin(), out.end(), [&](const json& e) { return e["code"] == p.target; });
               if (it == out.end())
                 out.push_back({{"code", p.target}, {"name", language_name(p.target)}, {"targets", json::array()}});
             }
             send_json(res, 200, out);
           }, false));
}

}  // namespace tfm::serve

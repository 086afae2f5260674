// LibreTranslate's API beyond /translate and /languages (routes_translate.cpp): /detect, /frontend/settings,
// /translate_file with /download_file/NAME, /suggest; and what /translate needs of it: source "auto" (the
// detectedLanguage of each text) and format "html". As LibreTranslate's app.py answers them; a bad request is 400.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "io/text_file.h"
#include "serve/server_core.h"

namespace tfm::serve {

using nlohmann::json;

namespace {

constexpr double kFileSeconds = 30 * 60;         // a translated file is kept this long
constexpr size_t kFileBytes = size_t(256) << 20;  // all translated files together
const char* const kFileFormats[] = {".txt", ".html"};

int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string joined(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string o;
  for (const std::string& s : v) o += (o.empty() ? "" : sep) + s;
  return o;
}

// Werkzeug's secure_filename, as LibreTranslate names uploads: ASCII letters, digits, '.', '_' and '-' kept,
// white space as '_', anything else dropped, no leading dots or underscores.
std::string secure_filename(const std::string& name) {
  std::string base = name;
  if (const size_t slash = base.find_last_of("/\\"); slash != std::string::npos) base = base.substr(slash + 1);
  std::string o;
  for (char c : base) {
    if (std::isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-')
      o += c;
    else if (c == ' ' || c == '\t')
      o += '_';
  }
  const size_t start = o.find_first_not_of("._");
  return start == std::string::npos ? std::string() : o.substr(start);
}

std::string extension(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) return "";
  std::string e = name.substr(dot);
  for (char& c : e) c = (char)std::tolower((unsigned char)c);
  return e;
}

std::string random_hex(size_t bytes) {
  static thread_local std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string o;
  for (size_t i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xFF;
    o += hex[v >> 4], o += hex[v & 15];
  }
  return o;
}

}  // namespace

std::vector<std::string> Server::source_languages(const std::string& target) const {
  std::vector<std::string> out;
  auto add = [&](const std::string& c) {
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  };
  for (const Pair& p : pairs_)
    if (target.empty() || p.target == target) add(p.source);
  for (const Pair& p : pairs_)
    if (target.empty() || p.speaks(target))
      for (const std::string& c : p.languages)
        if (c != target) add(c);
  return out;
}

json Server::detect_languages(const std::string& text, const std::vector<std::string>& candidates) const {
  if (!langid_) {
    if (candidates.size() == 1) return json::array({{{"confidence", 100.0}, {"language", candidates[0]}}});
    throw validation_error("detecting the language among " + joined(candidates) +
                           " needs a language identifier: start tfm serve with --langid FILE (written by tfm "
                           "langid train), or give the source language");
  }
  // As LibreTranslate: detected among every language the identifier knows, then only the candidates kept, with
  // their confidences (a French text on an English-only server: English, with a confidence near 0).
  int64_t evidence = 0;
  json out = json::array();
  for (const DetectedLanguage& g : langid_->detect(text, {}, &evidence))
    if (std::find(candidates.begin(), candidates.end(), g.language) != candidates.end())
      out.push_back({{"confidence", evidence ? std::round(g.confidence * 10000.0) / 100.0 : 0.0},  // percent
                     {"language", g.language}});
  if (out.empty()) throw validation_error("the language identifier (--langid) knows none of " + joined(candidates));
  return out;
}

void Server::check_langid() const {
  if (!langid_) return;
  const std::vector<std::string> known = langid_->languages(), sources = source_languages("");
  std::vector<std::string> missing;
  for (const std::string& s : sources)
    if (std::find(known.begin(), known.end(), s) == known.end()) missing.push_back(s);
  if (missing.size() == sources.size())
    throw std::runtime_error(o_.langid + " tells apart " + joined(known) + ", none of the languages served models "
                             "translate from (" + joined(sources) + ")");
  if (!missing.empty() && sources.size() > 1)
    std::fprintf(stderr, "warning: %s does not know %s: source \"auto\" and /detect never answer %s\n",
                 o_.langid.c_str(), joined(missing).c_str(), missing.size() == 1 ? "it" : "them");
}

Server::LibreTranslateInput Server::libretranslate_input(const TranslateRequest& r) const {
  LibreTranslateInput in;
  const bool html = r.format == "html";
  if (html && !r.target_prefix.empty())
    throw validation_error("`target_prefix` applies to format \"text\", not \"html\"");
  if (html) {
    for (size_t i = 0; i < r.q.size(); ++i) {
      in.html.push_back(split_html(r.q[i]));
      for (const HtmlPiece& p : in.html.back())
        if (p.translate) in.texts.push_back(p.text), in.origin.push_back(i);
    }
  } else {
    in.texts = r.q;
    for (size_t i = 0; i < r.q.size(); ++i) in.origin.push_back(i);
  }
  std::vector<std::string> source_of_q(r.q.size(), r.source);
  if (r.source == "auto") {
    const std::vector<std::string> candidates = source_languages(r.target);
    if (candidates.empty()) (void)route(r.source, r.target);  // throws: nothing is served into target
    // The text each q is detected on: its text nodes in html.
    std::vector<std::string> plain(r.q.size());
    for (size_t k = 0; k < in.texts.size(); ++k) plain[in.origin[k]] += (plain[in.origin[k]].empty() ? "" : " ") + in.texts[k];
    // As LibreTranslate: a text over 40 characters is detected on its own, a shorter one takes the language of
    // the whole request.
    json overall;
    in.detected = json::array();
    for (size_t i = 0; i < r.q.size(); ++i) {
      json d;
      if (code_points(plain[i]) > 40) {
        d = detect_languages(plain[i], candidates)[0];
      } else {
        if (overall.is_null()) overall = detect_languages(joined(plain, "\n"), candidates)[0];
        d = overall;
      }
      source_of_q[i] = d["language"].get<std::string>();
      in.detected.push_back(d);
    }
  }
  for (size_t k = 0; k < in.texts.size(); ++k) in.sources.push_back(source_of_q[in.origin[k]]);
  return in;
}

json Server::libretranslate_output(const TranslateRequest& r, const LibreTranslateInput& in, std::vector<Task>& tasks,
                                   bool alternatives) const {
  json texts = json::array(), alts = json::array();
  if (r.format == "html") {
    size_t k = 0;
    for (size_t i = 0; i < r.q.size(); ++i) {
      std::vector<std::string> translated;
      for (; k < tasks.size() && in.origin[k] == i; ++k) translated.push_back(std::move(tasks[k].text));
      texts.push_back(join_html(in.html[i], translated));
      alts.push_back(json::array());
    }
  } else {
    for (Task& t : tasks) texts.push_back(std::move(t.text)), alts.push_back(t.alternatives);
  }
  json out = {{"translatedText", r.single ? texts[0] : texts}};
  if (alternatives) out["alternatives"] = r.single ? alts[0] : alts;
  if (r.source == "auto") out["detectedLanguage"] = r.single ? in.detected[0] : in.detected;
  return out;
}

void Server::libretranslate_routes() {
  if (!translation_) {
    for (const char* path : {"/detect", "/translate_file"})
      not_for_this_model(path, "a translation model (transformer_seq2seq)");
    return;
  }
  add("POST", "/detect", "LibreTranslate /detect: the language of q among the served source languages",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              const std::string body = json_body(req, true);
              check_json_depth(body);
              const json j = json::parse(body, nullptr, false);
              if (!j.is_object()) throw validation_error("the body must be a JSON object (or a form) with a field `q`");
              auto it = j.find("q");
              std::vector<std::string> q;
              if (it != j.end() && it->is_string()) {
                q.push_back(it->get<std::string>());
              } else if (it != j.end() && it->is_array()) {
                for (const json& e : *it) {
                  if (!e.is_string()) throw validation_error("`q` must be a string or a list of strings");
                  q.push_back(e.get<std::string>());
                }
              } else if (it != j.end() && !it->is_null()) {
                throw validation_error("`q` must be a string or a list of strings");
              }
              if (q.empty() || std::all_of(q.begin(), q.end(), [](const std::string& s) { return s.empty(); }))
                throw validation_error("Invalid request: missing q parameter (the text whose language to detect)");
              for (size_t i = 0; i < q.size(); ++i)
                if (auto bad = find_invalid_utf8(q[i]))
                  throw validation_error("`q` is not valid UTF-8 (byte offset " + std::to_string(*bad) + ")");
              // A list: its texts together, as LibreTranslate averages its detections over them.
              send_json(res, 200, detect_languages(joined(q, "\n"), source_languages("")));
            }, true));
  add("GET", "/frontend/settings", "LibreTranslate /frontend/settings",
      guard([this](const httplib::Request&, httplib::Response& res) {
              const std::vector<std::string> sources = source_languages("");
              const bool detect = langid_ || sources.size() == 1;
              json formats = json::array();
              for (const char* f : kFileFormats) formats.push_back(f);
              const std::string source = detect ? "auto" : pairs_.front().source, target = pairs_.front().target;
              send_json(res, 200,
                        {{"charLimit", limits_.max_input_chars},
                         {"frontendTimeout", 500},
                         {"apiKeys", !o_.api_key.empty()},
                         {"keyRequired", !o_.api_key.empty()},
                         {"suggestions", false},
                         {"filesTranslation", true},
                         {"supportedFilesFormat", formats},
                         {"language",
                          {{"source", {{"code", source}, {"name", detect ? "Auto Detect" : language_name(source)}}},
                           {"target", {{"code", target}, {"name", language_name(target)}}}}}});
            }, false));
  add("POST", "/translate_file", "LibreTranslate /translate_file: a .txt or .html file (multipart field `file`)",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              if (!req.is_multipart_form_data() || !req.has_file("file"))
                throw validation_error("Invalid request: missing file parameter (a multipart/form-data upload)");
              const httplib::MultipartFormData file = req.get_file_value("file");
              auto form = [&](const char* name) {
                return req.has_file(name) ? req.get_file_value(name).content : std::string();
              };
              TranslateRequest r;
              r.source = form("source"), r.target = form("target");
              if (r.source.empty()) throw validation_error("Invalid request: missing source parameter");
              if (r.target.empty()) throw validation_error("Invalid request: missing target parameter");
              if (file.filename.empty()) throw validation_error("Invalid request: empty file");
              const std::string ext = extension(file.filename);
              if (std::find_if(std::begin(kFileFormats), std::end(kFileFormats),
                               [&](const char* f) { return ext == f; }) == std::end(kFileFormats))
                throw validation_error("Invalid request: file format not supported (" + joined({".txt", ".html"}) +
                                       ")");
              if (auto bad = find_invalid_utf8(file.content))
                throw validation_error("Invalid request: the file is not UTF-8 text (byte offset " +
                                       std::to_string(*bad) + ")");
              // The file as /translate's q: its lines (.txt), or one html document.
              const bool html = ext == ".html";
              std::vector<std::string> lines;
              if (html) {
                lines.push_back(file.content);
              } else {
                size_t start = 0;
                while (start <= file.content.size()) {
                  size_t nl = file.content.find('\n', start);
                  if (nl == std::string::npos) nl = file.content.size();
                  lines.push_back(file.content.substr(start, nl - start));
                  start = nl + 1;
                }
              }
              r.format = html ? "html" : "text";
              r.single = false;
              // A text line is translated without its white space and line ending; an empty one stays empty.
              std::vector<std::string> lead(lines.size()), trail(lines.size());
              std::vector<size_t> line_of;
              for (size_t i = 0; i < lines.size(); ++i) {
                std::string& l = lines[i];
                if (html) {
                  r.q.push_back(l);
                  line_of.push_back(i);
                  continue;
                }
                const size_t a = l.find_first_not_of(" \t\r"), b = l.find_last_not_of(" \t\r");
                if (a == std::string::npos) continue;
                lead[i] = l.substr(0, a), trail[i] = l.substr(b + 1);
                r.q.push_back(l.substr(a, b + 1 - a));
                line_of.push_back(i);
              }
              std::string out;
              if (!r.q.empty()) {
                const LibreTranslateInput in = libretranslate_input(r);
                std::vector<Task> tasks = translate_texts(r, in.texts, in.sources, in.origin, req);
                const json t = libretranslate_output(r, in, tasks, false)["translatedText"];
                for (size_t k = 0; k < line_of.size(); ++k) lines[line_of[k]] = lead[line_of[k]] + t[k].get<std::string>() + trail[line_of[k]];
              }
              for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" : "") + lines[i];
              std::string name = secure_filename(file.filename);
              if (name.empty()) name = "file" + ext;
              const std::string stored = random_hex(16) + "." + name;
              {
                std::lock_guard<std::mutex> lock(files_mu_);
                const auto now = std::chrono::steady_clock::now();
                for (auto it = files_.begin(); it != files_.end();) {  // expired files go first, then the oldest
                  if (std::chrono::duration<double>(now - it->second.created).count() > kFileSeconds) {
                    files_bytes_ -= it->second.content.size();
                    it = files_.erase(it);
                  } else {
                    ++it;
                  }
                }
                while (!files_.empty() && files_bytes_ + out.size() > kFileBytes) {
                  auto oldest = std::min_element(files_.begin(), files_.end(), [](const auto& a, const auto& b) {
                    return a.second.created < b.second.created;
                  });
                  files_bytes_ -= oldest->second.content.size();
                  files_.erase(oldest);
                }
                files_bytes_ += out.size();
                files_[stored] = {name, std::move(out), html ? "text/html; charset=utf-8" : "text/plain; charset=utf-8",
                                  now};
              }
              // An absolute URL, as Flask's url_for(_external=True): from the Host the client used.
              std::string host = req.get_header_value("Host");
              if (host.empty()) host = o_.host + ":" + std::to_string(req.local_port);
              send_json(res, 200, {{"translatedFileUrl", "http://" + host + "/download_file/" + stored}});
            }, true));
  route_table_["/download_file/{filename}"]["GET"] = RouteDoc{"LibreTranslate /download_file: a translated file", false};
  svr_.Get(R"(/download_file/([^/]+))", guard([this](const httplib::Request& req, httplib::Response& res) {
             const std::string name = req.matches[1];
             TranslatedFile f;
             {
               std::lock_guard<std::mutex> lock(files_mu_);
               auto it = files_.find(name);
               if (it == files_.end() ||
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second.created).count() >
                       kFileSeconds)
                 throw ApiError(404, "not_found", "Invalid filename: no translated file '" + excerpt(name) +
                                                      "' (files are kept 30 minutes)");
               f = it->second;
             }
             res.set_header("Content-Disposition", "attachment; filename=\"" + f.name + "\"");
             res.set_content(f.content, f.content_type);
           }, false));
  add("POST", "/suggest", "LibreTranslate /suggest (disabled: suggestions are not stored)",
      guard([](const httplib::Request&, httplib::Response&) {
              throw ApiError(403, "forbidden", "Suggestions are disabled on this server.");
            }, false));
}

}  // namespace tfm::serve

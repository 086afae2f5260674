#include "io/hub.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "io/atomic_file.h"
#include "io/curl_library.h"
#include "io/download.h"

namespace tfm::hub {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// os.path.expanduser for "~" and "~/...".
std::string expand_user(const std::string& p) {
  if (p == "~" || p.rfind("~/", 0) == 0) {
    std::string home = env("HOME");
    if (!home.empty()) return home + p.substr(1);
  }
  return p;
}

// huggingface_hub's _is_true: "1", "ON", "YES", "TRUE" (any case).
bool env_true(const char* name) {
  std::string v = env(name);
  for (char& c : v) c = char(std::toupper((unsigned char)c));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

std::string hf_home() {
  std::string h = env("HF_HOME");
  if (!h.empty()) return expand_user(h);
  std::string xdg = env("XDG_CACHE_HOME");
  return expand_user(xdg.empty() ? std::string("~/.cache") : xdg) + "/huggingface";
}

bool is_commit_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool is_sha256_hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string revision_of(const HubOptions& o) { return o.revision.empty() ? "main" : o.revision; }
bool offline_of(const HubOptions& o) { return o.offline ? *o.offline : env_true("HF_HUB_OFFLINE"); }

std::string endpoint_of(const HubOptions& o) {
  std::string e = !o.endpoint.empty() ? o.endpoint : env("HF_ENDPOINT");
  if (e.empty()) e = "https://huggingface.co";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

std::string token_of(const HubOptions& o) {
  if (!o.token.empty()) return o.token;
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    std::string t = env(name);
    if (!t.empty()) return t;
  }
  std::string path = env("HF_TOKEN_PATH");
  path = path.empty() ? hf_home() + "/token" : expand_user(path);
  std::ifstream f(path);
  std::string t;
  if (f) std::getline(f, t);
  while (!t.empty() && std::isspace((unsigned char)t.back())) t.pop_back();
  return t;
}

// urllib.parse.quote(s, safe=keep): percent-encodes everything but unreserved characters and `keep`.
std::string quote(const std::string& s, const char* keep) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (c && std::strchr(keep, c))) {
      out += char(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string read_small_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace((unsigned char)s.back())) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace((unsigned char)s[b])) ++b;
  return s.substr(b);
}

bool has_weights(const fs::path& dir) {
  std::error_code ec;
  for (const char* f : {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                        "pytorch_model.bin.index.json"})
    if (fs::exists(dir / f, ec)) return true;
  return false;
}

// ---- HTTP (libcurl) ----

struct SlistFree {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

struct Response {
  long status = 0;
  std::map<std::string, std::string> headers;  // lowercase names, of the last response (after redirects)
  std::string body;                            // for in-memory requests
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// A request in progress: headers are collected per response (a redirect starts a new set).
struct Exchange {
  Response* res = nullptr;
  std::FILE* out = nullptr;     // body to a file (downloads), else to res->body
  curl_off_t resume_from = 0;   // the Range start asked for; a 200 answer means the server ignored it
  curl_off_t written = 0;       // body bytes written in this request
  int write_errno = 0;
  // progress
  bool progress = false, tty = false;
  std::string label;
  curl_off_t total = -1;        // the whole file's size, when known
  int last_decile = -1, last_permille = -1;
  bool bar_drawn = false;
};

size_t on_header(char* data, size_t size, size_t nmemb, void* user) {
  auto* x = static_cast<Exchange*>(user);
  std::string line(data, size * nmemb);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (the first, or one after a redirect)
    x->res->headers.clear();
    size_t sp = line.find(' ');
    x->res->status = sp == std::string::npos ? 0 : std::atol(line.c_str() + sp + 1);
    return size * nmemb;
  }
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (char& c : name) c = char(std::tolower((unsigned char)c));
    x->res->headers[name] = trim(line.substr(colon + 1));
  }
  return size * nmemb;
}

std::string human_bytes(curl_off_t n) {
  char buf[32];
  if (n < 1024) std::snprintf(buf, sizeof buf, "%lld B", (long long)n);
  else if (n < 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", n / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.1f MiB", n / (1024.0 * 1024.0));
  return buf;
}

void report(Exchange* x) {
  curl_off_t have = x->resume_from + x->written;
  if (x->total <= 0) return;
  if (x->tty) {
    int permille = int(have * 1000 / x->total);
    if (permille == x->last_permille) return;
    x->last_permille = permille;
    const int width = 30;
    std::string bar(size_t(have * width / x->total), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r%s [%s] %3d%% %s / %s   ", x->label.c_str(), bar.c_str(), permille / 10,
                 human_bytes(have).c_str(), human_bytes(x->total).c_str());
    x->bar_drawn = true;
  } else {
    int decile = int(have * 10 / x->total);
    if (decile <= x->last_decile) return;
    x->last_decile = decile;
    std::fprintf(stderr, "%s: %d%% (%s / %s)\n", x->label.c_str(), decile * 10, human_bytes(have).c_str(),
                 human_bytes(x->total).c_str());
  }
}

size_t on_body(char* data, size_t size, size_t nmemb, void* user) {
  auto* x = static_cast<Exchange*>(user);
  size_t n = size * nmemb;
  if (x->out) {
    // Only a 2xx body is content; an error page is not written into the blob.
    if (x->res->status < 200 || x->res->status >= 300) return n;
    if (x->resume_from > 0 && x->written == 0 && x->res->status == 200) {
      // The server ignored the Range request and sends the whole file: start the .incomplete over.
      if (::ftruncate(::fileno(x->out), 0) != 0 || std::fseek(x->out, 0, SEEK_SET) != 0) {
        x->write_errno = errno;
        return 0;
      }
      x->resume_from = 0;
    }
    if (std::fwrite(data, 1, n, x->out) != n) {
      x->write_errno = errno ? errno : EIO;
      return 0;
    }
  } else {
    if (x->res->body.size() + n > (64u << 20)) return 0;  // an API answer is small; refuse a runaway body
    x->res->body.append(data, n);
  }
  x->written += curl_off_t(n);
  if (x->progress) report(x);
  return n;
}

struct Request {
  std::string url;
  std::string token;
  bool head = false;
  bool follow = true;  // follow redirects (downloads); false for the HEAD that reads the hub's headers
  curl_off_t range_from = 0;
  long connect_timeout_s = 20;
};

// Performs the request; returns the curl code (the caller maps it to a message).
CURLcode perform(const Request& rq, Exchange& x, std::string* detail) {
  std::unique_ptr<CURL, CurlFree> curl = curl_easy_handle();
  CURL* c = curl.get();
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::unique_ptr<curl_slist, SlistFree> headers;
  auto add_header = [&](const std::string& h) { headers.reset(curl_slist_append(headers.release(), h.c_str())); };
  if (!rq.token.empty()) add_header("Authorization: Bearer " + rq.token);
  std::string range;
  if (rq.range_from > 0) range = std::to_string((long long)rq.range_from) + "-";
  curl_easy_setopt(c, CURLOPT_URL, rq.url.c_str());
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, rq.follow ? 1L : 0L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, rq.connect_timeout_s);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 100L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "transformer.cpp-tfm/1; hf_hub-compatible");
  if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  if (rq.head) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  if (!range.empty()) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
  CURLcode rc = curl_easy_perform(c);
  if (x.bar_drawn) std::fputc('\n', stderr);
  x.bar_drawn = false;
  *detail = errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
  return rc;
}

// The message for a transport failure (no HTTP status).
[[noreturn]] void throw_transport(const std::string& what, const std::string& url, CURLcode rc,
                                  const std::string& detail) {
  if (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_PROXY)
    throw std::runtime_error(what + ": cannot reach " + url + " (" + detail +
                             "): no network? Set HF_ENDPOINT for a mirror, or HF_HUB_OFFLINE=1 to use the cache only");
  throw std::runtime_error(what + ": request to " + url + " failed: " + detail);
}

// The message for an HTTP error status, as huggingface_hub's hf_raise_for_status words them (X-Error-Code).
[[noreturn]] void throw_status(const std::string& id, const std::string& file, const std::string& revision,
                               const std::string& url, const Response& r, bool have_token) {
  const std::string code = r.header("x-error-code");
  const std::string where = file.empty() ? "'" + id + "'" : "'" + id + "': " + file;
  const std::string st = "HTTP " + std::to_string(r.status) + " from " + url;
  if (code == "GatedRepo")
    throw std::runtime_error(where + ": the model is gated (" + st + "); accept its terms on the hub and set HF_TOKEN");
  if (code == "RepoNotFound" || ((r.status == 401 || r.status == 403) && code.empty()))
    throw std::runtime_error(where + ": no such model, or it is private or gated (" + st + ")" +
                             (have_token ? "; HF_TOKEN has no access to it" : "; set HF_TOKEN if you have access"));
  if (code == "RevisionNotFound") throw std::runtime_error(where + ": no such revision '" + revision + "' (" + st + ")");
  if (code == "EntryNotFound" || (r.status == 404 && !file.empty()))
    throw std::runtime_error(where + ": no such file in the model at revision '" + revision + "' (" + st + ")");
  if (r.status == 404) throw std::runtime_error(where + ": no such model or revision '" + revision + "' (" + st + ")");
  throw std::runtime_error(where + ": " + st);
}

// huggingface_hub's _normalize_etag: W/"x" and "x" -> x.
std::string normalize_etag(std::string e) {
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

bool is_absolute_url(const std::string& u) { return u.find("://") != std::string::npos; }

// scheme://host[:port] of an absolute URL.
std::string origin_of(const std::string& url) {
  size_t b = url.find("://");
  size_t e = url.find('/', b == std::string::npos ? 0 : b + 3);
  return e == std::string::npos ? url : url.substr(0, e);
}

struct FileMeta {
  std::string commit, etag, location;
  long long size = -1;
  bool lfs = false;
};

struct Client {
  std::string id, revision, endpoint, token;
  HubOptions opts;
  fs::path repo;  // <cache>/models--org--name

  Response get_json(const std::string& url, const std::string& file) {
    Response r;
    Exchange x;
    x.res = &r;
    std::string detail;
    CURLcode rc = perform({url, token, false, true, 0, opts.connect_timeout_s}, x, &detail);
    if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && r.status >= 400)) throw_transport("'" + id + "'", url, rc, detail);
    if (r.status >= 400) throw_status(id, file, revision, url, r, !token.empty());
    return r;
  }

  // HEAD of the resolve URL, following only redirects on the same host (a renamed repository), as
  // huggingface_hub's get_hf_file_metadata does.
  FileMeta head(const std::string& file, const std::string& rev) {
    std::string url = endpoint + "/" + id + "/resolve/" + quote(rev, "") + "/" + quote(file, "/");
    for (int hop = 0; hop < 10; ++hop) {
      Response r;
      Exchange x;
      x.res = &r;
      std::string detail;
      CURLcode rc = perform({url, token, true, false, 0, opts.connect_timeout_s}, x, &detail);
      if (rc != CURLE_OK) throw_transport("'" + id + "': " + file, url, rc, detail);
      if (r.status >= 400) throw_status(id, file, rev, url, r, !token.empty());
      std::string loc = r.header("location");
      if (r.status >= 300 && r.status < 400 && !loc.empty() && !is_absolute_url(loc) && r.header("x-linked-etag").empty()) {
        url = origin_of(url) + (loc[0] == '/' ? "" : "/") + loc;  // relative redirect: a renamed repository
        continue;
      }
      FileMeta m;
      m.commit = r.header("x-repo-commit");
      std::string linked = r.header("x-linked-etag");
      m.lfs = !linked.empty();
      m.etag = normalize_etag(m.lfs ? linked : r.header("etag"));
      std::string size = r.header(m.lfs ? "x-linked-size" : "content-length");
      if (size.empty()) size = r.header("content-length");
      if (!size.empty()) m.size = std::atoll(size.c_str());
      m.location = (r.status >= 300 && r.status < 400 && !loc.empty())
                       ? (is_absolute_url(loc) ? loc : origin_of(url) + (loc[0] == '/' ? "" : "/") + loc)
                       : url;
      if (m.etag.empty())
        throw std::runtime_error("'" + id + "': " + file + ": the server sent no ETag for " + url +
                                 " (is " + endpoint + " a Hugging Face hub endpoint?)");
      if (m.etag.find('/') != std::string::npos || m.etag == "." || m.etag == "..")
        throw std::runtime_error("'" + id + "': " + file + ": unusable ETag '" + m.etag + "' from " + url);
      return m;
    }
    throw std::runtime_error("'" + id + "': " + file + ": too many redirects from " + endpoint);
  }

  // Fetches meta.location into blob (via blob.incomplete), resuming after a cut connection.
  void fetch_blob(const std::string& file, const FileMeta& meta, const fs::path& blob) {
    const std::string part = blob.string() + ".incomplete";
    const bool tty = ::isatty(2);
    std::string last_error;
    for (int attempt = 0; attempt < 5; ++attempt) {
      std::error_code ec;
      curl_off_t have = fs::exists(part, ec) ? curl_off_t(fs::file_size(part, ec)) : 0;
      if (meta.size >= 0 && have > meta.size) {  // a stale .incomplete longer than the file: start over
        fs::remove(part, ec);
        have = 0;
      }
      if (meta.size < 0 || have < meta.size) {
        std::FILE* f = std::fopen(part.c_str(), "ab");
        if (!f) throw std::runtime_error("cannot write '" + part + "': " + std::strerror(errno));
        std::unique_ptr<std::FILE, int (*)(std::FILE*)> guard(f, std::fclose);
        Response r;
        Exchange x;
        x.res = &r;
        x.out = f;
        x.resume_from = have;
        x.progress = opts.progress;
        x.tty = tty;
        x.label = file;
        x.total = meta.size;
        std::string detail;
        if (attempt > 0 && opts.progress)
          std::fprintf(stderr, "%s: resuming at byte %lld\n", file.c_str(), (long long)have);
        CURLcode rc = perform({meta.location, token, false, true, have, opts.connect_timeout_s}, x, &detail);
        if (std::fflush(f) != 0) throw std::runtime_error("cannot write '" + part + "': " + std::strerror(errno));
        if (x.write_errno) throw std::runtime_error("cannot write '" + part + "': " + std::strerror(x.write_errno));
        if (r.status == 416 && meta.size >= 0 && have == meta.size) {
          // nothing left to fetch
        } else if (r.status >= 400) {
          throw_status(id, file, revision, meta.location, r, !token.empty());
        } else if (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_CONNECT) {
          throw_transport("'" + id + "': " + file, meta.location, rc, detail);
        } else if (rc != CURLE_OK) {
          last_error = detail;  // cut off / timed out: resume with a Range request
          continue;
        }
      }
      std::error_code ec2;
      const long long got = (long long)fs::file_size(part, ec2);
      if (meta.size >= 0 && got != meta.size) {
        last_error = "received " + std::to_string(got) + " of " + std::to_string(meta.size) + " bytes";
        continue;
      }
      if (meta.lfs && is_sha256_hex(meta.etag)) {
        const std::string digest = sha256_file(part);
        if (digest != meta.etag) {
          fs::remove(part, ec2);
          throw std::runtime_error("'" + id + "': " + file + ": sha256 " + digest + " does not match the hub's " +
                                   meta.etag + " (the download is corrupt; run the command again)");
        }
      }
      fs::rename(part, blob, ec2);
      if (ec2) throw std::runtime_error("cannot rename '" + part + "' to '" + blob.string() + "': " + ec2.message());
      return;
    }
    throw std::runtime_error("'" + id + "': " + file + ": download from " + meta.location + " failed after 5 tries (" +
                             last_error + "); run the command again to resume");
  }

  // hf_hub_download for one file of the snapshot `commit`. Returns true when bytes were fetched.
  bool download_file(const std::string& file, const std::string& commit) {
    const fs::path snapshot = repo / "snapshots" / commit;
    const fs::path pointer = snapshot / file;
    std::error_code ec;
    if (fs::exists(pointer, ec)) return false;  // exists() follows the link: a dangling one is fetched again
    FileMeta meta = head(file, commit);
    const fs::path blob = repo / "blobs" / meta.etag;
    fs::create_directories(repo / "blobs", ec);
    if (ec) throw std::runtime_error("cannot create '" + (repo / "blobs").string() + "': " + ec.message());
    bool fetched = false;
    if (!fs::exists(blob, ec)) {
      fetch_blob(file, meta, blob);
      fetched = true;
    }
    fs::create_directories(pointer.parent_path(), ec);
    if (ec) throw std::runtime_error("cannot create '" + pointer.parent_path().string() + "': " + ec.message());
    // The relative link huggingface_hub's _create_symlink makes: snapshots/<commit>/a/b -> ../../../blobs/<etag>.
    const fs::path rel = fs::relative(blob, pointer.parent_path(), ec);
    fs::remove(pointer, ec);  // a dangling link
    fs::create_symlink(rel, pointer, ec);
    if (ec) {  // a file system without symlinks: a copy, as huggingface_hub falls back to
      fs::copy_file(blob, pointer, fs::copy_options::overwrite_existing, ec);
      if (ec) throw std::runtime_error("cannot create '" + pointer.string() + "': " + ec.message());
    }
    return fetched;
  }
};

bool glob_match(const std::string& pattern, const std::string& path) {
  return ::fnmatch(pattern.c_str(), path.c_str(), 0) == 0;  // '*' matches '/' too, as Python's fnmatch
}

}  // namespace

std::string cache_dir(const HubOptions& opts) {
  if (!opts.cache_dir.empty()) return expand_user(opts.cache_dir);
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}) {
    std::string v = env(name);
    if (!v.empty()) return expand_user(v);
  }
  return hf_home() + "/hub";
}

namespace {

// One part of a repository id (huggingface_hub's validate_repo_id).
bool id_part_ok(const std::string& p) {
  if (p.empty() || p.size() > 96 || p[0] == '.' || p[0] == '-' || p.back() == '.') return false;
  if (p.find("..") != std::string::npos || p.find("--") != std::string::npos) return false;
  for (unsigned char c : p)
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

// The models the hub once kept without an organisation (now under google-bert/, openai-community/, FacebookAI/,
// distilbert/, google-t5/, albert/, ...): the hub still answers their old names with a redirect, and
// huggingface_hub / transformers take them as ids. Any other single name is a folder (a typo is not sent to the
// network), unless the cache already has it.
const std::set<std::string>& legacy_ids() {
  static const std::set<std::string> ids = {
      "albert-base-v1", "albert-base-v2", "albert-large-v1", "albert-large-v2", "albert-xlarge-v1", "albert-xlarge-v2",
      "albert-xxlarge-v1", "albert-xxlarge-v2", "bert-base-cased", "bert-base-cased-finetuned-mrpc",
      "bert-base-chinese", "bert-base-german-cased", "bert-base-german-dbmdz-cased", "bert-base-german-dbmdz-uncased",
      "bert-base-multilingual-cased", "bert-base-multilingual-uncased", "bert-base-uncased", "bert-large-cased",
      "bert-large-cased-whole-word-masking", "bert-large-cased-whole-word-masking-finetuned-squad",
      "bert-large-uncased", "bert-large-uncased-whole-word-masking",
      "bert-large-uncased-whole-word-masking-finetuned-squad", "camembert-base", "ctrl", "distilbert-base-cased",
      "distilbert-base-cased-distilled-squad", "distilbert-base-german-cased", "distilbert-base-multilingual-cased",
      "distilbert-base-uncased", "distilbert-base-uncased-distilled-squad",
      "distilbert-base-uncased-finetuned-sst-2-english", "distilgpt2", "distilroberta-base", "gpt2", "gpt2-large",
      "gpt2-medium", "gpt2-xl", "openai-gpt", "roberta-base", "roberta-base-openai-detector", "roberta-large",
      "roberta-large-mnli", "roberta-large-openai-detector", "t5-11b", "t5-3b", "t5-base", "t5-large", "t5-small",
      "transfo-xl-wt103", "xlm-clm-ende-1024", "xlm-clm-enfr-1024", "xlm-mlm-100-1280", "xlm-mlm-17-1280",
      "xlm-mlm-en-2048", "xlm-mlm-ende-1024", "xlm-mlm-enfr-1024", "xlm-mlm-enro-1024", "xlm-mlm-tlm-xnli15-1024",
      "xlm-mlm-xnli15-1024", "xlm-roberta-base", "xlm-roberta-large", "xlm-roberta-large-finetuned-conll02-dutch",
      "xlm-roberta-large-finetuned-conll02-spanish", "xlm-roberta-large-finetuned-conll03-english",
      "xlm-roberta-large-finetuned-conll03-german", "xlnet-base-cased", "xlnet-large-cased"};
  return ids;
}

}  // namespace

bool is_model_id(const std::string& s) {
  size_t slash = s.find('/');
  if (slash == std::string::npos) return legacy_ids().count(s) > 0;
  if (s.find('/', slash + 1) != std::string::npos) return false;
  return id_part_ok(s.substr(0, slash)) && id_part_ok(s.substr(slash + 1));
}

std::string repo_folder_name(const std::string& id) {
  std::string out = "models--";
  for (char c : id) {
    if (c == '/') out += "--";
    else out += c;
  }
  return out;
}

std::optional<std::string> cached_snapshot(const std::string& id, const HubOptions& opts) {
  const fs::path repo = fs::path(cache_dir(opts)) / repo_folder_name(id);
  const std::string rev = revision_of(opts);
  std::error_code ec;
  std::string commit;
  if (is_commit_hash(rev) && fs::is_directory(repo / "snapshots" / rev, ec)) {
    commit = rev;
  } else {
    if (rev.find("..") != std::string::npos) return std::nullopt;
    commit = trim(read_small_file((repo / "refs" / rev).string()));
    if (!is_commit_hash(commit)) return std::nullopt;
  }
  const fs::path snap = repo / "snapshots" / commit;
  if (!fs::is_directory(snap, ec)) return std::nullopt;
  return snap.string();
}

std::vector<std::string> model_files(const std::vector<std::string>& all) {
  static const std::set<std::string> top = {
      "config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt",
      "special_tokens_map.json", "added_tokens.json", "generation_config.json", "modules.json",
      "sentence_bert_config.json", "config_sentence_transformers.json", "sentencepiece.bpe.model", "spiece.model",
      "src_vocab.txt", "tgt_vocab.txt"};
  auto base = [](const std::string& p) { return p.substr(p.find_last_of('/') + 1); };
  auto dir = [](const std::string& p) {
    size_t s = p.find_last_of('/');
    return s == std::string::npos ? std::string() : p.substr(0, s);
  };
  auto is_weights = [](const std::string& b, const char* stem, const char* ext) {
    const std::string s = stem, e = ext;
    if (b == s + e || b == s + e + ".index.json") return true;
    // shards: model-00001-of-00002.safetensors, pytorch_model-00001-of-00002.bin
    return b.rfind(s + "-", 0) == 0 && b.size() > e.size() && b.compare(b.size() - e.size(), e.size(), e) == 0;
  };
  std::set<std::string> safetensors_dirs;
  for (const auto& p : all)
    if (is_weights(base(p), "model", ".safetensors")) safetensors_dirs.insert(dir(p));
  // sentence-transformers modules live in folders named "<index>_<Name>" (1_Pooling, 2_Dense, 2_Normalize).
  auto module_dir = [](const std::string& d) {
    if (d.empty() || d.find('/') != std::string::npos) return false;
    size_t u = d.find('_');
    if (u == 0 || u == std::string::npos) return false;
    for (size_t i = 0; i < u; ++i)
      if (!std::isdigit((unsigned char)d[i])) return false;
    return true;
  };
  std::vector<std::string> out;
  for (const auto& p : all) {
    const std::string b = base(p), d = dir(p);
    if (!d.empty() && !module_dir(d)) continue;
    bool want = top.count(b) || (b.size() > 4 && b.compare(b.size() - 4, 4, ".spm") == 0) ||
                is_weights(b, "model", ".safetensors") ||
                (is_weights(b, "pytorch_model", ".bin") && !safetensors_dirs.count(d));
    if (want) out.push_back(p);
  }
  return out;
}

DownloadSummary download_model(const std::string& id, const HubOptions& opts) {
  if (!is_model_id(id))
    throw std::invalid_argument("'" + id + "' is not a Hugging Face model id (expected <org>/<name>, e.g. "
                                "sentence-transformers/all-MiniLM-L6-v2, or a name the hub kept without an "
                                "organisation, e.g. bert-base-uncased)");
  Client cl;
  cl.id = id;
  cl.revision = revision_of(opts);
  cl.endpoint = endpoint_of(opts);
  cl.token = token_of(opts);
  cl.opts = opts;
  cl.repo = fs::path(cache_dir(opts)) / repo_folder_name(id);
  if (offline_of(opts))
    throw std::runtime_error("'" + id + "': cannot download while HF_HUB_OFFLINE is set (the cache " +
                             cl.repo.string() + " has no snapshot for revision '" + cl.revision + "')");

  // The file list and the commit the revision points to (snapshot_download's repo_info).
  const std::string api = cl.endpoint + "/api/models/" + id + "/revision/" + quote(cl.revision, "");
  Response info = cl.get_json(api, "");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(info.body);
  } catch (const std::exception& e) {
    throw std::runtime_error("'" + id + "': " + api + " did not answer JSON (" + e.what() + ")");
  }
  const std::string commit = j.contains("sha") && j["sha"].is_string() ? j["sha"].get<std::string>() : "";
  if (!is_commit_hash(commit))
    throw std::runtime_error("'" + id + "': " + api + " gave no 40-hex commit \"sha\"");
  std::vector<std::string> all;
  if (j.contains("siblings") && j["siblings"].is_array())
    for (const auto& s : j["siblings"])
      if (s.is_object() && s.contains("rfilename") && s["rfilename"].is_string()) {
        std::string f = s["rfilename"].get<std::string>();
        // a path that would leave the snapshot folder is never written
        if (f.empty() || f[0] == '/' || f.find("..") != std::string::npos) continue;
        all.push_back(f);
      }
  std::vector<std::string> files;
  if (opts.include.empty()) {
    files = model_files(all);
  } else {
    for (const auto& f : all)
      for (const auto& g : opts.include)
        if (glob_match(g, f)) {
          files.push_back(f);
          break;
        }
  }
  if (files.empty()) {
    std::string names;
    for (size_t i = 0; i < all.size() && i < 20; ++i) names += (i ? ", " : "") + all[i];
    throw std::runtime_error("'" + id + "': no file of revision '" + cl.revision + "' matches " +
                             (opts.include.empty() ? std::string("the files tfm reads") : std::string("--include")) +
                             " (the repository has: " + (names.empty() ? "nothing" : names) + ")");
  }

  DownloadSummary s;
  s.commit = commit;
  for (const auto& f : files) {
    if (cl.download_file(f, commit)) ++s.downloaded;
    else ++s.cached;
  }
  if (cl.revision != commit) {  // refs/<revision>: the commit, no newline (huggingface_hub writes it so)
    const fs::path ref = cl.repo / "refs" / cl.revision;
    std::error_code ec;
    fs::create_directories(ref.parent_path(), ec);
    write_file_atomic(ref.string(), std::string_view(commit));
  }
  s.snapshot = (cl.repo / "snapshots" / commit).string();
  return s;
}

std::string resolve_model(const std::string& path_or_id, const HubOptions& opts) {
  std::error_code ec;
  if (path_or_id.empty() || fs::exists(path_or_id, ec)) return path_or_id;
  // A single name the cache has (huggingface_hub writes models--<name> for one) is an id too.
  const bool cached_name = path_or_id.find('/') == std::string::npos && id_part_ok(path_or_id) &&
                           fs::is_directory(fs::path(cache_dir(opts)) / repo_folder_name(path_or_id), ec);
  if (!is_model_id(path_or_id) && !cached_name) return path_or_id;
  std::optional<std::string> snap = cached_snapshot(path_or_id, opts);
  const bool offline = offline_of(opts);
  if (snap && (offline || !is_model_id(path_or_id) ||
               (fs::exists(fs::path(*snap) / "config.json", ec) && has_weights(*snap))))
    return *snap;
  if (offline)
    throw NotCachedError(path_or_id + ": no such model folder, and the Hugging Face cache " +
                             (fs::path(cache_dir(opts)) / repo_folder_name(path_or_id)).string() +
                             " has no snapshot for revision '" + revision_of(opts) +
                             "' (HF_HUB_OFFLINE is set: run 'tfm download " + path_or_id + "' with network access)");
  try {
    return download_model(path_or_id, opts).snapshot;
  } catch (const std::runtime_error& e) {
    // A mistyped relative folder has the shape of an id too: say both.
    throw std::runtime_error(path_or_id + ": no such model folder; as a Hugging Face model id: " + e.what());
  }
}

}  // namespace tfm::hub

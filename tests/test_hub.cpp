// Hugging Face hub ids (io/hub.h): the huggingface_hub cache layout, written here from its documentation
// (https://huggingface.co/docs/huggingface_hub/guides/manage-cache) rather than by our writer, and downloads from
// a fake hub on loopback (cpp-httplib, port chosen by the kernel) that answers as huggingface.co does: the model
// API's file list, resolve URLs with X-Repo-Commit / ETag, a 302 to another path with X-Linked-Etag /
// X-Linked-Size for LFS files, 401 with X-Error-Code for a gated model, 404 for a missing one, a connection cut
// mid-file and Range requests. Nothing here reaches the internet.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/hub.h"
#include "io/safetensors.h"
#include "run_tfm.h"
#include "test_util.h"
#include "tfm/encoder.h"
#include "tfm/error.h"

namespace fs = std::filesystem;
using tfm::test::fixture;
using tfm::test::slurp;
using tfm::test::spit;
using tfm::test::TempFolder;

namespace {

std::string hex_digest(const EVP_MD* md, const std::string& bytes) {
  unsigned char buf[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), buf, &n, md, nullptr);
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < n; ++i) {
    s += hex[buf[i] >> 4];
    s += hex[buf[i] & 15];
  }
  return s;
}
// The ETag the hub gives a file kept in git: its git blob id, sha1("blob <size>\0" + bytes).
std::string git_blob_sha1(const std::string& bytes) {
  return hex_digest(EVP_sha1(), "blob " + std::to_string(bytes.size()) + std::string(1, '\0') + bytes);
}
std::string sha256(const std::string& bytes) { return hex_digest(EVP_sha256(), bytes); }

// Sets an environment variable for the scope of a test and restores it after.
struct EnvVar {
  std::string name;
  std::optional<std::string> old;
  EnvVar(const std::string& n, const std::optional<std::string>& v) : name(n) {
    if (const char* o = std::getenv(n.c_str())) old = o;
    if (v) ::setenv(n.c_str(), v->c_str(), 1);
    else ::unsetenv(n.c_str());
  }
  ~EnvVar() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

// The sentence-transformers fixture (tests/fixtures/st_mean) as a hub repository; the Normalize module has no
// file, as on the hub (sentence-transformers/all-MiniLM-L6-v2 has no 2_Normalize folder either).
struct RepoFile {
  std::string bytes;
  bool lfs = false;
};
std::map<std::string, RepoFile> st_mean_repo() {
  std::map<std::string, RepoFile> files;
  for (const char* f : {"config.json", "config_sentence_transformers.json", "modules.json", "sentence_bert_config.json",
                        "tokenizer_config.json", "vocab.txt", "1_Pooling/config.json", "sentences.txt"})
    files[f] = {slurp(fixture(std::string("st_mean/") + f)), false};
  files["model.safetensors"] = {slurp(fixture("st_mean/model.safetensors")), true};
  files["expected.safetensors"] = {slurp(fixture("st_mean/expected.safetensors")), true};  // not one tfm reads
  files["README.md"] = {"# st_mean\n", false};
  files["flax_model.msgpack"] = {"not for tfm", true};
  return files;
}

const std::string kMain = "1111111111111111111111111111111111111111";
const std::string kV1 = "2222222222222222222222222222222222222222";

// A fake hub on 127.0.0.1 answering like huggingface.co for the repositories "org/st" (public; branch main and
// tag v1 at different commits) and "org/gated" (401 without "Authorization: Bearer good-token").
struct FakeHub {
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::map<std::string, RepoFile> files = st_mean_repo();
  std::mutex mu;
  std::vector<std::string> ranges;             // Range headers of the CDN requests
  std::map<std::string, int> cdn_gets;         // CDN GETs per sha256
  std::atomic<bool> cut_next_cdn{false};       // the next CDN transfer from offset 0 is cut after half the bytes
  std::atomic<bool> corrupt_cdn{false};        // the CDN sends other bytes than the ETag says
  std::atomic<int> resolve_gets{0};

  std::string base() const { return "http://127.0.0.1:" + std::to_string(port); }

  bool authorized(const std::string& repo, const httplib::Request& req) const {
    return repo != "org/gated" || req.get_header_value("Authorization") == "Bearer good-token";
  }
  static void deny(httplib::Response& res, int status, const char* code, const char* msg) {
    res.status = status;
    res.set_header("X-Error-Code", code);
    res.set_content(std::string("{\"error\":\"") + msg + "\"}", "application/json");
  }
  std::optional<std::string> commit_of(const std::string& rev) const {
    if (rev == "main" || rev == kMain) return kMain;
    if (rev == "v1" || rev == kV1) return kV1;
    return std::nullopt;
  }

  FakeHub() {
    server.Get(R"(/api/models/([^/]+/[^/]+)/revision/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string repo = req.matches[1], rev = req.matches[2];
      if (repo != "org/st" && repo != "org/gated") return deny(res, 404, "RepoNotFound", "Repository not found");
      if (!authorized(repo, req)) return deny(res, 401, "GatedRepo", "Access to model org/gated is restricted");
      auto commit = commit_of(rev);
      if (!commit) return deny(res, 404, "RevisionNotFound", "Invalid rev id");
      nlohmann::json j = {{"id", repo}, {"sha", *commit}, {"siblings", nlohmann::json::array()}};
      for (const auto& [name, f] : files) j["siblings"].push_back({{"rfilename", name}});
      res.set_content(j.dump(), "application/json");
    });
    server.Get(R"(/([^/]+/[^/]+)/resolve/([^/]+)/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string repo = req.matches[1], rev = req.matches[2], name = req.matches[3];
      if (repo != "org/st" && repo != "org/gated") return deny(res, 404, "RepoNotFound", "Repository not found");
      if (!authorized(repo, req)) return deny(res, 401, "GatedRepo", "Access to model org/gated is restricted");
      auto commit = commit_of(rev);
      if (!commit) return deny(res, 404, "RevisionNotFound", "Invalid rev id");
      auto it = files.find(name);
      if (it == files.end()) return deny(res, 404, "EntryNotFound", "Entry not found");
      if (req.method == "GET") ++resolve_gets;
      res.set_header("X-Repo-Commit", *commit);
      const RepoFile& f = it->second;
      if (f.lfs) {  // the pointer's git id as ETag, the content's sha256 as X-Linked-Etag, and a CDN redirect
        const std::string pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:" + sha256(f.bytes) +
                                    "\nsize " + std::to_string(f.bytes.size()) + "\n";
        res.status = 302;
        res.set_header("ETag", "\"" + git_blob_sha1(pointer) + "\"");
        res.set_header("X-Linked-Etag", "\"" + sha256(f.bytes) + "\"");
        res.set_header("X-Linked-Size", std::to_string(f.bytes.size()));
        res.set_header("Location", base() + "/cdn/" + sha256(f.bytes) + "?X-Amz-Signature=abc");
        return;
      }
      res.set_header("ETag", "\"" + git_blob_sha1(f.bytes) + "\"");
      res.set_content(f.bytes, "application/octet-stream");
    });
    server.Get(R"(/cdn/([0-9a-f]{64}))", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string sha = req.matches[1];
      const RepoFile* f = nullptr;
      for (const auto& [name, rf] : files)
        if (sha256(rf.bytes) == sha) f = &rf;
      if (!f) return deny(res, 404, "EntryNotFound", "no such object");
      {
        std::lock_guard<std::mutex> l(mu);
        if (req.has_header("Range")) ranges.push_back(req.get_header_value("Range"));
        ++cdn_gets[sha];
      }
      std::string bytes = f->bytes;
      if (corrupt_cdn) bytes[bytes.size() / 2] ^= 1;
      const bool cut = cut_next_cdn.exchange(false);
      res.set_content_provider(bytes.size(), "application/octet-stream",
                               [bytes, cut](size_t offset, size_t length, httplib::DataSink& sink) {
                                 if (cut && offset == 0) {  // half of the file, then the connection drops
                                   sink.write(bytes.data(), bytes.size() / 2);
                                   return false;
                                 }
                                 sink.write(bytes.data() + offset, std::min<size_t>(length, 16384));
                                 return true;
                               });
    });
    // A name the hub kept without an organisation: redirected to the repository it moved to (here org/st), as
    // huggingface.co answers bert-base-uncased with google-bert/bert-base-uncased.
    server.Get(R"(/api/models/([^/]+)/revision/([^/]+))", [](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] != "bert-base-uncased") return deny(res, 404, "RepoNotFound", "Repository not found");
      res.status = 307;
      res.set_header("Location", "/api/models/org/st/revision/" + std::string(req.matches[2]));
    });
    server.Get(R"(/([^/]+)/resolve/([^/]+)/(.+))", [](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] != "bert-base-uncased") return deny(res, 404, "RepoNotFound", "Repository not found");
      res.status = 307;
      res.set_header("Location", "/org/st/resolve/" + std::string(req.matches[2]) + "/" + std::string(req.matches[3]));
    });
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
    while (!server.is_running()) ::usleep(1000);
  }
  ~FakeHub() {
    server.stop();
    thread.join();
  }
};

tfm::hub::HubOptions options(const FakeHub& hub, const std::string& cache) {
  tfm::hub::HubOptions o;
  o.endpoint = hub.base();
  o.cache_dir = cache;
  o.offline = false;
  o.progress = false;
  o.token = "-";  // no token from the environment or ~/.cache/huggingface/token
  return o;
}

// The embeddings sentence-transformers computed for the fixture (scripts/make_embed_fixtures.py).
void expect_st_mean_embeddings(const std::string& model) {
  tfm::EncoderOptions eo;
  eo.threads = 1;
  const tfm::Encoder enc(model, eo);
  std::vector<std::string> s;
  std::stringstream ss(slurp(fixture("st_mean/sentences.txt")));
  for (std::string line; std::getline(ss, line);) s.push_back(line);
  const tfm::FloatArray got = enc.embed(s);
  const tfm::Tensor want = tfm::SafeTensors::open(fixture("st_mean/expected.safetensors")).get("embeddings");
  ASSERT_EQ(got.numel(), want.numel());
  EXPECT_TRUE(tfm::test::all_close(got.data(), want.f32(), (size_t)got.numel(), 1e-5f));
}

// The tree huggingface_hub writes for `files` of org/st at commit `commit` (refs/<ref> when ref is set).
void write_hf_tree(const std::string& cache, const std::string& commit, const std::string& ref,
                   const std::map<std::string, RepoFile>& files) {
  const fs::path repo = fs::path(cache) / "models--org--st";
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / ".no_exist" / commit);  // what hf_hub_download records for a 404
  spit((repo / ".no_exist" / commit / "added_tokens.json").string(), "");
  if (!ref.empty()) spit((repo / "refs" / ref).string(), commit);  // the hash, no newline
  for (const auto& [name, f] : files) {
    const std::string etag = f.lfs ? sha256(f.bytes) : git_blob_sha1(f.bytes);
    spit((repo / "blobs" / etag).string(), f.bytes);
    const fs::path link = repo / "snapshots" / commit / name;
    fs::create_directories(link.parent_path());
    // snapshots/<commit>/1_Pooling/config.json -> ../../../blobs/<etag>
    std::string rel = "../../";
    for (size_t i = 0; i < name.size(); ++i) rel += name[i] == '/' ? "../" : "";
    fs::create_symlink(rel + "blobs/" + etag, link);
  }
}

}  // namespace

TEST(Hub, ModelIdsAndFolderNames) {
  using tfm::hub::is_model_id;
  EXPECT_TRUE(is_model_id("sentence-transformers/all-MiniLM-L6-v2"));
  EXPECT_TRUE(is_model_id("BAAI/bge-small-en-v1.5"));
  // The names the hub kept without an organisation are ids, as huggingface_hub takes them; another single name
  // is a folder.
  for (const char* legacy : {"bert-base-uncased", "gpt2", "roberta-base", "distilbert-base-uncased", "t5-small"})
    EXPECT_TRUE(is_model_id(legacy)) << legacy;
  EXPECT_FALSE(is_model_id("mymodel"));
  EXPECT_FALSE(is_model_id("out"));
  EXPECT_EQ(tfm::hub::repo_folder_name("gpt2"), "models--gpt2");
  EXPECT_FALSE(is_model_id("/abs/path"));
  EXPECT_FALSE(is_model_id("./org/name"));
  EXPECT_FALSE(is_model_id("a/b/c"));
  EXPECT_FALSE(is_model_id("org/../x"));
  EXPECT_FALSE(is_model_id("org/na--me"));
  EXPECT_FALSE(is_model_id("org/"));
  EXPECT_EQ(tfm::hub::repo_folder_name("BAAI/bge-small-en-v1.5"), "models--BAAI--bge-small-en-v1.5");
}

TEST(Hub, CacheFolderFromTheEnvironment) {
  EnvVar a("HF_HUB_CACHE", std::nullopt), b("HUGGINGFACE_HUB_CACHE", std::nullopt), c("HF_HOME", std::nullopt),
      d("XDG_CACHE_HOME", std::nullopt), h("HOME", "/home/u");
  EXPECT_EQ(tfm::hub::cache_dir(), "/home/u/.cache/huggingface/hub");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(tfm::hub::cache_dir(), "/xdg/huggingface/hub");
  ::setenv("HF_HOME", "~/hf", 1);
  EXPECT_EQ(tfm::hub::cache_dir(), "/home/u/hf/hub");
  ::setenv("HF_HUB_CACHE", "/c", 1);
  EXPECT_EQ(tfm::hub::cache_dir(), "/c");
  tfm::hub::HubOptions o;
  o.cache_dir = "/explicit";
  EXPECT_EQ(tfm::hub::cache_dir(o), "/explicit");
}

TEST(Hub, DefaultFilesAreTheOnesTfmReads) {
  const std::vector<std::string> all = {
      "README.md", ".gitattributes", "config.json", "model.safetensors", "pytorch_model.bin", "tf_model.h5",
      "onnx/model.onnx", "1_Pooling/config.json", "2_Dense/config.json", "2_Dense/pytorch_model.bin",
      "3_Dense/pytorch_model.bin", "vocab.txt", "tokenizer.json", "modules.json", "source.spm", "openvino/x.xml",
      "model-00001-of-00002.safetensors", "model.safetensors.index.json", "expected.safetensors"};
  EXPECT_EQ(tfm::hub::model_files(all),
            (std::vector<std::string>{"config.json", "model.safetensors", "1_Pooling/config.json",
                                      "2_Dense/config.json", "2_Dense/pytorch_model.bin", "3_Dense/pytorch_model.bin",
                                      "vocab.txt", "tokenizer.json", "modules.json", "source.spm",
                                      "model-00001-of-00002.safetensors", "model.safetensors.index.json"}));
}

// A tree written as huggingface_hub documents it is found without any network (HF_HUB_OFFLINE), by branch, tag and
// commit hash, and the Encoder on it gives sentence-transformers' embeddings.
TEST(Hub, FindsTheTreeHuggingfaceHubWrites) {
  TempFolder t;
  const std::string cache = t.path + "/hub";
  auto files = st_mean_repo();
  write_hf_tree(cache, kMain, "main", files);
  write_hf_tree(cache, kV1, "v1", {{"config.json", files["config.json"]}});
  tfm::hub::HubOptions o;
  o.cache_dir = cache;
  o.offline = true;
  const std::string snap = cache + "/models--org--st/snapshots/" + kMain;
  EXPECT_EQ(tfm::hub::resolve_model("org/st", o), snap);
  o.revision = kMain;
  EXPECT_EQ(tfm::hub::resolve_model("org/st", o), snap);
  o.revision = "v1";
  EXPECT_EQ(tfm::hub::resolve_model("org/st", o), cache + "/models--org--st/snapshots/" + kV1);
  o.revision = "v2";
  try {
    tfm::hub::resolve_model("org/st", o);
    ADD_FAILURE() << "no error";
  } catch (const tfm::hub::NotCachedError& e) {
    EXPECT_NE(std::string(e.what()).find("org/st: no such model folder, and the Hugging Face cache " + cache +
                                         "/models--org--st has no snapshot for revision 'v2'"),
              std::string::npos)
        << e.what();
  }
  // A path that exists is a folder, never an id.
  EXPECT_EQ(tfm::hub::resolve_model(fixture("st_mean"), o), fixture("st_mean"));

  EnvVar c("HF_HUB_CACHE", cache), off("HF_HUB_OFFLINE", "1");
  expect_st_mean_embeddings("org/st");
  EXPECT_THROW(tfm::Encoder("org/absent"), tfm::FileNotFoundError);
}

// tfm download against the fake hub: the default file selection, the 302 to the CDN with X-Linked-Etag, a cut
// connection resumed with Range, and the tree has huggingface_hub's shape.
TEST(Hub, DownloadsIntoTheSameLayout) {
  TempFolder t;
  FakeHub hub;
  const std::string cache = t.path + "/hub";
  hub.cut_next_cdn = true;
  tfm::hub::DownloadSummary s = tfm::hub::download_model("org/st", options(hub, cache));
  const fs::path repo = fs::path(cache) / "models--org--st";
  EXPECT_EQ(s.commit, kMain);
  EXPECT_EQ(s.snapshot, (repo / "snapshots" / kMain).string());
  EXPECT_EQ(s.downloaded, 8);
  // refs/main holds the commit without a newline, as huggingface_hub writes it.
  EXPECT_EQ(slurp((repo / "refs/main").string()), kMain);
  // Each selected file is a relative symlink into blobs/, named by the ETag (git sha1, or sha256 for LFS).
  std::vector<std::string> got;
  for (const auto& e : fs::recursive_directory_iterator(repo / "snapshots" / kMain))
    if (!fs::is_directory(e.symlink_status())) got.push_back(e.path().lexically_relative(repo / "snapshots" / kMain).string());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"1_Pooling/config.json", "config.json", "config_sentence_transformers.json",
                                           "model.safetensors", "modules.json", "sentence_bert_config.json",
                                           "tokenizer_config.json", "vocab.txt"}));
  for (const std::string& name : got) {
    const fs::path link = repo / "snapshots" / kMain / name;
    ASSERT_TRUE(fs::is_symlink(link)) << name;
    const RepoFile& f = hub.files[name];
    const std::string etag = f.lfs ? sha256(f.bytes) : git_blob_sha1(f.bytes);
    const std::string depth = name.find('/') == std::string::npos ? "../../" : "../../../";
    EXPECT_EQ(fs::read_symlink(link).string(), depth + "blobs/" + etag) << name;
    EXPECT_EQ(slurp(link.string()), f.bytes) << name;
  }
  size_t blobs = 0;
  for (const auto& e : fs::directory_iterator(repo / "blobs")) {
    EXPECT_EQ(e.path().extension(), "") << e.path();  // no .incomplete left
    ++blobs;
  }
  EXPECT_EQ(blobs, 8u);
  // The weights came over two CDN requests: the cut one, then a Range request from where it stopped.
  const std::string wsha = sha256(hub.files["model.safetensors"].bytes);
  EXPECT_EQ(hub.cdn_gets[wsha], 2);
  ASSERT_EQ(hub.ranges.size(), 1u);
  EXPECT_EQ(hub.ranges[0], "bytes=" + std::to_string(hub.files["model.safetensors"].bytes.size() / 2) + "-");

  // A second download fetches nothing; the Encoder on the id gives sentence-transformers' embeddings offline.
  const int before = hub.resolve_gets;
  s = tfm::hub::download_model("org/st", options(hub, cache));
  EXPECT_EQ(s.downloaded, 0);
  EXPECT_EQ(s.cached, 8);
  EXPECT_EQ(hub.resolve_gets, before);
  EnvVar c("HF_HUB_CACHE", cache), off("HF_HUB_OFFLINE", "1");
  expect_st_mean_embeddings("org/st");
}

// bert-base-uncased (a name without an organisation) downloads through the hub's redirect into
// models--bert-base-uncased, as huggingface_hub stores it, and resolves from there; a single name that is neither
// such a name nor in the cache stays a folder name and reaches no server.
TEST(Hub, LegacyIdsWithoutAnOrganisation) {
  TempFolder t;
  FakeHub hub;
  const std::string cache = t.path + "/hub";
  tfm::hub::DownloadSummary s = tfm::hub::download_model("bert-base-uncased", options(hub, cache));
  const fs::path repo = fs::path(cache) / "models--bert-base-uncased";
  EXPECT_EQ(s.commit, kMain);
  EXPECT_EQ(s.snapshot, (repo / "snapshots" / kMain).string());
  EXPECT_EQ(s.downloaded, 8);
  EXPECT_EQ(slurp((repo / "refs/main").string()), kMain);
  EXPECT_EQ(tfm::hub::resolve_model("bert-base-uncased", options(hub, cache)), s.snapshot);
  expect_st_mean_embeddings(s.snapshot);
  const int before = hub.resolve_gets;
  EXPECT_EQ(tfm::hub::resolve_model("mymodel", options(hub, cache)), "mymodel");
  EXPECT_EQ(hub.resolve_gets, before);
  // A single name the cache holds (huggingface_hub wrote models--mymodel) resolves offline.
  fs::create_directories(fs::path(cache) / "models--mymodel");
  fs::copy(repo, fs::path(cache) / "models--mymodel", fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  EnvVar off("HF_HUB_OFFLINE", "1");
  tfm::hub::HubOptions o = options(hub, cache);
  o.offline = true;
  EXPECT_EQ(tfm::hub::resolve_model("mymodel", o), (fs::path(cache) / "models--mymodel/snapshots" / kMain).string());
}

TEST(Hub, RevisionIncludeAndBlobsShared) {
  TempFolder t;
  FakeHub hub;
  const std::string cache = t.path + "/hub";
  auto o = options(hub, cache);
  o.revision = "v1";
  o.include = {"*.json"};
  tfm::hub::DownloadSummary s = tfm::hub::download_model("org/st", o);
  const fs::path repo = fs::path(cache) / "models--org--st";
  EXPECT_EQ(s.snapshot, (repo / "snapshots" / kV1).string());
  EXPECT_EQ(slurp((repo / "refs/v1").string()), kV1);
  EXPECT_FALSE(fs::exists(repo / "refs/main"));
  EXPECT_TRUE(fs::exists(repo / "snapshots" / kV1 / "1_Pooling/config.json"));  // '*' matches '/' as in fnmatch
  EXPECT_FALSE(fs::exists(repo / "snapshots" / kV1 / "vocab.txt"));
  EXPECT_EQ(s.downloaded, 6);
  // A commit hash as revision writes no ref; blobs already present are linked, not fetched again.
  o.revision = kMain;
  o.include = {"config.json", "vocab.txt"};
  s = tfm::hub::download_model("org/st", o);
  EXPECT_EQ(s.downloaded, 1);  // vocab.txt; config.json's blob is shared with v1
  EXPECT_EQ(s.cached, 1);
  EXPECT_FALSE(fs::exists(repo / "refs" / kMain));
  EXPECT_EQ(slurp((repo / "snapshots" / kMain / "config.json").string()), hub.files["config.json"].bytes);
  // A revision the hub does not have.
  o.revision = "nope";
  try {
    tfm::hub::download_model("org/st", o);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'org/st': no such revision 'nope' (HTTP 404"), std::string::npos) << e.what();
  }
  o.revision = "";
  o.include = {"*.bin"};
  try {
    tfm::hub::download_model("org/st", o);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no file of revision 'main' matches --include"), std::string::npos) << e.what();
  }
}

TEST(Hub, ErrorsNameTheModel) {
  TempFolder t;
  FakeHub hub;
  const std::string cache = t.path + "/hub";
  auto expect_error = [&](const std::string& id, const tfm::hub::HubOptions& o, const std::string& needle) {
    try {
      tfm::hub::download_model(id, o);
      ADD_FAILURE() << "no error for " << id;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto o = options(hub, cache);
  expect_error("org/gated", o, "'org/gated': the model is gated (HTTP 401 from " + hub.base() +
                                   "/api/models/org/gated/revision/main); accept its terms on the hub and set HF_TOKEN");
  expect_error("org/missing", o, "'org/missing': no such model, or it is private or gated (HTTP 404");
  // With the token the gated model downloads (the header reaches the resolve endpoint too).
  o.token = "good-token";
  o.include = {"config.json"};
  EXPECT_EQ(tfm::hub::download_model("org/gated", o).downloaded, 1);
  // Bytes that do not hash to the ETag are refused and nothing is left in blobs/.
  hub.corrupt_cdn = true;
  auto c = options(hub, cache);
  c.include = {"model.safetensors"};
  expect_error("org/st", c, "model.safetensors: sha256 ");
  for (const auto& e : fs::directory_iterator(fs::path(cache) / "models--org--st" / "blobs"))
    ADD_FAILURE() << "left behind: " << e.path();
  hub.corrupt_cdn = false;
  // No server at all, and offline mode.
  auto n = options(hub, cache);
  n.endpoint = "http://127.0.0.1:1";
  expect_error("org/st", n, "cannot reach http://127.0.0.1:1/api/models/org/st/revision/main");
  expect_error("org/st", n, "no network?");
  n.offline = true;
  expect_error("org/st", n, "'org/st': cannot download while HF_HUB_OFFLINE is set");
  EXPECT_THROW(tfm::hub::download_model("not-an-id", n), std::invalid_argument);
}

// The CLI: tfm download prints the snapshot; --model takes the id (downloading it when missing) with --revision.
TEST(Hub, CliDownloadAndModelIds) {
  TempFolder t;
  FakeHub hub;
  const std::string cache = t.path + "/hub";
  tfm::test::RunOptions ro;
  ro.env = {"HF_ENDPOINT=" + hub.base(), "HF_HUB_CACHE=" + cache, "HF_TOKEN=", "HF_HUB_OFFLINE="};
  spit(t.path + "/in.txt", "hello world\n");
  // embed on an id that is not cached downloads it first.
  tfm::test::TfmRun r = tfm::test::run_tfm_with(t.path, {"embed", "--model", "org/st", "--input", t.path + "/in.txt"}, "", ro);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(fs::exists(cache + "/models--org--st/snapshots/" + kMain + "/model.safetensors"));
  const std::string first = r.out;
  // The same with the folder gives the same output.
  r = tfm::test::run_tfm_with(t.path, {"embed", "--model", fixture("st_mean"), "--input", t.path + "/in.txt"}, "", ro);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, first);
  r = tfm::test::run_tfm_with(t.path, {"download", "org/st", "--revision", "v1", "--include", "*.json", "--quiet"}, "", ro);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, cache + "/models--org--st/snapshots/" + kV1 + "\n");
  // Offline: a cached revision works, a missing one is a one-line error naming the id and the cache.
  ro.env.back() = "HF_HUB_OFFLINE=1";
  r = tfm::test::run_tfm_with(t.path, {"tokenize", "--model", "org/st", "hello"}, "", ro);
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  r = tfm::test::run_tfm_with(t.path, {"embed", "--model", "org/st", "--revision", "v9", "--input", t.path + "/in.txt"}, "", ro);
  tfm::test::expect_one_line_error(r, "org/st: no such model folder, and the Hugging Face cache " + cache +
                                          "/models--org--st has no snapshot for revision 'v9'");
  ro.env.back() = "HF_HUB_OFFLINE=";
  r = tfm::test::run_tfm_with(t.path, {"download", "org/gated"}, "", ro);
  tfm::test::expect_one_line_error(r, "the model is gated");
}

// ---- a config that does not match its checkpoint (models/checkpoint_weights.h check_all_used) ----

namespace {
// fixtures/bert with its config.json edited by `edit` (the weights linked, not copied).
std::string bert_with_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  tfm::test::link_folder(fixture("bert"), dir, {{"config.json", ""}});
  nlohmann::json j = nlohmann::json::parse(slurp(fixture("bert/config.json")));
  edit(j);
  spit(dir + "/config.json", j.dump(2));
  return dir;
}
std::string load_error(const std::string& dir) {
  try {
    tfm::EncoderOptions o;
    o.threads = 1;
    tfm::Encoder e(dir, o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(CheckpointMatch, ConfigAndCheckpointMustAgree) {
  TempFolder t;
  // One layer fewer than the checkpoint: layer 1's tensors are named instead of running a smaller model.
  std::string msg = load_error(bert_with_config(t.path + "/fewer", [](nlohmann::json& j) { j["num_hidden_layers"] = 1; }));
  EXPECT_NE(msg.find("model.safetensors: 16 tensors are not used by the model " + t.path +
                     "/fewer/config.json describes (do num_hidden_layers and the architecture match the checkpoint?): "
                     "encoder.layer.1.attention.output.LayerNorm.bias, "),
            std::string::npos)
      << msg;
  // One layer more: the first missing tensor is named.
  msg = load_error(bert_with_config(t.path + "/more", [](nlohmann::json& j) { j["num_hidden_layers"] = 3; }));
  EXPECT_NE(msg.find("missing tensor 'encoder.layer.2."), std::string::npos) << msg;
  // Another width: the tensor and both shapes.
  msg = load_error(bert_with_config(t.path + "/wide", [](nlohmann::json& j) { j["intermediate_size"] = 128; }));
  EXPECT_NE(msg.find("encoder.layer.0.intermediate.dense.weight' has shape [64, 32], config expects [128, 32]"),
            std::string::npos)
      << msg;
  // hidden_act: null is not read as the default.
  msg = load_error(bert_with_config(t.path + "/nullact", [](nlohmann::json& j) { j["hidden_act"] = nullptr; }));
  EXPECT_NE(msg.find("key 'hidden_act' is null"), std::string::npos) << msg;
  // An extra tensor that is neither a buffer nor another task's head.
  tfm::Tensor x = tfm::Tensor::zeros({2});
  tfm::SafeTensors st = tfm::SafeTensors::open(fixture("bert/model.safetensors"));
  std::vector<std::pair<std::string, tfm::Tensor>> ts;
  for (const auto& n : st.names()) ts.emplace_back(n, st.get(n));
  ts.emplace_back("embeddings.position_ids", tfm::Tensor::zeros({20}));  // a buffer: skipped, as transformers does
  ts.emplace_back("classifier.weight", tfm::Tensor::zeros({3, 32}));     // another task's head: skipped
  ts.emplace_back("adapter.down.weight", x);
  fs::create_directories(t.path + "/extra");
  spit(t.path + "/extra/config.json", slurp(fixture("bert/config.json")));
  tfm::save_safetensors(t.path + "/extra/model.safetensors", ts);
  msg = load_error(t.path + "/extra");
  EXPECT_NE(msg.find("1 tensor is not used by the model"), std::string::npos) << msg;
  EXPECT_NE(msg.find(": adapter.down.weight"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("position_ids"), std::string::npos) << msg;
}

TEST(CheckpointMatch, HeadFoldersStillLoad) {
  // A sequence-classification folder as a plain encoder (its classifier is another task's head), and the
  // sentence-transformers fixtures, load without complaint.
  for (const char* f : {"heads_seqcls", "heads_mlm", "heads_tokcls", "st_mean", "st_multi", "roberta",
                        "family_heads/distilbert", "family_heads/distilbert_mlm", "family_heads/distilbert_seqcls",
                        "family_heads/roberta_mlm", "family_heads/roberta_tokcls", "family_heads/xlmr_cross"}) {
    const std::string msg = load_error(fixture(f));
    EXPECT_EQ(msg, "(no error)") << f;
  }
}

// ---- tfm encode --init random --save ----

TEST(EncodeSave, RandomModelReloadsWithTheSameOutputs) {
  TempFolder t;
  tfm::test::link_folder(fixture("heads_seqcls"), t.path + "/src");
  const std::string out = t.path + "/saved";
  tfm::test::TfmRun r = tfm::test::run_tfm_in(
      t.path, {"encode", "--model", t.path + "/src", "--init", "random", "--seed", "7", "--save", out, "--output",
               t.path + "/a.npy", "hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("saved the model to " + out), std::string::npos) << r.out;
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt"}) EXPECT_TRUE(fs::is_regular_file(out + "/" + f)) << f;
  for (const auto& e : fs::directory_iterator(t.path)) EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos);
  r = tfm::test::run_tfm_in(t.path, {"encode", "--model", out, "--output", t.path + "/b.npy", "hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::string a = slurp(t.path + "/a.npy"), b = slurp(t.path + "/b.npy");
  EXPECT_GT(a.size(), 128u);
  EXPECT_EQ(a, b);
  // Another seed gives other weights (the saved file is not some fixed model).
  r = tfm::test::run_tfm_in(t.path, {"encode", "--model", t.path + "/src", "--init", "random", "--seed", "8",
                                     "--output", t.path + "/c.npy", "hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(slurp(t.path + "/c.npy"), a);
  // A folder that is not empty is refused before anything runs; --save without --init random too.
  r = tfm::test::run_tfm_in(t.path, {"encode", "--model", t.path + "/src", "--init", "random", "--save", out, "x"});
  tfm::test::expect_one_line_error(r, "--save: " + out + " exists and is not an empty folder; nothing written");
  r = tfm::test::run_tfm_in(t.path, {"encode", "--model", out, "--save", t.path + "/again", "x"});
  tfm::test::expect_one_line_error(r, "--save writes the model --init random builds");
  EXPECT_FALSE(fs::exists(t.path + "/again"));
}

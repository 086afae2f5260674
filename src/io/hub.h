// Hugging Face hub model ids: the local cache huggingface_hub keeps, and downloads into it over the hub's HTTP API
// (libcurl).
//
// The cache is the one huggingface_hub (file_download.py, constants.py) reads and writes, so a model downloaded by
// either is found by the other:
//   <cache>/models--<org>--<name>/refs/<revision>            the commit hash the branch or tag pointed to (no newline)
//   <cache>/models--<org>--<name>/blobs/<etag>               file contents, named by ETag: the git blob sha1, or for
//                                                            LFS files (weights) their sha256
//   <cache>/models--<org>--<name>/snapshots/<commit>/<file>  relative symlink to ../../blobs/<etag>
// <cache> is $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
// else ~/.cache/huggingface/hub (a leading ~ is expanded, as os.path.expanduser does).
//
// Downloads (download_model) follow snapshot_download: GET <endpoint>/api/models/<id>/revision/<revision> lists the
// files and the commit; each selected file is fetched from <endpoint>/<id>/resolve/<commit>/<file>: a HEAD request
// (relative redirects followed, a redirect to another host — the CDN for LFS files — is where the bytes come from)
// gives X-Repo-Commit, X-Linked-Etag (LFS) or ETag, X-Linked-Size or Content-Length; the bytes go to
// blobs/<etag>.incomplete, a cut connection resumes with a Range request, the size (and for LFS files the sha256)
// is checked, and only then is the file renamed onto blobs/<etag> and linked from the snapshot.
#pragma once
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tfm::hub {

// resolve_model's error for a model id that is neither a folder nor cached while offline (the API layer turns it
// into tfm::FileNotFoundError).
struct NotCachedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Settings of the hub client. Empty strings / nullopt mean "as huggingface_hub reads them from the environment":
// HF_HUB_CACHE / HF_HOME (cache_dir), HF_ENDPOINT (endpoint, default https://huggingface.co), HF_TOKEN or the
// token file $HF_TOKEN_PATH / $HF_HOME/token (token), HF_HUB_OFFLINE=1 (offline).
struct HubOptions {
  std::string revision;   // branch, tag or 40-hex commit hash; "" = "main"
  std::string cache_dir;  // "" = the environment's (see above)
  std::string endpoint;   // "" = $HF_ENDPOINT, else https://huggingface.co (a mirror or a test server)
  std::string token;      // "" = $HF_TOKEN / the token file; sent as "Authorization: Bearer <token>"
  std::optional<bool> offline;  // nullopt = HF_HUB_OFFLINE (1/ON/YES/TRUE); true: the cache only, no network
  // fnmatch globs on repository paths ("*.json", "1_Pooling/*"); empty = the files tfm reads (model_files()).
  std::vector<std::string> include;
  bool progress = true;  // a progress bar per file on stderr (a line per 10% when stderr is not a terminal)
  long connect_timeout_s = 20;
};

// The cache folder the options name (see the file comment). Never empty.
std::string cache_dir(const HubOptions& opts = {});
// True when `s` has the shape of a hub model id: "<org>/<name>", each part of [A-Za-z0-9._-], not starting with
// '.' or '-', at most 96 characters each (huggingface_hub's validate_repo_id), or one of the names the hub kept
// without an organisation (bert-base-uncased, gpt2, roberta-base, distilbert-base-uncased, t5-small, ...), which
// it still answers with a redirect. Absolute and ./ paths never are.
bool is_model_id(const std::string& s);
// "org/name" -> "models--org--name", "gpt2" -> "models--gpt2" (huggingface_hub's repo_folder_name).
std::string repo_folder_name(const std::string& id);
// The snapshot folder of `id` at opts.revision in the cache, or nullopt when the cache has none: a 40-hex
// revision names snapshots/<revision> directly, anything else is looked up in refs/<revision>.
std::optional<std::string> cached_snapshot(const std::string& id, const HubOptions& opts = {});

// True for the repository paths tfm reads when no include globs are given: config.json, the weights
// (model.safetensors, its .index.json and shards; pytorch_model.bin likewise, when the same folder has no
// safetensors), tokenizer.json, tokenizer_config.json, vocab.txt, vocab.json, merges.txt, special_tokens_map.json,
// *.spm, sentencepiece models, src_vocab.txt / tgt_vocab.txt, generation_config.json, the sentence-transformers
// files (modules.json, sentence_bert_config.json, config_sentence_transformers.json) and their module folders
// ("1_Pooling/config.json", "2_Dense/model.safetensors", ...). `all` is every file of the repository.
std::vector<std::string> model_files(const std::vector<std::string>& all);

struct DownloadSummary {
  std::string snapshot;  // <cache>/models--org--name/snapshots/<commit>
  std::string commit;    // 40-hex commit the revision resolved to
  int downloaded = 0;    // files fetched over the network
  int cached = 0;        // files already in the snapshot or in blobs/
};

// Downloads the selected files of `id` at opts.revision into the cache (see the file comment) and writes
// refs/<revision> when the revision is not the commit hash itself. Files already in the snapshot are not
// fetched again. Throws std::runtime_error naming the id (and the file) when: HF_HUB_OFFLINE is set; the host
// cannot be reached ("no network?"); the hub answers 401/403 (gated or private: set HF_TOKEN), 404 (no such model,
// revision or file); no file matches the include globs; a transfer fails after its retries; a size or sha256 does
// not match; the cache cannot be written. std::invalid_argument when `id` is not a model id.
DownloadSummary download_model(const std::string& id, const HubOptions& opts = {});

// What every command does with a --model value: an existing path is returned unchanged; a model id (or a single
// name the cache has, as huggingface_hub's models--<name>) resolves to its
// cached snapshot (used as is when it has config.json and weights, or when offline), else it is downloaded with
// download_model. Anything else is returned unchanged (the caller reports the missing folder). Throws
// NotCachedError naming the id and the cache folder when offline and the id is not cached; download_model's errors
// as std::runtime_error "<id>: no such model folder; as a Hugging Face model id: <error>".
std::string resolve_model(const std::string& path_or_id, const HubOptions& opts = {});

}  // namespace tfm::hub

// Checksummed HTTP(S) downloads (libcurl) and the one-member zip extraction that fra-eng needs (zlib).
//
// download_file writes DIR/filename.part, hashes the bytes as they arrive (OpenSSL EVP), checks the digest
// against the expected one and only then renames the .part onto DIR/filename, so DIR/filename is either absent,
// the previous file, or a complete file with the expected checksum; never a truncated or corrupt one.
#pragma once
#include <cstdint>
#include <string>

namespace tfm {

// One file of a dataset. At least one of sha256 / sha1 must be set (lowercase or uppercase hex); when both are
// set both are checked.
struct RemoteFile {
  std::string url;       // full http(s) URL, e.g. "https://raw.githubusercontent.com/.../train.en.gz"
  std::string filename;  // name under the target folder, e.g. "train.en.gz" (no '/')
  std::string sha256;    // expected SHA-256, 64 hex digits, or empty
  std::string sha1;      // expected SHA-1, 40 hex digits, or empty (d2l's DATA_HUB publishes SHA-1 only)
};

struct DownloadOptions {
  // Mirror / test server: when non-empty, the URL becomes base_url + "/" + the last path component of
  // RemoteFile::url (scheme, host and path prefix are replaced; a trailing '/' on base_url is ignored).
  // A base_url without "://" is a local folder and a file:// URL a local path: the files are copied from there
  // (and checksum-verified the same way).
  // The library does not read the environment; the CLI fills this from --base-url or TFM_DOWNLOAD_BASE_URL.
  std::string base_url;
  long connect_timeout_s = 20;     // DNS + TCP + TLS handshake, seconds
  long low_speed_limit_bps = 100;  // abort when slower than this many bytes/s ...
  long low_speed_time_s = 60;      // ... for this many seconds in a row (a stalled server)
  bool progress = true;            // progress on stderr: a bar when stderr is a tty, else a line per 10%
};

enum class DownloadStatus { downloaded, already_present };

// The URL download_file fetches for `file` under `opts` (applies base_url).
std::string resolve_url(const RemoteFile& file, const DownloadOptions& opts);

// Downloads `file` to dir/file.filename (creating `dir` if needed). Follows redirects (at most 10).
// If dir/filename already exists with the expected checksum nothing is fetched and already_present is returned
// ("<file>: already present" is printed to stderr when opts.progress); a file with another checksum is
// replaced.
// Throws std::runtime_error naming the URL when: the host cannot be resolved ("could not resolve host ...: the
// network may be unreachable"), the connection fails or times out, the server answers HTTP >= 400 (the message
// names the status), the connection closes before Content-Length bytes arrived; naming the file, the expected
// and the actual digest when the checksum does not match; naming the path when the folder or file cannot be
// written. std::invalid_argument when `file` has no checksum, a malformed one, or a filename with '/'.
// A local mirror file that cannot be read: std::runtime_error "cannot read '<path>' (local mirror): <reason>".
// On every error dir/filename.part is removed and dir/filename is left as it was.
DownloadStatus download_file(const RemoteFile& file, const std::string& dir, const DownloadOptions& opts = {});

// Lowercase hex digests of a file's bytes (OpenSSL EVP_Digest*). Throw std::runtime_error naming the path when
// it cannot be read.
std::string sha256_file(const std::string& path);
std::string sha1_file(const std::string& path);

// Extracts the member named `member` (exact path inside the archive, e.g. "fra-eng/fra.txt") of the zip file
// `zip_path` to `out_path`, atomically. Supports the two methods zip writers use for plain files: stored (0) and
// deflate (8, inflated with zlib as raw deflate, windowBits -15); the CRC-32 and size recorded in the central
// directory are checked. Not supported (std::runtime_error naming the archive): ZIP64, encryption, other
// methods, multi-disk archives. Throws std::runtime_error naming the archive and member when the member is
// missing (listing the members present) or the archive is truncated/corrupt.
void extract_zip_member(const std::string& zip_path, const std::string& member, const std::string& out_path);

}  // namespace tfm

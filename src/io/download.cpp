#include "io/download.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "io/atomic_file.h"
#include "io/curl_library.h"

namespace tfm {

namespace {

std::runtime_error sys_error(const std::string& what, int err) {
  return std::runtime_error(what + ": " + std::strerror(err));
}

// ---- digests (OpenSSL EVP) ----

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

MdCtx new_digest(const EVP_MD* md) {
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1)
    throw std::runtime_error(std::string("OpenSSL: cannot initialise digest ") + EVP_MD_get0_name(md));
  return ctx;
}

std::string finish_digest(EVP_MD_CTX* ctx) {
  unsigned char buf[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx, buf, &n) != 1) throw std::runtime_error("OpenSSL: EVP_DigestFinal_ex failed");
  static const char* hex = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (unsigned int i = 0; i < n; ++i) {
    s[2 * i] = hex[buf[i] >> 4];
    s[2 * i + 1] = hex[buf[i] & 15];
  }
  return s;
}

std::string file_digest(const std::string& path, const EVP_MD* md) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw sys_error("cannot read '" + path + "'", errno);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> guard(f, std::fclose);
  MdCtx ctx = new_digest(md);
  std::vector<char> buf(1 << 16);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) EVP_DigestUpdate(ctx.get(), buf.data(), n);
  if (std::ferror(f)) throw sys_error("cannot read '" + path + "'", errno);
  return finish_digest(ctx.get());
}

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'F') c = char(c - 'A' + 'a');
  return s;
}

void check_hex(const std::string& filename, const char* algo, const std::string& hex, size_t digits) {
  bool ok = hex.size() == digits;
  for (char c : hex) ok = ok && std::isxdigit((unsigned char)c);
  if (!ok)
    throw std::invalid_argument(filename + ": expected " + algo + " must be " + std::to_string(digits) +
                                " hex digits, got '" + hex + "'");
}

// ---- small helpers ----

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string host_of(const std::string& url) {
  size_t b = url.find("://");
  b = b == std::string::npos ? 0 : b + 3;
  size_t e = url.find_first_of(":/?#", b);
  return url.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

std::string human_bytes(curl_off_t n) {
  char buf[32];
  if (n < 1024) std::snprintf(buf, sizeof buf, "%lld B", (long long)n);
  else if (n < 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", n / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.1f MiB", n / (1024.0 * 1024.0));
  return buf;
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // the rename happened; durability of the folder entry is best effort here
  ::fsync(fd);
  ::close(fd);
}

// ---- transfer state ----

struct Transfer {
  std::string filename;
  std::FILE* out = nullptr;
  MdCtx sha256, sha1;
  curl_off_t received = 0;
  int write_errno = 0;
  // progress
  bool progress = false, tty = false;
  CURL* curl = nullptr;
  int last_decile = 0;            // non-tty: last 10% step printed (0%: nothing to report)
  curl_off_t last_unknown_mib = 0;  // non-tty, unknown size: last 10 MiB step printed
  int last_permille = -1;         // tty: last bar state drawn
  bool bar_drawn = false;

  void report() {
    curl_off_t total = -1;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &total);
    if (tty) {
      int permille = total > 0 ? int(received * 1000 / total) : int((received >> 16) % 1000);
      if (permille == last_permille) return;
      last_permille = permille;
      if (total > 0) {
        const int width = 30;
        int fill = int(received * width / total);
        std::string bar(size_t(fill), '#');
        bar.resize(width, '.');
        std::fprintf(stderr, "\r%s [%s] %3d%% %s / %s   ", filename.c_str(), bar.c_str(), permille / 10,
                     human_bytes(received).c_str(), human_bytes(total).c_str());
      } else {
        std::fprintf(stderr, "\r%s %s   ", filename.c_str(), human_bytes(received).c_str());
      }
      bar_drawn = true;
    } else if (total > 0) {
      int decile = int(received * 10 / total);
      if (decile <= last_decile) return;
      last_decile = decile;
      std::fprintf(stderr, "%s: %d%% (%s / %s)\n", filename.c_str(), decile * 10, human_bytes(received).c_str(),
                   human_bytes(total).c_str());
    } else {
      curl_off_t step = received / (10 << 20);
      if (step <= last_unknown_mib) return;
      last_unknown_mib = step;
      std::fprintf(stderr, "%s: %s\n", filename.c_str(), human_bytes(received).c_str());
    }
  }
  void end_progress() {
    if (bar_drawn) std::fputc('\n', stderr);
    bar_drawn = false;
  }
};

size_t on_data(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * nmemb;
  if (n == 0) return 0;
  if (std::fwrite(data, 1, n, t->out) != n) {
    t->write_errno = errno ? errno : EIO;
    return 0;  // makes curl fail with CURLE_WRITE_ERROR
  }
  EVP_DigestUpdate(t->sha256.get(), data, n);
  EVP_DigestUpdate(t->sha1.get(), data, n);
  t->received += curl_off_t(n);
  if (t->progress) t->report();
  return n;
}

// Removes the .part file unless disarmed.
struct PartGuard {
  std::string path;
  std::FILE* f = nullptr;
  bool armed = true;
  ~PartGuard() {
    if (f) std::fclose(f);
    if (armed) std::remove(path.c_str());
  }
};

// Runs the transfer of `url` into t.out; throws the error message the header documents.
void fetch(const std::string& url, Transfer& t, const DownloadOptions& opts) {
  std::unique_ptr<CURL, CurlFree> curl = curl_easy_handle();
  char errbuf[CURL_ERROR_SIZE] = {0};
  CURL* c = curl.get();
  t.curl = c;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);  // HTTP >= 400 -> CURLE_HTTP_RETURNED_ERROR, body not written
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, opts.connect_timeout_s);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, opts.low_speed_limit_bps);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, opts.low_speed_time_s);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // thread-safe timeouts
  curl_easy_setopt(c, CURLOPT_USERAGENT, "transformer.cpp-tfm/1");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);

  CURLcode rc = curl_easy_perform(c);
  t.end_progress();
  std::string detail = errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  switch (rc) {
    case CURLE_OK:
      break;
    case CURLE_HTTP_RETURNED_ERROR:
      throw std::runtime_error("download of " + url + " failed: HTTP status " + std::to_string(status));
    case CURLE_COULDNT_RESOLVE_HOST:
      throw std::runtime_error("could not resolve host '" + host_of(url) + "' (" + url +
                               "): the network may be unreachable");
    case CURLE_COULDNT_CONNECT:
      throw std::runtime_error("could not connect to " + url + ": " + detail);
    case CURLE_OPERATION_TIMEDOUT:
      throw std::runtime_error("download of " + url + " timed out: " + detail);
    case CURLE_PARTIAL_FILE:
      throw std::runtime_error("download of " + url + " was cut off after " + std::to_string(t.received) +
                               " bytes (connection closed early): " + detail);
    case CURLE_WRITE_ERROR:
      if (t.write_errno) throw sys_error("cannot write '" + t.filename + ".part'", t.write_errno);
      [[fallthrough]];
    default:
      throw std::runtime_error("download of " + url + " failed: " + detail);
  }
  // FAILONERROR covers HTTP >= 400; anything else that is not a success (e.g. a 3xx without Location) is an error.
  if (url.rfind("http", 0) == 0 && (status < 200 || status >= 300))
    throw std::runtime_error("download of " + url + " failed: HTTP status " + std::to_string(status));
}

// ---- local mirror ----

// A mirror URL without a scheme is a local folder; file:// URLs name local files too.
bool is_local_url(const std::string& url) {
  return url.rfind("file://", 0) == 0 || url.find("://") == std::string::npos;
}

// file:///a/b%20c -> /a/b c (also file://localhost/...); a plain path is returned as is.
std::string local_path_of(const std::string& url) {
  if (url.rfind("file://", 0) != 0) return url;
  std::string rest = url.substr(7);
  if (rest.rfind("localhost/", 0) == 0) rest = rest.substr(9);
  if (rest.empty() || rest[0] != '/')
    throw std::invalid_argument("mirror URL '" + url + "': expected file:///absolute/path (a host is not supported)");
  std::string out;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == '%' && i + 2 < rest.size() && std::isxdigit((unsigned char)rest[i + 1]) &&
        std::isxdigit((unsigned char)rest[i + 2])) {
      out += char(std::stoi(rest.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += rest[i];
    }
  }
  return out;
}

// Copies the mirror file `path` into t.out, hashing as on a network transfer.
void fetch_local(const std::string& path, Transfer& t) {
  std::FILE* in = std::fopen(path.c_str(), "rb");
  if (!in) throw sys_error("cannot read '" + path + "' (local mirror)", errno);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> guard(in, std::fclose);
  std::vector<char> buf(1 << 16);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), in)) > 0) {
    if (std::fwrite(buf.data(), 1, n, t.out) != n) throw sys_error("cannot write '" + t.filename + ".part'", errno);
    EVP_DigestUpdate(t.sha256.get(), buf.data(), n);
    EVP_DigestUpdate(t.sha1.get(), buf.data(), n);
    t.received += curl_off_t(n);
  }
  if (std::ferror(in)) throw sys_error("cannot read '" + path + "' (local mirror)", errno);
}

// ---- zip ----

uint16_t le16(const unsigned char* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t le32(const unsigned char* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24); }

void read_at(std::FILE* f, const std::string& zip, off_t off, void* buf, size_t n) {
  if (::fseeko(f, off, SEEK_SET) != 0 || std::fread(buf, 1, n, f) != n)
    throw std::runtime_error(zip + ": truncated or unreadable zip (reading " + std::to_string(n) + " bytes at offset " +
                             std::to_string((long long)off) + ")");
}

}  // namespace

std::string sha256_file(const std::string& path) { return file_digest(path, EVP_sha256()); }
std::string sha1_file(const std::string& path) { return file_digest(path, EVP_sha1()); }

std::string resolve_url(const RemoteFile& file, const DownloadOptions& opts) {
  if (opts.base_url.empty()) return file.url;
  std::string base = opts.base_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::string path = file.url.substr(0, file.url.find_first_of("?#"));
  size_t slash = path.find_last_of('/');
  return base + "/" + (slash == std::string::npos ? path : path.substr(slash + 1));
}

DownloadStatus download_file(const RemoteFile& file, const std::string& dir, const DownloadOptions& opts) {
  if (file.filename.empty() || file.filename == "." || file.filename == ".." ||
      file.filename.find('/') != std::string::npos)
    throw std::invalid_argument("download of " + file.url + ": invalid target filename '" + file.filename + "'");
  if (file.sha256.empty() && file.sha1.empty())
    throw std::invalid_argument(file.filename + ": no expected checksum (sha256 or sha1) given for " + file.url);
  if (!file.sha256.empty()) check_hex(file.filename, "SHA-256", file.sha256, 64);
  if (!file.sha1.empty()) check_hex(file.filename, "SHA-1", file.sha1, 40);

  const std::string path = dir + "/" + file.filename;
  // Compares the digests against the expected ones; returns "" on a match, else the mismatch description.
  auto mismatch = [&](const std::string& got256, const std::string& got1) -> std::string {
    if (!file.sha256.empty() && got256 != lower(file.sha256))
      return "SHA-256 mismatch: expected " + lower(file.sha256) + ", got " + got256;
    if (!file.sha1.empty() && got1 != lower(file.sha1))
      return "SHA-1 mismatch: expected " + lower(file.sha1) + ", got " + got1;
    return "";
  };

  if (is_regular_file(path)) {
    std::string got256 = file.sha256.empty() ? "" : sha256_file(path);
    std::string got1 = file.sha1.empty() ? "" : sha1_file(path);
    std::string why = mismatch(got256, got1);
    if (why.empty()) {
      if (opts.progress) std::fprintf(stderr, "%s: already present\n", path.c_str());
      return DownloadStatus::already_present;
    }
    if (opts.progress) std::fprintf(stderr, "%s: present but %s; downloading again\n", path.c_str(), why.c_str());
  }

  make_dirs(dir);
  const std::string url = resolve_url(file, opts);
  PartGuard part{path + ".part"};
  part.f = std::fopen(part.path.c_str(), "wb");
  if (!part.f) throw sys_error("cannot create '" + part.path + "'", errno);

  Transfer t;
  t.filename = file.filename;
  t.out = part.f;
  t.sha256 = new_digest(EVP_sha256());
  t.sha1 = new_digest(EVP_sha1());
  t.progress = opts.progress;
  t.tty = ::isatty(STDERR_FILENO) == 1;
  if (opts.progress) std::fprintf(stderr, "%s <- %s\n", path.c_str(), url.c_str());
  if (is_local_url(url))
    fetch_local(local_path_of(url), t);
  else
    fetch(url, t, opts);

  if (std::fflush(part.f) != 0 || ::fsync(::fileno(part.f)) != 0) throw sys_error("cannot write '" + part.path + "'", errno);
  std::FILE* f = part.f;
  part.f = nullptr;
  if (std::fclose(f) != 0) throw sys_error("cannot write '" + part.path + "'", errno);

  std::string why = mismatch(finish_digest(t.sha256.get()), finish_digest(t.sha1.get()));
  if (!why.empty())
    throw std::runtime_error(file.filename + ": " + why + " (downloaded " + std::to_string(t.received) +
                             " bytes from " + url + "; the download was deleted)");
  if (std::rename(part.path.c_str(), path.c_str()) != 0)
    throw sys_error("cannot rename '" + part.path + "' to '" + path + "'", errno);
  part.armed = false;
  fsync_dir(dir);
  if (opts.progress) std::fprintf(stderr, "%s: %s, checksum ok\n", path.c_str(), human_bytes(t.received).c_str());
  return DownloadStatus::downloaded;
}

void extract_zip_member(const std::string& zip_path, const std::string& member, const std::string& out_path) {
  std::FILE* f = std::fopen(zip_path.c_str(), "rb");
  if (!f) throw sys_error("cannot read '" + zip_path + "'", errno);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> guard(f, std::fclose);
  if (::fseeko(f, 0, SEEK_END) != 0) throw sys_error("cannot seek in '" + zip_path + "'", errno);
  const off_t size = ::ftello(f);

  // End of central directory record: 22 bytes + a comment of at most 65535 bytes, at the end of the file.
  const off_t tail_len = std::min<off_t>(size, 22 + 65535);
  std::vector<unsigned char> tail(size_t(tail_len), 0);
  read_at(f, zip_path, size - tail_len, tail.data(), tail.size());
  long eocd = -1;
  for (long i = long(tail.size()) - 22; i >= 0; --i)
    if (le32(&tail[size_t(i)]) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd < 0) throw std::runtime_error(zip_path + ": not a zip file (no end-of-central-directory record)");
  const unsigned char* e = &tail[size_t(eocd)];
  uint16_t disk = le16(e + 4), cd_disk = le16(e + 6), entries = le16(e + 10);
  uint32_t cd_size = le32(e + 12), cd_off = le32(e + 16);
  if (disk != 0 || cd_disk != 0) throw std::runtime_error(zip_path + ": multi-disk zip archives are not supported");
  if (entries == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_off == 0xFFFFFFFFu)
    throw std::runtime_error(zip_path + ": ZIP64 archives are not supported");
  if (off_t(cd_off) + off_t(cd_size) > size)
    throw std::runtime_error(zip_path + ": central directory at offset " + std::to_string(cd_off) + " (" +
                             std::to_string(cd_size) + " bytes) lies past the end of the file (" +
                             std::to_string((long long)size) + " bytes)");
  std::vector<unsigned char> cd(cd_size);
  read_at(f, zip_path, off_t(cd_off), cd.data(), cd.size());

  std::vector<std::string> names;
  size_t p = 0;
  for (uint16_t i = 0; i < entries; ++i) {
    if (p + 46 > cd.size() || le32(&cd[p]) != 0x02014b50)
      throw std::runtime_error(zip_path + ": corrupt central directory (entry " + std::to_string(i) + ")");
    const unsigned char* h = &cd[p];
    uint16_t flags = le16(h + 8), method = le16(h + 10);
    uint32_t crc = le32(h + 16), csize = le32(h + 20), usize = le32(h + 24);
    uint16_t nlen = le16(h + 28), xlen = le16(h + 30), clen = le16(h + 32);
    uint32_t local_off = le32(h + 42);
    if (p + 46 + nlen > cd.size()) throw std::runtime_error(zip_path + ": corrupt central directory (entry name)");
    std::string name(reinterpret_cast<const char*>(h + 46), nlen);
    p += 46 + size_t(nlen) + xlen + clen;
    if (name != member) {
      names.push_back(name);
      continue;
    }
    const std::string what = zip_path + ": member '" + member + "'";
    if (flags & 1) throw std::runtime_error(what + " is encrypted, which is not supported");
    if (method != 0 && method != 8)
      throw std::runtime_error(what + " uses compression method " + std::to_string(method) +
                               "; only stored (0) and deflate (8) are supported");
    if (csize == 0xFFFFFFFFu || usize == 0xFFFFFFFFu || local_off == 0xFFFFFFFFu)
      throw std::runtime_error(what + ": ZIP64 sizes are not supported");
    unsigned char lh[30];
    read_at(f, zip_path, off_t(local_off), lh, sizeof lh);
    if (le32(lh) != 0x04034b50) throw std::runtime_error(what + ": bad local header signature");
    off_t data_off = off_t(local_off) + 30 + le16(lh + 26) + le16(lh + 28);
    if (data_off + off_t(csize) > size)
      throw std::runtime_error(what + ": compressed data (" + std::to_string(csize) + " bytes at offset " +
                               std::to_string((long long)data_off) + ") lies past the end of the file");
    if (::fseeko(f, data_off, SEEK_SET) != 0) throw sys_error("cannot seek in '" + zip_path + "'", errno);

    write_file_atomic(out_path, [&](std::FILE* out) {
      std::vector<unsigned char> in(1 << 16), buf(1 << 16);
      uLong got_crc = crc32(0L, Z_NULL, 0);
      uint64_t written = 0, left = csize;
      auto emit = [&](const unsigned char* d, size_t n) {
        if (n && std::fwrite(d, 1, n, out) != n) throw sys_error("cannot write '" + out_path + "'", errno);
        got_crc = crc32(got_crc, d, uInt(n));
        written += n;
      };
      auto read_chunk = [&]() -> size_t {
        size_t n = size_t(std::min<uint64_t>(left, in.size()));
        if (n && std::fread(in.data(), 1, n, f) != n) throw std::runtime_error(what + ": truncated compressed data");
        left -= n;
        return n;
      };
      if (method == 0) {
        if (csize != usize)
          throw std::runtime_error(what + ": stored member with compressed size " + std::to_string(csize) +
                                   " != size " + std::to_string(usize));
        while (left) {
          size_t n = read_chunk();
          emit(in.data(), n);
        }
      } else {
        z_stream zs{};
        if (inflateInit2(&zs, -15) != Z_OK) throw std::runtime_error(what + ": zlib inflateInit2 failed");
        std::unique_ptr<z_stream, int (*)(z_stream*)> zguard(&zs, inflateEnd);
        int zr = Z_OK;
        while (zr != Z_STREAM_END) {
          if (zs.avail_in == 0) {
            if (left == 0) throw std::runtime_error(what + ": deflate stream ends early (truncated or corrupt)");
            zs.avail_in = uInt(read_chunk());
            zs.next_in = in.data();
          }
          zs.next_out = buf.data();
          zs.avail_out = uInt(buf.size());
          zr = inflate(&zs, Z_NO_FLUSH);
          if (zr != Z_OK && zr != Z_STREAM_END)
            throw std::runtime_error(what + ": corrupt deflate data (zlib: " + (zs.msg ? zs.msg : std::to_string(zr)) +
                                     ")");
          emit(buf.data(), buf.size() - zs.avail_out);
        }
      }
      if (written != usize)
        throw std::runtime_error(what + ": extracted " + std::to_string(written) + " bytes, the directory says " +
                                 std::to_string(usize));
      if (got_crc != crc) {
        char b[96];
        std::snprintf(b, sizeof b, ": CRC-32 mismatch: expected %08x, got %08lx", crc, got_crc);
        throw std::runtime_error(what + b);
      }
    });
    return;
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  throw std::runtime_error(zip_path + ": no member '" + member + "' (members: " + (list.empty() ? "none" : list) + ")");
}

}  // namespace tfm

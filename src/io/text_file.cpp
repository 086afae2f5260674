#include "io/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace tfm {

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Length and the allowed range of the second byte (Unicode table 3-7); later bytes are 80..BF.
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;  // continuation byte, C0/C1 (overlong) or F5..FF
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return std::nullopt;
}

constexpr size_t kMaxTextFileBytes = size_t(1) << 30;

// Whole file contents; gzread decompresses gzip input and passes any other file through unchanged.
void check_not_folder(const std::string& path, int fd) {
  struct stat st;
  if ((fd >= 0 ? ::fstat(fd, &st) : ::stat(path.c_str(), &st)) == 0 && S_ISDIR(st.st_mode))
    throw std::runtime_error(path + ": is a folder, expected a file");
}
std::runtime_error empty_file_error(const std::string& path) { return std::runtime_error(path + ": empty file"); }

void check_gzip_name(const std::string& path, int fd) {
  if (path.size() < 4 || path.compare(path.size() - 3, 3, ".gz") != 0) return;
  const int f = fd >= 0 ? fd : ::open(path.c_str(), O_RDONLY);
  if (f < 0) return;  // the reader's own "cannot open" follows
  unsigned char magic[2] = {0, 0};
  const ssize_t n = ::pread(f, magic, 2, 0);
  if (fd < 0) ::close(f);
  if (n > 0 && (n < 2 || magic[0] != 0x1f || magic[1] != 0x8b))
    throw std::runtime_error(path + ": not a gzip file (it does not start with gzip's magic bytes 1f 8b), though "
                             "its name ends in .gz");
}

std::string read_file_maybe_gzip(const std::string& path) {
  check_not_folder(path);
  check_gzip_name(path);
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": cannot open: " + (errno ? std::strerror(errno) : "out of memory"));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      if (err == Z_ERRNO) msg = std::strerror(errno);
      gzclose(f);
      throw std::runtime_error(path + ": read error: " + msg);
    }
    if (n == 0) break;
    // A corpus here is megabytes; /dev/zero or a gzip bomb must not take the machine's memory.
    if (out.size() + static_cast<size_t>(n) > kMaxTextFileBytes) {
      gzclose(f);
      throw std::runtime_error(path + ": larger than " + std::to_string(kMaxTextFileBytes >> 30) +
                               " GiB (decompressed); not a corpus this tool reads");
    }
    out.append(buf, static_cast<size_t>(n));
  }
  // gzread returns 0 both at the end and for a gzip stream cut short; gzclose reports the latter as Z_BUF_ERROR.
  if (const int rc = gzclose(f); rc != Z_OK) {
    throw std::runtime_error(path + ": read error: " +
                             (rc == Z_BUF_ERROR ? std::string("unexpected end of file")
                                                : "gzclose failed with code " + std::to_string(rc)));
  }
  return out;
}


std::vector<std::string> read_lines(const std::string& path, bool allow_empty) {
  const std::string text = read_file_maybe_gzip(path);
  if (text.empty() && !allow_empty) throw empty_file_error(path);
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (const auto bad = find_invalid_utf8(line)) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned>(static_cast<unsigned char>(line[*bad])));
      // The unit of the library's messages ("text 2: invalid UTF-8 at byte offset 4"): a 0-based byte offset.
      throw std::runtime_error(path + ": line " + std::to_string(lines.size() + 1) + ": invalid UTF-8 at byte offset " +
                               std::to_string(*bad) + " (byte " + byte + ")");
    }
    lines.emplace_back(line);
    start = end + 1;
  }
  return lines;
}

}  // namespace tfm

// The line reader, the rank plan and the rank outputs of the batch commands under mpirun (line_shards.h).
#include "line_shards.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "io/atomic_file.h"
#include "io/text_file.h"
#include "tfm/process_group.h"

namespace tfm::cli {

struct LineReader::Inflate {
  z_stream z{};
  std::string in;  // compressed bytes read and not yet inflated
  bool ended = false;  // the last gzip member ended (more members may follow)
  Inflate() {
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error("cannot start zlib's inflate");
  }
  ~Inflate() { inflateEnd(&z); }
};

LineReader::~LineReader() {
  if (gz) gzclose(gz);
  if (fd_ >= 0) ::close(fd_);
  delete inflate_;
}

void LineReader::open(const std::string& path) {
  int fd = 0;
  if (path == "-") {
    name = "<stdin>";
    fd = dup(0);
  } else {
    name = path;
    fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  }
  try {
    check_not_folder(name, fd);  // io/text_file: the wording of classify / rerank / fill-mask (read_lines)
    if (path != "-") check_gzip_name(path, fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  struct stat sb;
  if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) total_bytes = sb.st_size;
  if (path == "-" && total_bytes < 0) {  // zlib's gzread would wait to fill its buffer: read as data arrives
    fd_ = fd;
    return;
  }
  gz = gzdopen(fd, "rb");
  if (!gz) {
    ::close(fd);
    throw std::runtime_error(name + ": cannot open");
  }
}

bool LineReader::next(std::string& line) {
  if (end_line > 0 && line_no + 1 >= end_line) return false;
  for (;;) {
    size_t nl = buf.find('\n', pos);
    if (nl != std::string::npos) {
      line.assign(buf, pos, nl - pos);
      pos = nl + 1;
      break;
    }
    if (eof) {
      if (pos >= buf.size()) return false;
      line.assign(buf, pos, std::string::npos);
      pos = buf.size();
      break;
    }
    if (max_line > 0 && buf.size() - pos > max_line)
      throw std::invalid_argument(name + " line " + std::to_string(line_no + 1) + " is longer than " +
                                  (max_line == (size_t(1) << 20) ? std::string("1 MiB")
                                                                 : std::to_string(max_line) + " bytes"));
    buf.erase(0, pos);
    pos = 0;
    char tmp[1 << 16];
    const size_t n = fill(tmp, sizeof tmp);
    if (n == 0) eof = true;
    buf.append(tmp, n);
  }
  if (max_line > 0 && line.size() > max_line)
    throw std::invalid_argument(name + " line " + std::to_string(line_no + 1) + " is longer than " +
                                (max_line == (size_t(1) << 20) ? std::string("1 MiB")
                                                               : std::to_string(max_line) + " bytes"));
  ++line_no;
  if (strip_cr && !line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

size_t LineReader::fill(char* out, size_t cap) {
  if (gz) {
    const int n = gzread(gz, out, (unsigned)cap);
    if (n < 0) {
      int err = 0;
      throw std::runtime_error(name + ": read error: " + gzerror(gz, &err));
    }
    bytes = gzoffset(gz) >= 0 ? (int64_t)gzoffset(gz) : bytes + n;
    if (n == 0) {  // a truncated .gz reads as end of file; gzerror tells
      int err = 0;
      const char* msg = gzerror(gz, &err);
      if (err != Z_OK && err != Z_STREAM_END) throw std::runtime_error(name + ": read error: " + msg);
    }
    return (size_t)n;
  }
  auto read_some = [&](char* p, size_t n) -> size_t {  // what has arrived, at least one byte unless at the end
    for (;;) {
      const ssize_t r = ::read(fd_, p, n);
      if (r >= 0) {
        bytes += r;
        return (size_t)r;
      }
      if (errno != EINTR) throw std::runtime_error(name + ": read error: " + std::strerror(errno));
    }
  };
  if (!sniffed_) {  // gzip data piped in (cat x.gz | tfm ...): inflated as it arrives
    sniffed_ = true;
    size_t n = read_some(out, cap);
    if (n == 1) n += read_some(out + 1, cap - 1);  // the magic is two bytes
    if (n < 2 || (unsigned char)out[0] != 0x1f || (unsigned char)out[1] != 0x8b) return n;
    inflate_ = new Inflate;
    inflate_->in.assign(out, n);
  }
  if (!inflate_) return read_some(out, cap);
  Inflate& f = *inflate_;
  for (;;) {
    if (f.in.empty()) {
      char tmp[1 << 16];
      const size_t n = read_some(tmp, sizeof tmp);
      if (n == 0) {
        if (!f.ended) throw std::runtime_error(name + ": read error: the gzip data ends early (truncated)");
        return 0;
      }
      f.in.assign(tmp, n);
    }
    if (f.ended) {  // another gzip member follows
      inflateReset(&f.z);
      f.ended = false;
    }
    f.z.next_in = (Bytef*)f.in.data();
    f.z.avail_in = (uInt)f.in.size();
    f.z.next_out = (Bytef*)out;
    f.z.avail_out = (uInt)cap;
    const int ret = inflate(&f.z, Z_NO_FLUSH);
    if (ret != Z_OK && ret != Z_STREAM_END && ret != Z_BUF_ERROR)
      throw std::runtime_error(name + ": read error: " + (f.z.msg ? f.z.msg : "invalid gzip data"));
    f.in.erase(0, f.in.size() - f.z.avail_in);
    if (ret == Z_STREAM_END) f.ended = true;
    const size_t produced = cap - f.z.avail_out;
    if (produced > 0) return produced;
  }
}

bool LineReader::paused() const {
  if (fd_ < 0 || eof || buf.find('\n', pos) != std::string::npos) return false;
  if (inflate_ && !inflate_->in.empty()) return false;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;  // nothing to read yet (an error or hang-up reads as input, reported by next())
}

void LineReader::skip_to(int64_t first) {
  std::string line;
  while (line_no + 1 < first && next(line)) {
  }
}

bool blank_line(const std::string& line) { return line.find_first_not_of(" \t\v\f\r") == std::string::npos; }

int64_t LinePlan::first_line(int r) const {
  return unit_start.empty() ? 1 : unit_start[(size_t)ranges[(size_t)r].first];
}
int64_t LinePlan::end_line(int r) const {
  return unit_start.empty() ? 1 : unit_start[(size_t)ranges[(size_t)r].second];
}
int64_t LinePlan::counted_lines(int r) const {
  int64_t n = 0;
  for (int64_t u = ranges[(size_t)r].first; u < ranges[(size_t)r].second; ++u) n += unit_counted[(size_t)u];
  return n;
}

LinePlan plan_lines(const std::string& path, int64_t unit_lines, const std::function<bool(const std::string&)>& counts) {
  LinePlan p;
  const ProcessGroup g = process_group();
  p.rank = g.rank, p.world_size = g.world_size;
  LineReader in;
  in.open(path);
  std::vector<int64_t> unit_bytes;
  int64_t start = 1, counted = 0, bytes = 0;
  std::string line;
  while (in.next(line)) {
    bytes += (int64_t)line.size() + 1;
    if (counts(line)) ++counted;
    if (counted == unit_lines) {
      p.unit_start.push_back(start), p.unit_counted.push_back(counted), unit_bytes.push_back(bytes);
      start = in.line_no + 1, counted = 0, bytes = 0;
    }
  }
  p.total_lines = in.line_no;
  if (start <= p.total_lines) {  // the last, partial unit; lines left uncounted join the unit before
    if (counted > 0 || p.unit_start.empty()) {
      p.unit_start.push_back(start), p.unit_counted.push_back(counted), unit_bytes.push_back(bytes);
    } else {
      unit_bytes.back() += bytes;
    }
  }
  for (int64_t c : p.unit_counted) p.total_counted += c;
  p.unit_start.push_back(p.total_lines + 1);
  // Every rank computes every rank's range (rank 0 names them in its summary).
  for (int r = 0; r < p.world_size; ++r) p.ranges.push_back(group::shard(unit_bytes, r));
  return p;
}

std::string shard_path(const std::string& path, int rank, int world_size) {
  const size_t slash = path.find_last_of('/'), dot = path.find_last_of('.');
  const size_t cut = dot != std::string::npos && (slash == std::string::npos || dot > slash) ? dot : path.size();
  char tag[48];
  std::snprintf(tag, sizeof tag, "-%05d-of-%05d", rank + 1, world_size);
  return path.substr(0, cut) + tag + path.substr(cut);
}

namespace {
std::FILE* unlinked_temp_file() {
  const char* dir = std::getenv("TMPDIR");
  std::string d = dir && *dir ? dir : "/tmp";
  int fd = ::open(d.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {  // a filesystem without O_TMPFILE: create and unlink at once
    std::string name = d + "/tfm-rank-XXXXXX";
    fd = ::mkstemp(name.data());
    if (fd < 0) throw std::runtime_error("cannot create a temporary file in " + d + ": " + std::strerror(errno));
    ::unlink(name.c_str());
  }
  std::FILE* f = ::fdopen(fd, "w+b");
  if (!f) {
    ::close(fd);
    throw std::runtime_error("cannot open a temporary file in " + d + ": " + std::strerror(errno));
  }
  return f;
}

constexpr int kCountersTag = 1, kBodyTag = 2, kSideTag = 3;
constexpr int64_t kPiece = int64_t(4) << 20;  // bytes read from a body and sent at a time

void check_file(std::FILE* f, const char* what) {
  if (std::ferror(f)) throw std::runtime_error(std::string("the rank's temporary output: ") + what + " failed: " +
                                               std::strerror(errno ? errno : EIO));
}
}  // namespace

RankOutput::RankOutput() : body_(unlinked_temp_file()) {}
RankOutput::~RankOutput() {
  if (body_) std::fclose(body_);
}

std::array<int64_t, RankOutput::kCounters> RankOutput::exchange(int64_t own_done,
                                                                 const std::function<void(int64_t)>& on_progress) {
  work_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (std::fflush(body_) != 0) check_file(body_, "writing");
  const ProcessGroup g = process_group();
  std::array<int64_t, kCounters> total = counts;
  const int64_t body_bytes = (int64_t)std::ftell(body_);
  if (g.world_size == 1) {
    sizes_ = {{body_bytes, (int64_t)side.size()}};
    return total;
  }
  if (g.rank != 0) {
    group::report_progress(own_done, true);
    std::array<int64_t, kCounters + 2> msg{};
    std::copy(counts.begin(), counts.end(), msg.begin());
    msg[kCounters] = body_bytes, msg[kCounters + 1] = (int64_t)side.size();
    group::send(msg.data(), sizeof msg, 0, kCountersTag, std::max(600.0, 4 * work_seconds_));
    return total;
  }
  // Rank 0: every other rank's final progress report; a rank silent for the deadline ends the job.
  const char* t = std::getenv("TFM_COLLECTIVE_TIMEOUT");
  const double patience = t && std::strtod(t, nullptr) > 0 ? std::strtod(t, nullptr) : 600;
  auto last = std::chrono::steady_clock::now();
  int64_t shown = -1;
  for (int finished = 0;;) {
    const int64_t sum = group::progress_sum(own_done, &finished);
    if (sum != shown) {
      shown = sum, last = std::chrono::steady_clock::now();
      if (on_progress) on_progress(sum);
    }
    if (finished == g.world_size - 1) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - last).count() > patience)
      group::abort(3, "no progress report from the other ranks for " + std::to_string((int)patience) +
                          " s (a rank hung; TFM_COLLECTIVE_TIMEOUT sets the limit); ending the job");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  sizes_.assign((size_t)g.world_size, {0, 0});
  sizes_[0] = {body_bytes, (int64_t)side.size()};
  for (int r = 1; r < g.world_size; ++r) {
    std::array<int64_t, kCounters + 2> msg{};
    group::receive(msg.data(), sizeof msg, r, kCountersTag);
    for (int k = 0; k < kCounters; ++k) total[(size_t)k] += msg[(size_t)k];
    sizes_[(size_t)r] = {msg[kCounters], msg[kCounters + 1]};
  }
  return total;
}

void RankOutput::copy_body(std::FILE* out) {
  if (std::fflush(body_) != 0 || std::fseek(body_, 0, SEEK_SET) != 0) check_file(body_, "rewinding");
  std::vector<char> buf(1 << 16);
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), body_)) > 0;)
    if (std::fwrite(buf.data(), 1, n, out) != n) return;  // the caller's write check reports it
  check_file(body_, "reading");
}

void RankOutput::concatenate(std::FILE* out) {
  const ProcessGroup g = process_group();
  const double wait = std::max(600.0, 4 * work_seconds_);
  if (g.rank != 0) {  // the body in pieces (bounded memory), then the side data
    if (std::fflush(body_) != 0 || std::fseek(body_, 0, SEEK_SET) != 0) check_file(body_, "rewinding");
    std::vector<char> buf((size_t)kPiece);
    for (;;) {
      const size_t n = std::fread(buf.data(), 1, buf.size(), body_);
      check_file(body_, "reading");
      if (n == 0) break;
      group::send(buf.data(), (int64_t)n, 0, kBodyTag, wait);
    }
    group::send(side.data(), (int64_t)side.size(), 0, kSideTag, wait);
    return;
  }
  copy_body(out);
  sides.assign((size_t)g.world_size, std::string());
  sides[0] = side;
  std::vector<char> buf;
  for (int r = 1; r < g.world_size; ++r) {
    for (int64_t left = sizes_[(size_t)r][0]; left > 0;) {
      const int64_t n = std::min(left, kPiece);
      buf.resize((size_t)n);
      group::receive(buf.data(), n, r, kBodyTag);
      std::fwrite(buf.data(), 1, (size_t)n, out);
      left -= n;
    }
    sides[(size_t)r].resize((size_t)sizes_[(size_t)r][1]);
    group::receive(sides[(size_t)r].data(), (int64_t)sides[(size_t)r].size(), r, kSideTag);
  }
}

std::string write_job_output(RankOutput& part, const LinePlan& plan, const std::string& path, bool shards,
                             int64_t own_rows, int64_t total_rows,
                             const std::function<void(std::FILE*, int64_t)>& header,
                             const std::function<std::string(const std::string&)>& side_path) {
  const int rank = plan.rank, world = plan.world_size;
  if (shards) {  // each rank its own file; none is kept unless every rank wrote its own
    const std::string mine = shard_path(path, rank, world);
    const std::string side = side_path ? side_path(mine) : "";
    std::string error;
    try {
      write_file_atomic(mine, [&](std::FILE* f) {
        if (header) header(f, own_rows);
        part.copy_body(f);
      });
      if (side_path) write_file_atomic(side, part.side);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!group::all(error.empty())) {
      std::remove(mine.c_str());
      if (side_path) std::remove(side.c_str());
      if (!error.empty()) throw std::runtime_error(error);
      throw std::runtime_error("another rank could not write its shard; no shard kept");
    }
    if (world == 1) return mine;
    std::string wrote = shard_path(path, 0, world) + " .. " + shard_path(path, world - 1, world) + " (lines";
    for (int r = 0; r < world; ++r)
      wrote += (r ? ", " : " ") + std::to_string(plan.first_line(r)) + "-" + std::to_string(plan.end_line(r) - 1);
    return wrote + ")";
  }
  auto write_all = [&](std::FILE* f) {
    if (header) header(f, total_rows);
    part.concatenate(f);
  };
  if (rank != 0) {
    part.concatenate(nullptr);
    return "";
  }
  if (path.empty() || path == "-") {
    write_all(stdout);
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
      throw std::runtime_error(std::string("cannot write to standard output: ") + std::strerror(errno ? errno : EIO));
    return path;
  }
  {
    TempFileGuard guard(path);  // a rank dying now ends this one: no temp file is left
    write_file_atomic(path, write_all);
  }
  if (side_path) {
    std::string text;
    for (const std::string& t : part.sides) text += t;
    write_file_atomic(side_path(path), text);
  }
  return path;
}

namespace {
char g_temp_path[PATH_MAX + 32];
struct sigaction g_old_term, g_old_int;
extern "C" void remove_temp_and_exit(int sig) {
  if (g_temp_path[0]) ::unlink(g_temp_path);
  ::_exit(128 + sig);
}
}  // namespace

TempFileGuard::TempFileGuard(const std::string& path) {
  std::string p = path;
  struct stat st;
  if (::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    if (char* real = ::realpath(p.c_str(), nullptr)) {
      p = real;
      std::free(real);
    }
  p += ".tmp." + std::to_string(::getpid());  // write_file_atomic's temp file (io/atomic_file.h)
  std::snprintf(g_temp_path, sizeof g_temp_path, "%s", p.c_str());
  struct sigaction sa {};
  sa.sa_handler = remove_temp_and_exit;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, &g_old_term);
  ::sigaction(SIGINT, &sa, &g_old_int);
}

TempFileGuard::~TempFileGuard() {
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  ::sigaction(SIGINT, &g_old_int, nullptr);
  g_temp_path[0] = 0;
}

}  // namespace tfm::cli

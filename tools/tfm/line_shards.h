// Batch commands over the ranks of mpirun (`mpirun -np N tfm embed / translate --input FILE`): the line reader
// they share, the plan of which lines each rank reads, a rank's output in an unlinked temp file, and rank 0's
// assembly of one output in input order (or every rank's own shard).
//
// The input is cut into units of the command's chunk (embed --chunk-lines, translate's 512 lines), which every
// run reads, sorts by length and batches alike; each rank takes a contiguous run of whole units, balanced by
// bytes. So 2 ranks compute exactly the batches 1 rank does and their output is byte-identical to its.
#pragma once
#include <zlib.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tfm::cli {

// Reads lines ('\n' separated, one trailing '\r' removed unless strip_cr is false) from a plain or gzip file or
// stdin (zlib reads both), counting the file bytes consumed for the progress ETA. Lines may hold any byte, NUL
// included. Throws std::runtime_error naming the file: cannot open, is a folder, read error (a truncated .gz), a
// line over max_line bytes. Standard input that is not a file (a pipe, a socket, a terminal) is read with read(2)
// as its data arrives, never waiting for more than the line asked for, and paused() tells when the writer has
// sent nothing more yet: a co-process that writes a line and waits for its answer gets it (tfm embed, tokenize
// and translate answer what they hold at each pause).
struct LineReader {
  gzFile gz = nullptr;
  std::string name;
  int64_t line_no = 0, bytes = 0, total_bytes = -1;  // total_bytes: -1 when unknown (a pipe)
  std::string buf;
  size_t pos = 0;
  bool eof = false;
  int64_t end_line = -1;  // > 0: next() reports the end of input before this 1-based line (a rank's range)
  bool strip_cr = true;   // drop one trailing '\r' (CRLF files)
  size_t max_line = 0;    // > 0: a longer line throws "<name> line N is longer than 1 MiB" (max_line 1 MiB)
  LineReader() = default;
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  ~LineReader();
  void open(const std::string& path);  // "-" = stdin
  bool next(std::string& line);
  // Reads and drops lines up to (not including) 1-based line `first`.
  void skip_to(int64_t first);
  // Standard input that is not a file: no whole line is buffered and none can be read without waiting. Always
  // false for a file (its data is there to read).
  bool paused() const;

 private:
  size_t fill(char* out, size_t cap);  // the next bytes of input (0 at its end)
  int fd_ = -1;                        // stdin that is not a file, read as it arrives
  struct Inflate;                      // gzip data on such a stdin
  Inflate* inflate_ = nullptr;
  bool sniffed_ = false;               // the first bytes checked for the gzip magic
};

// Whether a line is blank (empty or only " \t\v\f\r"): embed's empty line.
bool blank_line(const std::string& line);

// Which input lines every rank reads.
struct LinePlan {
  int rank = 0, world_size = 1;
  int64_t total_lines = 0, total_counted = 0;
  std::vector<int64_t> unit_start;  // 1-based first line of each unit, then total_lines + 1
  std::vector<int64_t> unit_counted;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // per rank: units [begin, end)
  // Rank r's input lines: [first_line(r), end_line(r)), 1-based; empty when first == end.
  int64_t first_line(int r) const;
  int64_t end_line(int r) const;
  int64_t counted_lines(int r) const;
};
// Reads `path` (a file, plain or gzip) once, on every rank: units of `unit_lines` lines for which
// `counts(line)` holds (embed --skip-empty leaves blank lines out of its chunks; a unit's uncounted lines before
// the next unit's first counted one belong to it), split over the ranks by tfm::group::shard on their bytes.
LinePlan plan_lines(const std::string& path, int64_t unit_lines, const std::function<bool(const std::string&)>& counts);

// "out.npy" -> "out-00001-of-00002.npy" for rank 0 of 2 (the Hugging Face shard naming, 1-based).
std::string shard_path(const std::string& path, int rank, int world_size);

// One rank's output while the job runs: its rows in input order (no file header) in an unlinked temp file
// ($TMPDIR, else /tmp; removed by the system however the process ends), small side data, and counters summed
// over the ranks.
class RankOutput {
 public:
  static constexpr int kCounters = 6;
  RankOutput();
  ~RankOutput();
  RankOutput(const RankOutput&) = delete;
  RankOutput& operator=(const RankOutput&) = delete;
  std::FILE* body() { return body_; }
  std::string side;                          // e.g. embed's input line of each row (--skip-empty with .npy)
  std::array<int64_t, kCounters> counts{};   // the command's counters (rows, skipped, ...)

  // Every rank, once its own work is done. Ranks other than 0 send their final progress report and their
  // counters to rank 0; rank 0 waits for every rank's final report, calling on_progress(sum of the ranks'
  // counts of done work, own_done included) as reports arrive, then receives the counters. A rank silent for
  // TFM_COLLECTIVE_TIMEOUT seconds ends the job. Returns the counters summed over the ranks on rank 0, the own
  // ones elsewhere.
  std::array<int64_t, kCounters> exchange(int64_t own_done, const std::function<void(int64_t)>& on_progress);
  // After exchange. Rank 0: writes its own body, then every other rank's as it receives them, in rank order,
  // to `out`, and collects every rank's side data into sides (rank order). Other ranks: send theirs (`out`
  // unused). One process: its own body and side.
  void concatenate(std::FILE* out);
  // Copies this rank's body to `out` (its shard).
  void copy_body(std::FILE* out);
  std::vector<std::string> sides;

 private:
  std::FILE* body_ = nullptr;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double work_seconds_ = 0;  // how long this rank worked (since construction): the patience of its wait for rank 0
  std::vector<std::array<int64_t, 2>> sizes_;  // rank 0: every rank's body and side bytes
};

// Every rank, after RankOutput::exchange: writes the job's output from the ranks' parts. Without `shards`: rank 0
// writes one file at `path` atomically (stdout when path is "" or "-"): header(f, total rows), then every rank's
// body in rank order, and (side_path non-null) the ranks' side data concatenated to side_path(path). With
// `shards`: every rank writes its own shard_path(path, rank, world_size) the same way with its own rows, and all
// are removed unless every rank wrote its own (then this rank throws std::runtime_error). `header` may be null
// (no header). Returns, on rank 0, what was written for the summary line ("out.npy", or the shard names with the
// lines of each).
std::string write_job_output(RankOutput& part, const LinePlan& plan, const std::string& path, bool shards,
                             int64_t own_rows, int64_t total_rows,
                             const std::function<void(std::FILE*, int64_t)>& header,
                             const std::function<std::string(const std::string&)>& side_path);

// Rank 0 writing the one output of a job under mpirun: a SIGTERM / SIGINT (mpirun ending the job because a rank
// died) removes write_file_atomic's temp file for `path` before the process ends, so that no partial file is
// left. Restores the previous handlers when destroyed.
class TempFileGuard {
 public:
  explicit TempFileGuard(const std::string& path);
  ~TempFileGuard();
};

}  // namespace tfm::cli

// tfm embed: sentence embeddings of every line of a file, as SentenceTransformer.encode() gives them.
// Lines are read in chunks, tokenized in parallel, sorted by length into batches of similar lengths (little
// padding), embedded, and written back in input order, so memory stays bounded for any number of lines.
// Under mpirun every rank embeds a contiguous run of chunks; rank 0 writes the one output (line_shards.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "cli_util.h"
#include "commands.h"
#include "io/atomic_file.h"
#include "io/json_util.h"
#include "io/text_file.h"
#include "line_shards.h"
#include "io/npy.h"
#include "tfm/encoder.h"
#include "tfm/model_info.h"
#include "tfm/pipeline.h"
#include "tfm/process_group.h"

namespace tfm::cli {

namespace {

// Output sink: .npy (header rewritten with the final row count at the end; needs a seekable file) or JSON lines.
// Rows are `dim` elements at `precision` (float32 values, or int8 / uint8 integers as quantize_embeddings gives
// them). header = false: the rows only (a rank's part under mpirun; write_npy_header writes the header before them).
class Writer {
 public:
  Writer(std::FILE* f, bool npy, int64_t dim, std::string name, EmbeddingPrecision precision, bool header = true)
      : f_(f), npy_(npy), header_(header), dim_(dim), name_(std::move(name)), precision_(precision) {
    if (npy_ && header_) write_header(0);
  }
  // `row`: dim elements (4 bytes each for float32, else 1). line_no > 0: JSON lines name the input line the row
  // comes from ({"line": N, "embedding": [...]}).
  void row(const uint8_t* row, int64_t line_no = 0) {
    const bool f32 = precision_ == EmbeddingPrecision::Float32;
    if (npy_) {
      const size_t bytes = (size_t)dim_ * (f32 ? 4 : 1);
      if (std::fwrite(row, 1, bytes, f_) != bytes) fail();
    } else {
      std::string s = line_no > 0 ? "{\"line\": " + std::to_string(line_no) + ", \"embedding\": [" : "{\"embedding\": [";
      char num[32];
      const bool is_signed = precision_ == EmbeddingPrecision::Int8 || precision_ == EmbeddingPrecision::Binary;
      for (int64_t k = 0; k < dim_; ++k) {
        if (f32) {
          float v;
          std::memcpy(&v, row + 4 * k, 4);
          std::snprintf(num, sizeof num, "%s%.9g", k ? ", " : "", (double)v);
        } else {
          std::snprintf(num, sizeof num, "%s%d", k ? ", " : "", is_signed ? (int)(int8_t)row[k] : (int)row[k]);
        }
        s += num;
      }
      s += "]}\n";
      if (std::fwrite(s.data(), 1, s.size(), f_) != s.size()) fail();
    }
    ++rows_;
  }
  void finish() {
    if (npy_ && header_) {
      if (std::fflush(f_) != 0 || std::fseek(f_, 0, SEEK_SET) != 0)
        throw std::runtime_error("cannot rewrite the .npy header (the output is not a seekable file; use .jsonl)");
      write_header(rows_);
      if (std::fseek(f_, 0, SEEK_END) != 0) fail();
    }
    if (std::fflush(f_) != 0 || std::ferror(f_)) fail();
  }
  int64_t rows() const { return rows_; }
  // NPY v1.0 header of a fixed 128 bytes (room for any row count), so the final count fits in place.
  void write_header(int64_t rows) {
    QuantizedEmbeddings kind;
    kind.precision = precision_;
    std::string dict = std::string("{'descr': '") + kind.npy_descr() + "', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(dim_) + "), }";
    const size_t total = 128, pre = 10;
    dict.append(total - pre - dict.size() - 1, ' ');
    dict += '\n';
    std::string h = "\x93NUMPY";
    h += (char)1;
    h += (char)0;
    h += (char)(dict.size() & 0xff);
    h += (char)(dict.size() >> 8);
    h += dict;
    if (std::fwrite(h.data(), 1, h.size(), f_) != h.size()) fail();
  }

 private:
  [[noreturn]] void fail() {
    throw std::runtime_error("cannot write to " + name_ + ": " + std::strerror(errno ? errno : EIO));
  }
  std::FILE* f_;
  bool npy_, header_;
  int64_t dim_, rows_ = 0;
  std::string name_;
  EmbeddingPrecision precision_;
};

std::string fmt_count(int64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

// A progress line on stderr, redrawn at most 5 times a second: sentences, sentences/s, percent and ETA of a file.
struct Progress {
  bool on = false;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), last;
  void update(int64_t done, int64_t bytes, int64_t total_bytes, bool final = false) {
    if (!on) return;
    auto now = std::chrono::steady_clock::now();
    if (!final && now - last < std::chrono::milliseconds(200)) return;
    last = now;
    double secs = std::chrono::duration<double>(now - start).count();
    double rate = secs > 0 ? done / secs : 0;
    char line[160];
    int n = std::snprintf(line, sizeof line, "\r%s sentences  %.0f/s", fmt_count(done).c_str(), rate);
    if (total_bytes > 0 && bytes > 0) {
      double frac = std::min(1.0, (double)bytes / (double)total_bytes);
      const int width = 24, fill = (int)(frac * width);
      std::string bar = "[" + std::string(fill, '#') + std::string(width - fill, '.') + "]";
      long eta = frac > 0 ? (long)std::lround(secs * (1 - frac) / frac) : 0;
      n += std::snprintf(line + n, sizeof line - n, "  %s %3.0f%%  ETA %ld:%02ld", bar.c_str(), 100 * frac, eta / 60,
                         eta % 60);
    }
    std::fprintf(stderr, "%s\033[K%s", line, final ? "\n" : "");
    std::fflush(stderr);
  }
};

}  // namespace

void add_embed_command(CLI::App& app) {
  struct Opts {
    std::string model, input, output, pooling, prompt_name, prompt, dtype;  // "": as the folder stores it
    std::string precision = "float32", calibration, chunk_pooling = "mean";
    bool normalize = false, skip_empty = false, quiet = false, no_prompt = false, output_shards = false;
    bool no_truncate = false;
    int64_t batch_tokens = 16384, batch_size = 128, max_length = 0, chunk_lines = 1024, chunk = 0, stride = 0;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "embed", "Sentence embeddings of every line of a file (sentence-transformers semantics: modules.json "
               "Transformer -> Pooling -> Dense -> Normalize), written in input order as float32 [N, dim] .npy or "
               "JSON lines {\"embedding\": [...]}");
  cmd->add_option("--model", o->model,
                  "sentence-transformers folder (modules.json), or a BERT folder with --pooling")
      ->required();
  cmd->add_option("--input,-i", o->input, "Text file (plain or .gz), one sentence a line, or - for stdin")->required();
  cmd->add_option("--output,-o", o->output, "out.npy or out.jsonl (default: JSON lines on stdout)");
  cmd->add_flag("--normalize", o->normalize, "L2-normalise the vectors (added when the folder has no Normalize)");
  cmd->add_option("--pooling", o->pooling,
                  "cls, mean, max, mean_sqrt_len, weightedmean, lasttoken, or several joined by '+' "
                  "(required without modules.json; replaces the folder's Pooling modes otherwise)")
      ->check(pooling_mode());
  cmd->add_option("--prompt-name", o->prompt_name, "Prompt from config_sentence_transformers.json, e.g. query");
  cmd->add_option("--prompt", o->prompt, "Literal prompt prepended to every line");
  cmd->add_flag("--no-prompt", o->no_prompt, "Do not apply the folder's default_prompt_name");
  cmd->add_option("--max-length", o->max_length,
                  "Truncate to this many tokens (default: sentence_bert_config.json max_seq_length)")
      ->check(whole_range(2, 1 << 20));
  cmd->add_option("--batch-tokens", o->batch_tokens, "Most padded tokens in one batch (default 16384)")
      ->check(whole_range(1, 1 << 26));
  cmd->add_option("--batch-size", o->batch_size, "Most sentences in one batch (default 128)")
      ->check(whole_range(1, 1 << 20));
  cmd->add_option("--chunk-lines", o->chunk_lines,
                  "Lines read, sorted by length and embedded together (default 1024; bounds memory). Under mpirun "
                  "the unit the ranks share: each takes a contiguous run of chunks, balanced by bytes, so the output "
                  "is byte for byte the one process's")
      ->check(whole_range(1, 1 << 24));
  cmd->add_flag("--output-shards", o->output_shards,
                "Under mpirun: each rank writes the rows of its own contiguous lines to OUT-0000R-of-0000N.EXT "
                "(1-based rank, the Hugging Face shard naming) instead of rank 0 writing one OUT in input order; "
                "kept only if every rank wrote its shard");
  cmd->add_flag("--skip-empty", o->skip_empty,
                "Leave empty (or all-space) lines out instead of failing; so that rows can be matched to input lines, "
                "each JSON line then has \"line\": N (1-based input line), and a .npy output gets OUT.lines.txt with "
                "the input line of each row");
  cmd->add_option("--precision", o->precision,
                  "float32 (default), int8, uint8, binary or ubinary: the vectors as sentence-transformers' "
                  "quantize_embeddings gives them. int8 / uint8: per dimension, step = (max - min) / 255 and "
                  "trunc((x - min) / step) (int8: minus 128), the ranges from --calibration or else from all "
                  "vectors of this call (held in memory until the end); binary / ubinary: the sign bits x > 0 "
                  "packed 8 to a byte (np.packbits; binary = packed - 128 as int8), dim / 8 values a row. The .npy "
                  "dtype is int8 (int8, binary) or uint8 (uint8, ubinary); JSON lines hold the integers")
      ->check(CLI::IsMember({"float32", "int8", "uint8", "binary", "ubinary"}));
  cmd->add_option("--calibration", o->calibration,
                  "int8 / uint8: float32 [N, dim] .npy (e.g. from tfm embed) whose per-dimension min and max are "
                  "the quantisation ranges (quantize_embeddings' calibration_embeddings); values outside them wrap "
                  "around as numpy's cast does, counted in a note");
  cmd->add_flag("--no-truncate", o->no_truncate,
                "Refuse a line longer than the model's max_seq_length instead of truncating it (the default, as "
                "text-embeddings-inference; a note on stderr counts the truncated lines)");
  cmd->add_option("--chunk", o->chunk,
                  "Embed lines longer than N tokens (special tokens and prompt included; at most max_seq_length) as "
                  "the mean (--chunk-pooling) of overlapping windows: the line's text tokens are cut into windows "
                  "of W = N - (special + prompt tokens) tokens, the first starting at token 0 and each next one "
                  "starting W - S tokens after the previous one (S = --stride tokens shared), until one reaches the "
                  "last token (it may be shorter), as Hugging Face tokenizers' return_overflowing_tokens with "
                  "stride S; each window gets the special tokens and prompt and is embedded as a line of its own. "
                  "A line of at most N tokens is embedded as without --chunk")
      ->check(whole_range(3, 1 << 20));
  cmd->add_option("--stride", o->stride,
                  "--chunk: tokens consecutive windows share (default 0; less than the window's text tokens)")
      ->check(whole_range(0, 1 << 20));
  cmd->add_option("--chunk-pooling", o->chunk_pooling,
                  "--chunk: mean (default) or max of the windows' vectors, element-wise, then L2-normalised when "
                  "the pipeline normalises (a Normalize module or --normalize)")
      ->check(CLI::IsMember({"mean", "max"}));
  cmd->add_flag("--quiet,-q", o->quiet, "No progress bar, no summary line and no notes (truncated lines, int8 ranges)");
  add_dtype_option(cmd, o->dtype);
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    std::string fmt = "jsonl";
    const std::string& out = o->output;
    auto ends = [&](const char* suf) {
      size_t n = std::strlen(suf);
      return out.size() >= n && out.compare(out.size() - n, n, suf) == 0;
    };
    if (!out.empty() && out != "-") {
      if (ends(".npy")) fmt = "npy";
      else if (!ends(".jsonl") && !ends(".json"))
        throw CLI::ValidationError("--output must end in .npy or .jsonl, got '" + out + "'");
    }
    if (!o->prompt.empty() && !o->prompt_name.empty())
      throw CLI::ValidationError("give --prompt or --prompt-name, not both");
    require_utf8("--prompt", o->prompt);
    EncoderOptions eo;  // SentenceTransformer.encode()'s pipeline, also for a plain folder with --pooling
    eo.pipeline = "sentence_transformers";
    eo.threads = o->threads;
    eo.dtype = o->dtype;
    eo.pooling = o->pooling;
    eo.prompt_name = o->prompt_name;
    eo.prompt = o->prompt;
    eo.no_prompt = o->no_prompt;
    eo.normalize = o->normalize;
    eo.max_seq_length = o->max_length;
    {  // Name the real problem before the loader's "has no modules.json" / "missing key 'vocab_size'". A missing
       // folder, or a file given as one, is Encoder's message ("X: no such model folder"), as in Python.
      std::error_code ec;
      const std::string cp = o->model + "/config.json";
      if (std::filesystem::exists(cp, ec))  // an unsupported folder is refused by inspect_model
        if (const ModelInfo info = inspect_model(o->model); info.translation)
          throw std::invalid_argument(cp + ": this is a " + info.model_type + " folder (a translation model), not an "
                                      "encoder; use 'tfm translate --model " + o->model + "'");
    }
    if ((o->stride != 0 || o->chunk_pooling != "mean") && o->chunk == 0)
      throw CLI::ValidationError("--stride and --chunk-pooling are for --chunk N");
    const EmbeddingPrecision precision = parse_precision(o->precision);
    if (!o->calibration.empty() && !precision_needs_ranges(precision))
      throw CLI::ValidationError("--calibration gives the ranges of --precision int8 or uint8");
    const Encoder model(o->model, eo);
    const int64_t D = model.embedding_dim(), max_seq_length = model.max_input_length();
    const int64_t QD = quantized_dim(precision, D);
    std::vector<float> ranges;  // int8 / uint8: [2, D], from --calibration or (empty) from all rows of the call
    if (!o->calibration.empty()) {
      const NpyData c = read_npy(o->calibration);
      if (c.descr != "<f4" || c.shape.size() != 2 || c.shape[0] < 1 || c.shape[1] != D)
        throw std::invalid_argument(o->calibration + ": calibration embeddings must be float32 [N >= 1, " +
                                    std::to_string(D) + "] (the model's dimension), got " + c.descr + " " +
                                    shape_str(c.shape));
      ranges = embedding_ranges(reinterpret_cast<const float*>(c.bytes.data()), c.shape[0], D);
    }
    EmbedOptions eo_batch;
    eo_batch.batch_size = o->batch_size;
    eo_batch.batch_tokens = o->batch_tokens;
    TokenizeOptions to;  // the whole line: truncated below (or refused, or cut into windows)
    to.max_length = 0;
    to.return_offsets = false;
    TokenizeOptions to_cut = to;
    to_cut.max_length = max_seq_length;  // cut to max_seq_length, as SentenceTransformer.encode()
    // --chunk: the tokens every window keeps: the prompt's (`prompt_tokens`, after the leading special tokens) and
    // the special tokens (`specials`, leading and trailing); the rest of a window is text.
    int64_t prompt_tokens = 0, specials = 0, window_text = 0;
    if (o->chunk) {
      if (o->chunk > max_seq_length)
        throw CLI::ValidationError("--chunk " + std::to_string(o->chunk) + " is more than the model's " +
                                   std::to_string(max_seq_length) + " tokens (max_seq_length)");
      const TextEncoding frame = model.tokenize("", to);  // the special tokens and the prompt of an empty text
      for (bool sp : frame.special) (sp ? specials : prompt_tokens) += 1;
      window_text = o->chunk - specials - prompt_tokens;
      if (window_text < 1)
        throw CLI::ValidationError("--chunk " + std::to_string(o->chunk) + " leaves no room for text next to the " +
                                   std::to_string(specials + prompt_tokens) + " special and prompt tokens");
      chunk_windows(0, window_text, o->stride);  // throws for a stride that is not below the window's text tokens
    }

    // Under mpirun (or with --output-shards) every rank embeds a contiguous run of whole chunks (line_shards.h).
    const ProcessGroup group = process_group();
    const bool sharded = group.world_size > 1 || o->output_shards;
    if (sharded && o->input == "-")
      throw std::invalid_argument("--input -: under mpirun (or with --output-shards) the input must be a file that "
                                  "every rank reads, not stdin");
    if (o->output_shards && (out.empty() || out == "-"))
      throw std::invalid_argument("--output-shards names each rank's file after --output; give --output FILE");
    // int8 / uint8 without --calibration: the ranges of every row of the call, known once all are embedded.
    const bool deferred = precision_needs_ranges(precision) && ranges.empty();
    if (deferred && sharded)
      throw std::invalid_argument(std::string("--precision ") + o->precision + " without --calibration takes its "
                                  "ranges from every embedding of the call; under mpirun (or with --output-shards) "
                                  "give --calibration FILE.npy");
    LinePlan plan;
    if (sharded) plan = plan_lines(o->input, o->chunk_lines, [&](const std::string& l) {
      return !(o->skip_empty && blank_line(l));
    });
    LineReader in;
    in.open(o->input);
    if (sharded) {
      in.skip_to(plan.first_line(group.rank));
      in.end_line = plan.end_line(group.rank);
    }
    Progress progress;
    progress.on = !o->quiet && isatty(2) && group.rank == 0;
    // Rows done so far; under mpirun rank 0 shows the sum over the ranks.
    auto show = [&](int64_t done, int64_t bytes, bool final = false) {
      if (!sharded) return progress.update(done, bytes, in.total_bytes, final);
      if (group.rank != 0) return group::report_progress(done);
      const int64_t sum = group::progress_sum(done);
      progress.update(sum, sum, plan.total_counted, final);
    };
    int64_t skipped = 0, truncated = 0, chunked = 0, wrapped = 0, range_rows = 0;
    std::vector<int64_t> kept_lines;  // --skip-empty: the input line of each row

    auto run = [&](std::FILE* f) {
      Writer w(f, fmt == "npy", QD, out.empty() || out == "-" ? std::string("stdout") : out, precision,
               /*header=*/!sharded);
      std::vector<uint8_t> qrow((size_t)(QD * (precision == EmbeddingPrecision::Float32 ? 4 : 1)));
      std::vector<float> held;           // deferred: every row, quantised at the end
      std::vector<int64_t> held_lines;
      auto write_row = [&](const float* r, int64_t line_no) {
        wrapped += quantize_embedding(r, D, precision, ranges.data(), qrow.data());
        w.row(qrow.data(), o->skip_empty ? line_no : 0);
      };
      std::vector<std::string> lines;
      std::vector<int64_t> line_nos;
      std::string line;
      bool eof = false;
      while (!eof) {
        lines.clear();
        line_nos.clear();
        while ((int64_t)lines.size() < o->chunk_lines) {
          if (!lines.empty() && in.paused()) break;  // a co-process waits for these lines' answer (line_shards.h)
          if (!in.next(line)) {  // an empty input gives an empty [0, dim] output, as in classify / rerank / fill-mask
            eof = true;
            break;
          }
          if (blank_line(line)) {
            if (o->skip_empty) {
              ++skipped;
              continue;
            }
            throw std::invalid_argument(in.name + ": line " + std::to_string(in.line_no) +
                                        " is empty; pass --skip-empty to leave empty lines out");
          }
          lines.push_back(line);
          line_nos.push_back(in.line_no);
        }
        const int64_t n = (int64_t)lines.size();
        if (n == 0) break;
        std::vector<TextEncoding> enc(n);
        std::vector<std::string> errors(n);
#pragma omp parallel for schedule(dynamic, 64)
        for (int64_t i = 0; i < n; ++i) {
          try {
            enc[i] = model.tokenize(lines[i], to);
          } catch (const std::exception& e) {
            errors[i] = e.what();
          }
        }
        // Each line's encodings: itself (truncated to max_seq_length unless --no-truncate), or with --chunk its
        // windows; first[i] is the index of line i's first one.
        std::vector<TextEncoding> windows;
        std::vector<int64_t> first(n + 1, 0);
        for (int64_t i = 0; i < n; ++i) {
          if (!errors[i].empty())
            throw std::invalid_argument(in.name + ": line " + std::to_string(line_nos[i]) + ": " + errors[i]);
          TextEncoding& e = enc[i];
          const int64_t len = (int64_t)e.input_ids.size();
          first[i] = (int64_t)windows.size();
          if (o->chunk && len > o->chunk) {
            ++chunked;
            // [leading special tokens][prompt][text][trailing special tokens]
            int64_t trail = 0;
            while (trail < len && e.special[(size_t)(len - 1 - trail)]) ++trail;
            const int64_t lead = specials - trail + prompt_tokens;
            for (const auto& [a, b] : chunk_windows(len - lead - trail, window_text, o->stride)) {
              std::vector<size_t> keep;
              for (int64_t k = 0; k < lead; ++k) keep.push_back((size_t)k);
              for (int64_t k = lead + a; k < lead + b; ++k) keep.push_back((size_t)k);
              for (int64_t k = len - trail; k < len; ++k) keep.push_back((size_t)k);
              TextEncoding wdw;
              auto take = [&](const auto& from, auto& to_) {
                if (from.size() != (size_t)len) return;
                for (size_t k : keep) to_.push_back(from[k]);
              };
              take(e.input_ids, wdw.input_ids), take(e.token_type_ids, wdw.token_type_ids);
              take(e.attention_mask, wdw.attention_mask), take(e.tokens, wdw.tokens);
              take(e.special, wdw.special), take(e.offsets, wdw.offsets);
              windows.push_back(std::move(wdw));
            }
            continue;
          }
          if (len > max_seq_length) {
            if (o->no_truncate)
              throw std::invalid_argument(in.name + ": line " + std::to_string(line_nos[i]) + " has " +
                                          std::to_string(len) + " tokens, more than the model's " +
                                          std::to_string(max_seq_length) + " (max_seq_length); without "
                                          "--no-truncate it is truncated, with --chunk N embedded whole");
            ++truncated;
            e = model.tokenize(lines[i], to_cut);
          }
          windows.push_back(std::move(e));
        }
        first[n] = (int64_t)windows.size();
        // Batches of similar length under --batch-tokens and --batch-size (tfm::length_batches), as
        // tfm::Encoder::embed of texts batches them.
        const FloatArray result = model.embed(windows, eo_batch);
        show(w.rows() + (int64_t)held_lines.size() + n, in.bytes);
        std::vector<float> pooled(D);
        for (int64_t i = 0; i < n; ++i) {
          const float* r = result.data() + first[i] * D;
          for (int64_t k = 0; k < (first[i + 1] - first[i]) * D; ++k)
            if (!std::isfinite(r[k]))
              throw std::runtime_error(in.name + ": line " + std::to_string(line_nos[i]) +
                                       ": the model produced a non-finite value");
          if (first[i + 1] - first[i] > 1) {
            pool_windows(r, first[i + 1] - first[i], D, o->chunk_pooling == "max", model.normalizes(), pooled.data());
            r = pooled.data();
          }
          if (deferred) {
            held.insert(held.end(), r, r + D);
            held_lines.push_back(line_nos[i]);
          } else {
            write_row(r, line_nos[i]);
          }
          if (o->skip_empty) kept_lines.push_back(line_nos[i]);
        }
        if (std::fflush(f) != 0) throw std::runtime_error("cannot write the embeddings: " + std::string(std::strerror(errno)));
      }
      if (deferred && !held_lines.empty()) {
        range_rows = (int64_t)held_lines.size();
        ranges = embedding_ranges(held.data(), range_rows, D);
        for (size_t i = 0; i < held_lines.size(); ++i) write_row(held.data() + i * D, held_lines[i]);
      }
      w.finish();
      if (!sharded) progress.update(w.rows(), in.bytes, in.total_bytes, true);
      return w.rows();
    };
    auto lines_text = [](const std::vector<int64_t>& nos) {
      std::string text;
      for (int64_t n : nos) text += std::to_string(n) + "\n";
      return text;
    };
    const bool lines_out = o->skip_empty && fmt == "npy";
    auto lines_path = [](const std::string& npy) { return npy.substr(0, npy.size() - 4) + ".lines.txt"; };

    int64_t rows = 0;
    std::string lines_file, wrote = out;
    if (!sharded && (out.empty() || out == "-")) {
      rows = run(stdout);
    } else if (!sharded) {
      write_file_atomic(out, [&](std::FILE* f) { rows = run(f); });
    } else {
      RankOutput part;
      const int64_t own = run(part.body());
      part.counts = {own, skipped, truncated, chunked, wrapped};
      if (lines_out) part.side = lines_text(kept_lines);
      const auto total = part.exchange(own, [&](int64_t sum) { progress.update(sum, sum, plan.total_counted); });
      progress.update(total[0], total[0], plan.total_counted, true);
      rows = total[0], skipped = total[1], truncated = total[2], chunked = total[3], wrapped = total[4];
      wrote = write_job_output(part, plan, out, o->output_shards, own, rows,
                               fmt == "npy" ? std::function<void(std::FILE*, int64_t)>([&](std::FILE* f, int64_t n) {
                                 Writer(f, true, QD, out, precision, false).write_header(n);
                               })
                                            : nullptr,
                               lines_out ? std::function<std::string(const std::string&)>(lines_path) : nullptr);
      if (lines_out && !o->output_shards) lines_file = lines_path(out);
      if (group.rank != 0) return;
    }
    if (!sharded && lines_out) {
      lines_file = lines_path(out);
      write_file_atomic(lines_file, lines_text(kept_lines));
    }
    if (truncated && !o->quiet)
      std::fprintf(stderr, "note: %s %s longer than the model's %lld tokens (max_seq_length) %s truncated; "
                   "--no-truncate refuses such lines, --chunk N embeds them whole\n", fmt_count(truncated).c_str(),
                   truncated == 1 ? "line was" : "lines were", (long long)max_seq_length,
                   truncated == 1 ? "and was" : "and were");
    if (range_rows > 0 && range_rows < 100 && !o->quiet)
      std::fprintf(stderr, "note: --precision %s ranges from %lld embedding%s; they are more stable from more, or "
                   "from --calibration FILE.npy (as sentence-transformers warns)\n", o->precision.c_str(),
                   (long long)range_rows, range_rows == 1 ? "" : "s");
    if (wrapped && !o->quiet)
      std::fprintf(stderr, "note: %s values fell outside the %s ranges and wrapped around, as quantize_embeddings' "
                   "numpy cast does\n", fmt_count(wrapped).c_str(), o->calibration.empty() ? "int8" : "calibration");
    if (!o->quiet) {
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - progress.start).count();
      std::fprintf(stderr, "embedded %s %s [%s, dim %lld] in %.2f s (%.0f sentences/s)%s%s%s\n",
                   fmt_count(rows).c_str(), rows == 1 ? "sentence" : "sentences", model.pooling().c_str(),
                   (long long)D, secs, secs > 0 ? rows / secs : 0.0,
                   skipped ? (", skipped " + fmt_count(skipped) + (skipped == 1 ? " empty line" : " empty lines")).c_str()
                           : "",
                   chunked ? (", " + fmt_count(chunked) + " in windows of " + std::to_string(o->chunk) + " tokens").c_str()
                           : "",
                   out.empty() || out == "-" ? "" : ("; wrote " + wrote +
                                                     (lines_file.empty() ? "" : " and " + lines_file + " (input line of each row)"))
                                                        .c_str());
    }
  });
}

}  // namespace tfm::cli

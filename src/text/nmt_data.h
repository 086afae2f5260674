// d2l.ai's fra-eng machine-translation data pipeline (reference: shared/reference/torch/d2lnmt.py:
// preprocess_nmt, tokenize_nmt, build_array_nmt, load_data_nmt, predict_seq2seq's source encoding) plus a
// reproducible minibatch shuffler.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "text/vocab.h"

namespace tfm {

// Python's str.lower() on UTF-8 text: full Unicode lowercase per code point (utf8proc tables), including the
// two context/multi-code-point rules CPython applies: U+0130 'İ' -> "i\u0307" and U+03A3 'Σ' -> 'ς' in the
// Final_Sigma context (after a cased letter, not followed by one, skipping case-ignorable characters).
// Throws std::invalid_argument "invalid UTF-8 at byte offset N" on malformed input.
std::string unicode_lower(std::string_view text);

// d2l preprocess_nmt: U+202F and U+00A0 -> ' ', lowercase as Python's str.lower(), and a ' ' inserted before each
// ',', '.', '!', '?' at code point index i > 0 whose previous code point (after replacement) is not ' '.
// Operates on code points; the previous-character test sees the original neighbour, so "..." -> ". . .".
// Throws std::invalid_argument naming the byte offset on invalid UTF-8 (callers add file name/line).
std::string preprocess_nmt(std::string_view text);

struct ParallelCorpus {
  // source[i], target[i]: tokens of pair i, split on single ' ' (so "a  b" -> {"a", "", "b"} as Python split(' ')).
  std::vector<std::vector<std::string>> source, target;
  // 1-based line numbers (within the lines read) that d2l skips silently because they do not have exactly two
  // tab-separated fields; the empty piece after a final '\n' is not counted. Lets the CLI warn.
  std::vector<int64_t> skipped_lines;
};

// d2l tokenize_nmt on preprocessed text: splits on '\n' and, like d2l's `if num_examples and i > num_examples`,
// reads lines 0..num_examples inclusive (num_examples + 1 lines); num_examples = 0 reads all lines.
// Throws std::invalid_argument for num_examples < 0.
ParallelCorpus tokenize_nmt(std::string_view preprocessed_text, int64_t num_examples);

// Reads a 'source<TAB>target' file (gzip-compressed if it starts with the gzip magic bytes), checks UTF-8, then
// preprocess_nmt + tokenize_nmt as d2l's load_data_nmt does. Throws std::runtime_error with messages like
// "fra.txt: cannot open: No such file or directory", "fra.txt: line 12: invalid UTF-8 at byte offset 4 (byte 0xff)",
// "fra.txt: no sentence pairs (expected lines 'source<TAB>target')".
ParallelCorpus read_nmt_file(const std::string& path, int64_t num_examples);

struct NmtArrays {
  std::vector<int64_t> src, tgt;                      // [N, num_steps] row-major token ids
  std::vector<int64_t> src_valid_len, tgt_valid_len;  // [N] number of non-<pad> ids per row
  int64_t num_steps = 0;
  int64_t size() const { return static_cast<int64_t>(src_valid_len.size()); }
};

// d2l build_array_nmt for both sides: each line -> vocab ids + <eos>, truncated to num_steps (a truncated line
// keeps no <eos>, as in d2l) or padded with <pad>; valid_len counts ids != <pad> (so a literal "<pad>" token in
// the text is not counted, as in d2l). Throws std::invalid_argument if num_steps < 1, source/target sizes differ,
// or a vocabulary lacks "<pad>" or "<eos>" (d2l would silently use id 0).
NmtArrays build_arrays_nmt(const ParallelCorpus& corpus, const Vocab& src_vocab, const Vocab& tgt_vocab,
                           int64_t num_steps);

struct EncodedSource {
  std::vector<int64_t> ids;  // [num_steps] token ids + <eos>, truncated or <pad>-padded
  // d2l uses the untruncated length (tokens + 1); it is clamped to num_steps here, which masks the same keys.
  int64_t valid_len = 0;
};

// predict_seq2seq's source side: unicode_lower(sentence) split on ' ' (no preprocess_nmt: the caller passes
// already-spaced text such as "go ."), ids + <eos>, truncate/pad to num_steps.
// Throws std::invalid_argument if num_steps < 1 or the vocabulary lacks "<pad>"/"<eos>", or on invalid UTF-8.
EncodedSource encode_source_sentence(std::string_view sentence, const Vocab& src_vocab, int64_t num_steps);

// Seeded minibatch order: each epoch() is a fresh permutation of 0..n-1 cut into batches of batch_size (the last
// one smaller when n % batch_size != 0). Fisher-Yates over std::mt19937_64 with our own unbiased bounded draw,
// because std::shuffle and std::uniform_int_distribution are implementation-defined and the order must be
// identical on every platform. (It is not torch.randperm's order.)
class BatchSampler {
 public:
  // Throws std::invalid_argument if n < 0 or batch_size < 1.
  BatchSampler(int64_t n, int64_t batch_size, uint64_t seed);
  std::vector<std::vector<int64_t>> epoch();

  // RNG state as text (std::mt19937_64's operator<<), for checkpoints; restoring it continues the same sequence of
  // epochs. set_state throws std::invalid_argument on text that does not parse.
  std::string state() const;
  void set_state(const std::string& state);

  int64_t n() const { return n_; }
  int64_t batch_size() const { return batch_size_; }

 private:
  int64_t n_, batch_size_;
  std::mt19937_64 rng_;
};

}  // namespace tfm

#include "text/nmt_data.h"

#include <utf8proc.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "io/text_file.h"

namespace tfm {

namespace {

// Decodes UTF-8 into code points; strict like Python's decoder (no overlongs, surrogates or > U+10FFFF).
std::vector<utf8proc_int32_t> decode_utf8(std::string_view text) {
  std::vector<utf8proc_int32_t> cps;
  cps.reserve(text.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t n = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n < 0) throw std::invalid_argument("invalid UTF-8 at byte offset " + std::to_string(i));
    cps.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return cps;
}

void append_utf8(std::string& out, utf8proc_int32_t cp) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// Unicode Case_Ignorable (DerivedCoreProperties): Mn, Me, Cf, Lm, Sk, or Word_Break MidLetter / MidNumLet /
// Single_Quote. utf8proc has no Word_Break property, so those code points are listed.
bool is_case_ignorable(utf8proc_int32_t c) {
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      break;
  }
  switch (c) {
    case 0x0027: case 0x002E: case 0x003A: case 0x00B7: case 0x0387: case 0x055F: case 0x05F4: case 0x2018:
    case 0x2019: case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55: case 0xFF07: case 0xFF0E:
    case 0xFF1A:
      return true;
    default:
      return false;
  }
}

// Unicode Cased = Lowercase | Uppercase | Lt. Letters with a case mapping cover Ll/Lu/Lt and the Roman numerals
// and circled letters of Other_Lowercase/Other_Uppercase; the remaining non-case-ignorable members (the only ones
// the Final_Sigma rule can see) are listed.
bool is_cased(utf8proc_int32_t c) {
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
      return true;
    default:
      break;
  }
  if (utf8proc_tolower(c) != c || utf8proc_toupper(c) != c) return true;
  return c == 0x00AA || c == 0x00BA || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
         (c >= 0x1F170 && c <= 0x1F189);
}

// CPython's handle_capital_sigma: Σ at index i is final when preceded by a cased letter and not followed by one,
// skipping case-ignorable characters on both sides.
bool is_final_sigma(const std::vector<utf8proc_int32_t>& cps, size_t i) {
  size_t j = i;
  while (j > 0 && is_case_ignorable(cps[j - 1])) --j;
  if (j == 0 || !is_cased(cps[j - 1])) return false;
  size_t k = i + 1;
  while (k < cps.size() && is_case_ignorable(cps[k])) ++k;
  return k == cps.size() || !is_cased(cps[k]);
}

// Python str.lower() on code points.
std::vector<utf8proc_int32_t> lower_code_points(const std::vector<utf8proc_int32_t>& cps) {
  std::vector<utf8proc_int32_t> out;
  out.reserve(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    const utf8proc_int32_t c = cps[i];
    if (c == 0x0130) {  // the one unconditional multi-code-point lowercase in SpecialCasing.txt
      out.push_back(0x0069);
      out.push_back(0x0307);
    } else if (c == 0x03A3) {
      out.push_back(is_final_sigma(cps, i) ? 0x03C2 : 0x03C3);
    } else {
      out.push_back(utf8proc_tolower(c));
    }
  }
  return out;
}

std::string encode_utf8(const std::vector<utf8proc_int32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (auto c : cps) append_utf8(out, c);
  return out;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) {
      parts.emplace_back(s.substr(start));
      return parts;
    }
    parts.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
}

// Throws "<path>: line L: invalid UTF-8 at byte offset B (byte 0xXX)" (B 0-based in the line, the unit of every
// "invalid UTF-8" message) for the first malformed sequence.
void check_utf8_lines(const std::string& path, std::string_view text) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  size_t i = 0, line = 1, line_start = 0;
  while (i < text.size()) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t n = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n < 0) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned>(p[i]));
      throw std::runtime_error(path + ": line " + std::to_string(line) + ": invalid UTF-8 at byte offset " +
                               std::to_string(i - line_start) + " (byte " + byte + ")");
    }
    i += static_cast<size_t>(n);
    if (cp == '\n') {
      ++line;
      line_start = i;
    }
  }
}


void require_token(const Vocab& vocab, const char* token, const char* which) {
  if (!vocab.contains(token)) {
    throw std::invalid_argument(std::string(which) + " vocabulary (" + std::to_string(vocab.size()) +
                                " tokens) has no '" + token + "'");
  }
}

// ids + <eos>, truncated or <pad>-padded to num_steps (d2l truncate_pad), written to out[0, num_steps).
// Returns the number of ids != <pad>.
int64_t fill_row(const Vocab& vocab, const std::vector<std::string>& tokens, int64_t num_steps, int64_t* out) {
  const int64_t pad = vocab["<pad>"];
  std::vector<int64_t> ids = vocab.ids(tokens);
  ids.push_back(vocab["<eos>"]);
  ids.resize(static_cast<size_t>(num_steps), pad);
  int64_t valid = 0;
  for (int64_t s = 0; s < num_steps; ++s) {
    out[s] = ids[static_cast<size_t>(s)];
    valid += out[s] != pad;
  }
  return valid;
}

// Uniform draw in [0, bound) without modulo bias: rejects the 2^64 mod bound lowest values.
uint64_t draw_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

std::string unicode_lower(std::string_view text) { return encode_utf8(lower_code_points(decode_utf8(text))); }

std::string preprocess_nmt(std::string_view text) {
  std::vector<utf8proc_int32_t> cps = decode_utf8(text);
  for (auto& c : cps) {
    if (c == 0x202F || c == 0x00A0) c = ' ';
  }
  cps = lower_code_points(cps);
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (size_t i = 0; i < cps.size(); ++i) {
    const utf8proc_int32_t c = cps[i];
    if (i > 0 && (c == ',' || c == '.' || c == '!' || c == '?') && cps[i - 1] != ' ') out += ' ';
    append_utf8(out, c);
  }
  return out;
}

ParallelCorpus tokenize_nmt(std::string_view text, int64_t num_examples) {
  if (num_examples < 0) throw std::invalid_argument("tokenize_nmt: num_examples " + std::to_string(num_examples) +
                                                    " < 0 (0 means all lines)");
  ParallelCorpus corpus;
  int64_t i = 0;
  size_t start = 0;
  for (;; ++i) {
    if (num_examples > 0 && i > num_examples) break;
    size_t end = text.find('\n', start);
    const bool last = end == std::string_view::npos;
    std::string_view line = text.substr(start, last ? std::string_view::npos : end - start);
    // CRLF files: d2l reads in Python's text mode, which turns "\r\n" into "\n".
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::vector<std::string> parts = split(line, '\t');
    if (parts.size() == 2) {
      corpus.source.push_back(split(parts[0], ' '));
      corpus.target.push_back(split(parts[1], ' '));
    } else if (!(last && line.empty())) {
      corpus.skipped_lines.push_back(i + 1);
    }
    if (last) break;
    start = end + 1;
  }
  return corpus;
}

ParallelCorpus read_nmt_file(const std::string& path, int64_t num_examples) {
  const std::string raw = read_file_maybe_gzip(path);
  const std::string hint = " (expected lines 'source<TAB>target')";
  if (raw.empty()) throw std::runtime_error(path + ": no sentence pairs" + hint);
  check_utf8_lines(path, raw);
  ParallelCorpus corpus = tokenize_nmt(preprocess_nmt(raw), num_examples);
  if (corpus.source.empty()) {
    const size_t fields = split(raw.substr(0, raw.find('\n')), '\t').size();
    throw std::runtime_error(path + ": no sentence pairs in " + std::to_string(corpus.skipped_lines.size()) +
                             " lines read" + hint + "; line 1 has " + std::to_string(fields) +
                             " tab-separated field(s)");
  }
  return corpus;
}

NmtArrays build_arrays_nmt(const ParallelCorpus& corpus, const Vocab& src_vocab, const Vocab& tgt_vocab,
                           int64_t num_steps) {
  if (num_steps < 1) throw std::invalid_argument("build_arrays_nmt: num_steps " + std::to_string(num_steps) + " < 1");
  if (corpus.source.size() != corpus.target.size()) {
    throw std::invalid_argument("build_arrays_nmt: " + std::to_string(corpus.source.size()) + " source lines but " +
                                std::to_string(corpus.target.size()) + " target lines");
  }
  for (const char* t : {"<pad>", "<eos>"}) {
    require_token(src_vocab, t, "build_arrays_nmt: source");
    require_token(tgt_vocab, t, "build_arrays_nmt: target");
  }
  const size_t n = corpus.source.size(), steps = static_cast<size_t>(num_steps);
  NmtArrays a;
  a.num_steps = num_steps;
  a.src.resize(n * steps);
  a.tgt.resize(n * steps);
  a.src_valid_len.resize(n);
  a.tgt_valid_len.resize(n);
  for (size_t i = 0; i < n; ++i) {
    a.src_valid_len[i] = fill_row(src_vocab, corpus.source[i], num_steps, &a.src[i * steps]);
    a.tgt_valid_len[i] = fill_row(tgt_vocab, corpus.target[i], num_steps, &a.tgt[i * steps]);
  }
  return a;
}

EncodedSource encode_source_sentence(std::string_view sentence, const Vocab& src_vocab, int64_t num_steps) {
  if (num_steps < 1) {
    throw std::invalid_argument("encode_source_sentence: num_steps " + std::to_string(num_steps) + " < 1");
  }
  require_token(src_vocab, "<pad>", "encode_source_sentence: source");
  require_token(src_vocab, "<eos>", "encode_source_sentence: source");
  EncodedSource e;
  e.ids.resize(static_cast<size_t>(num_steps));
  const std::vector<std::string> tokens = split(unicode_lower(sentence), ' ');
  fill_row(src_vocab, tokens, num_steps, e.ids.data());
  e.valid_len = std::min<int64_t>(static_cast<int64_t>(tokens.size()) + 1, num_steps);
  return e;
}

BatchSampler::BatchSampler(int64_t n, int64_t batch_size, uint64_t seed) : n_(n), batch_size_(batch_size), rng_(seed) {
  if (n < 0) throw std::invalid_argument("BatchSampler: n " + std::to_string(n) + " < 0");
  if (batch_size < 1) throw std::invalid_argument("BatchSampler: batch_size " + std::to_string(batch_size) + " < 1");
}

std::vector<std::vector<int64_t>> BatchSampler::epoch() {
  std::vector<int64_t> perm(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) perm[static_cast<size_t>(i)] = i;
  for (int64_t i = n_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(draw_below(rng_, static_cast<uint64_t>(i) + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  std::vector<std::vector<int64_t>> batches;
  for (int64_t s = 0; s < n_; s += batch_size_) {
    batches.emplace_back(perm.begin() + s, perm.begin() + std::min(s + batch_size_, n_));
  }
  return batches;
}

std::string BatchSampler::state() const {
  std::ostringstream ss;
  ss << rng_;
  return ss.str();
}

void BatchSampler::set_state(const std::string& state) {
  std::istringstream ss(state);
  std::mt19937_64 rng;
  ss >> rng;
  if (ss.fail()) throw std::invalid_argument("BatchSampler::set_state: not a std::mt19937_64 state (" +
                                             std::to_string(state.size()) + " bytes)");
  rng_ = rng;
}

}  // namespace tfm

#include "text/vocab.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "io/atomic_file.h"

namespace tfm {

namespace {
const char* const kUnk = "<unk>";
}

bool Vocab::add(const std::string& token) {
  auto [it, inserted] = token_to_idx_.emplace(token, static_cast<int64_t>(idx_to_token_.size()));
  if (inserted) idx_to_token_.push_back(token);
  return inserted;
}

Vocab::Vocab(const std::vector<std::vector<std::string>>& lines, int64_t min_freq,
             const std::vector<std::string>& reserved_tokens) {
  add(kUnk);
  for (const auto& t : reserved_tokens) {
    if (!add(t)) throw std::invalid_argument("Vocab: reserved token '" + t + "' is '<unk>' or listed twice");
  }
  // Counter in first-seen order, then a stable sort by descending count: the same order as Python's
  // sorted(Counter.items(), key=count, reverse=True).
  std::unordered_map<std::string, size_t> slot;
  std::vector<std::pair<std::string, int64_t>> freqs;
  for (const auto& line : lines) {
    for (const auto& t : line) {
      auto [it, inserted] = slot.emplace(t, freqs.size());
      if (inserted) freqs.emplace_back(t, 0);
      ++freqs[it->second].second;
    }
  }
  std::stable_sort(freqs.begin(), freqs.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [token, freq] : freqs) {
    if (freq < min_freq) break;
    add(token);
  }
}

Vocab Vocab::from_idx_to_token(std::vector<std::string> idx_to_token) {
  if (idx_to_token.empty()) throw std::invalid_argument("Vocab: empty token list (expected '<unk>' first)");
  if (idx_to_token[0] != kUnk) {
    throw std::invalid_argument("Vocab: token 0 is '" + idx_to_token[0] + "', expected '<unk>'");
  }
  Vocab v;
  for (size_t i = 0; i < idx_to_token.size(); ++i) {
    if (!v.add(idx_to_token[i])) {
      throw std::invalid_argument("Vocab: duplicate token '" + idx_to_token[i] + "' at index " + std::to_string(i) +
                                  " (first at index " + std::to_string(v.token_to_idx_.at(idx_to_token[i])) + ")");
    }
  }
  return v;
}

int64_t Vocab::operator[](const std::string& token) const {
  auto it = token_to_idx_.find(token);
  return it == token_to_idx_.end() ? 0 : it->second;
}

std::vector<int64_t> Vocab::ids(const std::vector<std::string>& tokens) const {
  std::vector<int64_t> out;
  out.reserve(tokens.size());
  for (const auto& t : tokens) out.push_back((*this)[t]);
  return out;
}

const std::string& Vocab::to_token(int64_t id) const {
  if (id < 0 || id >= size()) {
    throw std::out_of_range("Vocab::to_token: id " + std::to_string(id) + " outside [0, " + std::to_string(size()) +
                            ")");
  }
  return idx_to_token_[static_cast<size_t>(id)];
}

void Vocab::save(const std::string& path) const {
  std::string bytes;
  for (size_t i = 0; i < idx_to_token_.size(); ++i) {
    const std::string& t = idx_to_token_[i];
    if (t.find('\n') != std::string::npos || (!t.empty() && t.back() == '\r')) {
      throw std::invalid_argument(path + ": cannot save token " + std::to_string(i) +
                                  ": it contains a newline or ends in '\\r' (the file holds one token per line)");
    }
    bytes += idx_to_token_[i];
    bytes += '\n';
  }
  write_file_atomic(path, bytes);
}

Vocab Vocab::load(const std::string& path) {
  const std::string bytes = read_whole_file(path);
  if (bytes.empty()) throw std::runtime_error(path + ": empty vocabulary file (expected '<unk>' on line 1)");

  // Every token is '\n'-terminated; a missing final newline is tolerated. Empty lines are empty tokens
  // (d2l keeps "" from double spaces), so they are not skipped.
  std::vector<std::string> tokens;
  size_t start = 0;
  while (start < bytes.size()) {
    size_t end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    const size_t stop = end > start && bytes[end - 1] == '\r' ? end - 1 : end;  // CRLF (edited on Windows)
    tokens.emplace_back(bytes, start, stop - start);
    start = end + 1;
  }
  if (tokens[0] != kUnk) {
    throw std::runtime_error(path + ": line 1 is '" + tokens[0] + "', expected '<unk>'");
  }
  std::unordered_map<std::string, size_t> first_line;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto [it, inserted] = first_line.emplace(tokens[i], i + 1);
    if (!inserted) {
      throw std::runtime_error(path + ": line " + std::to_string(i + 1) + ": duplicate token '" + tokens[i] +
                               "' (first on line " + std::to_string(it->second) + ")");
    }
  }
  return from_idx_to_token(std::move(tokens));
}

}  // namespace tfm

// Token <-> id vocabulary with d2l.ai's construction rules (reference: shared/reference/torch/d2lnmt.py, Vocab).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace tfm {

class Vocab {
 public:
  // d2l's Vocab(tokens, min_freq, reserved_tokens): id 0 is "<unk>", then reserved_tokens in order, then corpus
  // tokens by descending frequency, ties in first-seen order (Python's sorted is stable over the Counter's
  // insertion order). Construction stops at the first token whose frequency is below min_freq; corpus tokens
  // equal to "<unk>" or a reserved token keep their earlier id.
  // Throws std::invalid_argument if reserved_tokens contains "<unk>" or a duplicate (d2l would silently build a
  // vocabulary whose idx_to_token and token_to_idx disagree).
  explicit Vocab(const std::vector<std::vector<std::string>>& lines, int64_t min_freq = 0,
                 const std::vector<std::string>& reserved_tokens = {});

  // Vocabulary with exactly this id order. Throws std::invalid_argument on an empty list, a first token other than
  // "<unk>" or a duplicate token (message names both indices).
  static Vocab from_idx_to_token(std::vector<std::string> idx_to_token);

  // Id of token; 0 (<unk>) for unknown tokens, like d2l's token_to_idx.get(token, 0).
  int64_t operator[](const std::string& token) const;
  // Ids of tokens, element-wise operator[].
  std::vector<int64_t> ids(const std::vector<std::string>& tokens) const;
  bool contains(const std::string& token) const { return token_to_idx_.count(token) != 0; }
  // Throws std::out_of_range naming the id and the vocabulary size.
  const std::string& to_token(int64_t id) const;
  int64_t size() const { return static_cast<int64_t>(idx_to_token_.size()); }
  const std::vector<std::string>& idx_to_token() const { return idx_to_token_; }

  // Writes one token per line, '\n'-terminated, in id order (an empty token is an empty line). Written atomically
  // (temporary file + rename) so an interrupted save never leaves a truncated vocabulary next to a checkpoint.
  // Throws std::invalid_argument if a token contains '\n', std::runtime_error on I/O failure (message has the path).
  void save(const std::string& path) const;
  // Reads a file written by save(). Throws std::runtime_error naming the path for: missing/unreadable file, empty
  // file, first token not "<unk>", duplicate token (with both line numbers).
  static Vocab load(const std::string& path);

 private:
  Vocab() = default;
  // Appends token; returns false (and changes nothing) if it is already present.
  bool add(const std::string& token);

  std::vector<std::string> idx_to_token_;
  std::unordered_map<std::string, int64_t> token_to_idx_;
};

}  // namespace tfm

// Models of the tokenizer engine: WordPiece, BPE, Unigram, WordLevel (tokenizers' models/).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <queue>
#include <stdexcept>

#include "text/tokenizer/components.h"
#include "text/tokenizer/unicode.h"

namespace tfm::tok {

using nlohmann::json;

void Model::build_reverse(const std::string& source) {
  int64_t max_id = -1;
  for (const auto& [t, id] : vocab_) {
    if (id < 0) throw std::runtime_error(source + ": model: token '" + t + "' has negative id " + std::to_string(id));
    max_id = std::max(max_id, id);
  }
  if (max_id >= (int64_t)vocab_.size() * 4 + 1024)
    throw std::runtime_error(source + ": model: largest id is " + std::to_string(max_id) + " but there are only " +
                             std::to_string(vocab_.size()) + " tokens");
  id_to_token_.assign((size_t)(max_id + 1), std::string());
  has_id_.assign((size_t)(max_id + 1), false);
  for (const auto& [t, id] : vocab_) {
    if (has_id_[(size_t)id])
      throw std::runtime_error(source + ": model: tokens '" + id_to_token_[(size_t)id] + "' and '" + t +
                               "' both have id " + std::to_string(id));
    id_to_token_[(size_t)id] = t;
    has_id_[(size_t)id] = true;
  }
}

namespace {

std::string byte_token(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  return buf;
}

// Byte offset of the start of the char after the one starting at `i`.
size_t next_char(std::string_view s, size_t i) {
  unsigned char b = (unsigned char)s[i];
  size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
  return std::min(s.size(), i + n);
}

Vocab read_vocab_object(const json& v, const std::string& source) {
  if (!v.is_object()) throw std::runtime_error(source + ": model.vocab must be an object token -> id");
  Vocab out;
  out.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it->is_number_integer())
      throw std::runtime_error(source + ": model.vocab['" + it.key() + "'] must be an integer id");
    out.emplace(it.key(), it->get<int64_t>());
  }
  return out;
}

// The model's vocabulary: the one read while parsing (moved from) or model.vocab of the tree.
Vocab vocab_of(const json& m, const std::string& source, Vocab* read) {
  return read ? std::move(*read) : read_vocab_object(m.at("vocab"), source);
}

std::string opt_str(const json& j, const char* key, const std::string& fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return j[key].get<std::string>();
}

// ---------------------------------------------------------------------------------------------------------

class WordPieceModel : public Model {
 public:
  WordPieceModel(Vocab v, std::string unk, std::string prefix, int64_t max_chars, const std::string& source)
      : unk_(std::move(unk)), prefix_(std::move(prefix)), max_chars_(max_chars) {
    vocab_ = std::move(v);
    build_reverse(source);
    unk_id_ = token_to_id(unk_);
  }
  std::string type() const override { return "WordPiece"; }
  std::string continuing_subword_prefix() const override { return prefix_; }

  void tokenize(std::string_view s, std::vector<Token>& out) const override {
    size_t nchars = 0;
    for (size_t i = 0; i < s.size(); i = next_char(s, i)) ++nchars;
    if ((int64_t)nchars > max_chars_) {
      push_unk(s, out);
      return;
    }
    size_t first = out.size();
    size_t start = 0;
    std::string cand;
    while (start < s.size()) {
      size_t end = s.size();
      bool found = false;
      while (start < end) {
        cand.clear();
        if (start > 0) cand += prefix_;
        cand.append(s.substr(start, end - start));
        auto it = vocab_.find(cand);
        if (it != vocab_.end()) {
          out.push_back({it->second, cand, (uint32_t)start, (uint32_t)end});
          found = true;
          break;
        }
        // Drop the last char.
        size_t k = end - 1;
        while (k > start && ((unsigned char)s[k] & 0xC0) == 0x80) --k;
        end = k;
      }
      if (!found) {
        out.resize(first);
        push_unk(s, out);
        return;
      }
      start = end;
    }
  }

 private:
  void push_unk(std::string_view s, std::vector<Token>& out) const {
    if (unk_id_ < 0) throw std::invalid_argument("WordPiece: the unknown token '" + unk_ + "' is not in the vocabulary");
    out.push_back({unk_id_, unk_, 0, (uint32_t)s.size()});
  }
  std::string unk_, prefix_;
  int64_t max_chars_;
  int64_t unk_id_ = -1;
};

// ---------------------------------------------------------------------------------------------------------

class WordLevelModel : public Model {
 public:
  WordLevelModel(Vocab v, std::string unk, const std::string& source) : unk_(std::move(unk)) {
    vocab_ = std::move(v);
    build_reverse(source);
    unk_id_ = token_to_id(unk_);
  }
  std::string type() const override { return "WordLevel"; }
  void tokenize(std::string_view s, std::vector<Token>& out) const override {
    auto it = vocab_.find(s);
    if (it != vocab_.end()) {
      out.push_back({it->second, std::string(s), 0, (uint32_t)s.size()});
      return;
    }
    if (unk_id_ < 0) throw std::invalid_argument("WordLevel: the unknown token '" + unk_ + "' is not in the vocabulary");
    out.push_back({unk_id_, unk_, 0, (uint32_t)s.size()});
  }

 private:
  std::string unk_;
  int64_t unk_id_ = -1;
};

// ---------------------------------------------------------------------------------------------------------

class BpeModel : public Model {
 public:
  BpeModel(const json& m, const std::string& source, Vocab* read) {
    vocab_ = vocab_of(m, source, read);
    build_reverse(source);
    if (m.contains("unk_token") && !m["unk_token"].is_null()) unk_ = m["unk_token"].get<std::string>();
    prefix_ = opt_str(m, "continuing_subword_prefix", "");
    suffix_ = opt_str(m, "end_of_word_suffix", "");
    fuse_unk_ = m.value("fuse_unk", false);
    byte_fallback_ = m.value("byte_fallback", false);
    ignore_merges_ = m.value("ignore_merges", false);
    if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
      throw std::runtime_error(source + ": model BPE: dropout " + m["dropout"].dump() +
                               " is not supported (tokenization would be random)");
    const json& merges = m.at("merges");
    if (!merges.is_array()) throw std::runtime_error(source + ": model BPE: merges must be a list");
    merges_.reserve(merges.size() * 2);
    int32_t rank = 0;
    for (const json& x : merges) {
      std::string a, b;
      if (x.is_string()) {
        std::string s = x.get<std::string>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          throw std::runtime_error(source + ": model BPE: merge '" + s + "' is not two tokens separated by a space");
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string()) {
        a = x[0].get<std::string>(), b = x[1].get<std::string>();
      } else {
        throw std::runtime_error(source + ": model BPE: merge " + x.dump() + " is neither \"a b\" nor [a, b]");
      }
      int64_t ia = token_to_id(a), ib = token_to_id(b);
      if (ia < 0 || ib < 0)
        throw std::runtime_error(source + ": model BPE: merge '" + a + " " + b + "' uses a token not in the vocabulary");
      std::string joined = a + (b.size() >= prefix_.size() ? b.substr(prefix_.size()) : std::string());
      int64_t inew = token_to_id(joined);
      if (inew < 0)
        throw std::runtime_error(source + ": model BPE: merge '" + a + " " + b + "' gives '" + joined +
                                 "', which is not in the vocabulary");
      merges_.emplace(key(ia, ib), std::pair<int32_t, int32_t>{rank, (int32_t)inew});
      ++rank;
    }
    if (unk_) unk_id_ = token_to_id(*unk_);
  }
  std::string type() const override { return "BPE"; }
  std::string continuing_subword_prefix() const override { return prefix_; }

  void tokenize(std::string_view s, std::vector<Token>& out) const override {
    if (s.empty()) return;
    if (ignore_merges_) {
      auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        out.push_back({it->second, std::string(s), 0, (uint32_t)s.size()});
        return;
      }
    }
    struct Sym {
      int64_t c;
      int prev, next;
      uint32_t len;
    };
    std::vector<Sym> syms;
    syms.reserve(s.size());
    auto add = [&](int64_t c, uint32_t len) {
      int n = (int)syms.size();
      syms.push_back({c, n - 1, -1, len});
      if (n > 0) syms[n - 1].next = n;
    };
    bool have_unk = false;
    int64_t unk_c = 0;
    uint32_t unk_len = 0;
    std::string piece;
    for (size_t i = 0; i < s.size();) {
      size_t end = next_char(s, i);
      bool is_first = i == 0, is_last = end == s.size();
      uint32_t byte_len = (uint32_t)(end - i);
      piece.clear();
      if (!prefix_.empty() && !is_first) piece += prefix_;
      piece.append(s.substr(i, end - i));
      if (!suffix_.empty() && is_last) piece += suffix_;
      auto it = vocab_.find(piece);
      if (it != vocab_.end()) {
        if (have_unk) add(unk_c, unk_len), have_unk = false;
        add(it->second, byte_len);
      } else {
        bool done = false;
        if (byte_fallback_) {
          std::vector<int64_t> ids;
          for (unsigned char b : piece) {
            int64_t id = token_to_id(byte_token(b));
            if (id < 0) break;
            ids.push_back(id);
          }
          if (ids.size() == piece.size()) {
            for (int64_t id : ids) add(id, 1);
            done = true;
          }
        }
        if (!done && unk_) {
          if (unk_id_ < 0)
            throw std::invalid_argument("BPE: the unknown token '" + *unk_ + "' is not in the vocabulary");
          if (have_unk && fuse_unk_) {
            unk_len += byte_len;
          } else {
            if (have_unk) add(unk_c, unk_len);
            have_unk = true, unk_c = unk_id_, unk_len = byte_len;
          }
        }
      }
      i = end;
    }
    if (have_unk) add(unk_c, unk_len);
    merge_all(syms);
    uint32_t pos = 0;
    for (const Sym& x : syms) {
      if (x.len == 0) continue;
      out.push_back({x.c, id_to_token_[(size_t)x.c], pos, pos + x.len});
      pos += x.len;
    }
  }

 private:
  static uint64_t key(int64_t a, int64_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

  template <class Sym>
  void merge_all(std::vector<Sym>& syms) const {
    struct M {
      int32_t rank;
      int pos;
      int32_t new_id;
    };
    auto cmp = [](const M& x, const M& y) { return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos; };
    std::priority_queue<M, std::vector<M>, decltype(cmp)> q(cmp);
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      auto it = merges_.find(key(syms[i].c, syms[i + 1].c));
      if (it != merges_.end()) q.push({it->second.first, (int)i, it->second.second});
    }
    while (!q.empty()) {
      M top = q.top();
      q.pop();
      Sym& cur = syms[(size_t)top.pos];
      if (cur.len == 0 || cur.next < 0) continue;
      int next_pos = cur.next;
      Sym right = syms[(size_t)next_pos];
      auto it = merges_.find(key(cur.c, right.c));
      if (it == merges_.end() || it->second.second != top.new_id) continue;
      cur.c = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      syms[(size_t)next_pos].len = 0;
      if (right.next >= 0 && (size_t)right.next < syms.size()) syms[(size_t)right.next].prev = top.pos;
      if (cur.prev >= 0) {
        auto p = merges_.find(key(syms[(size_t)cur.prev].c, cur.c));
        if (p != merges_.end()) q.push({p->second.first, cur.prev, p->second.second});
      }
      if (cur.next >= 0 && (size_t)cur.next < syms.size()) {
        auto n = merges_.find(key(cur.c, syms[(size_t)cur.next].c));
        if (n != merges_.end()) q.push({n->second.first, top.pos, n->second.second});
      }
    }
  }

  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::optional<std::string> unk_;
  int64_t unk_id_ = -1;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
};

// ---------------------------------------------------------------------------------------------------------

class UnigramModel : public Model {
 public:
  UnigramModel(const json& m, const std::string& source) {
    const json& v = m.at("vocab");
    if (!v.is_array()) throw std::runtime_error(source + ": model Unigram: vocab must be a list of [piece, score]");
    scores_.reserve(v.size());
    int64_t id = 0;
    for (const json& e : v) {
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
        throw std::runtime_error(source + ": model Unigram: vocab entry " + e.dump().substr(0, 80) +
                                 " is not [piece, score]");
      std::string piece = e[0].get<std::string>();
      double score = e[1].get<double>();
      vocab_.insert_or_assign(piece, id);  // a repeated piece takes its last id, as token_to_ids
      scores_.push_back(score);
      id_to_token_.push_back(piece);
      has_id_.push_back(true);
      max_len_ = std::max(max_len_, piece.size());
      for (size_t k = 1; k < piece.size(); ++k) prefixes_.emplace(piece.substr(0, k));
      ++id;
    }
    if (m.contains("unk_id") && !m["unk_id"].is_null()) {
      unk_id_ = m["unk_id"].get<int64_t>();
      if (unk_id_ < 0 || unk_id_ >= id)
        throw std::runtime_error(source + ": model Unigram: unk_id " + std::to_string(unk_id_) + " is outside the vocabulary");
    }
    byte_fallback_ = m.value("byte_fallback", false);
    min_score_ = std::numeric_limits<double>::infinity();
    for (double s : scores_) min_score_ = std::min(min_score_, s);
    if (scores_.empty()) min_score_ = 0;
  }
  std::string type() const override { return "Unigram"; }

  void tokenize(std::string_view s, std::vector<Token>& out) const override {
    if (s.empty()) return;
    const double unk_score = min_score_ - 10.0;
    struct Node {
      int64_t id = -1;
      double score = 0;
      long starts_at = -1;
    };
    std::vector<Node> best(s.size() + 1);
    size_t pos = 0;
    std::string_view sv = s;
    while (pos < s.size()) {
      double till_here = best[pos].score;
      bool has_single = false;
      size_t mblen = next_char(s, pos) - pos;
      // Every vocabulary piece that is a prefix of s[pos..] (common_prefix_search), shortest first.
      for (size_t len = 1; len <= max_len_ && pos + len <= s.size(); ++len) {
        std::string_view sub = sv.substr(pos, len);
        auto it = vocab_.find(sub);
        if (it != vocab_.end()) {
          Node& target = best[pos + len];
          double cand = scores_[(size_t)it->second] + till_here;
          if (target.starts_at < 0 || cand > target.score) {
            target.score = cand;
            target.starts_at = (long)pos;
            target.id = it->second;
          }
          if (len == mblen) has_single = true;
        }
        if (len < max_len_ && !prefixes_.count(sub)) break;
      }
      if (!has_single) {
        Node& target = best[pos + mblen];
        double cand = unk_score + till_here;
        if (target.starts_at < 0 || cand > target.score) {
          target.score = cand;
          target.starts_at = (long)pos;
          target.id = unk_id_;
        }
      }
      pos += mblen;
    }
    // Backtrack; consecutive unknown pieces are fused (fuse_unk is always on for Unigram).
    std::vector<std::pair<size_t, size_t>> pieces;  // reversed
    size_t ends_at = s.size();
    bool in_unk = false;
    size_t unk_end = 0, unk_start = 0;
    while (ends_at > 0) {
      const Node& node = best[ends_at];
      if (node.starts_at < 0) break;  // cannot happen: every char reaches the next boundary
      size_t st = (size_t)node.starts_at;
      if (unk_id_ >= 0 && node.id == unk_id_) {
        if (!in_unk) in_unk = true, unk_end = ends_at;
        unk_start = st;
      } else {
        if (in_unk) pieces.emplace_back(unk_start, unk_end), in_unk = false;
        pieces.emplace_back(st, ends_at);
      }
      ends_at = st;
    }
    if (in_unk) pieces.emplace_back(unk_start, unk_end);
    std::reverse(pieces.begin(), pieces.end());
    for (const auto& [a, b] : pieces) {
      std::string_view str = sv.substr(a, b - a);
      auto it = vocab_.find(str);
      if (it != vocab_.end()) {
        out.push_back({it->second, std::string(str), (uint32_t)a, (uint32_t)b});
        continue;
      }
      if (byte_fallback_) {
        std::vector<int64_t> ids;
        for (unsigned char c : str) {
          auto bt = vocab_.find(byte_token(c));
          if (bt == vocab_.end()) break;
          ids.push_back(bt->second);
        }
        if (ids.size() == str.size()) {
          for (size_t k = 0; k < ids.size(); ++k)
            out.push_back({ids[k], byte_token((unsigned char)str[k]), (uint32_t)a, (uint32_t)b});
          continue;
        }
      }
      if (unk_id_ < 0) throw std::invalid_argument("Unigram: text has a piece outside the vocabulary and no unk_id");
      out.push_back({unk_id_, std::string(str), (uint32_t)a, (uint32_t)b});
    }
  }

 private:
  std::vector<double> scores_;
  std::unordered_set<std::string, StrHash, std::equal_to<>> prefixes_;
  size_t max_len_ = 0;
  int64_t unk_id_ = -1;
  bool byte_fallback_ = false;
  double min_score_ = 0;
};

}  // namespace

std::unique_ptr<Model> make_wordpiece(Vocab vocab, const std::string& unk, const std::string& prefix,
                                      int64_t max_chars, const std::string& source) {
  return std::make_unique<WordPieceModel>(std::move(vocab), unk, prefix, max_chars, source);
}

std::unique_ptr<Model> make_model(const json& m, const std::string& source, Vocab* vocab) {
  if (!m.is_object()) throw std::runtime_error(source + ": model must be an object");
  std::string t = m.contains("type") && m["type"].is_string() ? m["type"].get<std::string>() : "";
  try {
    if (t.empty()) {  // older files: tell the model by its keys
      if (m.contains("merges")) t = "BPE";
      else if (m.contains("continuing_subword_prefix") || m.contains("max_input_chars_per_word")) t = "WordPiece";
      else if (m.contains("vocab") && m["vocab"].is_array()) t = "Unigram";
      else if (m.contains("vocab")) t = "WordLevel";
    }
    if (t == "WordPiece")
      return make_wordpiece(vocab_of(m, source, vocab), opt_str(m, "unk_token", "[UNK]"),
                            opt_str(m, "continuing_subword_prefix", "##"),
                            m.contains("max_input_chars_per_word") && !m["max_input_chars_per_word"].is_null()
                                ? m["max_input_chars_per_word"].get<int64_t>()
                                : 100,
                            source);
    if (t == "WordLevel")
      return std::make_unique<WordLevelModel>(vocab_of(m, source, vocab),
                                              opt_str(m, "unk_token", "<unk>"), source);
    if (t == "BPE") return std::make_unique<BpeModel>(m, source, vocab);
    if (t == "Unigram") return std::make_unique<UnigramModel>(m, source);
  } catch (const json::exception& e) {
    throw std::runtime_error(source + ": model " + t + ": " + e.what());
  }
  throw std::runtime_error(source + ": unsupported model " + (t.empty() ? "(no type)" : "type '" + t + "'"));
}

}  // namespace tfm::tok

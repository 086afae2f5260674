// The tokenizer engine: tokenizer.json loading and the encode / decode pipeline of tokenizers' TokenizerImpl.
#include "text/tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "io/json_util.h"
#include "text/tokenizer/components.h"
#include "text/tokenizer/unicode.h"

namespace tfm {

using nlohmann::json;
using namespace tok;

struct HfTokenizer::Impl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;

  struct Added {
    std::string content;
    std::u32string match;  // content, normalized when `normalized`
    int64_t id;
    bool special, lstrip, rstrip, single_word, normalized;
  };
  std::vector<Added> added;
  std::unordered_map<int64_t, size_t> added_by_id;
  Vocab added_by_content;
  // Candidates by first char, longest first, for the raw (normalized=false) and normalized sets.
  std::unordered_map<char32_t, std::vector<size_t>> raw_first, norm_first;

  std::optional<TruncationParams> truncation;
  std::optional<PaddingParams> padding;
  int64_t vocab_size = 0;
  int64_t pad_id = 0;

  void finish(const std::string& source);

  struct Seg {
    NormStr n;
    long added = -1;  // index into `added`, or -1
  };
  void split_added(NormStr n, bool normalized_set, std::vector<Seg>& out) const;
  Encoding encode_sequence(std::string_view text, int type_id, size_t stop_at, bool from_end) const;
  void word_tokens(const NormStr& w, Encoding& e, std::vector<Token>& scratch, int64_t word) const;
};

namespace {

void push_token(Encoding& e, int64_t id, std::string tok, std::pair<int64_t, int64_t> off, int seq, int64_t word) {
  e.words.push_back(word);
  e.input_ids.push_back(id);
  e.tokens.push_back(std::move(tok));
  e.offsets.push_back(off);
  e.token_type_ids.push_back(seq);
  e.attention_mask.push_back(1);
  e.special_tokens_mask.push_back(0);
  e.sequence_ids.push_back(seq);
}

void truncate_encoding(Encoding& e, size_t n, Side dir) {
  if (e.input_ids.size() <= n) return;
  auto cut = [&](auto& v) {
    if (dir == Side::Right) v.resize(n);
    else v.erase(v.begin(), v.end() - (long)n);
  };
  cut(e.input_ids), cut(e.token_type_ids), cut(e.attention_mask), cut(e.tokens), cut(e.offsets),
      cut(e.special_tokens_mask), cut(e.sequence_ids), cut(e.words);
}

void merge_into(Encoding& dst, Encoding&& src) {
  auto cat = [](auto& a, auto& b) { a.insert(a.end(), std::make_move_iterator(b.begin()), std::make_move_iterator(b.end())); };
  cat(dst.input_ids, src.input_ids);
  cat(dst.token_type_ids, src.token_type_ids);
  cat(dst.attention_mask, src.attention_mask);
  cat(dst.tokens, src.tokens);
  cat(dst.offsets, src.offsets);
  cat(dst.special_tokens_mask, src.special_tokens_mask);
  cat(dst.sequence_ids, src.sequence_ids);
  cat(dst.words, src.words);
}

void pad_encoding(Encoding& e, size_t target, const PaddingParams& p) {
  size_t L = e.input_ids.size();
  if (L >= target) return;
  size_t n = target - L;
  auto ext = [&](auto& v, auto value) {
    if (p.direction == Side::Right) v.insert(v.end(), n, value);
    else v.insert(v.begin(), n, value);
  };
  ext(e.input_ids, p.pad_id);
  ext(e.token_type_ids, p.pad_type_id);
  ext(e.attention_mask, (int64_t)0);
  ext(e.tokens, p.pad_token);
  ext(e.offsets, std::pair<int64_t, int64_t>{0, 0});
  ext(e.special_tokens_mask, (int64_t)1);
  ext(e.sequence_ids, -1);
  ext(e.words, (int64_t)-1);
}

size_t padded_target(size_t longest, const PaddingParams& p) {
  size_t t = p.fixed_length ? (size_t)*p.fixed_length : longest;
  if (p.pad_to_multiple_of > 0 && t % (size_t)p.pad_to_multiple_of != 0)
    t += (size_t)p.pad_to_multiple_of - t % (size_t)p.pad_to_multiple_of;
  return t;
}

bool ends_with_word(const std::u32string& s, size_t end) { return end > 0 && is_alphanumeric_word(s[end - 1]); }
bool starts_with_word(const std::u32string& s, size_t start) {
  return start < s.size() && is_alphanumeric_word(s[start]);
}

}  // namespace

// tokenizers' AddedVocabulary::find_matches + split_with_indices (leftmost-longest, then single_word / lstrip /
// rstrip).
void HfTokenizer::Impl::split_added(NormStr n, bool normalized_set, std::vector<Seg>& out) const {
  const auto& first = normalized_set ? norm_first : raw_first;
  if (first.empty() || n.s.empty()) {
    if (!n.s.empty()) out.push_back({std::move(n), -1});
    return;
  }
  const std::u32string& s = n.s;
  size_t start_offset = 0;
  size_t i = 0;
  while (i < s.size()) {
    auto it = first.find(s[i]);
    long best = -1;
    if (it != first.end())
      for (size_t k : it->second) {
        const std::u32string& m = added[k].match;
        if (m.size() <= s.size() - i && s.compare(i, m.size(), m) == 0) {
          best = (long)k;
          break;  // longest first
        }
      }
    if (best < 0) {
      ++i;
      continue;
    }
    const Added& a = added[(size_t)best];
    size_t start = i, stop = i + a.match.size();
    if (a.single_word) {
      bool start_space = start == 0 || !ends_with_word(s, start);
      bool stop_space = stop == s.size() || !starts_with_word(s, stop);
      if (!start_space || !stop_space) {
        i = stop;  // the discarded match is still consumed (non-overlapping iteration)
        continue;
      }
    }
    if (a.lstrip) {
      size_t ns = start;
      while (ns > 0 && is_whitespace(s[ns - 1])) --ns;
      start = std::max(ns, start_offset);
    }
    if (a.rstrip)
      while (stop < s.size() && is_whitespace(s[stop])) ++stop;
    if (start_offset < start) out.push_back({n.slice(start_offset, start), -1});
    out.push_back({n.slice(start, stop), best});
    start_offset = stop;
    i = stop;
  }
  if (start_offset < s.size()) out.push_back({n.slice(start_offset, s.size()), -1});
}

void HfTokenizer::Impl::word_tokens(const NormStr& w, Encoding& e, std::vector<Token>& toks, int64_t word) const {
  std::string u;
  u.reserve(w.s.size());
  std::vector<uint32_t> char_of_byte;
  char_of_byte.reserve(w.s.size() + 1);
  for (size_t i = 0; i < w.s.size(); ++i) {
    size_t before = u.size();
    append_utf8(w.s[i], u);
    char_of_byte.insert(char_of_byte.end(), u.size() - before, (uint32_t)i);
  }
  toks.clear();
  model->tokenize(u, toks);
  int seq = e.sequence_ids.empty() ? 0 : e.sequence_ids.back();
  (void)seq;
  for (Token& t : toks) {
    std::pair<int64_t, int64_t> off;
    if (t.start < t.end && t.end <= u.size()) {
      uint32_t cs = char_of_byte[t.start], ce = char_of_byte[t.end - 1];
      off = {w.al[cs].first, w.al[ce].second};
    } else {
      off = {w.orig_begin, w.orig_begin};
    }
    push_token(e, t.id, std::move(t.value), off, 0, word);
  }
}

Encoding HfTokenizer::Impl::encode_sequence(std::string_view text, int type_id, size_t stop_at, bool from_end) const {
  std::u32string u = decode_utf8(text);
  Encoding e;
  std::vector<Seg> raw;
  split_added(NormStr::from_original(u, 0), false, raw);
  std::vector<Seg> segs;
  for (Seg& s : raw) {
    if (s.added >= 0) {
      segs.push_back(std::move(s));
      continue;
    }
    if (normalizer) normalizer->normalize(s.n);
    split_added(std::move(s.n), true, segs);
  }
  // Units: added tokens and pre-tokenized words, in order.
  std::vector<Seg> units;
  std::vector<NormStr> words;
  for (Seg& s : segs) {
    if (s.added >= 0) {
      units.push_back(std::move(s));
      continue;
    }
    words.clear();
    words.push_back(std::move(s.n));
    if (pre_tokenizer) pre_tokenizer->pre_tokenize(words);
    for (NormStr& w : words)
      if (!w.s.empty()) units.push_back({std::move(w), -1});
  }
  // With truncation, tokenizers stops after the word that reaches max_length tokens (added tokens count but do
  // not stop it), counting from the end when truncating on the left.
  std::vector<Token> scratch;
  // The word of a token is its unit's index (tokenizers' PreTokenizedString::into_encoding: the split's index).
  auto add_unit = [&](Seg& s, Encoding& into, size_t k) {
    if (s.added >= 0) {
      const Added& a = added[(size_t)s.added];
      push_token(into, a.id, encode_utf8(s.n.s), {s.n.al.front().first, s.n.al.back().second}, 0, (int64_t)k);
      return false;
    }
    word_tokens(s.n, into, scratch, (int64_t)k);
    return true;
  };
  if (!from_end || stop_at == 0) {
    for (size_t k = 0; k < units.size(); ++k)
      if (add_unit(units[k], e, k) && stop_at > 0 && e.input_ids.size() >= stop_at) break;
  } else {
    std::vector<Encoding> parts;
    size_t count = 0;
    for (size_t k = units.size(); k-- > 0;) {
      parts.emplace_back();
      bool word = add_unit(units[k], parts.back(), k);
      count += parts.back().input_ids.size();
      if (word && count >= stop_at) break;
    }
    for (size_t k = parts.size(); k-- > 0;) merge_into(e, std::move(parts[k]));
  }
  std::fill(e.token_type_ids.begin(), e.token_type_ids.end(), type_id);
  std::fill(e.sequence_ids.begin(), e.sequence_ids.end(), type_id);
  return e;
}

void HfTokenizer::Impl::finish(const std::string& source) {
  vocab_size = model->size();
  for (const Added& a : added) vocab_size = std::max(vocab_size, a.id + 1);
  // Matching sets: normalized tokens are matched in their normalized form.
  for (size_t k = 0; k < added.size(); ++k) {
    Added& a = added[k];
    if (a.content.empty()) throw std::runtime_error(source + ": added token with id " + std::to_string(a.id) + " is empty");
    a.match = decode_utf8(a.content);
    if (a.normalized && normalizer) {
      NormStr n = NormStr::from_original(a.match, 0);
      normalizer->normalize(n);
      a.match = n.s;
    }
    if (a.match.empty()) continue;
    (a.normalized ? norm_first : raw_first)[a.match[0]].push_back(k);
    added_by_id.emplace(a.id, k);
    added_by_content.emplace(a.content, a.id);
  }
  for (auto* m : {&raw_first, &norm_first})
    for (auto& [c, v] : *m)
      std::stable_sort(v.begin(), v.end(), [&](size_t x, size_t y) { return added[x].match.size() > added[y].match.size(); });
  if (padding) {
    pad_id = padding->pad_id;
  } else {
    pad_id = 0;
    for (const char* t : {"[PAD]", "<pad>", "<|padding|>"}) {
      auto it = added_by_content.find(t);
      int64_t id = it != added_by_content.end() ? it->second : model->token_to_id(t);
      if (id >= 0) {
        pad_id = id;
        break;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Loading.

namespace {

std::optional<TruncationParams> parse_truncation(const json& j, const std::string& source) {
  if (!j.contains("truncation") || j["truncation"].is_null()) return std::nullopt;
  const json& t = j["truncation"];
  if (!t.is_object()) throw std::runtime_error(source + ": truncation must be an object or null");
  TruncationParams p;
  p.max_length = json_int(t, "max_length", source);
  if (p.max_length < 1)
    throw std::runtime_error(source + ": truncation max_length must be positive, found " + std::to_string(p.max_length));
  std::string strat = json_string_or(t, "strategy", "LongestFirst", source);
  if (strat == "LongestFirst") p.strategy = TruncationStrategy::LongestFirst;
  else if (strat == "OnlyFirst") p.strategy = TruncationStrategy::OnlyFirst;
  else if (strat == "OnlySecond") p.strategy = TruncationStrategy::OnlySecond;
  else throw std::runtime_error(source + ": truncation strategy '" + strat + "' is unknown");
  std::string dir = json_string_or(t, "direction", "Right", source);
  if (dir != "Right" && dir != "Left") throw std::runtime_error(source + ": truncation direction '" + dir + "' is unknown");
  p.direction = dir == "Left" ? Side::Left : Side::Right;
  p.stride = json_int_or(t, "stride", 0, source);
  if (p.stride < 0) throw std::runtime_error(source + ": truncation stride must be >= 0");
  return p;
}

std::optional<PaddingParams> parse_padding(const json& j, const std::string& source) {
  if (!j.contains("padding") || j["padding"].is_null()) return std::nullopt;
  const json& pj = j["padding"];
  if (!pj.is_object()) throw std::runtime_error(source + ": padding must be an object or null");
  PaddingParams p;
  if (pj.contains("strategy") && !pj["strategy"].is_null()) {
    const json& s = pj["strategy"];
    if (s.is_object() && s.contains("Fixed")) {
      p.fixed_length = s["Fixed"].get<int64_t>();
      if (*p.fixed_length < 0) throw std::runtime_error(source + ": padding Fixed length must be >= 0");
    } else if (s != json("BatchLongest")) {
      throw std::runtime_error(source + ": padding strategy " + s.dump() + " is unknown");
    }
  }
  std::string dir = json_string_or(pj, "direction", "Right", source);
  if (dir != "Right" && dir != "Left") throw std::runtime_error(source + ": padding direction '" + dir + "' is unknown");
  p.direction = dir == "Left" ? Side::Left : Side::Right;
  if (pj.contains("pad_to_multiple_of") && !pj["pad_to_multiple_of"].is_null())
    p.pad_to_multiple_of = json_int(pj, "pad_to_multiple_of", source);
  if (p.pad_to_multiple_of < 0) throw std::runtime_error(source + ": padding pad_to_multiple_of must be >= 0");
  p.pad_id = json_int_or(pj, "pad_id", 0, source);
  p.pad_type_id = json_int_or(pj, "pad_type_id", 0, source);
  p.pad_token = json_string_or(pj, "pad_token", "[PAD]", source);
  return p;
}

// json::parse for tokenizer.json, except that model.vocab (an object token -> id) goes straight into a Vocab and
// the tree holds an empty object there: building nlohmann's tree of a 30,522-token vocabulary (std::map nodes),
// reading it back and freeing it would be most of loading bert-base-uncased's tokenizer.json (BENCHMARKS.md has
// the measurement). Everything else is nlohmann's DOM parser: the same tree, the same parse errors; a duplicate
// key keeps its last value, as the tree does. A vocabulary value that is not an integer is remembered and reported
// after a successful parse, with read_vocab_object's message.
class VocabSax {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  VocabSax(json& root, tok::Vocab& vocab) : dom_(root, true), vocab_(vocab) {}
  bool read_vocab() const { return read_; }
  const std::string* bad_key() const { return bad_ ? &bad_key_ : nullptr; }

  bool null() { return in_vocab_ ? not_integer() : dom_.null(); }
  bool boolean(bool v) { return in_vocab_ ? not_integer() : dom_.boolean(v); }
  bool number_integer(number_integer_t v) {
    if (!in_vocab_) return dom_.number_integer(v);
    if (!skip_) vocab_[key_] = v;
    return true;
  }
  bool number_unsigned(number_unsigned_t v) {
    if (!in_vocab_) return dom_.number_unsigned(v);
    if (!skip_) vocab_[key_] = (int64_t)v;  // as json::get<int64_t> converts it
    return true;
  }
  bool number_float(number_float_t v, const string_t& text) {
    return in_vocab_ ? not_integer() : dom_.number_float(v, text);
  }
  bool string(string_t& v) { return in_vocab_ ? not_integer() : dom_.string(v); }
  bool binary(binary_t& v) { return in_vocab_ ? not_integer() : dom_.binary(v); }
  bool key(string_t& k) {
    if (in_vocab_) {
      if (!skip_) key_ = k;
      return true;
    }
    frames_.back().key = k;
    return dom_.key(k);
  }
  bool start_object(std::size_t n) {
    if (in_vocab_) return nested();
    const bool vocab = frames_.size() == 2 && frames_[0].object && frames_[0].key == "model" && frames_[1].object &&
                       frames_[1].key == "vocab";
    frames_.push_back({true, {}});
    if (!vocab) return dom_.start_object(n);
    in_vocab_ = read_ = true;
    vocab_.clear();  // a second "model" or "vocab" key: the last one counts, as in the tree
    vocab_.reserve(32768);
    return dom_.start_object(0);
  }
  bool end_object() {
    if (in_vocab_ && skip_) return --skip_, true;
    frames_.pop_back();
    in_vocab_ = false;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (in_vocab_) return nested();
    frames_.push_back({false, {}});
    return dom_.start_array(n);
  }
  bool end_array() {
    if (in_vocab_) return --skip_, true;  // only arrays nested in a vocabulary value reach here inside it
    frames_.pop_back();
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t pos, const std::string& token, const Exception& e) {
    return dom_.parse_error(pos, token, e);  // throws e (json::parse_error, ...) as its own type
  }

 private:
  struct Frame {
    bool object;
    std::string key;  // the object's current key
  };
  bool not_integer() {
    if (!skip_ && !bad_) {
      bad_ = true;
      bad_key_ = key_;
    }
    return true;
  }
  bool nested() {  // an object or array as a vocabulary value: not an integer; its contents are skipped
    not_integer();
    ++skip_;
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  tok::Vocab& vocab_;
  std::vector<Frame> frames_;
  bool in_vocab_ = false, read_ = false, bad_ = false;
  int skip_ = 0;  // depth of containers nested in a vocabulary value
  std::string key_, bad_key_;
};

}  // namespace

HfTokenizer HfTokenizer::from_json_text(const std::string& text, const std::string& source) {
  json j;
  tok::Vocab vocab;
  VocabSax sax(j, vocab);
  try {
    json::sax_parse(text, &sax);
  } catch (const json::parse_error& e) {
    throw std::runtime_error(source + ": invalid JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  }
  if (const std::string* k = sax.bad_key())
    throw std::runtime_error(source + ": model.vocab['" + *k + "'] must be an integer id");
  if (!j.is_object()) throw std::runtime_error(source + ": expected a JSON object, found " + std::string(j.type_name()));
  auto impl = std::make_shared<Impl>();
  try {
    if (!j.contains("model")) throw std::runtime_error(source + ": no \"model\"");
    impl->model = make_model(j["model"], source, sax.read_vocab() ? &vocab : nullptr);
    impl->normalizer = make_normalizer(j.value("normalizer", json()), source);
    impl->pre_tokenizer = make_pre_tokenizer(j.value("pre_tokenizer", json()), source);
    impl->post_processor = make_post_processor(j.value("post_processor", json()), source);
    impl->decoder = make_decoder(j.value("decoder", json()), source);
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      if (!j["added_tokens"].is_array()) throw std::runtime_error(source + ": added_tokens must be a list");
      for (const json& a : j["added_tokens"]) {
        Impl::Added t;
        t.content = json_string(a, "content", source);
        t.id = json_int(a, "id", source);
        if (t.id < 0) throw std::runtime_error(source + ": added token '" + t.content + "' has negative id");
        t.special = json_bool_or(a, "special", false, source);
        t.lstrip = json_bool_or(a, "lstrip", false, source);
        t.rstrip = json_bool_or(a, "rstrip", false, source);
        t.single_word = json_bool_or(a, "single_word", false, source);
        t.normalized = json_bool_or(a, "normalized", !t.special, source);
        int64_t in_model = impl->model->token_to_id(t.content);
        if (in_model >= 0 && in_model != t.id)
          throw std::runtime_error(source + ": added token '" + t.content + "' has id " + std::to_string(t.id) +
                                   ", the vocabulary gives it id " + std::to_string(in_model));
        const std::string* other = impl->model->id_to_token(t.id);
        if (other && *other != t.content)
          throw std::runtime_error(source + ": added token '" + t.content + "' has id " + std::to_string(t.id) +
                                   ", which is already '" + *other + "'");
        if (t.id > impl->model->size() + (int64_t)j["added_tokens"].size() + 1024)
          throw std::runtime_error(source + ": added token '" + t.content + "' has id " + std::to_string(t.id) +
                                   ", far beyond the vocabulary of " + std::to_string(impl->model->size()));
        impl->added.push_back(std::move(t));
      }
    }
    impl->truncation = parse_truncation(j, source);
    impl->padding = parse_padding(j, source);
  } catch (const json::exception& e) {
    throw std::runtime_error(source + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(source + ": " + e.what());
  }
  impl->finish(source);
  HfTokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

HfTokenizer HfTokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path + ": read error");
  return from_json_text(ss.str(), path);
}

HfTokenizer HfTokenizer::from_bert_vocab(const std::string& path, const BertOptions& o) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream ss;  // read whole, then split into a map sized once (start-up of one-sentence commands)
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path + ": read error");
  const std::string text = ss.str();
  Vocab vocab;
  vocab.reserve((size_t)std::count(text.begin(), text.end(), '\n') + 1);
  int64_t id = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    // A repeated token takes its last id, as in transformers' load_vocab.
    vocab.insert_or_assign(std::string(line), id);
    ++id;
    pos = end + 1;
  }
  if (id == 0) throw std::runtime_error(path + ": vocabulary file is empty");
  auto need = [&](const char* tok, const char* role) {
    auto it = vocab.find(tok);
    if (it == vocab.end()) throw std::runtime_error(path + ": " + role + " token '" + tok + "' is not in the vocabulary");
    return it->second;
  };
  int64_t cls = need("[CLS]", "classifier"), sep = need("[SEP]", "separator");
  need("[UNK]", "unknown");
  need("[PAD]", "padding");
  auto impl = std::make_shared<Impl>();
  std::vector<Impl::Added> added;
  for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) {
    auto it = vocab.find(s);
    if (it != vocab.end()) added.push_back({s, {}, it->second, true, false, false, false, false});
  }
  impl->model = make_wordpiece(std::move(vocab), "[UNK]", "##", 100, path);
  impl->normalizer = make_bert_normalizer(o.clean_text, o.handle_chinese_chars, o.strip_accents, o.lowercase);
  impl->pre_tokenizer = make_bert_pre_tokenizer();
  impl->post_processor = make_bert_processing("[CLS]", cls, "[SEP]", sep);
  impl->decoder = make_wordpiece_decoder("##", true);
  impl->added = std::move(added);
  impl->finish(path);
  HfTokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

// ---------------------------------------------------------------------------------------------------------
// Encoding.

Encoding HfTokenizer::encode(std::string_view text, const std::string_view* pair, const EncodeCall& call) const {
  const Impl& m = *impl_;
  if (call.max_length < 0) throw std::invalid_argument("max_length must be >= 0, got " + std::to_string(call.max_length));
  std::optional<TruncationParams> trunc = m.truncation;
  if (call.max_length > 0) {
    if (!trunc) trunc = TruncationParams{};
    trunc->max_length = call.max_length;
  }
  if (trunc && call.strategy) trunc->strategy = *call.strategy;
  if (trunc && call.direction) trunc->direction = *call.direction;

  size_t stop_at = trunc ? (size_t)trunc->max_length : 0;
  bool from_end = trunc && trunc->direction == Side::Left;
  std::vector<Encoding> encs;
  encs.push_back(m.encode_sequence(text, 0, stop_at, from_end));
  if (pair) encs.push_back(m.encode_sequence(*pair, 1, stop_at, from_end));

  if (trunc) {
    size_t n_added = call.add_special_tokens && m.post_processor ? m.post_processor->added_tokens(pair != nullptr) : 0;
    if ((size_t)trunc->max_length < n_added)
      throw std::invalid_argument("max_length " + std::to_string(trunc->max_length) + " cannot hold the " +
                                  std::to_string(n_added) + " special tokens");
    size_t max_len = (size_t)trunc->max_length - n_added;
    size_t n1 = encs[0].input_ids.size(), n2 = pair ? encs[1].input_ids.size() : 0;
    size_t total = n1 + n2;
    if (total > max_len) {
      size_t to_remove = total - max_len;
      switch (trunc->strategy) {
        case TruncationStrategy::LongestFirst:
          if (!pair) {
            truncate_encoding(encs[0], total - to_remove, trunc->direction);
          } else {
            size_t a = n1, b = n2;
            bool swap = a > b;
            if (swap) std::swap(a, b);
            b = a > max_len ? a : std::max(a, max_len - a);
            if (a + b > max_len) {
              a = max_len / 2;
              b = a + max_len % 2;
            }
            if (swap) std::swap(a, b);
            truncate_encoding(encs[0], a, trunc->direction);
            truncate_encoding(encs[1], b, trunc->direction);
          }
          break;
        case TruncationStrategy::OnlyFirst:
        case TruncationStrategy::OnlySecond: {
          Encoding* target = trunc->strategy == TruncationStrategy::OnlyFirst ? &encs[0] : pair ? &encs[1] : nullptr;
          if (!target || target->input_ids.size() <= to_remove)
            throw std::invalid_argument(
                "truncation: the sequence to truncate is too short to respect max_length " +
                std::to_string(trunc->max_length));
          truncate_encoding(*target, target->input_ids.size() - to_remove, trunc->direction);
          break;
        }
      }
    }
  }
  if (m.post_processor) m.post_processor->process(encs, call.add_special_tokens);
  Encoding out = std::move(encs[0]);
  for (size_t i = 1; i < encs.size(); ++i) merge_into(out, std::move(encs[i]));
  if (m.padding) pad_encoding(out, padded_target(out.input_ids.size(), *m.padding), *m.padding);
  return out;
}

std::vector<Encoding> HfTokenizer::encode_windows(std::string_view text, std::string_view pair, int64_t max_length,
                                                  int64_t stride) const {
  const Impl& m = *impl_;
  if (max_length < 1) throw std::invalid_argument("max_length must be >= 1, got " + std::to_string(max_length));
  if (stride < 0) throw std::invalid_argument("stride must be >= 0, got " + std::to_string(stride));
  const Encoding first = m.encode_sequence(text, 0, 0, false);
  const Encoding second = m.encode_sequence(pair, 1, 0, false);
  const size_t n_added = m.post_processor ? m.post_processor->added_tokens(true) : 0;
  const size_t n1 = first.input_ids.size(), n2 = second.input_ids.size();
  auto join = [&](Encoding part) {
    std::vector<Encoding> encs = {first, std::move(part)};
    if (m.post_processor) m.post_processor->process(encs, true);
    Encoding out = std::move(encs[0]);
    for (size_t i = 1; i < encs.size(); ++i) merge_into(out, std::move(encs[i]));
    return out;
  };
  if (n1 + n2 + n_added <= (size_t)max_length) return {join(second)};
  // tokenizers' truncate_encodings (only_second), then Encoding::truncate(max_len, stride, Right).
  const size_t to_remove = n1 + n2 + n_added - (size_t)max_length;
  if (n2 <= to_remove)
    throw std::invalid_argument("the question (" + std::to_string(n1) + " tokens with " + std::to_string(n_added) +
                                " special tokens) is too long: it leaves no room for the context within max_length " +
                                std::to_string(max_length) + " (tokenizers: sequence to truncate too short to respect "
                                "the provided max_length)");
  const size_t room = n2 - to_remove;
  if ((size_t)stride >= room)
    throw std::invalid_argument("stride " + std::to_string(stride) + " must be less than the " + std::to_string(room) +
                                " context tokens each window holds (max_length " + std::to_string(max_length) +
                                " less the question and special tokens)");
  std::vector<Encoding> windows;
  for (size_t start = 0; start < n2; start += room - (size_t)stride) {
    const size_t stop = std::min(start + room, n2);
    Encoding part;
    auto slice = [&](auto& dst, const auto& src) { dst.assign(src.begin() + (long)start, src.begin() + (long)stop); };
    slice(part.input_ids, second.input_ids), slice(part.token_type_ids, second.token_type_ids);
    slice(part.attention_mask, second.attention_mask), slice(part.tokens, second.tokens);
    slice(part.offsets, second.offsets), slice(part.special_tokens_mask, second.special_tokens_mask);
    slice(part.sequence_ids, second.sequence_ids), slice(part.words, second.words);
    windows.push_back(join(std::move(part)));
    if (stop == n2) break;
  }
  return windows;
}

void HfTokenizer::pad(std::vector<Encoding>& batch) const {
  PaddingParams p;
  if (impl_->padding) p = *impl_->padding;
  else {
    p.pad_id = impl_->pad_id;
    auto t = id_to_token(p.pad_id);
    p.pad_token = t ? *t : "";
  }
  size_t longest = 0;
  for (const Encoding& e : batch) longest = std::max(longest, e.input_ids.size());
  size_t target = padded_target(longest, p);
  for (Encoding& e : batch) pad_encoding(e, target, p);
}

// Ids without a token are skipped, as tokenizers' decode skips them: the one rule of the CLI, Python and tfm
// serve's /decode. No ids give "".
std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    auto a = m.added_by_id.find(id);
    if (a != m.added_by_id.end()) {
      const Impl::Added& t = m.added[a->second];
      if (skip_special && t.special) continue;
      // A normalized added token decodes to its normalized form, as tokenizers does.
      tokens.push_back(t.normalized ? encode_utf8(t.match) : t.content);
      continue;
    }
    if (const std::string* t = m.model->id_to_token(id)) tokens.push_back(*t);
  }
  if (!m.decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  m.decoder->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::string HfTokenizer::decode_tokens(std::vector<std::string> tokens) const {
  std::string out;
  if (!impl_->decoder) {
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  impl_->decoder->decode_chain(tokens);
  for (const auto& t : tokens) out += t;
  return out;
}

std::string HfTokenizer::continuing_subword_prefix() const { return impl_->model->continuing_subword_prefix(); }

std::string HfTokenizer::normalize(std::string_view text) const {
  NormStr n = NormStr::from_original(decode_utf8(text), 0);
  if (impl_->normalizer) impl_->normalizer->normalize(n);
  return encode_utf8(n.s);
}

int64_t HfTokenizer::token_to_id(const std::string& token) const {
  auto it = impl_->added_by_content.find(token);
  if (it != impl_->added_by_content.end()) return it->second;
  return impl_->model->token_to_id(token);
}

std::optional<std::string> HfTokenizer::id_to_token(int64_t id) const {
  auto a = impl_->added_by_id.find(id);
  if (a != impl_->added_by_id.end()) return impl_->added[a->second].content;
  if (const std::string* t = impl_->model->id_to_token(id)) return *t;
  return std::nullopt;
}

int64_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }
bool HfTokenizer::is_special(int64_t id) const {
  auto a = impl_->added_by_id.find(id);
  return a != impl_->added_by_id.end() && impl_->added[a->second].special;
}
const std::optional<TruncationParams>& HfTokenizer::truncation() const { return impl_->truncation; }
const std::optional<PaddingParams>& HfTokenizer::padding() const { return impl_->padding; }
int64_t HfTokenizer::pad_id() const { return impl_->pad_id; }
int64_t HfTokenizer::num_special_tokens_to_add(bool pair) const {
  return impl_->post_processor ? (int64_t)impl_->post_processor->added_tokens(pair) : 0;
}
std::string HfTokenizer::model_type() const { return impl_->model->type(); }
int64_t HfTokenizer::first_special_id() const {
  if (!impl_->post_processor) return -1;
  auto v = impl_->post_processor->single_prefix_ids();
  return v.empty() ? -1 : v.front();
}
int64_t HfTokenizer::last_special_id() const {
  if (!impl_->post_processor) return -1;
  auto v = impl_->post_processor->single_suffix_ids();
  return v.empty() ? -1 : v.back();
}

}  // namespace tfm

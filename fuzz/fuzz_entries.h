// Entry points of the libFuzzer targets in fuzz/, shared with tests/test_fuzz_regressions.cpp (which replays
// the reproducers in tests/fixtures/fuzz_regressions/<target>/ through the same functions).
//
// Contract checked for every input: the library either succeeds or throws a std::exception with a non-empty
// message. Crashes, sanitizer reports, leaks and hangs are bugs, and so is a broken invariant of a successful
// result (reported by throwing InvariantViolation, which is deliberately not a std::exception: libFuzzer turns
// it into a crash, gtest into a failure).
//
// The library opens files by path, so each input is written to an anonymous in-memory file (memfd) and opened
// as /proc/self/fd/N; nothing touches the disk.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/encoder.h"
#include "models/seq2seq.h"
#include "text/bert_tokenizer.h"
#include "text/tokenizer/tokenizer.h"
#include "text/nmt_data.h"
#include "io/text_file.h"
#include "text/vocab.h"
#include "train/optim.h"
#include "nn/params.h"
#include "train/recipe.h"

namespace tfm::fuzz {

struct InvariantViolation {
  std::string what;
};

[[noreturn]] inline void violated(const std::string& msg) {
  std::fprintf(stderr, "FUZZ INVARIANT VIOLATED: %s\n", msg.c_str());
  throw InvariantViolation{msg};
}

// The only acceptable failure: a std::exception that says something.
inline void check_message(const std::exception& e) {
  if (e.what() == nullptr || e.what()[0] == '\0') violated("exception with an empty message");
}

// An in-memory file holding the current input, reused across inputs (one per entry point).
class ScratchFile {
 public:
  explicit ScratchFile(const char* name) {
    fd_ = ::memfd_create(name, MFD_CLOEXEC);
    if (fd_ < 0) {
      std::fprintf(stderr, "memfd_create failed: %s\n", std::strerror(errno));
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  ~ScratchFile() { ::close(fd_); }

  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      ssize_t w = ::pwrite(fd_, data + done, size - done, (off_t)done);
      if (w <= 0) std::abort();
      done += (size_t)w;
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

inline std::string data_dir() {
  const char* d = std::getenv("TFM_DATA_DIR");
  return d && *d ? d : "../shared/data";
}

// ---------------------------------------------------------------- 1. safetensors

// SafeTensors::open + every accessor. Oracle: for each tensor the reader accepted, the data_offsets read
// independently from the header must lie inside the input (checked on the heap copy, so ASan sees an
// out-of-bounds acceptance even where the mmap would not fault), and F32/I64 tensors must equal those bytes.
inline void safetensors_entry(const uint8_t* data, size_t size) {
  static ScratchFile file("fuzz_safetensors");
  const std::string& path = file.write(data, size);
  try {
    SafeTensors st = SafeTensors::open(path);
    if (size < 8) violated("open() accepted a " + std::to_string(size) + "-byte file");
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
    if (header_len > size - 8) violated("open() accepted header length " + std::to_string(header_len));
    const uint8_t* section = data + 8 + header_len;
    const uint64_t section_size = size - 8 - header_len;
    nlohmann::json header = nlohmann::json::parse(data + 8, section);
    for (const std::string& name : st.names()) {
      if (!header.contains(name)) violated("names() lists '" + name + "', not in the header");
      const nlohmann::json& info = header[name];
      uint64_t begin = info["data_offsets"][0].get<uint64_t>(), end = info["data_offsets"][1].get<uint64_t>();
      if (begin > end || end > section_size)
        violated("tensor '" + name + "' accepted with data_offsets outside the data section");
      const Shape& shape = st.shape_of(name);
      if (shape != info["shape"].get<Shape>()) violated("tensor '" + name + "': shape_of() differs from the header");
      const std::string dtype = st.dtype_of(name);
      const bool readable = dtype == "F32" || dtype == "I64" || dtype == "F16" || dtype == "BF16" || dtype == "I32";
      Tensor t;
      try {
        t = st.get(name);
      } catch (const std::exception& e) {
        check_message(e);
        if (readable) violated("get('" + name + "') of readable dtype " + dtype + " threw: " + e.what());
        continue;
      }
      if (!readable) violated("get('" + name + "') returned a tensor of unreadable dtype " + dtype);
      if (t.shape() != shape) violated("get('" + name + "') changed the shape");
      const uint8_t* bytes = section + begin;
      const size_t span = (size_t)(end - begin);
      if (dtype == "F32" || dtype == "I64") {
        const void* p = dtype == "F32" ? static_cast<const void*>(t.f32()) : static_cast<const void*>(t.i64());
        if (t.nbytes() != span || (span && std::memcmp(p, bytes, span) != 0))
          violated("get('" + name + "') does not hold the bytes of its data_offsets");
      } else if (dtype == "I32") {
        if ((size_t)t.numel() * 4 != span) violated("I32 tensor '" + name + "' has the wrong size");
        for (int64_t i = 0; i < t.numel(); ++i) {
          int32_t v;
          std::memcpy(&v, bytes + 4 * i, 4);
          if (t.i64()[i] != v) violated("I32 tensor '" + name + "' converted wrongly");
        }
      } else {
        if ((size_t)t.numel() * 2 != span) violated("16-bit tensor '" + name + "' has the wrong size");
        volatile float sink = 0;
        for (int64_t i = 0; i < t.numel(); ++i) sink = sink + t.f32()[i];
      }
    }
    for (const auto& [key, value] : header.items())
      if (key != "__metadata__" && !st.has(key)) violated("header tensor '" + key + "' missing from names()");
    try {
      (void)st.get("\x01no such tensor");
      violated("get() of a missing name did not throw");
    } catch (const std::exception& e) {
      check_message(e);
    }
  } catch (const std::exception& e) {
    check_message(e);
  }
}

// ---------------------------------------------------------------- 2. config.json

// Parses the input as JSON and feeds it to every config reader. A config that parses must survive
// to_json -> from_json unchanged.
inline void config_entry(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data, data + size);
  } catch (const std::exception& e) {
    check_message(e);
    return;
  }
  try {
    EncoderConfig c = EncoderConfig::from_json(j, "config.json");
    if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0 ||
        c.vocab_size <= 0 || c.num_hidden_layers <= 0 || c.intermediate_size <= 0 ||
        c.max_position_embeddings <= 0 || c.type_vocab_size <= 0)
      violated("EncoderConfig::from_json accepted invalid sizes: " + j.dump());
  } catch (const std::exception& e) {
    check_message(e);
  }
  try {
    Seq2SeqConfig c = Seq2SeqConfig::from_json(j, "config.json");
    if (!(c.dropout >= 0 && c.dropout < 1)) violated("Seq2SeqConfig::from_json accepted dropout " + j.dump());
    nlohmann::json again = c.to_json();
    try {
      Seq2SeqConfig c2 = Seq2SeqConfig::from_json(again, "round trip");
      if (c2.to_json() != again) violated("Seq2SeqConfig to_json/from_json round trip changed " + again.dump());
    } catch (const std::exception& e) {
      violated(std::string("Seq2SeqConfig from_json(to_json()) threw: ") + e.what());
    }
  } catch (const std::exception& e) {
    check_message(e);
  }
  try {
    RecipeConfig c = RecipeConfig::from_json(j, "train_config.json");
    nlohmann::json again = c.to_json();
    try {
      RecipeConfig c2 = RecipeConfig::from_json(again, "round trip");
      if (c2.to_json() != again) violated("RecipeConfig to_json/from_json round trip changed " + again.dump());
    } catch (const std::exception& e) {
      violated(std::string("RecipeConfig from_json(to_json()) threw: ") + e.what());
    }
  } catch (const std::exception& e) {
    check_message(e);
  }
}

// ---------------------------------------------------------------- 3. WordPiece tokenizer

// bert-base-uncased from $TFM_DATA_DIR (default ../shared/data), loaded once; nullptr if it is not there.
inline const BertTokenizer* bert_tokenizer() {
  static const std::optional<BertTokenizer> tok = []() -> std::optional<BertTokenizer> {
    std::string dir = data_dir() + "/bert-base-uncased";
    if (!std::filesystem::exists(dir + "/tokenizer.json")) {
      std::fprintf(stderr, "fuzz: %s/tokenizer.json not found (set TFM_DATA_DIR)\n", dir.c_str());
      return std::nullopt;
    }
    return BertTokenizer::from_dir(dir);
  }();
  return tok ? &*tok : nullptr;
}

inline void check_encoding(const BertTokenizer& tok, const Encoding& enc, bool special, bool pair,
                           int64_t max_length, const char* what) {
  const size_t L = enc.input_ids.size();
  if (enc.token_type_ids.size() != L || enc.attention_mask.size() != L || enc.tokens.size() != L)
    violated(std::string(what) + ": Encoding vectors differ in length");
  if (max_length > 0 && (int64_t)L > max_length) violated(std::string(what) + ": longer than max_length");
  for (size_t i = 0; i < L; ++i) {
    if (enc.input_ids[i] < 0 || enc.input_ids[i] >= tok.vocab_size()) violated(std::string(what) + ": id out of range");
    if (tok.id_to_token(enc.input_ids[i]) != enc.tokens[i]) violated(std::string(what) + ": token/id mismatch");
    if (enc.attention_mask[i] != 1) violated(std::string(what) + ": attention_mask not 1");
    if (enc.token_type_ids[i] != 0 && enc.token_type_ids[i] != 1) violated(std::string(what) + ": bad token type");
    if (i > 0 && enc.token_type_ids[i] < enc.token_type_ids[i - 1]) violated(std::string(what) + ": type ids decrease");
    if (!pair && enc.token_type_ids[i] != 0) violated(std::string(what) + ": type id 1 without a pair");
  }
  if (special) {
    if (L < (pair ? 3u : 2u) || enc.input_ids.front() != tok.cls_id() || enc.input_ids.back() != tok.sep_id())
      violated(std::string(what) + ": not [CLS] ... [SEP]");
  }
}

// The input is the text; bytes after the first 0 byte (if any) are the pair. The last byte picks a max_length.
inline void tokenizer_entry(const uint8_t* data, size_t size) {
  const BertTokenizer* tok = bert_tokenizer();
  if (!tok) return;
  std::string_view all(reinterpret_cast<const char*>(data), size);
  size_t zero = all.find('\0');
  std::string_view text = all.substr(0, zero);
  std::optional<std::string> pair;
  if (zero != std::string_view::npos) pair = std::string(all.substr(zero + 1));
  const int64_t max_length = size ? data[size - 1] % 16 : 0;

  try {
    check_encoding(*tok, tok->encode(text), true, false, 0, "encode(text)");
    check_encoding(*tok, tok->encode(text, nullptr, false), false, false, 0, "encode(text, no special)");
    (void)tok->tokenize(text);
    (void)tok->normalize(text);
  } catch (const std::exception& e) {
    check_message(e);
  }
  try {
    check_encoding(*tok, tok->encode(text, nullptr, true, max_length), true, false, max_length,
                   "encode(text, max_length)");
  } catch (const std::exception& e) {
    check_message(e);
  }
  if (!pair) return;
  try {
    check_encoding(*tok, tok->encode(text, &*pair), true, true, 0, "encode(text, pair)");
    check_encoding(*tok, tok->encode(text, &*pair, false), false, true, 0, "encode(text, pair, no special)");
    std::vector<Encoding> batch = tok->encode_batch({std::string(text), *pair});
    if (batch.size() != 2 || batch[0].input_ids.size() != batch[1].input_ids.size())
      violated("encode_batch: rows not padded to one length");
  } catch (const std::exception& e) {
    check_message(e);
  }
  try {
    check_encoding(*tok, tok->encode(text, &*pair, true, max_length), true, true, max_length,
                   "encode(text, pair, max_length)");
  } catch (const std::exception& e) {
    check_message(e);
  }
}

// ---------------------------------------------------------------- 3b. tokenizer engine, every model kind

// The trained fixture tokenizers (tests/fixtures/tokenizer/<kind>, from $TFM_SOURCE_DIR or the working
// directory): byte-level BPE, Unigram (Precompiled + Metaspace), WordPiece, WordLevel.
inline const std::vector<HfTokenizer>& engine_tokenizers() {
  static const std::vector<HfTokenizer> toks = [] {
    std::vector<HfTokenizer> v;
    const char* src = std::getenv("TFM_SOURCE_DIR");
#ifdef TFM_SOURCE_DIR
    if (!src || !*src) src = TFM_SOURCE_DIR;
#endif
    const std::string root = std::string(src && *src ? src : ".") + "/tests/fixtures/tokenizer/";
    for (const char* kind : {"bpe_bytelevel", "unigram", "wordpiece", "wordlevel"}) {
      const std::string path = root + kind + "/tokenizer.json";
      if (std::filesystem::exists(path)) v.push_back(HfTokenizer::from_file(path));
      else std::fprintf(stderr, "fuzz: %s not found (set TFM_SOURCE_DIR)\n", path.c_str());
    }
    return v;
  }();
  return toks;
}

inline void check_engine_encoding(const HfTokenizer& tok, const Encoding& e, size_t text_chars, size_t pair_chars,
                                  int64_t max_length, const char* what) {
  const size_t L = e.input_ids.size();
  if (e.tokens.size() != L || e.offsets.size() != L || e.token_type_ids.size() != L || e.attention_mask.size() != L ||
      e.special_tokens_mask.size() != L || e.sequence_ids.size() != L)
    violated(std::string(what) + ": Encoding vectors differ in length");
  if (max_length > 0 && (int64_t)L > max_length) violated(std::string(what) + ": longer than max_length");
  for (size_t i = 0; i < L; ++i) {
    if (e.input_ids[i] < 0 || e.input_ids[i] >= tok.vocab_size()) violated(std::string(what) + ": id out of range");
    const auto& [a, b] = e.offsets[i];
    const size_t limit = e.sequence_ids[i] == 1 ? pair_chars : text_chars;
    if (a < 0 || b < a || (size_t)b > limit) violated(std::string(what) + ": offsets outside the text");
  }
}

// Arbitrary bytes as text (a 0 byte splits off the pair) through every fixture tokenizer: encode with and
// without special tokens and truncation, decode of the ids, normalize.
inline void hf_tokenizer_entry(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  size_t zero = all.find('\0');
  std::string_view text = all.substr(0, zero);
  std::optional<std::string_view> pair;
  if (zero != std::string_view::npos) pair = all.substr(zero + 1);
  const int64_t max_length = size ? data[size - 1] % 24 : 0;
  auto chars = [](std::string_view s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  };
  for (const HfTokenizer& tok : engine_tokenizers()) {
    for (int special = 0; special < 2; ++special) {
      EncodeCall call;
      call.add_special_tokens = special;
      try {
        Encoding e = tok.encode(text, pair ? &*pair : nullptr, call);
        check_engine_encoding(tok, e, chars(text), pair ? chars(*pair) : 0, 0, "engine encode");
        (void)tok.decode(e.input_ids, true);
        (void)tok.decode(e.input_ids, false);
        (void)tok.normalize(text);
      } catch (const std::exception& ex) {
        check_message(ex);
      }
      call.max_length = max_length;
      call.direction = max_length % 2 ? Side::Left : Side::Right;
      try {
        Encoding e = tok.encode(text, pair ? &*pair : nullptr, call);
        check_engine_encoding(tok, e, chars(text), pair ? chars(*pair) : 0, max_length, "engine encode max_length");
      } catch (const std::exception& ex) {
        check_message(ex);
      }
    }
  }
}

// ---------------------------------------------------------------- 4. vocab.txt / tokenizer.json

// strict_ids: every id decodes to a token that encodes back to it (tokenizer.json). A vocab.txt may repeat a
// token, which then takes its last id (transformers' load_vocab), so there only presence is checked.
inline void use_tokenizer(const BertTokenizer& tok, bool strict_ids) {
  static const std::string sample = "Hello, WORLD! unaffable naïve café [MASK] 你好 x\tY [SEP]";
  static const std::string pair = "second ##piece";
  check_encoding(tok, tok.encode(sample), true, false, 0, "loaded tokenizer: encode");
  check_encoding(tok, tok.encode(sample, &pair, true, 7), true, true, 7, "loaded tokenizer: encode pair");
  for (int64_t id = 0; id < tok.vocab_size(); ++id)
    if (strict_ids ? tok.token_to_id(tok.id_to_token(id)) != id : tok.token_to_id(tok.id_to_token(id)) < 0)
      violated("loaded tokenizer: id_to_token/token_to_id disagree at id " + std::to_string(id));
}

// The input as a d2l vocabulary file (Vocab::load), a vocab.txt and a tokenizer.json.
inline void vocab_load_entry(const uint8_t* data, size_t size) {
  static ScratchFile file("fuzz_vocab");
  const std::string& path = file.write(data, size);
  try {
    Vocab v = Vocab::load(path);
    if (v.size() < 1 || v.to_token(0) != "<unk>") violated("Vocab::load: id 0 is not <unk>");
    for (int64_t i = 0; i < v.size(); ++i)
      if (v[v.to_token(i)] != i) violated("Vocab::load: token_to_idx and idx_to_token disagree");
  } catch (const std::exception& e) {
    check_message(e);
  }
  try {
    use_tokenizer(BertTokenizer::from_vocab_file(path), false);
  } catch (const std::exception& e) {
    check_message(e);
  }
  try {
    use_tokenizer(BertTokenizer::from_tokenizer_json(path), true);
  } catch (const std::exception& e) {
    check_message(e);
  }
}

// ---------------------------------------------------------------- 5. line readers

// The input as a corpus file (plain or gzip): read_lines, read_nmt_file (all lines and the first few) and the
// d2l arrays built from what was read.
inline void lines_entry(const uint8_t* data, size_t size) {
  static ScratchFile file("fuzz_lines");
  const std::string& path = file.write(data, size);
  try {
    std::vector<std::string> lines = read_lines(path);
    for (const std::string& l : lines)
      if (l.find('\n') != std::string::npos || find_invalid_utf8(l)) violated("read_lines returned a bad line");
  } catch (const std::exception& e) {
    check_message(e);
  }
  for (int64_t num_examples : {int64_t{0}, int64_t{2}}) {
    try {
      ParallelCorpus c = read_nmt_file(path, num_examples);
      if (c.source.size() != c.target.size()) violated("read_nmt_file: source and target sizes differ");
      if (num_examples > 0 && c.source.size() > (size_t)num_examples + 1) violated("read_nmt_file: too many pairs");
      Vocab src(c.source, 2, {"<pad>", "<bos>", "<eos>"}), tgt(c.target, 0, {"<pad>", "<bos>", "<eos>"});
      NmtArrays a = build_arrays_nmt(c, src, tgt, 5);
      if (a.size() != (int64_t)c.source.size() || a.src.size() != c.source.size() * 5)
        violated("build_arrays_nmt: wrong array sizes");
      for (int64_t v : a.src_valid_len)
        if (v < 0 || v > 5) violated("build_arrays_nmt: valid_len out of range");
      if (!c.source.empty()) {
        std::string sentence;
        for (const std::string& w : c.source[0]) sentence += (sentence.empty() ? "" : " ") + w;
        EncodedSource e = encode_source_sentence(sentence, src, 5);
        if (e.ids.size() != 5 || e.valid_len < 1 || e.valid_len > 5) violated("encode_source_sentence: bad result");
      }
    } catch (const std::exception& e) {
      check_message(e);
    }
  }
}

// ---------------------------------------------------------------- 6. checkpoints

// The small model the checkpoint target loads: num_hiddens 8, 1 layer, 2 heads, vocab 11.
inline Seq2SeqConfig small_seq2seq_config() {
  Seq2SeqConfig c;
  c.num_hiddens = 8;
  c.num_layers = 1;
  c.num_heads = 2;
  c.ffn_num_hiddens = 8;
  c.dropout = 0.0;
  c.num_steps = 6;
  c.src_vocab_size = 11;
  c.tgt_vocab_size = 11;
  c.max_len = 16;
  return c;
}

// The input as a recipe checkpoint (restore as train_recipe --resume does) and as a model.safetensors for
// Seq2SeqModel::load of the small config.
inline void checkpoint_entry(const uint8_t* data, size_t size) {
  static ScratchFile file("fuzz_checkpoint");
  static Seq2SeqModel model(small_seq2seq_config());
  const std::string& path = file.write(data, size);
  try {
    {
      Adam adam(model.params().total(), AdamOptions{});
      read_checkpoint(path, model.params(), adam, 4);
    }
  } catch (const std::exception& e) {
    check_message(e);
  }
  try {
    model.load(path);
    for (float x : model.params().all_data())
      if (!std::isfinite(x)) violated("Seq2SeqModel::load accepted a non-finite parameter");
  } catch (const std::exception& e) {
    check_message(e);
  }
}

// Writes valid seed inputs for checkpoint_entry into `dir`: a checkpoint as train_recipe saves it and the
// model.safetensors of the small config.
inline void write_checkpoint_seeds(const std::string& dir) {
  Seq2SeqModel model(small_seq2seq_config());
  Rng rng(7);
  model.init(rng);
  model.save(dir + "/model.safetensors");
  nn::ParamStore& P = model.params();
  std::vector<float> m(P.total(), 0.01f), v(P.total(), 0.001f);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : P.named_tensors()) tensors.emplace_back("model." + name, t);
  tensors.emplace_back("optim.exp_avg", Tensor::view_of(m.data(), {P.total()}, DType::F32, nullptr));
  tensors.emplace_back("optim.exp_avg_sq", Tensor::view_of(v.data(), {P.total()}, DType::F32, nullptr));
  nlohmann::json log = nlohmann::json::array({nlohmann::json{{"epoch", 1}, {"step", 3}, {"train_loss", 2.5},
                                                             {"valid_loss", 2.75}, {"valid_bleu", 1.5},
                                                             {"lr", 1e-4}, {"tokens_per_sec", 1000.0},
                                                             {"elapsed", 2.0}}});
  Rng dropout_rng(9);
  nlohmann::json st = {{"step", 3},       {"epoch", 2},      {"batch_pos", 1},   {"bad_epochs", 0},
                       {"best_epoch", 1}, {"best_bleu", 1.5}, {"elapsed", 2.0},  {"tokens", 120},
                       {"log", log},      {"dropout_rng", dropout_rng.state()}};
  save_safetensors(dir + "/checkpoint.safetensors", tensors,
                   nlohmann::json{{"state", st.dump()}, {"format", "tfm-checkpoint-1"}});
}

// ---------------------------------------------------------------- table

struct Target {
  const char* name;  // fuzz/<name>.cpp, tests/fixtures/fuzz_regressions/<name>/
  void (*entry)(const uint8_t*, size_t);
};

inline constexpr Target kTargets[] = {
    {"fuzz_safetensors", safetensors_entry}, {"fuzz_config", config_entry},       {"fuzz_tokenizer", tokenizer_entry},
    {"fuzz_vocab_load", vocab_load_entry},   {"fuzz_lines", lines_entry},         {"fuzz_checkpoint", checkpoint_entry},
    {"fuzz_hf_tokenizer", hf_tokenizer_entry},
};

}  // namespace tfm::fuzz

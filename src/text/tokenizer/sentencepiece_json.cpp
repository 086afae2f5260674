// tokenizer.json for a SentencePiece model folder without one, as transformers' convert_slow_tokenizer builds it
// (XLMRobertaConverter for sentencepiece.bpe.model, T5Converter for spiece.model), so the engine runs what
// transformers' fast tokenizer would.
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "text/tokenizer/tokenizer.h"
#include <nlohmann/json.hpp>

namespace tfm {

namespace {

using nlohmann::json;

// Minimal protobuf reading (the fields of sentencepiece_model.proto that the conversion needs).
struct Reader {
  const unsigned char* p;
  const unsigned char* end;
  std::string source;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) throw std::runtime_error(source + ": truncated SentencePiece model");
      unsigned char b = *p++;
      v |= (uint64_t)(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error(source + ": bad varint in SentencePiece model");
  }
  struct Field {
    uint32_t number, wire;
    uint64_t value;
    std::string_view bytes;
    float f32;
  };
  bool next(Field& f) {
    if (p >= end) return false;
    uint64_t key = varint();
    f.number = (uint32_t)(key >> 3);
    f.wire = (uint32_t)(key & 7);
    if (f.wire == 0) {
      f.value = varint();
    } else if (f.wire == 1) {
      if (end - p < 8) throw std::runtime_error(source + ": truncated SentencePiece model");
      p += 8;
    } else if (f.wire == 2) {
      uint64_t n = varint();
      if ((uint64_t)(end - p) < n) throw std::runtime_error(source + ": truncated SentencePiece model");
      f.bytes = std::string_view((const char*)p, (size_t)n);
      p += n;
    } else if (f.wire == 5) {
      if (end - p < 4) throw std::runtime_error(source + ": truncated SentencePiece model");
      std::memcpy(&f.f32, p, 4);
      p += 4;
    } else {
      throw std::runtime_error(source + ": unsupported protobuf wire type " + std::to_string(f.wire) +
                               " (not a SentencePiece model?)");
    }
    return true;
  }
};

Reader reader(std::string_view b, const std::string& source) {
  return Reader{(const unsigned char*)b.data(), (const unsigned char*)b.data() + b.size(), source};
}

std::string base64(std::string_view in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = ((uint32_t)(unsigned char)in[i] << 16) | ((uint32_t)(unsigned char)in[i + 1] << 8) |
                 (uint32_t)(unsigned char)in[i + 2];
    out += t[v >> 18], out += t[(v >> 12) & 63], out += t[(v >> 6) & 63], out += t[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
    out += t[v >> 18], out += t[(v >> 12) & 63], out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = ((uint32_t)(unsigned char)in[i] << 16) | ((uint32_t)(unsigned char)in[i + 1] << 8);
    out += t[v >> 18], out += t[(v >> 12) & 63], out += t[(v >> 6) & 63], out += '=';
  }
  return out;
}

json added(int64_t id, const std::string& content, bool lstrip = false) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", lstrip},
          {"rstrip", false},   {"normalized", false}, {"special", true}};
}

json tmpl(const std::string& spec) {  // "<s> $A </s>"
  json out = json::array();
  std::istringstream in(spec);
  std::string w;
  while (in >> w) {
    if (w == "$A" || w == "$B")
      out.push_back({{"Sequence", {{"id", w.substr(1)}, {"type_id", 0}}}});
    else
      out.push_back({{"SpecialToken", {{"id", w}, {"type_id", 0}}}});
  }
  return out;
}

}  // namespace

std::string sentencepiece_tokenizer_json(const std::string& model_path, bool t5_style, int64_t extra_ids) {
  std::ifstream f(model_path, std::ios::binary);
  if (!f) throw std::runtime_error(model_path + ": cannot open");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  struct Piece {
    std::string piece;
    float score = 0;
    int type = 1;
  };
  std::vector<Piece> pieces;
  std::string charsmap;
  int model_type = 1;
  int64_t unk_id = 0;
  Reader top = reader(bytes, model_path);
  Reader::Field fl;
  while (top.next(fl)) {
    if (fl.number == 1 && fl.wire == 2) {
      Piece p;
      Reader r = reader(fl.bytes, model_path);
      Reader::Field g;
      while (r.next(g)) {
        if (g.number == 1 && g.wire == 2) p.piece = std::string(g.bytes);
        else if (g.number == 2 && g.wire == 5) p.score = g.f32;
        else if (g.number == 3 && g.wire == 0) p.type = (int)g.value;
      }
      pieces.push_back(std::move(p));
    } else if (fl.number == 2 && fl.wire == 2) {
      Reader r = reader(fl.bytes, model_path);
      Reader::Field g;
      while (r.next(g)) {
        if (g.number == 3 && g.wire == 0) model_type = (int)g.value;
        else if (g.number == 40 && g.wire == 0) unk_id = (int64_t)g.value;
      }
    } else if (fl.number == 3 && fl.wire == 2) {
      Reader r = reader(fl.bytes, model_path);
      Reader::Field g;
      while (r.next(g))
        if (g.number == 2 && g.wire == 2) charsmap = std::string(g.bytes);
    }
  }
  if (pieces.size() < 4) throw std::runtime_error(model_path + ": not a SentencePiece model (fewer than 4 pieces)");
  if (model_type != 1)
    throw std::runtime_error(model_path + ": SentencePiece model type " + std::to_string(model_type) +
                             " is not supported without a tokenizer.json (only Unigram)");
  json vocab = json::array();
  json added_tokens = json::array();
  json normalizers = json::array();
  json post;
  int64_t unk;
  if (!t5_style) {  // XLMRobertaConverter: fairseq ids <s> <pad> </s> <unk>, then the pieces after the 3 controls
    for (const char* s : {"<s>", "<pad>", "</s>", "<unk>"}) vocab.push_back({s, 0.0});
    for (size_t i = 3; i < pieces.size(); ++i) vocab.push_back({pieces[i].piece, pieces[i].score});
    vocab.push_back({"<mask>", 0.0});
    unk = 3;
    for (int64_t i = 0; i < 4; ++i) added_tokens.push_back(added(i, vocab[(size_t)i][0].get<std::string>()));
    added_tokens.push_back(added((int64_t)vocab.size() - 1, "<mask>", true));
    normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", "``"}}}, {"content", "\""}});
    normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", "''"}}}, {"content", "\""}});
    post = {{"type", "TemplateProcessing"}, {"single", tmpl("<s> $A </s>")}, {"pair", tmpl("<s> $A </s> </s> $B </s>")},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {0}}, {"tokens", {"<s>"}}}},
                                {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}}}};
  } else {  // T5Converter: the pieces as they are, then <extra_id_N> from the highest N down
    for (const Piece& p : pieces) vocab.push_back({p.piece, p.score});
    for (int64_t i = extra_ids - 1; i >= 0; --i) vocab.push_back({"<extra_id_" + std::to_string(i) + ">", 0.0});
    unk = unk_id;
    int64_t eos = -1;
    for (size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i].type == 2 || pieces[i].type == 3) {
        added_tokens.push_back(added((int64_t)i, pieces[i].piece));
        if (pieces[i].piece == "</s>") eos = (int64_t)i;
      }
    for (int64_t i = 0; i < extra_ids; ++i)
      added_tokens.push_back(added((int64_t)pieces.size() + i, vocab[pieces.size() + (size_t)i][0].get<std::string>()));
    if (eos < 0) throw std::runtime_error(model_path + ": no </s> piece for the T5 template");
    post = {{"type", "TemplateProcessing"}, {"single", tmpl("$A </s>")}, {"pair", tmpl("$A </s> $B </s>")},
            {"special_tokens", {{"</s>", {{"id", "</s>"}, {"ids", {eos}}, {"tokens", {"</s>"}}}}}}};
  }
  if (!charsmap.empty()) normalizers.push_back({{"type", "Precompiled"}, {"precompiled_charsmap", base64(charsmap)}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}});
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added_tokens},
            {"normalizer", {{"type", "Sequence"}, {"normalizers", normalizers}}},
            {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}, {"split", true}}},
            {"post_processor", post},
            {"decoder", {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}, {"split", true}}},
            {"model", {{"type", "Unigram"}, {"unk_id", unk}, {"vocab", vocab}, {"byte_fallback", false}}}};
  return j.dump();
}

}  // namespace tfm

#include "text/subword.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "io/atomic_file.h"
#include "io/text_file.h"

namespace tfm {

namespace {

// Feeds a vector of sentences to SentencePieceTrainer without a temporary corpus file.
class VectorSentenceIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorSentenceIterator(const std::vector<std::string>& sentences) : sentences_(sentences) {}
  bool done() const override { return i_ >= sentences_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return sentences_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& sentences_;
  size_t i_ = 0;
};

std::string format_double(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void train_subword_model(const std::vector<std::string>& sentences, const std::string& model_prefix_or_path,
                         const SubwordTrainOptions& options) {
  const std::string where = "train_subword_model(" + model_prefix_or_path + ")";
  if (sentences.empty()) throw std::invalid_argument(where + ": no training sentences");
  for (size_t i = 0; i < sentences.size(); ++i) {
    if (sentences[i].find('\n') != std::string::npos) {
      throw std::invalid_argument(where + ": sentence " + std::to_string(i) + " contains '\\n'");
    }
    if (const auto bad = find_invalid_utf8(sentences[i])) {
      throw std::invalid_argument(where + ": sentence " + std::to_string(i) + ": invalid UTF-8 at byte offset " +
                                  std::to_string(*bad));
    }
  }
  if (options.vocab_size < 5) {
    throw std::invalid_argument(where + ": vocab_size " + std::to_string(options.vocab_size) +
                                " must be at least 5 (4 special pieces + 1)");
  }
  if (options.model_type != "unigram" && options.model_type != "bpe") {
    throw std::invalid_argument(where + ": model_type '" + options.model_type + "' (expected 'unigram' or 'bpe')");
  }
  if (options.num_threads < 1) {
    throw std::invalid_argument(where + ": num_threads " + std::to_string(options.num_threads) + " < 1");
  }
  if (!(options.character_coverage > 0.0 && options.character_coverage <= 1.0)) {
    throw std::invalid_argument(where + ": character_coverage " + format_double(options.character_coverage) +
                                " outside (0, 1]");
  }
  if (options.input_sentence_size < 0 || options.max_sentence_length < 1) {
    throw std::invalid_argument(where + ": input_sentence_size " + std::to_string(options.input_sentence_size) +
                                " must be >= 0 and max_sentence_length " +
                                std::to_string(options.max_sentence_length) + " >= 1");
  }

  const std::string path = ends_with(model_prefix_or_path, ".model") ? model_prefix_or_path
                                                                      : model_prefix_or_path + ".model";
  // Same names as spm_train's flags (sentencepiece/src/spec_parser.h). No model_prefix: SentencePiece then returns
  // the serialized model in memory instead of writing <prefix>.model and <prefix>.vocab itself.
  const std::unordered_map<std::string, std::string> kwargs = {
      {"vocab_size", std::to_string(options.vocab_size)},
      {"model_type", options.model_type},
      {"character_coverage", format_double(options.character_coverage)},
      {"normalization_rule_name", options.normalization_rule_name},
      {"num_threads", std::to_string(options.num_threads)},
      {"input_sentence_size", std::to_string(options.input_sentence_size)},
      {"shuffle_input_sentence", options.shuffle_input_sentence ? "true" : "false"},
      {"max_sentence_length", std::to_string(options.max_sentence_length)},
      {"unk_id", "0"},
      {"pad_id", "1"},
      {"bos_id", "2"},
      {"eos_id", "3"},
      {"unk_piece", "<unk>"},
      {"pad_piece", "<pad>"},
      {"bos_piece", "<bos>"},
      {"eos_piece", "<eos>"},
      {"minloglevel", options.verbose ? "0" : "1"},
  };
  VectorSentenceIterator it(sentences);
  std::string model_proto;
  const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs, &it, &model_proto);
  if (!status.ok()) throw std::runtime_error(where + ": SentencePiece training failed: " + status.ToString());
  if (model_proto.empty()) throw std::runtime_error(where + ": SentencePiece returned an empty model");
  write_file_atomic(path, model_proto);
}

SubwordModel::SubwordModel() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SubwordModel::SubwordModel(SubwordModel&&) noexcept = default;
SubwordModel& SubwordModel::operator=(SubwordModel&&) noexcept = default;
SubwordModel::~SubwordModel() = default;

SubwordModel SubwordModel::load(const std::string& path) { return from_bytes(read_whole_file(path), path); }

SubwordModel SubwordModel::from_bytes(const std::string& bytes, const std::string& path) {
  if (bytes.empty()) throw std::runtime_error(path + ": empty file, not a SentencePiece model");

  SubwordModel model;
  const auto status = model.sp_->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    throw std::runtime_error(path + ": not a SentencePiece model (" + status.ToString() + ")");
  }
  const struct {
    const char* name;
    int id;
  } specials[] = {{"<unk>", model.sp_->unk_id()},
                  {"<pad>", model.sp_->pad_id()},
                  {"<bos>", model.sp_->bos_id()},
                  {"<eos>", model.sp_->eos_id()}};
  for (const auto& s : specials) {
    if (s.id < 0) {
      throw std::runtime_error(path + ": SentencePiece model has no " + s.name +
                               " piece (trained with its id = -1); seq2seq batches need <unk>, <pad>, <bos>, <eos>");
    }
  }
  return model;
}

std::vector<int64_t> SubwordModel::encode(std::string_view text) const {
  if (const auto bad = find_invalid_utf8(text)) {
    throw std::invalid_argument("SubwordModel::encode: invalid UTF-8 at byte offset " + std::to_string(*bad));
  }
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) throw std::runtime_error("SubwordModel::encode: " + status.ToString());
  return {ids.begin(), ids.end()};
}

std::vector<std::string> SubwordModel::encode_pieces(std::string_view text) const {
  if (const auto bad = find_invalid_utf8(text)) {
    throw std::invalid_argument("SubwordModel::encode_pieces: invalid UTF-8 at byte offset " +
                                std::to_string(*bad));
  }
  std::vector<std::string> pieces;
  const auto status = sp_->Encode(text, &pieces);
  if (!status.ok()) throw std::runtime_error("SubwordModel::encode_pieces: " + status.ToString());
  return pieces;
}

std::string SubwordModel::decode(const std::vector<int64_t>& ids) const {
  const int64_t n = vocab_size();
  std::vector<int> ids32(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n) {
      throw std::out_of_range("SubwordModel::decode: id " + std::to_string(ids[i]) + " at position " +
                              std::to_string(i) + " is outside [0, " + std::to_string(n) + ")");
    }
    ids32[i] = static_cast<int>(ids[i]);
  }
  std::string text;
  const auto status = sp_->Decode(ids32, &text);
  if (!status.ok()) throw std::runtime_error("SubwordModel::decode: " + status.ToString());
  return text;
}

int64_t SubwordModel::vocab_size() const { return sp_->GetPieceSize(); }
int64_t SubwordModel::unk_id() const { return sp_->unk_id(); }
int64_t SubwordModel::pad_id() const { return sp_->pad_id(); }
int64_t SubwordModel::bos_id() const { return sp_->bos_id(); }
int64_t SubwordModel::eos_id() const { return sp_->eos_id(); }

std::string SubwordModel::id_to_piece(int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw std::out_of_range("SubwordModel::id_to_piece: id " + std::to_string(id) + " is outside [0, " +
                            std::to_string(vocab_size()) + ")");
  }
  return sp_->IdToPiece(static_cast<int>(id));
}

int64_t SubwordModel::piece_to_id(std::string_view piece) const { return sp_->PieceToId(piece); }

}  // namespace tfm

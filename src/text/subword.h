// Subword vocabulary for machine translation: a thin wrapper over the SentencePiece library (Kudo & Richardson
// 2018, https://github.com/google/sentencepiece, v0.1.97 as shipped by Debian 12). Training and segmentation are
// SentencePiece's own; this file fixes the options our seq2seq models rely on and turns SentencePiece's status
// codes into exceptions that name the file.
//
// Id conventions of every model trained here (the seq2seq code depends on them):
//   0 = "<unk>", 1 = "<pad>", 2 = "<bos>", 3 = "<eos>", then the learned pieces.
// A joint source/target vocabulary is trained by passing the union of both sides' sentences.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tfm {

struct SubwordTrainOptions {
  // Total pieces including the 4 special ones (SentencePiece --vocab_size). Training fails if the corpus cannot
  // supply this many pieces (SentencePiece's hard_vocab_limit).
  int64_t vocab_size = 8000;
  // "unigram" (Kudo 2018, SentencePiece's default) or "bpe" (Sennrich et al. 2016).
  std::string model_type = "unigram";
  // Fraction of characters covered by the alphabet; 1.0 keeps every character of the training data.
  double character_coverage = 1.0;
  // SentencePiece normaliser: "identity" (default here) leaves characters untouched so decode(encode(s)) == s up
  // to whitespace; "nmt_nfkc" (SentencePiece's default) applies NFKC plus NMT-specific rules, which changes
  // characters such as U+2026 '…' -> "..." and so breaks the exact round trip. With either rule, runs of
  // whitespace collapse to one ' ' and leading/trailing whitespace is dropped (remove_extra_whitespaces).
  std::string normalization_rule_name = "identity";
  int num_threads = 1;
  // Train on a sample of this many sentences (0 = all): SentencePiece's reservoir sample when
  // shuffle_input_sentence, else the first input_sentence_size sentences. In SentencePiece 0.1.97 the reservoir
  // sampler uses a fixed internal seed (SetRandomGeneratorSeed does not reach it), so the sample is reproducible
  // but cannot be varied; shuffle `sentences` beforehand for a different subset.
  int64_t input_sentence_size = 0;
  bool shuffle_input_sentence = true;
  // Training is deterministic: the same sentences and options (num_threads included) give a byte-identical model
  // file, checked by the tests for num_threads 1 and 2. Different num_threads give slightly different models
  // (observed on Multi30k: the unigram EM statistics are summed in another order).

  // Sentences longer than this many bytes are skipped by SentencePiece (its --max_sentence_length).
  int64_t max_sentence_length = 4192;
  // Print SentencePiece's training log to stderr.
  bool verbose = false;
};

// Trains a SentencePiece model on `sentences` (one sentence each; '\n' not allowed) and writes the standard
// SentencePiece `.model` file (a serialized ModelProto, loadable by spm_encode and the Python package) to
// `model_prefix_or_path` if it ends in ".model", else to `model_prefix_or_path + ".model"`. No ".vocab" file is
// written. The file is written atomically (io/atomic_file.h: temporary file beside it, fsync, rename).
// Throws std::invalid_argument for empty `sentences`, a sentence containing '\n' or invalid UTF-8 (index given),
// vocab_size < 5, an unknown model_type, num_threads < 1, character_coverage outside (0, 1];
// std::runtime_error naming SentencePiece's message if training fails (e.g. vocab_size too large for the corpus)
// or naming the path on I/O failure.
void train_subword_model(const std::vector<std::string>& sentences, const std::string& model_prefix_or_path,
                         const SubwordTrainOptions& options = {});

class SubwordModel {
 public:
  // Loads a SentencePiece `.model` file. Throws std::runtime_error naming the path if the file is missing,
  // unreadable or not a SentencePiece model, or if it lacks any of <unk>, <pad>, <bos>, <eos> (pad/bos/eos can be
  // disabled in SentencePiece, but our seq2seq batches need all four).
  static SubwordModel load(const std::string& path);
  // The same from the file's bytes (a serialized ModelProto); `name` stands for the path in error messages.
  static SubwordModel from_bytes(const std::string& bytes, const std::string& name);

  SubwordModel(SubwordModel&&) noexcept;
  SubwordModel& operator=(SubwordModel&&) noexcept;
  ~SubwordModel();

  // Piece ids of `text` (Viterbi segmentation, no sampling); no <bos>/<eos> added. Characters not in the model
  // map to unk_id(). Throws std::invalid_argument "invalid UTF-8 at byte offset N".
  std::vector<int64_t> encode(std::string_view text) const;
  // The pieces themselves, with U+2581 '▁' marking a preceding space, e.g. "▁Deux", "▁jeune", "s".
  std::vector<std::string> encode_pieces(std::string_view text) const;
  // Detokenised text of `ids`: pieces concatenated, '▁' -> ' ', the leading space removed. Control ids (<pad>,
  // <bos>, <eos>) produce nothing; <unk> produces " ⁇ " (SentencePiece's unk_surface).
  // Throws std::out_of_range naming the position and value of the first id outside [0, vocab_size()).
  std::string decode(const std::vector<int64_t>& ids) const;

  // Number of pieces including the special ones.
  int64_t vocab_size() const;
  int64_t unk_id() const;
  int64_t pad_id() const;
  int64_t bos_id() const;
  int64_t eos_id() const;
  // Throws std::out_of_range naming the id and vocab_size().
  std::string id_to_piece(int64_t id) const;
  // unk_id() for a piece not in the vocabulary.
  int64_t piece_to_id(std::string_view piece) const;

 private:
  SubwordModel();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace tfm

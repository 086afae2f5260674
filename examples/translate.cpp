// Translation with an installed transformer.cpp: one line per sentence, "translation<TAB>score", where score is
// the length-penalised log-probability the decoder ranks hypotheses by.
//   translate MODEL_DIR [--beam N] SENTENCE [SENTENCE...]
// MODEL_DIR is a folder written by `tfm train` (or exported from the d2l.ai reference).
#include <tfm/tfm.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [--beam N] SENTENCE [SENTENCE...]\n", argv[0]);
    return 2;
  }
  try {
    tfm::TranslateOptions options;
    options.return_scores = true;
    std::vector<std::string> sentences;
    for (int i = 2; i < argc; ++i) {
      if (std::strcmp(argv[i], "--beam") == 0 && i + 1 < argc) {
        options.beam_size = std::stoll(argv[++i]);
        options.length_penalty = 0.6f;
      } else {
        sentences.push_back(argv[i]);
      }
    }
    tfm::Translator translator(argv[1], tfm::TranslatorOptions{/*threads=*/1});
    for (const tfm::Translation& t : translator.translate_batch(sentences, options))
      std::printf("%s\t%.4f\n", t.text.c_str(), t.score);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "translate: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

// Sentence embeddings with an installed transformer.cpp: mean-pooled, L2-normalized BERT vectors and their
// cosine similarities.
//   embed MODEL_DIR TEXT [TEXT...]
// MODEL_DIR holds config.json, model.safetensors and tokenizer.json or vocab.txt (a Hugging Face BERT folder).
#include <tfm/tfm.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR TEXT [TEXT...]\n", argv[0]);
    return 2;
  }
  try {
    tfm::Encoder encoder(argv[1], tfm::EncoderOptions{"fp32", /*threads=*/1});
    std::vector<std::string> texts(argv + 2, argv + argc);
    tfm::EmbedOptions options;
    options.normalize = true;
    tfm::FloatArray emb = encoder.embed(texts, options);  // [texts, hidden_size]
    const int64_t n = emb.size(0), h = emb.size(1);
    std::printf("tfm %s, %s encoder, embeddings [%lld, %lld]\n", tfm::version(), encoder.model_type().c_str(),
                (long long)n, (long long)h);
    for (int64_t i = 0; i < n; ++i) {
      double sq = 0;
      for (int64_t k = 0; k < h; ++k) sq += (double)emb[i * h + k] * emb[i * h + k];
      std::printf("%lld norm %.4f first %.4f %.4f %.4f  %s\n", (long long)i, std::sqrt(sq), emb[i * h],
                  emb[i * h + 1], emb[i * h + 2], texts[i].c_str());
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) {
        double dot = 0;  // unit vectors: the dot product is the cosine
        for (int64_t k = 0; k < h; ++k) dot += (double)emb[i * h + k] * emb[j * h + k];
        std::printf("cosine(%lld, %lld) = %.4f\n", (long long)i, (long long)j, dot);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embed: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

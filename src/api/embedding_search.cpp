// tfm/pipeline.h: embedding quantisation (sentence-transformers' quantize_embeddings), exact semantic search over
// float32, int8 and binary corpora (semantic_search / semantic_search_faiss with rescoring), and the windows of
// `tfm embed --chunk`: written once for the CLI, the server and Python.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "tfm/pipeline.h"

namespace tfm {

EmbeddingPrecision parse_precision(const std::string& name) {
  if (name == "float32") return EmbeddingPrecision::Float32;
  if (name == "int8") return EmbeddingPrecision::Int8;
  if (name == "uint8") return EmbeddingPrecision::Uint8;
  if (name == "binary") return EmbeddingPrecision::Binary;
  if (name == "ubinary") return EmbeddingPrecision::Ubinary;
  throw std::invalid_argument("precision '" + name + "' is not one of float32, int8, uint8, binary, ubinary");
}

const char* precision_name(EmbeddingPrecision p) {
  switch (p) {
    case EmbeddingPrecision::Float32: return "float32";
    case EmbeddingPrecision::Int8: return "int8";
    case EmbeddingPrecision::Uint8: return "uint8";
    case EmbeddingPrecision::Binary: return "binary";
    case EmbeddingPrecision::Ubinary: return "ubinary";
  }
  return "?";
}

bool precision_needs_ranges(EmbeddingPrecision p) {
  return p == EmbeddingPrecision::Int8 || p == EmbeddingPrecision::Uint8;
}

int64_t quantized_dim(EmbeddingPrecision p, int64_t dim) {
  return p == EmbeddingPrecision::Binary || p == EmbeddingPrecision::Ubinary ? (dim + 7) / 8 : dim;
}

std::vector<float> embedding_ranges(const float* e, int64_t rows, int64_t dim) {
  if (rows < 1 || dim < 1)
    throw std::invalid_argument("quantisation ranges need embeddings [rows >= 1, dim >= 1], got [" +
                                std::to_string(rows) + ", " + std::to_string(dim) + "]");
  std::vector<float> r(e, e + dim);
  r.insert(r.end(), e, e + dim);
  for (int64_t n = 1; n < rows; ++n)
    for (int64_t k = 0; k < dim; ++k) {
      const float x = e[n * dim + k];
      // np.min / np.max propagate NaN
      if (std::isnan(x) || x < r[k]) r[k] = std::isnan(r[k]) ? r[k] : x;
      if (std::isnan(x) || x > r[dim + k]) r[dim + k] = std::isnan(r[dim + k]) ? r[dim + k] : x;
    }
  return r;
}

namespace {

// numpy's float32 -> int8 / uint8 cast on x86-64 (cvttss2si): truncation towards zero to int32, then the low byte;
// NaN and values outside int32 give INT32_MIN, whose low byte is 0 (float32 values that large are multiples of 256).
uint8_t numpy_byte(float q) {
  if (!(q > -2147483648.0f && q < 2147483648.0f)) return 0;
  return (uint8_t)(uint32_t)(int32_t)q;
}

// np.packbits(row > 0) of one row: big bit order, the last byte padded with 0 bits.
void pack_bits(const float* v, int64_t dim, uint8_t* out) {
  for (int64_t b = 0; b < (dim + 7) / 8; ++b) {
    uint8_t byte = 0;
    for (int64_t k = b * 8; k < std::min(dim, b * 8 + 8); ++k)
      if (v[k] > 0) byte |= (uint8_t)(0x80u >> (k % 8));
    out[b] = byte;
  }
}

}  // namespace

int64_t quantize_embedding(const float* v, int64_t dim, EmbeddingPrecision p, const float* ranges, uint8_t* out) {
  int64_t wrapped = 0;
  switch (p) {
    case EmbeddingPrecision::Float32:
      std::memcpy(out, v, (size_t)dim * sizeof(float));
      break;
    case EmbeddingPrecision::Int8:
    case EmbeddingPrecision::Uint8:
      for (int64_t k = 0; k < dim; ++k) {
        // float32 throughout, in numpy's order: steps = (max - min) / 255; (x - starts) / steps [- 128]
        const float start = ranges[k], step = (ranges[dim + k] - ranges[k]) / 255.0f;
        float q = (v[k] - start) / step;
        if (!(q >= 0.0f && q < 256.0f)) ++wrapped;
        if (p == EmbeddingPrecision::Int8) q = q - 128.0f;
        out[k] = numpy_byte(q);
      }
      break;
    case EmbeddingPrecision::Binary:
    case EmbeddingPrecision::Ubinary:
      pack_bits(v, dim, out);
      if (p == EmbeddingPrecision::Binary)  // packbits - 128 as int8: the byte with its top bit flipped
        for (int64_t b = 0; b < (dim + 7) / 8; ++b) out[b] ^= 0x80u;
      break;
  }
  return wrapped;
}

const char* QuantizedEmbeddings::npy_descr() const {
  switch (precision) {
    case EmbeddingPrecision::Float32: return "<f4";
    case EmbeddingPrecision::Int8:
    case EmbeddingPrecision::Binary: return "|i1";
    case EmbeddingPrecision::Uint8:
    case EmbeddingPrecision::Ubinary: return "|u1";
  }
  return "?";
}

double QuantizedEmbeddings::at(int64_t r, int64_t k) const {
  const int64_t i = r * dim + k;
  switch (precision) {
    case EmbeddingPrecision::Float32: {
      float f;
      std::memcpy(&f, values.data() + i * 4, 4);
      return f;
    }
    case EmbeddingPrecision::Int8:
    case EmbeddingPrecision::Binary: return (double)(int8_t)values[(size_t)i];
    case EmbeddingPrecision::Uint8:
    case EmbeddingPrecision::Ubinary: return (double)values[(size_t)i];
  }
  return 0;
}

QuantizedEmbeddings quantize_embeddings(const float* e, int64_t rows, int64_t dim, EmbeddingPrecision p,
                                        const std::vector<float>& ranges) {
  if (dim < 1) throw std::invalid_argument("quantize_embeddings: embeddings have no values (dim " +
                                           std::to_string(dim) + ")");
  if (rows < 0) throw std::invalid_argument("quantize_embeddings: negative row count");
  QuantizedEmbeddings q;
  q.precision = p;
  q.rows = rows;
  q.dim = quantized_dim(p, dim);
  const int64_t elem = p == EmbeddingPrecision::Float32 ? 4 : 1;
  q.values.resize((size_t)(rows * q.dim * elem));
  std::vector<float> own;
  const float* r = nullptr;
  if (precision_needs_ranges(p)) {
    if (!ranges.empty()) {
      if ((int64_t)ranges.size() != 2 * dim)
        throw std::invalid_argument("quantisation ranges must be [2, " + std::to_string(dim) + "] (min row, max row), "
                                    "got " + std::to_string(ranges.size()) + " values");
      r = ranges.data();
    } else {
      if (rows < 1)
        throw std::invalid_argument(std::string(precision_name(p)) + " quantisation without ranges or calibration "
                                    "embeddings takes its ranges from the embeddings, and there are none");
      own = embedding_ranges(e, rows, dim);
      r = own.data();
    }
  }
  for (int64_t n = 0; n < rows; ++n)
    q.out_of_range += quantize_embedding(e + n * dim, dim, p, r, q.values.data() + n * q.dim * elem);
  return q;
}

// ------------------------------------------------------------------------------------------ semantic search

std::vector<std::vector<SearchHit>> semantic_search(const float* queries, int64_t Q, int64_t D,
                                                    const QuantizedEmbeddings& corpus, const SearchOptions& o) {
  if (o.top_k < 1) throw std::invalid_argument("top_k must be >= 1, got " + std::to_string(o.top_k));
  if (o.rescore_multiplier < 1)
    throw std::invalid_argument("rescore_multiplier must be >= 1, got " + std::to_string(o.rescore_multiplier));
  const EmbeddingPrecision p = corpus.precision;
  const bool bits = p == EmbeddingPrecision::Binary || p == EmbeddingPrecision::Ubinary;
  if (corpus.dim != quantized_dim(p, D))
    throw std::invalid_argument(std::string("the queries have ") + std::to_string(D) + " values, the " +
                                precision_name(p) + " corpus rows " + std::to_string(corpus.dim) +
                                (bits ? " bytes (" + std::to_string(corpus.dim * 8) + " bits)" : std::string(" values")) +
                                "; embed both with the same model and dimensions");
  const QuantizedEmbeddings* re = bits && o.rescore ? o.rescore_embeddings : nullptr;
  if (re && (!precision_needs_ranges(re->precision) || re->rows != corpus.rows || re->dim != D))
    throw std::invalid_argument(std::string("rescoring embeddings must be int8 or uint8 [") +
                                std::to_string(corpus.rows) + ", " + std::to_string(D) + "] (the same corpus), got " +
                                precision_name(re->precision) + " [" + std::to_string(re->rows) + ", " +
                                std::to_string(re->dim) + "]");
  const int64_t N = corpus.rows;
  std::vector<std::vector<SearchHit>> out((size_t)Q);
  std::vector<double> score((size_t)N);
  std::vector<uint8_t> qbits((size_t)corpus.dim);
  const uint8_t flip = p == EmbeddingPrecision::Binary ? 0x80 : 0x00;  // binary stores packbits - 128
  for (int64_t qi = 0; qi < Q; ++qi) {
    const float* q = queries + qi * D;
    std::vector<int64_t> order((size_t)N);
    std::iota(order.begin(), order.end(), int64_t{0});
    if (!bits) {
      double qn = 0;
      for (int64_t k = 0; k < D; ++k) qn += (double)q[k] * q[k];
      qn = std::sqrt(qn);
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        double dot = 0, cn = 0;
        for (int64_t k = 0; k < D; ++k) {
          const double c = corpus.at(n, k);
          dot += (double)q[k] * c;
          cn += c * c;
        }
        // cosine for a float32 corpus (a zero vector scores 0, as torch's normalize leaves it 0); the plain dot
        // product for an int8 / uint8 one
        score[(size_t)n] = p == EmbeddingPrecision::Float32 ? (qn > 0 && cn > 0 ? dot / (qn * std::sqrt(cn)) : 0.0)
                                                            : dot;
      }
      const int64_t k = std::min(o.top_k, N);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        return score[(size_t)a] > score[(size_t)b] || (score[(size_t)a] == score[(size_t)b] && a < b);
      });
      for (int64_t i = 0; i < k; ++i) out[(size_t)qi].push_back({order[(size_t)i], score[(size_t)order[(size_t)i]]});
      continue;
    }
    pack_bits(q, D, qbits.data());
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      int64_t d = 0;
      const uint8_t* row = corpus.values.data() + n * corpus.dim;
      for (int64_t b = 0; b < corpus.dim; ++b) d += std::popcount((unsigned)(uint8_t)((row[b] ^ flip) ^ qbits[(size_t)b]));
      score[(size_t)n] = (double)d;
    }
    const int64_t k = std::min(o.rescore ? o.top_k * o.rescore_multiplier : o.top_k, N);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
      return score[(size_t)a] < score[(size_t)b] || (score[(size_t)a] == score[(size_t)b] && a < b);
    });
    std::vector<SearchHit> hits;
    for (int64_t i = 0; i < k; ++i) hits.push_back({order[(size_t)i], score[(size_t)order[(size_t)i]]});
    if (o.rescore) {
      for (SearchHit& h : hits) {
        double dot = 0;
        if (re) {
          for (int64_t j = 0; j < D; ++j) dot += (double)q[j] * re->at(h.corpus_id, j);
        } else {
          const uint8_t* row = corpus.values.data() + h.corpus_id * corpus.dim;
          for (int64_t j = 0; j < D; ++j)
            if (((row[j / 8] ^ flip) >> (7 - j % 8)) & 1) dot += q[j];
        }
        h.score = dot;
      }
      // best first; ties keep the Hamming order (np.argsort(-scores, kind="stable") of the candidates)
      std::stable_sort(hits.begin(), hits.end(), [](const SearchHit& a, const SearchHit& b) { return a.score > b.score; });
      if ((int64_t)hits.size() > o.top_k) hits.resize((size_t)o.top_k);
    }
    out[(size_t)qi] = std::move(hits);
  }
  return out;
}

// ------------------------------------------------------------------------------------------ long inputs

std::vector<std::pair<int64_t, int64_t>> chunk_windows(int64_t tokens, int64_t content, int64_t stride) {
  if (stride < 0 || stride >= content)
    throw std::invalid_argument("the stride (" + std::to_string(stride) + " tokens shared by consecutive windows) "
                                "must be >= 0 and less than the window's " + std::to_string(content) +
                                " text tokens");
  if (tokens < 0) throw std::invalid_argument("chunk_windows: negative token count");
  std::vector<std::pair<int64_t, int64_t>> w;
  for (int64_t start = 0;; start += content - stride) {
    w.emplace_back(start, std::min(tokens, start + content));
    if (start + content >= tokens) break;
  }
  return w;
}

void pool_windows(const float* windows, int64_t n, int64_t dim, bool max, bool normalize, float* out) {
  if (n < 1) throw std::invalid_argument("pool_windows: a document has no windows");
  for (int64_t k = 0; k < dim; ++k) {
    double acc = max ? (double)windows[k] : 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = windows[i * dim + k];
      acc = max ? std::max(acc, x) : acc + x;
    }
    out[k] = (float)(max ? acc : acc / (double)n);
  }
  if (normalize) l2_normalize(out, dim);
}

}  // namespace tfm

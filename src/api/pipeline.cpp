// tfm/pipeline.h: batching, dimensions, normalisation and the stored dtype, the one implementation the CLI, the
// server, Python and the API classes call.
#include "tfm/pipeline.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include "api/common.h"
#include "models/checkpoint_weights.h"
#include "models/pooling.h"
#include "ops/gemm.h"

namespace tfm {

bool BatchBudget::fits(int64_t length) const {
  if (rows_ == 0) return true;  // a batch always takes its first sequence, however long
  const int64_t longest = std::max(longest_, length);
  if (limits_.max_rows > 0 && rows_ + 1 > limits_.max_rows) return false;
  if (limits_.max_tokens > 0 && (rows_ + 1) * longest > limits_.max_tokens) return false;
  if (limits_.max_real_tokens > 0 && real_ + length > limits_.max_real_tokens) return false;
  return true;
}

void BatchBudget::add(int64_t length) {
  ++rows_;
  longest_ = std::max(longest_, length);
  real_ += length;
}

std::vector<std::vector<size_t>> length_batches(const std::vector<int64_t>& lengths, const BatchLimits& limits) {
  if (limits.max_tokens < 0 || limits.max_rows < 0 || limits.max_real_tokens < 0)
    throw std::invalid_argument("batch limits must be >= 0 (0 = none), got max_tokens " +
                                std::to_string(limits.max_tokens) + ", max_rows " + std::to_string(limits.max_rows) +
                                ", max_real_tokens " + std::to_string(limits.max_real_tokens));
  for (size_t i = 0; i < lengths.size(); ++i)
    if (lengths[i] < 0)
      throw std::invalid_argument("sequence " + std::to_string(i) + " has a negative length " +
                                  std::to_string(lengths[i]));
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lengths[a] < lengths[b]; });
  std::vector<std::vector<size_t>> batches;
  for (size_t s = 0; s < order.size();) {
    BatchBudget budget(limits);
    std::vector<size_t> batch;
    for (; s < order.size() && budget.fits(lengths[order[s]]); ++s) {
      budget.add(lengths[order[s]]);
      batch.push_back(order[s]);
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

void check_dimensions(int64_t dimensions, int64_t embedding_size) {
  if (dimensions < 1 || dimensions > embedding_size)
    throw std::invalid_argument("dimensions must be >= 1 and at most the embedding size " +
                                std::to_string(embedding_size) + ", got " + std::to_string(dimensions));
}

void l2_normalize(float* v, int64_t n) {
  Tensor row = Tensor::view_of(v, {1, n}, DType::F32, nullptr);
  l2_normalize_rows(row);
}

FloatArray truncate_dimensions(const FloatArray& a, int64_t dims, bool normalize) {
  if (a.ndim() != 2) throw std::invalid_argument("truncate_dimensions: expected embeddings [N, D]");
  const int64_t N = a.size(0), D = a.size(1);
  if (dims != 0) check_dimensions(dims, D);
  if (dims == 0 || dims == D) {
    if (!normalize) return a;
    dims = D;
  }
  Tensor t = Tensor::empty({N, dims});
  for (int64_t n = 0; n < N; ++n) std::copy(a.data() + n * D, a.data() + n * D + dims, t.f32() + n * dims);
  if (normalize) l2_normalize_rows(t);
  return api::to_array(std::move(t));
}

std::vector<float> truncate_dimensions(std::vector<float> v, int64_t dims, bool normalize) {
  if (dims != 0) check_dimensions(dims, (int64_t)v.size());
  if (dims > 0) v.resize((size_t)dims);
  if (normalize) l2_normalize(v.data(), (int64_t)v.size());
  return v;
}

std::string stored_dtype(const std::string& dir) {
  namespace fs = std::filesystem;
  auto has_weights = [](const std::string& d) {
    try {
      CheckpointWeights::find(d);
      return true;
    } catch (const std::runtime_error&) {
      return false;
    }
  };
  // A sentence-transformers folder may keep its Transformer module's weights in 0_Transformer.
  const std::string st = dir + "/0_Transformer";
  std::error_code ec;
  if (!has_weights(dir) && fs::is_directory(st, ec) && has_weights(st))
    return ops::compute_type_name(CheckpointWeights(st).stored_compute_type());
  api::require_weights(dir);
  return ops::compute_type_name(CheckpointWeights(dir).stored_compute_type());
}

}  // namespace tfm

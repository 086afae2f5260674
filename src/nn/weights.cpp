#include "nn/weights.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace tfm {

std::string SafeTensorsWeights::find(const std::string& name, const Shape& shape,
                                     const std::vector<std::string>& aliases) const {
  std::string found;
  if (st_.has(name)) {
    found = name;
  } else {
    for (const auto& a : aliases)
      if (st_.has(a)) {
        found = a;
        break;
      }
  }
  if (found.empty()) {
    std::string msg = st_.path() + ": missing tensor '" + name + "'";
    if (!aliases.empty()) {
      msg += " (also tried";
      for (size_t i = 0; i < aliases.size(); ++i) msg += (i ? ", '" : " '") + aliases[i] + "'";
      msg += ")";
    }
    throw std::runtime_error(msg);
  }
  if (st_.shape_of(found) != shape)
    throw std::runtime_error(st_.path() + ": tensor '" + found + "' has shape " + shape_str(st_.shape_of(found)) +
                             ", config expects " + shape_str(shape));
  used_.insert(found);
  return found;
}

Tensor SafeTensorsWeights::get_unchecked(const std::string& name, const Shape& shape,
                                         const std::vector<std::string>& aliases) {
  const std::string found = find(name, shape, aliases);
  Tensor t = st_.get(found);
  if (t.dtype() != DType::F32)
    throw std::runtime_error(st_.path() + ": tensor '" + found + "' has dtype " + st_.dtype_of(found) +
                             ", expected a floating-point type");
  return t;
}

const uint16_t* SafeTensorsWeights::get_bf16(const std::string& name, const Shape& shape,
                                             const std::vector<std::string>& aliases) {
  const std::string found = find(name, shape, aliases);
  if (st_.dtype_of(found) != "BF16") return nullptr;
  const unsigned char* p = st_.raw_data(found);
  if (reinterpret_cast<uintptr_t>(p) % alignof(uint16_t) != 0) return nullptr;  // get() copies it then
  return reinterpret_cast<const uint16_t*>(p);
}

Tensor SafeTensorsWeights::get(const std::string& name, const Shape& shape, const std::vector<std::string>& aliases) {
  Tensor t = get_unchecked(name, shape, aliases);
  const std::string found = find(name, shape, aliases);
  // PyTorch would propagate a NaN weight into every output; masked softmax and LayerNorm here can hide it and
  // return plausible but wrong numbers, so non-finite weights are refused up front.
  // Branch-free (it vectorises) and split over the OpenMP threads: the check reads every page of the file, and
  // was most of a one-sentence `tfm encode`. The first bad element is then located serially, for the message.
  const float* p = t.f32();
  const int64_t n = t.numel();
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const float* q = p + c * kChunk;
    const int64_t m = std::min(kChunk, n - c * kChunk);
    int b = 0;
#pragma omp simd reduction(| : b)
    for (int64_t i = 0; i < m; ++i) b |= !(std::fabs(q[i]) <= std::numeric_limits<float>::max());
    bad |= b;
  }
  if (bad)
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i]))
        throw std::runtime_error(st_.path() + ": tensor '" + found + "' contains NaN or Inf at element " +
                                 std::to_string(i));
  if (release_checked_) release(t);
  return t;
}

const int8_t* SafeTensorsWeights::get_int8(const std::string& name, const Shape& shape,
                                           const std::vector<std::string>& aliases, const float** scale) {
  std::vector<std::string> names = {name};
  names.insert(names.end(), aliases.begin(), aliases.end());
  for (const auto& n : names) {
    if (!st_.has(n) || st_.dtype_of(n) != "I8") continue;
    if (st_.shape_of(n) != shape)
      throw std::runtime_error(st_.path() + ": tensor '" + n + "' has shape " + shape_str(st_.shape_of(n)) +
                               ", config expects " + shape_str(shape));
    const std::string sn = n + "_scale";
    if (!st_.has(sn) || st_.dtype_of(sn) != "F32" || st_.shape_of(sn) != Shape{shape[0]})
      throw std::runtime_error(st_.path() + ": int8 tensor '" + n + "' needs '" + sn + "' (F32, [" +
                               std::to_string(shape[0]) + "])");
    Tensor s = st_.get(sn);
    for (int64_t i = 0; i < s.numel(); ++i)
      if (!std::isfinite(s.f32()[i]) || s.f32()[i] < 0)
        throw std::runtime_error(st_.path() + ": '" + sn + "' holds a negative or non-finite scale");
    scales_.push_back(s);
    used_.insert(n);
    used_.insert(sn);
    *scale = s.f32();
    return reinterpret_cast<const int8_t*>(st_.raw_data(n));
  }
  return nullptr;
}

ops::ComputeType SafeTensorsWeights::stored_compute_type() const {
  const nlohmann::json& m = st_.metadata();
  const bool int8 = m.is_object() && m.contains("tfm_dtype") && m["tfm_dtype"].is_string() && m["tfm_dtype"] == "int8";
  return int8 ? ops::ComputeType::I8 : ops::ComputeType::F32;
}

namespace {
bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

Tensor RandomWeights::get(const std::string& name, const Shape& shape, const std::vector<std::string>&) {
  Tensor t = Tensor::empty(shape);
  float* p = t.f32();
  int64_t n = t.numel();
  std::string prefix = name.substr(0, name.rfind('.'));
  bool is_norm = contains(name, "LayerNorm") || contains(name, "layer_norm") || contains(name, ".ln.");
  if (is_norm) {
    t.fill(ends_with(name, "weight") || ends_with(name, "gamma") ? 1.0f : 0.0f);
  } else if (contains(name, "embedding") && shape.size() == 2) {
    for (int64_t i = 0; i < n; ++i) p[i] = rng_.normal();
  } else if (shape.size() == 2) {
    fan_in_[prefix] = shape[1];
    float bound = 1.0f / std::sqrt((float)shape[1]);
    for (int64_t i = 0; i < n; ++i) p[i] = rng_.uniform(-bound, bound);
  } else {
    auto it = fan_in_.find(prefix);
    float bound = it != fan_in_.end() ? 1.0f / std::sqrt((float)it->second) : 0.0f;
    for (int64_t i = 0; i < n; ++i) p[i] = bound ? rng_.uniform(-bound, bound) : 0.0f;
  }
  created_.emplace_back(name, t);
  return t;
}

}  // namespace tfm

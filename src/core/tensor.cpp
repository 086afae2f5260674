#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

namespace tfm {

size_t dtype_size(DType dt) { return dt == DType::F32 ? 4 : 8; }
const char* dtype_name(DType dt) { return dt == DType::F32 ? "F32" : "I64"; }

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + shape_str(s));
    n *= d;
  }
  return n;
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  // 64-byte alignment for vector loads; at least one element so data_ is never null.
  size_t bytes = std::max<size_t>(64, ((size_t)shape_numel(shape) * dtype_size(dtype) + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  t.holder_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::from_f32(const Shape& shape, const std::vector<float>& values) {
  Tensor t = empty(shape, DType::F32);
  if ((int64_t)values.size() != t.numel())
    throw std::invalid_argument("from_f32: " + std::to_string(values.size()) + " values for shape " + shape_str(shape));
  std::memcpy(t.data_, values.data(), t.nbytes());
  return t;
}

Tensor Tensor::from_i64(const Shape& shape, const std::vector<int64_t>& values) {
  Tensor t = empty(shape, DType::I64);
  if ((int64_t)values.size() != t.numel())
    throw std::invalid_argument("from_i64: " + std::to_string(values.size()) + " values for shape " + shape_str(shape));
  std::memcpy(t.data_, values.data(), t.nbytes());
  return t;
}

Tensor Tensor::view_of(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keepalive) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.data_ = data;
  t.holder_ = std::move(keepalive);
  return t;
}

int64_t Tensor::size(int64_t i) const {
  int64_t n = ndim();
  if (i < 0) i += n;
  if (i < 0 || i >= n) throw std::out_of_range("dimension " + std::to_string(i) + " out of range for " + shape_str(shape_));
  return shape_[i];
}

float* Tensor::f32() {
  if (dtype_ != DType::F32) throw std::logic_error("tensor is not F32");
  return static_cast<float*>(data_);
}
const float* Tensor::f32() const { return const_cast<Tensor*>(this)->f32(); }
int64_t* Tensor::i64() {
  if (dtype_ != DType::I64) throw std::logic_error("tensor is not I64");
  return static_cast<int64_t*>(data_);
}
const int64_t* Tensor::i64() const { return const_cast<Tensor*>(this)->i64(); }

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("reshape: more than one -1 in " + shape_str(shape));
      infer = (int64_t)i;
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0 && known > 0) s[infer] = numel() / known;
  if (shape_numel(s) != numel())
    throw std::invalid_argument("reshape: cannot view " + shape_str(shape_) + " as " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

void Tensor::fill(float v) {
  float* p = f32();
  for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = v;
}

}  // namespace tfm

// Tensor: a dense, row-major, contiguous n-d array in PyTorch dimension order.
// Storage is either owned (heap) or a view into memory kept alive by a shared handle (e.g. an mmapped
// safetensors file), so weights are used in place without copies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tfm {

enum class DType { F32, I64 };

size_t dtype_size(DType dt);
const char* dtype_name(DType dt);

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3]"
int64_t shape_numel(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  // Owned, zero-initialised storage.
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32);
  // Owned storage, uninitialised contents.
  static Tensor empty(const Shape& shape, DType dtype = DType::F32);
  static Tensor from_f32(const Shape& shape, const std::vector<float>& values);
  static Tensor from_i64(const Shape& shape, const std::vector<int64_t>& values);
  // Non-owning view of `data`; `keepalive` holds whatever backs the memory (mmap handle).
  static Tensor view_of(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keepalive);

  bool defined() const { return data_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t ndim() const { return (int64_t)shape_.size(); }
  // Size of dimension i; negative i counts from the end as in PyTorch.
  int64_t size(int64_t i) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return (size_t)numel() * dtype_size(dtype_); }

  float* f32();
  const float* f32() const;
  int64_t* i64();
  const int64_t* i64() const;

  // Same storage, new shape (numel must match). One dimension may be -1.
  Tensor reshape(const Shape& shape) const;
  // Deep copy into owned storage.
  Tensor clone() const;
  void fill(float v);

 private:
  std::shared_ptr<void> holder_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::F32;
};

}  // namespace tfm

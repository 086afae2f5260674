/// @file tfm/array.h
/// A read-only, row-major, contiguous n-d array shared with the library without copying (the buffer a model wrote
/// its output into). Copying an Array shares the buffer.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tfm {

template <class T>
class Array {
 public:
  Array() = default;
  /// `data` holds numel(shape) elements; the Array keeps it alive.
  Array(std::shared_ptr<const T> data, std::vector<int64_t> shape) : data_(std::move(data)), shape_(std::move(shape)) {}

  const T* data() const { return data_.get(); }
  /// The owning handle, for handing the buffer on without a copy (the Python bindings keep it in a capsule).
  const std::shared_ptr<const T>& storage() const { return data_; }
  /// Dimensions in PyTorch order, e.g. [batch, length, hidden_size].
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t ndim() const { return (int64_t)shape_.size(); }
  /// Size of dimension `i`; negative `i` counts from the end. Throws std::out_of_range.
  int64_t size(int64_t i) const {
    const int64_t n = ndim();
    if (i < -n || i >= n) throw std::out_of_range("Array::size: dimension " + std::to_string(i) + " of a " +
                                                  std::to_string(n) + "-d array");
    return shape_[(size_t)(i < 0 ? i + n : i)];
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return shape_.empty() && !data_ ? 0 : n;
  }
  /// Element `i` of the flattened array (no bounds check).
  const T& operator[](int64_t i) const { return data_.get()[i]; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + numel(); }

 private:
  std::shared_ptr<const T> data_;
  std::vector<int64_t> shape_;
};

using FloatArray = Array<float>;
using IdArray = Array<int64_t>;

}  // namespace tfm

// ParamTable: every trainable tensor of a model in one flat float buffer (and its gradient in another), named by
// the PyTorch state_dict names. One buffer makes the optimizer, gradient clipping and checkpointing single loops.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tfm {

class ParamTable {
 public:
  struct Entry {
    std::string name;
    Shape shape;
    int64_t offset;  // in floats, into data() / grad()
    int64_t numel;
  };
  // Registers a parameter; returns its index. Only valid before finalize().
  int64_t add(const std::string& name, const Shape& shape);
  // Allocates the value and gradient buffers (zeros).
  void finalize();
  float* data(int64_t i) { return data_.data() + entries_[i].offset; }
  float* grad(int64_t i) { return grad_.data() + entries_[i].offset; }
  std::vector<float>& all_data() { return data_; }
  std::vector<float>& all_grad() { return grad_; }
  const std::vector<float>& all_data() const { return data_; }
  const std::vector<float>& all_grad() const { return grad_; }
  const std::vector<Entry>& entries() const { return entries_; }
  int64_t index_of(const std::string& name) const;  // -1 if absent
  int64_t total() const { return total_; }
  void zero_grad();
  // Views of the values, by name, for saving (share this table's memory).
  std::vector<std::pair<std::string, Tensor>> named_tensors();

 private:
  std::vector<Entry> entries_;
  std::vector<float> data_, grad_;
  int64_t total_ = 0;
};

}  // namespace tfm

#include "train/params.h"

#include <algorithm>
#include <stdexcept>

namespace tfm {

int64_t ParamTable::add(const std::string& name, const Shape& shape) {
  if (!data_.empty()) throw std::logic_error("ParamTable::add after finalize");
  int64_t n = shape_numel(shape);
  entries_.push_back({name, shape, total_, n});
  total_ += n;
  return (int64_t)entries_.size() - 1;
}

void ParamTable::finalize() {
  data_.assign(total_, 0.0f);
  grad_.assign(total_, 0.0f);
}

int64_t ParamTable::index_of(const std::string& name) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return (int64_t)i;
  return -1;
}

void ParamTable::zero_grad() { std::fill(grad_.begin(), grad_.end(), 0.0f); }

std::vector<std::pair<std::string, Tensor>> ParamTable::named_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& e : entries_)
    out.emplace_back(e.name, Tensor::view_of(data_.data() + e.offset, e.shape, DType::F32, nullptr));
  return out;
}

}  // namespace tfm

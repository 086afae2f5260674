#include "nn/params.h"

#include <algorithm>
#include <stdexcept>

#include "nn/weights.h"

namespace tfm::nn {

int64_t ParamStore::add(const std::string& name, const Shape& shape) {
  if (finalized_) throw std::logic_error("ParamStore::add('" + name + "') after finalize");
  int64_t n = shape_numel(shape);
  entries_.push_back({name, shape, total_, n});
  total_ += n;
  return (int64_t)entries_.size() - 1;
}

void ParamStore::finalize() {
  data_.assign(total_, 0.0f);
  grad_.assign(total_, 0.0f);
  finalized_ = true;
}

int64_t ParamStore::index_of(const std::string& name) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return (int64_t)i;
  return -1;
}

void ParamStore::zero_grad() { std::fill(grad_.begin(), grad_.end(), 0.0f); }

std::vector<std::pair<std::string, Tensor>> ParamStore::named_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& e : entries_)
    out.emplace_back(e.name, Tensor::view_of(data_.data() + e.offset, e.shape, DType::F32, nullptr));
  return out;
}

Vars Vars::prefix(const std::string& name) const {
  Vars v = *this;
  v.path_ = this->name(name);
  return v;
}

std::vector<std::string> Vars::aliases_of(const std::string& full) const {
  return aliases_ ? aliases_(full) : std::vector<std::string>{};
}

Param Vars::get(const std::string& leaf, const Shape& shape) const {
  const std::string full = name(leaf);
  if (store_) return Param(store_, store_->add(full, shape));
  return Param(source_->get(full, shape, aliases_of(full)));
}

Param Vars::get_unchecked(const std::string& leaf, const Shape& shape) const {
  const std::string full = name(leaf);
  if (store_) return Param(store_, store_->add(full, shape));
  return Param(source_->get_unchecked(full, shape, aliases_of(full)));
}

const uint16_t* Vars::get_bf16(const std::string& leaf, const Shape& shape) const {
  if (store_) return nullptr;
  const std::string full = name(leaf);
  return source_->get_bf16(full, shape, aliases_of(full));
}

bool Vars::has(const std::string& leaf) const {
  const std::string full = name(leaf);
  if (store_) return store_->index_of(full) >= 0;
  if (source_->has(full)) return true;
  for (const auto& a : aliases_of(full))
    if (source_->has(a)) return true;
  return false;
}

const int8_t* Vars::get_int8(const std::string& leaf, const Shape& shape, const float** scale) const {
  if (store_) return nullptr;
  const std::string full = name(leaf);
  return source_->get_int8(full, shape, aliases_of(full), scale);
}

std::function<void()> Vars::releaser(const Param& p) const {
  if (!source_) return [] {};
  return source_->releaser(p.tensor());
}

void Vars::release(const Param& p) const {
  if (source_) source_->release(p.tensor());
}

void Vars::release_bytes(const void* data, size_t bytes) const {
  if (source_) source_->release_bytes(data, bytes);
}

std::function<void()> Vars::bytes_releaser(const void* data, size_t bytes) const {
  return source_ ? source_->bytes_releaser(data, bytes) : std::function<void()>{};
}

}  // namespace tfm::nn

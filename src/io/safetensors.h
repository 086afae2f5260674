// safetensors reader (mmapped, zero-copy for F32/I64) and writer.
// Format (https://github.com/huggingface/safetensors): u64 little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}},
// then the data section; offsets are bytes relative to the start of the data section.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tfm {

class SafeTensors {
 public:
  // Maps `path` read-only and validates the whole header: file size, header length, JSON, each entry's dtype,
  // shape (non-negative ints), data_offsets (begin <= end, inside the data section, no two tensors overlapping)
  // and that the byte span equals numel * dtype size. Dtypes F32, F16, BF16, I64, I32 can be read; the other
  // standard dtypes (F64, U8, BOOL, ...) pass validation and fail in get().
  // Throws std::runtime_error whose message starts with `path` and names the offending tensor.
  static SafeTensors open(const std::string& path);

  bool has(const std::string& name) const;
  // The tensor `name`, shape as stored. F32 and I64 are zero-copy views into the mapping (which they keep
  // alive after this object is gone) unless the data is misaligned, then an owned copy. F16 and BF16 are
  // converted to an owned F32 tensor, I32 to an owned I64 tensor.
  // Throws naming the file and tensor if `name` is missing or its dtype is unsupported.
  Tensor get(const std::string& name) const;
  // Tensor names in sorted order (without "__metadata__").
  std::vector<std::string> names() const;
  // Stored shape / dtype string ("F32", "F16", ...) of `name`; throws like get() if missing.
  const Shape& shape_of(const std::string& name) const;
  std::string dtype_of(const std::string& name) const;
  // The "__metadata__" object, or an empty object if the file has none.
  const nlohmann::json& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }
  // Drops the resident pages wholly inside [data, data + bytes) when that range lies in this file's mapping
  // (madvise MADV_DONTNEED; a later read faults them in from the file again). Called once a tensor has been
  // copied into a packed layout, so the model's peak RSS holds each weight once. No-op for other memory.
  void release_pages(const void* data, size_t bytes) const;
  // release_pages for later: a function that drops those pages when called, and keeps the mapping alive until
  // then (valid after this object is gone). A no-op function for memory outside the mapping.
  std::function<void()> page_releaser(const void* data, size_t bytes) const;
  // Whether data[bytes] lies inside this file's mapping (values get() handed out in place).
  bool holds(const void* data, size_t bytes) const;
  // The stored bytes of `name` (any dtype, e.g. the I8 weights of `tfm convert --dtype int8`), inside the
  // mapping: valid while this object or a tensor from get() lives. Throws like get() if missing.
  const unsigned char* raw_data(const std::string& name) const { return data_ + entry(name).begin; }

 private:
  struct Entry {
    std::string dtype;
    Shape shape;
    size_t begin = 0, end = 0;  // bytes, relative to the data section
  };
  const Entry& entry(const std::string& name) const;

  std::string path_;
  std::shared_ptr<void> mapping_;        // keeps the mmap alive; shared with the views returned by get()
  size_t map_size_ = 0;
  const unsigned char* data_ = nullptr;  // start of the data section inside the mapping
  std::map<std::string, Entry> entries_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

// Writes `tensors` (F32 or I64, any shape) to `path` atomically (write_file_atomic) in the standard layout
// produced by the reference writer (reference/torch/st.py): entries and data in sorted-name order, data packed
// without gaps, header padded with spaces to a multiple of 8 bytes. `metadata`, if non-empty, must be an
// object of string values (as the format requires) and is stored as "__metadata__".
// Throws std::invalid_argument on duplicate or reserved names, undefined tensors or bad metadata, and
// std::runtime_error if the file cannot be written.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const nlohmann::json& metadata = {});

// A tensor as stored bytes: any safetensors dtype string ("F32", "BF16", "I8", ...). bytes.size() must equal
// numel * dtype size.
struct RawTensor {
  std::string name, dtype;
  Shape shape;
  std::vector<unsigned char> bytes;
};
// save_safetensors for stored bytes (same layout, atomic). Throws std::invalid_argument on duplicate or reserved
// names, an unknown dtype or a byte count that does not match the shape.
void save_safetensors_raw(const std::string& path, std::vector<RawTensor> tensors, const nlohmann::json& metadata = {});

}  // namespace tfm

// Safe reader of PyTorch checkpoints written by torch.save(state_dict) (pytorch_model.bin).
//
// Format (PyTorch >= 1.6, torch/serialization.py): a zip archive (entries stored, data aligned to 64 bytes) with
// "<archive>/data.pkl", a pickle (protocol 2) of the state dict whose tensors are
// torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks) and
// whose storages are persistent ids ('storage', torch.FloatStorage, key, location, numel) naming the entry
// "<archive>/data/<key>" (raw little-endian elements).
//
// Unlike torch.load, nothing in the file is executed: the unpickler here implements only the opcodes those
// pickles use (PROTO, FRAME, MARK, tuples, lists, dicts, ints, floats, strings, memo, REDUCE, BUILD, BINPERSID,
// STOP) and the globals collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter
// and the torch.*Storage types. Any other opcode or global (os.system, posix.system, builtins.eval, ...) is
// refused with an error naming it, before anything is built from it.
//
// Every offset is bounds-checked: zip directory records, local headers, entry spans, storage sizes against
// their entries, and each tensor's (offset, size, stride) span against its storage. Deflated entries (method 8,
// zlib) are accepted with a declared size capped by the deflate ratio; the legacy non-zip format
// (PyTorch < 1.6 or _use_new_zipfile_serialization=False) is refused with a message saying so.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tfm {

class TorchCheckpoint {
 public:
  // Maps `path`, reads the zip directory and unpickles data.pkl (validating as above). The pickle must give a
  // dict whose keys are strings and whose values are tensors (a state dict).
  // Throws std::runtime_error whose message starts with `path`.
  static TorchCheckpoint open(const std::string& path);

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Tensor names in sorted order.
  std::vector<std::string> names() const;
  // Shape as stored (PyTorch order) and dtype in safetensors spelling: "F32", "F16", "BF16", "F64", "I64",
  // "I32", "I16", "I8", "U8", "BOOL". Throw naming the file and tensor if `name` is missing.
  const Shape& shape_of(const std::string& name) const;
  std::string dtype_of(const std::string& name) const;
  // The tensor `name` as a contiguous tensor: F32 (F16, BF16 and F64 converted; a contiguous aligned F32 tensor
  // is a zero-copy view into the mapping) or I64 (I32 converted). Non-contiguous tensors (views saved with their
  // storage: a transpose, a slice) are gathered through their strides. Other dtypes throw naming the tensor.
  Tensor get(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  struct Storage {
    std::string dtype;
    size_t elem = 0;                // bytes per element
    int64_t numel = 0;
    const unsigned char* data = nullptr;
    std::shared_ptr<void> keep;     // the mapping or the inflated buffer
  };
  struct Entry {
    int storage = 0;                // index into storages_
    int64_t offset = 0;             // elements
    Shape shape;
    std::vector<int64_t> stride;    // elements
  };
  const Entry& entry(const std::string& name) const;

  std::string path_;
  std::vector<Storage> storages_;
  std::map<std::string, Entry> tensors_;
  friend class TorchUnpickler;
};

}  // namespace tfm

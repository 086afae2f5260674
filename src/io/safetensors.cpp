#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <tuple>

#include "io/atomic_file.h"
#include "io/float16.h"

namespace tfm {

// The format is little-endian and data is read in place, so the host must be too.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using nlohmann::json;

// Same cap as the reference implementation (safetensors MAX_HEADER_SIZE): a larger length means a corrupt file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Byte size of each dtype the format defines; 0 for a dtype it does not (rejected at open()).
size_t st_dtype_size(const std::string& dt) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  auto it = sizes.find(dt);
  return it == sizes.end() ? 0 : it->second;
}



// Non-negative JSON integer -> uint64; false for anything else (negative, float, string, ...).
bool json_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = (uint64_t)v.get<int64_t>();
    return true;
  }
  return false;
}

std::string json_brief(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

}  // namespace

SafeTensors SafeTensors::open(const std::string& path) {
  SafeTensors st;
  st.path_ = path;
  auto fail = [&](const std::string& msg) { return std::runtime_error(path + ": " + msg); };

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat sb;
  if (::fstat(fd, &sb) != 0) {
    int err = errno;
    ::close(fd);
    throw fail(std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(sb.st_mode)) {
    ::close(fd);
    throw fail("not a regular file");
  }
  const uint64_t file_size = (uint64_t)sb.st_size;
  if (file_size < 8) {
    ::close(fd);
    throw fail("file is " + std::to_string(file_size) + " bytes" + (file_size == 0 ? " (empty)" : "") +
               ", too short for the 8-byte header length of a safetensors file");
  }
  // MAP_PRIVATE + PROT_WRITE: tensors handed out are writable copy-on-write pages; nothing reaches the file.
  void* addr = ::mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);
  if (addr == MAP_FAILED) throw fail(std::string("cannot mmap: ") + std::strerror(map_err));
  st.mapping_ = std::shared_ptr<void>(addr, [file_size](void* p) { ::munmap(p, file_size); });
  st.map_size_ = file_size;
  const auto* bytes = static_cast<const unsigned char*>(addr);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > file_size - 8)
    throw fail("header length " + std::to_string(header_len) + " exceeds the " + std::to_string(file_size - 8) +
               " bytes after the length prefix (file is " + std::to_string(file_size) + " bytes; truncated?)");
  if (header_len > kMaxHeaderBytes)
    throw fail("header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  const auto* header_begin = reinterpret_cast<const char*>(bytes + 8);
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_len);
  } catch (const json::parse_error& e) {
    throw fail("header is not valid JSON (byte " + std::to_string(e.byte) + " of the header): " + e.what());
  }
  if (!header.is_object()) throw fail(std::string("header must be a JSON object, found ") + header.type_name());

  st.data_ = bytes + 8 + header_len;
  const uint64_t data_size = file_size - 8 - header_len;
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> spans;  // non-empty tensors, for the overlap check
  // A named loop variable rather than a structured binding: clang < 16 cannot capture bindings in lambdas.
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const json& info = item.value();
    if (name == "__metadata__") {
      if (!info.is_object()) throw fail(std::string("__metadata__ must be a JSON object, found ") + info.type_name());
      st.metadata_ = info;
      continue;
    }
    auto bad = [&](const std::string& msg) { return fail("tensor '" + name + "': " + msg); };
    if (!info.is_object()) throw bad(std::string("entry must be a JSON object, found ") + info.type_name());
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!info.contains(key)) throw bad(std::string("entry has no '") + key + "'");
    const json& jdtype = info["dtype"];
    const json& jshape = info["shape"];
    const json& joffsets = info["data_offsets"];
    if (!jdtype.is_string()) throw bad(std::string("'dtype' must be a string, found ") + jdtype.type_name());
    Entry e;
    e.dtype = jdtype.get<std::string>();
    size_t elem = st_dtype_size(e.dtype);
    if (elem == 0) throw bad("unknown dtype '" + e.dtype + "'");
    if (!jshape.is_array()) throw bad(std::string("'shape' must be an array, found ") + jshape.type_name());
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : jshape) {
      uint64_t dim;
      if (!d.is_number_integer())
        throw bad("'shape' must hold integers, found " + json_brief(jshape));
      if (!json_u64(d, dim)) throw bad("negative dimension in shape " + json_brief(jshape));
      if (dim > (uint64_t)INT64_MAX) throw bad("dimension too large in shape " + json_brief(jshape));
      e.shape.push_back((int64_t)dim);
      overflow |= __builtin_mul_overflow(numel, dim, &numel);
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, (uint64_t)elem, &nbytes);
    if (overflow) throw bad("shape " + shape_str(e.shape) + " is too large");
    uint64_t begin, end;
    if (!joffsets.is_array() || joffsets.size() != 2 || !json_u64(joffsets[0], begin) || !json_u64(joffsets[1], end))
      throw bad("'data_offsets' must be [begin, end] with non-negative integers, found " + json_brief(joffsets));
    std::string span = "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
    if (begin > end) throw bad("data_offsets " + span + " has begin > end");
    if (end > data_size)
      throw bad("data_offsets " + span + " lie outside the data section of " + std::to_string(data_size) + " bytes");
    if (end - begin != nbytes)
      throw bad("data_offsets " + span + " span " + std::to_string(end - begin) + " bytes, but shape " +
                shape_str(e.shape) + " of " + e.dtype + " needs " + std::to_string(nbytes));
    e.begin = begin;
    e.end = end;
    if (end > begin) spans.emplace_back(begin, end, name);
    st.entries_.emplace(name, std::move(e));
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    const auto& [pb, pe, pn] = spans[i - 1];
    const auto& [cb, ce, cn] = spans[i];
    if (cb < pe)
      throw fail("tensors '" + pn + "' [" + std::to_string(pb) + ", " + std::to_string(pe) + ") and '" + cn + "' [" +
                 std::to_string(cb) + ", " + std::to_string(ce) + ") overlap");
  }
  return st;
}

bool SafeTensors::has(const std::string& name) const { return entries_.count(name) > 0; }

const SafeTensors::Entry& SafeTensors::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it != entries_.end()) return it->second;
  // Show (part of) the key set so a naming mismatch (prefix, layer index) is visible at once.
  std::string listing;
  size_t shown = 0;
  for (const auto& [n, e] : entries_) {
    if (shown == 8) {
      listing += ", ...";
      break;
    }
    listing += (shown++ ? ", " : "") + n;
  }
  throw std::runtime_error(path_ + ": no tensor named '" + name + "' (the file has " +
                           std::to_string(entries_.size()) + " tensors: " + listing + ")");
}

namespace {
void release_mapped_pages(const void* mapping, size_t map_size, const void* data, size_t bytes) {
  const auto base = reinterpret_cast<uintptr_t>(mapping), p = reinterpret_cast<uintptr_t>(data);
  if (!base || p < base || p + bytes > base + map_size) return;
  const uintptr_t page = (uintptr_t)::sysconf(_SC_PAGESIZE);
  const uintptr_t begin = (p + page - 1) / page * page, end = (p + bytes) / page * page;
  // Only untouched copy-on-write pages exist here (nothing writes weights), so dropping them loses nothing.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}
}  // namespace

void SafeTensors::release_pages(const void* data, size_t bytes) const {
  release_mapped_pages(mapping_.get(), map_size_, data, bytes);
}

std::function<void()> SafeTensors::page_releaser(const void* data, size_t bytes) const {
  return [mapping = mapping_, size = map_size_, data, bytes] { release_mapped_pages(mapping.get(), size, data, bytes); };
}

bool SafeTensors::holds(const void* data, size_t bytes) const {
  const auto base = reinterpret_cast<uintptr_t>(mapping_.get()), p = reinterpret_cast<uintptr_t>(data);
  return base && p >= base && p + bytes <= base + map_size_;
}

std::vector<std::string> SafeTensors::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& kv : entries_) out.push_back(kv.first);
  return out;
}

const Shape& SafeTensors::shape_of(const std::string& name) const { return entry(name).shape; }
std::string SafeTensors::dtype_of(const std::string& name) const { return entry(name).dtype; }

Tensor SafeTensors::get(const std::string& name) const {
  const Entry& e = entry(name);
  const unsigned char* src = data_ + e.begin;
  const int64_t n = shape_numel(e.shape);
  if (e.dtype == "F32" || e.dtype == "I64") {
    DType dt = e.dtype == "F32" ? DType::F32 : DType::I64;
    if (n == 0) return Tensor::empty(e.shape, dt);
    // A view needs natural alignment; offsets need not be multiples of the element size, so copy if not.
    if (reinterpret_cast<uintptr_t>(src) % dtype_size(dt) == 0)
      return Tensor::view_of(const_cast<unsigned char*>(src), e.shape, dt, mapping_);
    Tensor t = Tensor::empty(e.shape, dt);
    std::memcpy(dt == DType::F32 ? static_cast<void*>(t.f32()) : static_cast<void*>(t.i64()), src, t.nbytes());
    return t;
  }
  if (e.dtype == "F16" || e.dtype == "BF16") {
    Tensor t = Tensor::empty(e.shape, DType::F32);
    float* dst = t.f32();
    bool half = e.dtype == "F16";
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = half ? io::f16_to_f32(h) : io::bf16_to_f32(h);
    }
    return t;
  }
  if (e.dtype == "I32") {
    Tensor t = Tensor::empty(e.shape, DType::I64);
    int64_t* dst = t.i64();
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, src + 4 * i, 4);
      dst[i] = v;
    }
    return t;
  }
  throw std::runtime_error(path_ + ": tensor '" + name + "' has unsupported dtype " + e.dtype +
                           " (readable: F32, F16, BF16, I64, I32)");
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const nlohmann::json& metadata) {
  auto bad = [&](const std::string& msg) { return std::invalid_argument("save_safetensors: " + path + ": " + msg); };
  std::vector<const std::pair<std::string, Tensor>*> order;
  for (const auto& p : tensors) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->first < b->first; });

  json header = json::object();
  uint64_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& [name, t] = *order[i];
    if (name.empty()) throw bad("empty tensor name");
    if (name == "__metadata__") throw bad("tensor name '__metadata__' is reserved by the format");
    if (i > 0 && order[i - 1]->first == name) throw bad("duplicate tensor name '" + name + "'");
    if (!t.defined()) throw bad("tensor '" + name + "' is undefined");
    header[name] = {{"dtype", dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  if (!metadata.is_null() && !metadata.is_object())
    throw bad(std::string("metadata must be a JSON object of strings, found ") + metadata.type_name());
  if (metadata.is_object() && !metadata.empty()) {
    for (const auto& [k, v] : metadata.items())
      if (!v.is_string()) throw bad("metadata value for key '" + k + "' must be a string, found " + v.type_name());
    header["__metadata__"] = metadata;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the format pads the header so the data section is 8-byte aligned

  write_file_atomic(path, [&](std::FILE* f) {
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = (unsigned char)((uint64_t)h.size() >> (8 * i));
    std::fwrite(len, 1, 8, f);
    std::fwrite(h.data(), 1, h.size(), f);
    for (const auto* p : order) {
      const Tensor& t = p->second;
      const void* data = t.dtype() == DType::F32 ? static_cast<const void*>(t.f32()) : static_cast<const void*>(t.i64());
      if (t.nbytes()) std::fwrite(data, 1, t.nbytes(), f);
    }
  });
}

void save_safetensors_raw(const std::string& path, std::vector<RawTensor> tensors, const nlohmann::json& metadata) {
  auto bad = [&](const std::string& msg) { return std::invalid_argument("save_safetensors: " + path + ": " + msg); };
  static const std::map<std::string, size_t> kSize = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                                      {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  std::sort(tensors.begin(), tensors.end(), [](const RawTensor& a, const RawTensor& b) { return a.name < b.name; });
  json header = json::object();
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const RawTensor& t = tensors[i];
    if (t.name.empty() || t.name == "__metadata__") throw bad("bad tensor name '" + t.name + "'");
    if (i > 0 && tensors[i - 1].name == t.name) throw bad("duplicate tensor name '" + t.name + "'");
    auto it = kSize.find(t.dtype);
    if (it == kSize.end()) throw bad("tensor '" + t.name + "' has unknown dtype '" + t.dtype + "'");
    if ((uint64_t)shape_numel(t.shape) * it->second != t.bytes.size())
      throw bad("tensor '" + t.name + "': " + std::to_string(t.bytes.size()) + " bytes do not match shape " +
                shape_str(t.shape) + " of " + t.dtype);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  if (metadata.is_object() && !metadata.empty()) {
    for (const auto& [k, v] : metadata.items())
      if (!v.is_string()) throw bad("metadata value for key '" + k + "' must be a string");
    header["__metadata__"] = metadata;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  write_file_atomic(path, [&](std::FILE* f) {
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = (unsigned char)((uint64_t)h.size() >> (8 * i));
    std::fwrite(len, 1, 8, f);
    std::fwrite(h.data(), 1, h.size(), f);
    for (const auto& t : tensors)
      if (!t.bytes.empty()) std::fwrite(t.bytes.data(), 1, t.bytes.size(), f);
  });
}

}  // namespace tfm

#include "io/torch_pickle.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "io/float16.h"

namespace tfm {

namespace {

struct Fail {
  std::string path;
  std::runtime_error operator()(const std::string& msg) const { return std::runtime_error(path + ": " + msg); }
};

uint64_t le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---- zip ----------------------------------------------------------------------------------------------------

struct ZipEntry {
  const unsigned char* data = nullptr;
  size_t size = 0;
  std::shared_ptr<void> keep;
};

// Reads the central directory of the zip in [base, base + n) (zip64 records included). Entries are
// resolved lazily: only the names are listed here, spans are checked by entry_of().
class Zip {
 public:
  Zip(const unsigned char* base, size_t n, std::shared_ptr<void> keep, Fail fail)
      : base_(base), n_(n), keep_(std::move(keep)), fail_(std::move(fail)) {
    if (n < 22) throw fail_("not a zip archive (" + std::to_string(n) + " bytes)");
    // End of central directory: the last "PK\5\6" within the final 65557 bytes.
    size_t eocd = n;
    const size_t lo = n > 65557 ? n - 65557 : 0;
    for (size_t i = n - 22 + 1; i-- > lo;)
      if (le(base + i, 4) == 0x06054b50) {
        eocd = i;
        break;
      }
    if (eocd == n) throw fail_("zip end-of-central-directory record not found (truncated file?)");
    uint64_t count = le(base + eocd + 10, 2), cd_size = le(base + eocd + 12, 4), cd_off = le(base + eocd + 16, 4);
    if ((count == 0xffff || cd_size == 0xffffffff || cd_off == 0xffffffff) && eocd >= 20 &&
        le(base + eocd - 20, 4) == 0x07064b50) {
      const uint64_t z = le(base + eocd - 20 + 8, 8);
      if (z > n || n - z < 56 || le(base + z, 4) != 0x06064b50) throw fail_("bad zip64 end-of-central-directory record");
      count = le(base + z + 32, 8);
      cd_size = le(base + z + 40, 8);
      cd_off = le(base + z + 48, 8);
    }
    if (cd_off > n || cd_size > n - cd_off) throw fail_("zip central directory lies outside the file (truncated?)");
    size_t p = cd_off;
    const size_t end = cd_off + cd_size;
    for (uint64_t k = 0; k < count; ++k) {
      if (end - p < 46 || le(base + p, 4) != 0x02014b50) throw fail_("corrupt zip central directory record");
      Record r;
      r.method = (int)le(base + p + 10, 2);
      r.csize = le(base + p + 20, 4);
      r.usize = le(base + p + 24, 4);
      const size_t name_len = le(base + p + 28, 2), extra_len = le(base + p + 30, 2), comment_len = le(base + p + 32, 2);
      r.local = le(base + p + 42, 4);
      if (end - p - 46 < name_len + extra_len + comment_len) throw fail_("corrupt zip central directory record");
      std::string name(reinterpret_cast<const char*>(base + p + 46), name_len);
      // zip64 extended information: the fields saturated above, in this order.
      const unsigned char* x = base + p + 46 + name_len;
      for (size_t q = 0; q + 4 <= extra_len;) {
        const size_t id = le(x + q, 2), len = le(x + q + 2, 2);
        if (q + 4 + len > extra_len) break;
        if (id == 1) {
          size_t f = q + 4;
          auto take = [&](uint64_t& v) {
            if (v != 0xffffffff) return;
            if (f + 8 > q + 4 + len) throw fail_("corrupt zip64 extra field of '" + name + "'");
            v = le(x + f, 8);
            f += 8;
          };
          take(r.usize);
          take(r.csize);
          take(r.local);
        }
        q += 4 + len;
      }
      records_[name] = r;
      p += 46 + name_len + extra_len + comment_len;
    }
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : records_) out.push_back(k);
    return out;
  }
  bool has(const std::string& name) const { return records_.count(name) != 0; }

  ZipEntry entry_of(const std::string& name) const {
    auto it = records_.find(name);
    if (it == records_.end()) throw fail_("zip entry '" + name + "' is missing");
    const Record& r = it->second;
    if (r.local > n_ || n_ - r.local < 30 || le(base_ + r.local, 4) != 0x04034b50)
      throw fail_("zip entry '" + name + "': local header outside the file or corrupt (truncated?)");
    const uint64_t start = r.local + 30 + le(base_ + r.local + 26, 2) + le(base_ + r.local + 28, 2);
    if (start > n_ || r.csize > n_ - start)
      throw fail_("zip entry '" + name + "': " + std::to_string(r.csize) + " bytes declared, past the end of the file (truncated?)");
    ZipEntry e;
    if (r.method == 0) {
      if (r.usize != r.csize) throw fail_("zip entry '" + name + "': stored entry with different sizes");
      e.data = base_ + start;
      e.size = r.csize;
      e.keep = keep_;
      return e;
    }
    if (r.method != 8)
      throw fail_("zip entry '" + name + "': compression method " + std::to_string(r.method) +
                  " is not supported (stored or deflate only)");
    // Deflate expands at most 1032:1; a larger declared size is a lie (or a bomb).
    if (r.usize / 1032 > r.csize + 1)
      throw fail_("zip entry '" + name + "': declared size " + std::to_string(r.usize) + " is impossible for " +
                  std::to_string(r.csize) + " compressed bytes");
    auto buf = std::make_shared<std::vector<unsigned char>>(r.usize);
    z_stream zs{};
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) throw fail_("zlib inflateInit failed");
    zs.next_in = const_cast<unsigned char*>(base_ + start);
    zs.avail_in = 0;
    zs.next_out = buf->data();
    size_t in_left = r.csize, out_left = r.usize;
    int rc = Z_OK;
    while (rc == Z_OK) {
      if (zs.avail_in == 0) {
        zs.avail_in = (uInt)std::min<size_t>(in_left, 1u << 30);
        in_left -= zs.avail_in;
      }
      zs.avail_out = (uInt)std::min<size_t>(out_left, 1u << 30);
      const uInt before = zs.avail_out;
      rc = inflate(&zs, Z_NO_FLUSH);
      out_left -= before - zs.avail_out;
      if (rc == Z_OK && zs.avail_in == 0 && in_left == 0 && out_left == 0) break;
      if (rc == Z_BUF_ERROR) break;
    }
    inflateEnd(&zs);
    if (rc != Z_STREAM_END || out_left != 0)
      throw fail_("zip entry '" + name + "': corrupt deflate data or size mismatch");
    e.data = buf->data();
    e.size = buf->size();
    e.keep = buf;
    return e;
  }

 private:
  struct Record {
    int method = 0;
    uint64_t csize = 0, usize = 0, local = 0;
  };
  const unsigned char* base_;
  size_t n_;
  std::shared_ptr<void> keep_;
  Fail fail_;
  std::map<std::string, Record> records_;
};

// ---- pickle -------------------------------------------------------------------------------------------------

struct StorageType {
  const char* name;
  const char* dtype;
  size_t elem;
};
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", "F32", 4}, {"HalfStorage", "F16", 2},  {"BFloat16Storage", "BF16", 2}, {"DoubleStorage", "F64", 8},
    {"LongStorage", "I64", 8},  {"IntStorage", "I32", 4},   {"ShortStorage", "I16", 2},     {"CharStorage", "I8", 1},
    {"ByteStorage", "U8", 1},   {"BoolStorage", "BOOL", 1},
};

const char* opcode_name(unsigned char op) {
  switch (op) {
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'P': return "PERSID";
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    case 'p': return "PUT";
    case 'g': return "GET";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x8b: return "LONG4";
    case 0x8e: return "BINBYTES8";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'l': return "LIST";
    case 'd': return "DICT";
    default: return "unknown";
  }
}

}  // namespace

// Values live in an arena and refer to each other by index: no recursion on destruction, and memo-made
// cycles cost nothing.
class TorchUnpickler {
 public:
  enum Kind { None, Bool, Int, Float, Str, Tuple, List, Dict, Global, Storage, TensorV };
  struct Value {
    Kind kind = None;
    int64_t i = 0;
    std::string s;                  // Str; Global "module.name"
    std::vector<uint32_t> items;    // Tuple / List; Dict as key, value, key, value...
  };
  static Value of(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }

  TorchUnpickler(TorchCheckpoint& ck, const Zip& zip, std::string prefix, Fail fail)
      : ck_(ck), zip_(zip), prefix_(std::move(prefix)), fail_(std::move(fail)) {}

  void run(const unsigned char* p, size_t n) {
    size_t pos = 0;
    auto need = [&](size_t k) {
      if (n - pos < k) throw fail_("data.pkl is truncated (at byte " + std::to_string(pos) + ")");
    };
    auto pop = [&]() -> uint32_t {
      if (stack_.size() <= mark_floor()) throw fail_("data.pkl: stack underflow at byte " + std::to_string(pos));
      uint32_t v = stack_.back();
      stack_.pop_back();
      return v;
    };
    auto pop_mark = [&]() -> std::vector<uint32_t> {
      if (marks_.empty()) throw fail_("data.pkl: no MARK at byte " + std::to_string(pos));
      const size_t m = marks_.back();
      marks_.pop_back();
      std::vector<uint32_t> out(stack_.begin() + m, stack_.end());
      stack_.resize(m);
      return out;
    };
    auto top = [&]() -> Value& {
      if (stack_.size() <= mark_floor()) throw fail_("data.pkl: stack underflow at byte " + std::to_string(pos));
      return vals_[stack_.back()];
    };
    auto str = [&](size_t len) {
      need(len);
      Value v;
      v.kind = Str;
      v.s.assign(reinterpret_cast<const char*>(p + pos), len);
      pos += len;
      push(std::move(v));
    };
    auto integer = [&](int64_t x) {
      Value v;
      v.kind = Int;
      v.i = x;
      push(std::move(v));
    };
    auto memo_put = [&](uint64_t idx) {
      if (stack_.empty()) throw fail_("data.pkl: memo store from an empty stack");
      if (idx > (1u << 24)) throw fail_("data.pkl: memo index " + std::to_string(idx) + " is too large");
      memo_[(uint32_t)idx] = stack_.back();
    };
    auto memo_get = [&](uint64_t idx) {
      auto it = memo_.find((uint32_t)idx);
      if (idx > 0xffffffffu || it == memo_.end()) throw fail_("data.pkl: memo index " + std::to_string(idx) + " is unset");
      stack_.push_back(it->second);
    };
    while (true) {
      need(1);
      const unsigned char op = p[pos++];
      switch (op) {
        case 0x80: need(1); ++pos; break;          // PROTO
        case 0x95: need(8); pos += 8; break;       // FRAME
        case '.':                                  // STOP
          if (stack_.size() != 1 || !marks_.empty()) throw fail_("data.pkl: STOP with a malformed stack");
          result_ = stack_.back();
          return;
        case '(': marks_.push_back(stack_.size()); break;
        case ')': push(of(Tuple)); break;
        case ']': push(of(List)); break;
        case '}': push(of(Dict)); break;
        case 'N': push(of(None)); break;
        case 0x88: { Value v = of(Bool); v.i = 1; push(std::move(v)); break; }
        case 0x89: push(of(Bool)); break;
        case 'K': need(1); integer(p[pos]); pos += 1; break;
        case 'M': need(2); integer((int64_t)le(p + pos, 2)); pos += 2; break;
        case 'J': need(4); integer((int32_t)(uint32_t)le(p + pos, 4)); pos += 4; break;
        case 0x8a: {                               // LONG1
          need(1);
          const size_t k = p[pos++];
          if (k > 8) throw fail_("data.pkl: integer of " + std::to_string(k) + " bytes is out of range");
          need(k);
          uint64_t u = k ? le(p + pos, (int)k) : 0;
          if (k && k < 8 && (p[pos + k - 1] & 0x80)) u |= ~uint64_t(0) << (8 * k);
          pos += k;
          integer((int64_t)u);
          break;
        }
        case 'G': {                                // BINFLOAT (big-endian double); kept as a number only
          need(8);
          pos += 8;
          push(of(Float));
          break;
        }
        case 'X': need(4); { size_t len = le(p + pos, 4); pos += 4; str(len); } break;
        case 0x8c: need(1); { size_t len = p[pos++]; str(len); } break;
        case 0x8d: need(8); { uint64_t len = le(p + pos, 8); pos += 8; if (len > n) need(n + 1); str(len); } break;
        case 'U': need(1); { size_t len = p[pos++]; str(len); } break;   // SHORT_BINSTRING
        case 'T': need(4); { size_t len = le(p + pos, 4); pos += 4; str(len); } break;  // BINSTRING
        case 'c': {                                // GLOBAL "module\nname\n"
          std::string parts[2];
          for (auto& part : parts) {
            size_t e = pos;
            while (e < n && p[e] != '\n' && e - pos < 256) ++e;
            if (e >= n || p[e] != '\n') throw fail_("data.pkl: malformed GLOBAL at byte " + std::to_string(pos));
            part.assign(reinterpret_cast<const char*>(p + pos), e - pos);
            pos = e + 1;
          }
          push_global(parts[0], parts[1]);
          break;
        }
        case 0x93: {                               // STACK_GLOBAL
          const uint32_t nm = pop(), mod = pop();
          if (vals_[nm].kind != Str || vals_[mod].kind != Str) throw fail_("data.pkl: STACK_GLOBAL needs two strings");
          push_global(vals_[mod].s, vals_[nm].s);
          break;
        }
        case 'q': need(1); memo_put(p[pos]); pos += 1; break;
        case 'r': need(4); memo_put(le(p + pos, 4)); pos += 4; break;
        case 0x94: memo_put(memo_.size()); break;  // MEMOIZE
        case 'h': need(1); memo_get(p[pos]); pos += 1; break;
        case 'j': need(4); memo_get(le(p + pos, 4)); pos += 4; break;
        case 't': { Value v = of(Tuple); v.items = pop_mark(); push(std::move(v)); break; }
        case 0x85: case 0x86: case 0x87: {
          Value v = of(Tuple);
          v.items.resize(op - 0x84);
          for (size_t k = v.items.size(); k-- > 0;) v.items[k] = pop();
          push(std::move(v));
          break;
        }
        case 'a': {
          const uint32_t x = pop();
          Value& l = top();
          if (l.kind != List) throw fail_("data.pkl: APPEND to a non-list");
          l.items.push_back(x);
          break;
        }
        case 'e': {
          std::vector<uint32_t> xs = pop_mark();
          Value& l = top();
          if (l.kind != List) throw fail_("data.pkl: APPENDS to a non-list");
          l.items.insert(l.items.end(), xs.begin(), xs.end());
          break;
        }
        case 's': {
          const uint32_t v = pop(), k = pop();
          Value& d = top();
          if (d.kind != Dict) throw fail_("data.pkl: SETITEM on a non-dict");
          d.items.push_back(k);
          d.items.push_back(v);
          break;
        }
        case 'u': {
          std::vector<uint32_t> xs = pop_mark();
          if (xs.size() % 2) throw fail_("data.pkl: SETITEMS with an odd number of items");
          Value& d = top();
          if (d.kind != Dict) throw fail_("data.pkl: SETITEMS on a non-dict");
          d.items.insert(d.items.end(), xs.begin(), xs.end());
          break;
        }
        case 'R': {                                // REDUCE
          const uint32_t args = pop(), fn = pop();
          reduce(fn, args);
          break;
        }
        case 'b': {                                // BUILD: only the OrderedDict's attributes (_metadata), ignored
          pop();
          if (top().kind != Dict) throw fail_("data.pkl: BUILD is only allowed on an OrderedDict");
          break;
        }
        case 'Q': {                                // BINPERSID
          const uint32_t pid = pop();
          persistent(pid);
          break;
        }
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          throw fail_(std::string("data.pkl: pickle opcode ") + hex + " (" + opcode_name(op) + ") at byte " +
                      std::to_string(pos - 1) + " is not allowed in a state dict");
        }
      }
    }
  }

  // The unpickled dict -> ck_.tensors_.
  void collect() {
    const Value& d = vals_[result_];
    if (d.kind != Dict) throw fail_("data.pkl does not hold a dict (a state_dict); save model.state_dict()");
    for (size_t k = 0; k + 1 < d.items.size(); k += 2) {
      const Value& key = vals_[d.items[k]];
      if (key.kind != Str) throw fail_("data.pkl: a state dict key is not a string");
      auto it = tensor_of_.find(d.items[k + 1]);
      if (it == tensor_of_.end()) throw fail_("data.pkl: entry '" + key.s + "' is not a tensor");
      ck_.tensors_[key.s] = it->second;
    }
  }

 private:
  size_t mark_floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Value v) {
    if (vals_.size() >= (1u << 22)) throw fail_("data.pkl: more than 4194304 objects (not a state dict)");
    vals_.push_back(std::move(v));
    stack_.push_back((uint32_t)(vals_.size() - 1));
  }

  void push_global(const std::string& mod, const std::string& name) {
    const std::string full = mod + "." + name;
    bool ok = full == "collections.OrderedDict" || full == "torch._utils._rebuild_tensor_v2" ||
              full == "torch._utils._rebuild_parameter";
    if (mod == "torch")
      for (const auto& t : kStorageTypes) ok |= name == t.name;
    if (!ok)
      throw fail_("data.pkl: global '" + full +
                  "' is not allowed (a state dict uses only torch._utils._rebuild_tensor_v2, torch.*Storage and "
                  "collections.OrderedDict); refusing to load");
    Value v = of(Global);
    v.s = full;
    push(std::move(v));
  }

  int64_t as_int(uint32_t i, const char* what) const {
    if (vals_[i].kind != Int) throw fail_(std::string("data.pkl: ") + what + " is not an integer");
    return vals_[i].i;
  }

  void reduce(uint32_t fn, uint32_t args_i) {
    const Value& f = vals_[fn];
    const Value& args = vals_[args_i];
    if (f.kind != Global) throw fail_("data.pkl: REDUCE on something that is not an allowed global");
    if (args.kind != Tuple) throw fail_("data.pkl: REDUCE arguments of " + f.s + " are not a tuple");
    if (f.s == "collections.OrderedDict") {
      if (!args.items.empty()) throw fail_("data.pkl: collections.OrderedDict called with arguments");
      push(of(Dict));
      return;
    }
    if (f.s == "torch._utils._rebuild_parameter") {
      if (args.items.size() != 3 || !tensor_of_.count(args.items[0]))
        throw fail_("data.pkl: torch._utils._rebuild_parameter expects (tensor, requires_grad, hooks)");
      stack_.push_back(args.items[0]);
      return;
    }
    if (f.s != "torch._utils._rebuild_tensor_v2") throw fail_("data.pkl: " + f.s + " cannot be called");
    const std::vector<uint32_t> a = args.items;
    if (a.size() < 6 || a.size() > 7)
      throw fail_("data.pkl: torch._utils._rebuild_tensor_v2 expects (storage, offset, size, stride, requires_grad, "
                  "hooks[, metadata])");
    if (vals_[a[0]].kind != Storage) throw fail_("data.pkl: tensor storage is not a persistent storage id");
    TorchCheckpoint::Entry e;
    e.storage = (int)vals_[a[0]].i;
    e.offset = as_int(a[1], "storage offset");
    const Value& size = vals_[a[2]];
    const Value& stride = vals_[a[3]];
    if (size.kind != Tuple || stride.kind != Tuple || size.items.size() != stride.items.size() || size.items.size() > 16)
      throw fail_("data.pkl: tensor size and stride must be tuples of the same length (at most 16)");
    const auto& st = ck_.storages_[e.storage];
    int64_t numel = 1;
    uint64_t last = 0;  // largest element index reached, relative to the offset
    for (size_t k = 0; k < size.items.size(); ++k) {
      const int64_t s = as_int(size.items[k], "tensor size"), d = as_int(stride.items[k], "tensor stride");
      if (s < 0 || d < 0 || s > (int64_t(1) << 40) || d > (int64_t(1) << 40))
        throw fail_("data.pkl: tensor size " + std::to_string(s) + " / stride " + std::to_string(d) + " out of range");
      e.shape.push_back(s);
      e.stride.push_back(d);
      if (s == 0) numel = 0;
      else if (numel) {
        if (numel > (int64_t(1) << 40) / s) throw fail_("data.pkl: tensor has too many elements");
        numel *= s;
      }
      if (s > 0) last += uint64_t(s - 1) * uint64_t(d);
    }
    if (e.offset < 0 || (numel > 0 && (uint64_t(e.offset) > uint64_t(st.numel) || last >= uint64_t(st.numel) - e.offset)))
      throw fail_("data.pkl: tensor (storage offset " + std::to_string(e.offset) + ", size " + shape_str(e.shape) +
                  ") reaches past its storage of " + std::to_string(st.numel) +
                  " elements");
    Value v = of(TensorV);
    push(std::move(v));
    tensor_of_[stack_.back()] = e;
  }

  void persistent(uint32_t pid) {
    const Value& t = vals_[pid];
    if (t.kind != Tuple || t.items.size() != 5 || vals_[t.items[0]].kind != Str || vals_[t.items[0]].s != "storage")
      throw fail_("data.pkl: persistent id is not ('storage', type, key, location, numel)");
    const Value& type = vals_[t.items[1]];
    const Value& key = vals_[t.items[2]];
    if (type.kind != Global || type.s.rfind("torch.", 0) != 0 || type.s.find("Storage") == std::string::npos ||
        key.kind != Str)
      throw fail_("data.pkl: persistent id has no storage type or key");
    const int64_t numel = as_int(t.items[4], "storage size");
    auto found = storage_of_.find(key.s);
    int index;
    if (found != storage_of_.end()) {
      index = found->second;
    } else {
      TorchCheckpoint::Storage s;
      for (const auto& st : kStorageTypes)
        if (type.s == std::string("torch.") + st.name) {
          s.dtype = st.dtype;
          s.elem = st.elem;
        }
      if (s.elem == 0) throw fail_("data.pkl: unknown storage type " + type.s);
      if (key.s.empty() || key.s.find('/') != std::string::npos)
        throw fail_("data.pkl: storage key '" + key.s + "' is not a plain name");
      const std::string entry = prefix_ + "data/" + key.s;
      ZipEntry z = zip_.entry_of(entry);
      if (numel < 0 || uint64_t(numel) > z.size / s.elem)
        throw fail_("storage '" + key.s + "' declares " + std::to_string(numel) + " elements of " +
                    std::to_string(s.elem) + " bytes, but " + entry + " holds " + std::to_string(z.size) + " bytes");
      s.numel = numel;
      s.data = z.data;
      s.keep = z.keep;
      ck_.storages_.push_back(std::move(s));
      index = (int)ck_.storages_.size() - 1;
      storage_of_[key.s] = index;
    }
    if (ck_.storages_[index].numel != numel)
      throw fail_("data.pkl: storage '" + key.s + "' declared with two sizes");
    Value v = of(Storage);
    v.i = index;
    push(std::move(v));
  }

  TorchCheckpoint& ck_;
  const Zip& zip_;
  std::string prefix_;
  Fail fail_;
  std::vector<Value> vals_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, uint32_t> memo_;
  std::unordered_map<uint32_t, TorchCheckpoint::Entry> tensor_of_;  // value index -> tensor
  std::map<std::string, int> storage_of_;
  uint32_t result_ = 0;
};

TorchCheckpoint TorchCheckpoint::open(const std::string& path) {
  Fail fail{path};
  TorchCheckpoint ck;
  ck.path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    throw fail("not a regular file");
  }
  const size_t n = (size_t)sb.st_size;
  if (n == 0) {
    ::close(fd);
    throw fail("file is empty");
  }
  void* addr = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (addr == MAP_FAILED) throw fail(std::string("cannot mmap: ") + std::strerror(err));
  std::shared_ptr<void> mapping(addr, [n](void* p) { ::munmap(p, n); });
  const auto* bytes = static_cast<const unsigned char*>(addr);
  static const unsigned char kLegacy[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20};
  if (n >= sizeof kLegacy && std::memcmp(bytes, kLegacy, sizeof kLegacy) == 0)
    throw fail("legacy torch.save format (PyTorch < 1.6 or _use_new_zipfile_serialization=False) is not supported; "
               "re-save it with torch.save(state_dict, path) or convert it to model.safetensors");
  if (n < 4 || le(bytes, 4) != 0x04034b50) throw fail("not a PyTorch checkpoint (no zip signature)");
  Zip zip(bytes, n, mapping, fail);
  // "<archive>/data.pkl": the archive folder is named after the file torch.save wrote (often "archive").
  std::string pkl;
  for (const auto& name : zip.names()) {
    const size_t slash = name.find('/');
    if (slash != std::string::npos && name.substr(slash) == "/data.pkl") {
      pkl = name;
      break;
    }
  }
  if (pkl.empty()) throw fail("zip archive has no <archive>/data.pkl entry (not written by torch.save?)");
  const std::string prefix = pkl.substr(0, pkl.size() - 8);  // "<archive>/"
  ZipEntry z = zip.entry_of(pkl);
  TorchUnpickler u(ck, zip, prefix, fail);
  u.run(z.data, z.size);
  u.collect();
  return ck;
}

const TorchCheckpoint::Entry& TorchCheckpoint::entry(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw std::runtime_error(path_ + ": missing tensor '" + name + "'");
  return it->second;
}

std::vector<std::string> TorchCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : tensors_) out.push_back(k);
  return out;
}

const Shape& TorchCheckpoint::shape_of(const std::string& name) const { return entry(name).shape; }
std::string TorchCheckpoint::dtype_of(const std::string& name) const { return storages_[entry(name).storage].dtype; }

Tensor TorchCheckpoint::get(const std::string& name) const {
  const Entry& e = entry(name);
  const Storage& s = storages_[e.storage];
  const bool is_float = s.dtype == "F32" || s.dtype == "F16" || s.dtype == "BF16" || s.dtype == "F64";
  const bool is_int = s.dtype == "I64" || s.dtype == "I32";
  if (!is_float && !is_int)
    throw std::runtime_error(path_ + ": tensor '" + name + "' has dtype " + s.dtype +
                             " (readable: F32, F16, BF16, F64, I64, I32)");
  const int64_t numel = shape_numel(e.shape);
  bool contiguous = true;
  for (int64_t k = (int64_t)e.shape.size() - 1, want = 1; k >= 0; --k) {
    if (e.shape[k] != 1 && e.stride[k] != want) contiguous = false;
    want *= e.shape[k];
  }
  const DType out = is_float ? DType::F32 : DType::I64;
  if (numel == 0) return Tensor::zeros(e.shape, out);
  const unsigned char* base = s.data + (size_t)e.offset * s.elem;
  if (contiguous && (s.dtype == "F32" || s.dtype == "I64") && reinterpret_cast<uintptr_t>(base) % s.elem == 0 && numel > 0)
    return Tensor::view_of(const_cast<unsigned char*>(base), e.shape, out, s.keep);
  Tensor t = Tensor::empty(e.shape, out);
  const size_t nd = e.shape.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t src = 0;  // element index relative to base
  for (int64_t i = 0; i < numel; ++i) {
    const unsigned char* q = base + (size_t)src * s.elem;
    if (s.dtype == "F32") std::memcpy(&t.f32()[i], q, 4);
    else if (s.dtype == "F16") t.f32()[i] = io::f16_to_f32((uint16_t)le(q, 2));
    else if (s.dtype == "BF16") t.f32()[i] = io::bf16_to_f32((uint16_t)le(q, 2));
    else if (s.dtype == "F64") t.f32()[i] = (float)std::bit_cast<double>(le(q, 8));
    else if (s.dtype == "I64") t.i64()[i] = (int64_t)le(q, 8);
    else t.i64()[i] = (int32_t)(uint32_t)le(q, 4);
    for (size_t k = nd; k-- > 0;) {
      if (++idx[k] < e.shape[k]) {
        src += e.stride[k];
        break;
      }
      src -= (idx[k] - 1) * e.stride[k];
      idx[k] = 0;
    }
  }
  return t;
}

}  // namespace tfm

#include "io/npy.h"

#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "io/atomic_file.h"

namespace tfm {

static_assert(std::endian::native == std::endian::little, "npy I/O writes '<' (little-endian) data in place");

namespace {

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes, then major and minor version bytes
constexpr size_t kMagicLen = 6;

// The header is a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
// This parser accepts exactly what numpy writes: string keys, values that are strings, True/False, or tuples
// of non-negative integers; keys in any order.
struct HeaderParser {
  const std::string& s;
  const std::string& path;
  size_t i = 0;

  std::runtime_error error(const std::string& what) const {
    return std::runtime_error(path + ": malformed .npy header (" + what + " at character " + std::to_string(i) +
                              "): " + s);
  }
  void skip_ws() {
    while (i < s.size() && std::isspace((unsigned char)s[i])) ++i;
  }
  bool accept(char c) {
    skip_ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) throw error(std::string("expected '") + c + "'");
  }
  std::string string_literal() {
    skip_ws();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) throw error("expected a quoted string");
    char q = s[i++];
    size_t end = s.find(q, i);
    if (end == std::string::npos) throw error("unterminated string");
    std::string out = s.substr(i, end - i);
    i = end + 1;
    return out;
  }
  bool boolean() {
    skip_ws();
    if (s.compare(i, 4, "True") == 0) {
      i += 4;
      return true;
    }
    if (s.compare(i, 5, "False") == 0) {
      i += 5;
      return false;
    }
    throw error("expected True or False");
  }
  Shape tuple() {
    expect('(');
    Shape shape;
    while (!accept(')')) {
      skip_ws();
      if (i >= s.size() || !std::isdigit((unsigned char)s[i])) throw error("expected a non-negative integer");
      int64_t v = 0;
      while (i < s.size() && std::isdigit((unsigned char)s[i])) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v))
          throw error("dimension too large");
        ++i;
      }
      shape.push_back(v);
      if (!accept(',')) {
        expect(')');
        break;
      }
    }
    return shape;
  }
};

}  // namespace

void save_npy(const std::string& path, const Tensor& t) {
  if (!t.defined()) throw std::invalid_argument("save_npy: " + path + ": tensor is undefined");
  const void* data = t.dtype() == DType::F32 ? static_cast<const void*>(t.f32()) : static_cast<const void*>(t.i64());
  write_npy(path, t.dtype() == DType::F32 ? "<f4" : "<i8", t.shape(), data, t.nbytes());
}

size_t npy_item_size(const std::string& descr) {
  if (descr == "<f4") return 4;
  if (descr == "<i8") return 8;
  if (descr == "|i1" || descr == "|u1") return 1;
  return 0;
}

void write_npy(const std::string& path, const std::string& descr, const Shape& shp, const void* data, size_t nbytes) {
  uint64_t numel = 1;
  for (int64_t d : shp) numel *= (uint64_t)d;
  if (npy_item_size(descr) == 0 || numel * npy_item_size(descr) != nbytes)
    throw std::invalid_argument("write_npy: " + path + ": " + std::to_string(nbytes) + " bytes do not hold " +
                                descr + " " + shape_str(shp));
  std::string shape = "(";
  for (size_t d = 0; d < shp.size(); ++d) shape += (d ? ", " : "") + std::to_string(shp[d]);
  shape += shp.size() == 1 ? ",)" : ")";  // Python's 1-tuple needs the trailing comma
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // magic(6) + version(2) + u16 length(2) + dict + padding + '\n' is a multiple of 64, so the data is aligned.
  size_t total = kMagicLen + 2 + 2 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  if (dict.size() > 65535) throw std::invalid_argument("write_npy: " + path + ": header too long for npy v1.0");

  std::string head(kMagic, kMagicLen);
  head += '\x01';
  head += '\x00';
  head += (char)(dict.size() & 0xff);
  head += (char)(dict.size() >> 8);
  head += dict;
  write_file_atomic(path, [&](std::FILE* f) {
    std::fwrite(head.data(), 1, head.size(), f);
    if (nbytes) std::fwrite(data, 1, nbytes, f);
  });
}

NpyData read_npy(const std::string& path) {
  auto fail = [&](const std::string& msg) { return std::runtime_error(path + ": " + msg); };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw fail(std::string("cannot open: ") + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw fail("read error");

  if (bytes.size() < kMagicLen + 2 || bytes.compare(0, kMagicLen, kMagic, kMagicLen) != 0)
    throw fail("not a .npy file (missing the \\x93NUMPY magic)");
  auto u8 = [&](size_t k) { return (uint32_t)(unsigned char)bytes[k]; };
  const uint32_t major = u8(6), minor = u8(7);
  // v1 stores the header length as u16, v2 as u32; v3 only changes the header encoding to UTF-8, which we
  // never need, so it is rejected rather than half-supported.
  size_t len_bytes = major == 1 ? 2 : major == 2 ? 4 : 0;
  if (len_bytes == 0)
    throw fail("unsupported .npy version " + std::to_string(major) + "." + std::to_string(minor) +
               " (supported: 1.x, 2.x)");
  const size_t prefix = kMagicLen + 2 + len_bytes;
  if (bytes.size() < prefix) throw fail("file truncated inside the header length");
  size_t header_len = 0;
  for (size_t k = 0; k < len_bytes; ++k) header_len |= (size_t)u8(kMagicLen + 2 + k) << (8 * k);
  if (header_len > bytes.size() - prefix)
    throw fail("header length " + std::to_string(header_len) + " exceeds the file size " +
               std::to_string(bytes.size()));
  const std::string header = bytes.substr(prefix, header_len);

  HeaderParser p{header, path};
  std::string descr;
  bool have_descr = false, have_order = false, have_shape = false, fortran = false;
  Shape shape;
  p.expect('{');
  while (!p.accept('}')) {
    std::string key = p.string_literal();
    p.expect(':');
    if (key == "descr") {
      descr = p.string_literal();
      have_descr = true;
    } else if (key == "fortran_order") {
      fortran = p.boolean();
      have_order = true;
    } else if (key == "shape") {
      shape = p.tuple();
      have_shape = true;
    } else {
      throw p.error("unexpected key '" + key + "'");
    }
    if (!p.accept(',')) {
      p.expect('}');
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape)
    throw fail("npy header lacks " + std::string(!have_descr ? "'descr'" : !have_order ? "'fortran_order'" : "'shape'") +
               ": " + header);
  if (npy_item_size(descr) == 0)
    throw fail("unsupported dtype '" + descr + "' (supported: '<f4' float32, '<i8' int64, '|i1' int8, '|u1' uint8)");
  if (fortran) throw fail("fortran_order True is not supported (save a C-contiguous array)");

  uint64_t numel = 1;
  bool overflow = false;
  for (int64_t d : shape) overflow |= __builtin_mul_overflow(numel, (uint64_t)d, &numel);
  uint64_t need = 0;
  overflow |= __builtin_mul_overflow(numel, (uint64_t)npy_item_size(descr), &need);
  const size_t have = bytes.size() - prefix - header_len;
  if (overflow || need != have)
    throw fail("data is " + std::to_string(have) + " bytes, but shape " + shape_str(shape) + " of " + descr +
               " needs " + (overflow ? std::string("more than 2^64") : std::to_string(need)));
  NpyData out;
  out.descr = descr;
  out.shape = shape;
  out.bytes = bytes.substr(prefix + header_len);
  return out;
}

Tensor load_npy(const std::string& path) {
  NpyData a = read_npy(path);
  if (a.descr != "<f4" && a.descr != "<i8")
    throw std::runtime_error(path + ": unsupported dtype '" + a.descr + "' (supported: '<f4' float32, '<i8' int64)");
  const DType dt = a.descr == "<f4" ? DType::F32 : DType::I64;
  Tensor t = Tensor::empty(a.shape, dt);
  if (!a.bytes.empty())
    std::memcpy(dt == DType::F32 ? static_cast<void*>(t.f32()) : static_cast<void*>(t.i64()), a.bytes.data(),
                a.bytes.size());
  return t;
}

}  // namespace tfm

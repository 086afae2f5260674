// IEEE binary16 and bfloat16 -> binary32, as checkpoints store them (safetensors F16/BF16, torch Half/BFloat16
// storages). Both conversions are exact for every input (subnormals, infinities, NaN payloads).
#pragma once
#include <bit>
#include <cstdint>

namespace tfm::io {

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal mant * 2^-24: shift the leading 1 up to the implicit-bit position.
    int shift = 0;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      ++shift;
    }
    bits = sign | (uint32_t(127 - 15 + 1 - shift) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

// bfloat16 is the upper half of a binary32.
inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

}  // namespace tfm::io

// Rng: a seeded, platform-independent generator (mt19937_64 with our own float conversion, since the
// standard distributions are implementation-defined). Its state serialises to text for checkpoints.
#pragma once
#include <cstdint>
#include <random>
#include <string>

namespace tfm {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : gen_(seed) {}
  uint64_t next_u64() { return gen_(); }
  // Uniform in [0, 1) with 24 random bits.
  float uniform() { return (float)(gen_() >> 40) * (1.0f / 16777216.0f); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  // Standard normal (Box-Muller).
  float normal();
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n ? gen_() % n : 0; }
  std::string state() const;
  void set_state(const std::string& s);

 private:
  std::mt19937_64 gen_;
};

}  // namespace tfm

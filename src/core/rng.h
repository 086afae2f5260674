// Rng: a seeded, platform-independent generator (mt19937_64 with our own float conversion, since the
// standard distributions are implementation-defined). Its state serialises to text for checkpoints.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tfm {

// Optional keying of dropout masks by row (sentence) instead of by generator state (ops::dropout_mask): the mask
// of row b in the c-th dropout call is a hash of (key, rows[b], c, position in the row), so a sentence gets the
// same mask whichever batch, shard or rank holds it (data-parallel training keys by (seed, step) and the
// sentence's index in the corpus). `calls` counts the dropout calls made so far.
struct RowKeys {
  uint64_t key = 0;
  std::vector<uint64_t> rows;
  uint64_t calls = 0;
};

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
  // While set (not owned), dropout masks drawn with this generator are keyed by row and leave its state alone.
  void set_row_keys(RowKeys* keys) { row_keys_ = keys; }
  RowKeys* row_keys() const { return row_keys_; }

 private:
  std::mt19937_64 gen_;
  RowKeys* row_keys_ = nullptr;
};

}  // namespace tfm

// Shared by the attention-option tests (test_alibi.cpp, test_grouped_query_attention.cpp, test_qk_norm.cpp,
// test_causal_attention.cpp): an nn::MultiHeadAttention whose trainable parameters are filled from a PyTorch
// fixture (scripts/make_attention_option_fixtures.py) by their checkpoint names, its saving forward and backward
// on the fixture's input, and its inference paths (padded, unpadded) on packed copies of the same weights.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "nn/attention.h"
#include "nn/params.h"
#include "test_util.h"

namespace tfm::test {

inline SafeTensors option_fixture(const std::string& name) {
  return SafeTensors::open(fixture("attention_options/" + name));
}

inline std::vector<float> fixture_vec(const SafeTensors& fx, const std::string& name) {
  const Tensor t = fx.get(name);
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

// Every registered parameter's values from the fixture tensor of its name.
inline void fill_from(nn::ParamStore& store, const SafeTensors& fx) {
  for (const auto& e : store.entries()) {
    const Tensor t = fx.get(e.name);
    ASSERT_EQ(t.numel(), e.numel) << e.name;
    std::copy_n(t.f32(), e.numel, store.all_data().data() + e.offset);
  }
}

// Every parameter's gradient against the fixture's "d<name>".
inline void expect_grads(const nn::ParamStore& store, const SafeTensors& fx, float atol) {
  for (const auto& e : store.entries())
    EXPECT_TRUE(all_close(store.all_grad().data() + e.offset, fx.get("d" + e.name).f32(), e.numel, atol, 1e-4f))
        << "d" << e.name;
}

// The real rows (mask [B, L] != 0) of x [B, L, H], concatenated, with the Varlen offsets and start columns.
struct Unpadded {
  std::vector<float> x;
  std::vector<int64_t> offsets{0}, start, rows;
  int64_t max_len = 0;
  Unpadded(const std::vector<float>& xp, const float* mask, int64_t B, int64_t L, int64_t H) {
    for (int64_t b = 0; b < B; ++b) {
      int64_t first = -1;
      for (int64_t l = 0; l < L; ++l)
        if (mask[b * L + l] != 0.0f) {
          if (first < 0) first = l;
          rows.push_back(b * L + l);
          x.insert(x.end(), xp.begin() + (b * L + l) * H, xp.begin() + (b * L + l + 1) * H);
        }
      offsets.push_back((int64_t)rows.size());
      start.push_back(first < 0 ? 0 : first);
      max_len = std::max(max_len, offsets[b + 1] - offsets[b]);
    }
  }
  nn::Varlen varlen() const { return nn::Varlen{(int64_t)start.size(), offsets.data(), max_len, start.data()}; }
};

// The module's inference copy: qkv packed from the three projections (or its own Wqkv), output packed.
inline void pack_for_inference(nn::MultiHeadAttention& a) {
  const int64_t H = a.hidden_size, W = a.qkv_width();
  if (!a.qkv.weight.defined()) {
    std::vector<float> w(W * H), b;
    const bool bias = a.query.bias.defined();
    if (bias) b.resize(W);
    int64_t row = 0;
    for (const nn::Linear* l : {&a.query, &a.key, &a.value}) {
      std::copy_n(l->weight.data(), l->out_features * H, w.data() + row * H);
      if (bias) std::copy_n(l->bias.data(), l->out_features, b.data() + row);
      row += l->out_features;
    }
    a.qkv = nn::Linear::from_weights(w.data(), bias ? b.data() : nullptr, H, W, ops::ComputeType::F32);
  } else {
    a.qkv.pack(ops::ComputeType::F32);
  }
  a.output.pack(ops::ComputeType::F32);
}

}  // namespace tfm::test

// nn::Embeddings (word + position + token type, LayerNorm, dropout, optional projection): the forward against
// the sum written out, the backward against finite differences of the tables.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/layers.h"
#include "nn/params.h"
#include "ops/layer_norm.h"
#include "test_util.h"

using namespace tfm;

namespace {
struct Emb {
  nn::ParamStore store;
  nn::Embeddings e;
  explicit Emb(bool project) {
    nn::Vars vb(store);
    e.vocab_size = 7;
    e.max_positions = 6;
    e.type_vocab_size = 2;
    e.dim = 4;
    e.word = vb.prefix("word").get("weight", {7, 4});
    e.position = vb.prefix("position").get("weight", {6, 4});
    e.type = vb.prefix("type").get("weight", {2, 4});
    e.norm = nn::LayerNorm::load(vb.prefix("norm"), 4, 1e-5f);
    if (project) e.project = nn::Linear::load(vb.prefix("project"), 4, 3);
    store.finalize();
    store.all_data() = test::random_vec(store.total(), 41, -1.0f, 1.0f);
  }
};
const int64_t kIds[6] = {1, 6, 0, 3, 3, 2}, kTypes[6] = {0, 1, 1, 0, 0, 1};
}  // namespace

TEST(Embeddings, ForwardIsTheNormedSum) {
  Emb m(false);
  nn::Context c;
  m.e.forward(c, kIds, nullptr, kTypes, 6, 3);  // positions n % 3
  std::vector<float> sum(6 * 4), ref(6 * 4);
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t h = 0; h < 4; ++h)
      sum[n * 4 + h] = m.e.word.data()[kIds[n] * 4 + h] + m.e.position.data()[(n % 3) * 4 + h] +
                       m.e.type.data()[kTypes[n] * 4 + h];
  ops::layer_norm_forward(ref.data(), nullptr, nullptr, sum.data(), m.e.norm.weight.data(), m.e.norm.bias.data(), 6, 4,
                          1e-5f);
  EXPECT_TRUE(test::all_close(m.e.out, ref, 0.0f));
  const int64_t bad[1] = {7};
  EXPECT_THROW(m.e.forward(c, bad, nullptr, nullptr, 1, 1), std::out_of_range);
}

TEST(Embeddings, BackwardMatchesFiniteDifferences) {
  for (bool project : {false, true}) {
    SCOPED_TRACE(project);
    Emb m(project);
    const int64_t width = project ? 3 : 4;
    const std::vector<float> w = test::random_vec(6 * width, 42);
    const int64_t positions[6] = {0, 1, 2, 5, 4, 3};
    auto loss = [&] {
      nn::Context c;
      m.e.forward(c, kIds, positions, kTypes, 6, 6);
      double s = 0;
      for (int64_t i = 0; i < 6 * width; ++i) s += (double)m.e.out[i] * w[i];
      return s;
    };
    nn::Context c;
    c.grad = true;
    m.e.forward(c, kIds, positions, kTypes, 6, 6);
    m.store.zero_grad();
    std::vector<float> d = w;
    m.e.backward(d.data());
    const std::vector<float> g = m.store.all_grad();
    std::vector<float>& p = m.store.all_data();
    const float eps = 1e-2f;
    for (size_t i = 0; i < p.size(); ++i) {
      const float pi = p[i];
      p[i] = pi + eps;
      const double lp = loss();
      p[i] = pi - eps;
      const double lm = loss();
      p[i] = pi;
      EXPECT_NEAR(g[i], (lp - lm) / (2 * eps), 3e-3) << "parameter " << i;
    }
  }
}

TEST(Embeddings, FrozenPositionsGetNoGradient) {
  Emb m(false);
  m.e.train_position = false;
  nn::Context c;
  m.e.forward(c, kIds, nullptr, kTypes, 6, 3);
  m.store.zero_grad();
  std::vector<float> d = test::random_vec(6 * 4, 43);
  m.e.backward(d.data());
  const int64_t pos = m.store.index_of("position.weight");
  for (int64_t i = 0; i < 6 * 4; ++i) EXPECT_EQ(m.store.grad(pos)[i], 0.0f);
}

// tfm/pipeline.h's batching: tfm::length_batches and tfm::BatchBudget, the one rule of what fits a batch that
// `tfm embed`, tfm::Encoder::embed, `tfm translate`, tfm::Translator and the server's queue share.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "tfm/pipeline.h"

namespace {

using Batches = std::vector<std::vector<size_t>>;

TEST(LengthBatches, SortedByLengthUnderThePaddedTokenBudget) {
  // lengths 5 3 9 3 1, at most 9 padded tokens: sorted 1 (#4), 3 (#1), 3 (#3), 5 (#0), 9 (#2); 3 rows x 3 = 9
  // fits, 4 x 5 = 20 does not; 5 and 9 give 2 x 9 = 18 > 9.
  tfm::BatchLimits l;
  l.max_tokens = 9;
  EXPECT_EQ(tfm::length_batches({5, 3, 9, 3, 1}, l), (Batches{{4, 1, 3}, {0}, {2}}));
  // A sequence over the budget still forms a batch of its own.
  l.max_tokens = 4;
  EXPECT_EQ(tfm::length_batches({7, 2, 2}, l), (Batches{{1, 2}, {0}}));
  // No limit: one batch, ties in input order.
  EXPECT_EQ(tfm::length_batches({2, 1, 2, 1}, {}), (Batches{{1, 3, 0, 2}}));
  EXPECT_EQ(tfm::length_batches({}, l), Batches{});
}

TEST(LengthBatches, RowAndRealTokenLimits) {
  tfm::BatchLimits rows;
  rows.max_rows = 2;
  EXPECT_EQ(tfm::length_batches({4, 4, 4, 4, 4}, rows), (Batches{{0, 1}, {2, 3}, {4}}));
  tfm::BatchLimits real;  // the sum of lengths: 1 + 2 + 3 = 6 fits, + 4 = 10 does not
  real.max_real_tokens = 6;
  EXPECT_EQ(tfm::length_batches({4, 3, 2, 1}, real), (Batches{{3, 2, 1}, {0}}));
  tfm::BatchLimits both;  // 2 rows x 3 = 6 <= 8 padded but 3 rows x 3 = 9 > 8
  both.max_tokens = 8;
  both.max_rows = 8;
  EXPECT_EQ(tfm::length_batches({3, 3, 3}, both), (Batches{{0, 1}, {2}}));
}

// Random lengths and limits: every index once, batches in ascending length, each under its limits (or a single
// sequence), and maximal: the next sequence would not have fitted.
TEST(LengthBatches, EveryIndexOnceAndEachBatchFullUnderItsLimits) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = rng() % 40;
    std::vector<int64_t> len(n);
    for (auto& x : len) x = 1 + (int64_t)(rng() % 30);
    tfm::BatchLimits l;
    l.max_tokens = trial % 3 ? 1 + (int64_t)(rng() % 100) : 0;
    l.max_rows = trial % 4 ? (int64_t)(rng() % 6) : 0;
    l.max_real_tokens = trial % 5 ? (int64_t)(rng() % 80) : 0;
    const Batches b = tfm::length_batches(len, l);
    std::vector<size_t> flat;
    for (const auto& batch : b) {
      ASSERT_FALSE(batch.empty());
      int64_t longest = 0, real = 0;
      for (size_t i : batch) longest = std::max(longest, len[i]), real += len[i];
      const int64_t rows = (int64_t)batch.size();
      if (rows > 1) {
        if (l.max_tokens) { EXPECT_LE(rows * longest, l.max_tokens); }
        if (l.max_rows) { EXPECT_LE(rows, l.max_rows); }
        if (l.max_real_tokens) { EXPECT_LE(real, l.max_real_tokens); }
      }
      flat.insert(flat.end(), batch.begin(), batch.end());
    }
    ASSERT_EQ(flat.size(), n);
    for (size_t k = 1; k < flat.size(); ++k) {
      EXPECT_LE(len[flat[k - 1]], len[flat[k]]);
      if (len[flat[k - 1]] == len[flat[k]]) { EXPECT_LT(flat[k - 1], flat[k]) << "ties keep the input order"; }
    }
    EXPECT_EQ(std::set<size_t>(flat.begin(), flat.end()).size(), n);
    for (size_t k = 0; k + 1 < b.size(); ++k) {  // the next batch's first sequence did not fit this one
      const int64_t next = len[b[k + 1].front()];
      int64_t real = next;
      for (size_t i : b[k]) real += len[i];
      const int64_t rows = (int64_t)b[k].size() + 1;
      const bool fits = (!l.max_tokens || rows * next <= l.max_tokens) && (!l.max_rows || rows <= l.max_rows) &&
                        (!l.max_real_tokens || real <= l.max_real_tokens);
      EXPECT_FALSE(fits) << "trial " << trial << ": batch " << k << " could have taken one more";
    }
  }
}

TEST(LengthBatches, BadInput) {
  EXPECT_THROW(tfm::length_batches({1, -2}, {}), std::invalid_argument);
  tfm::BatchLimits l;
  l.max_rows = -1;
  EXPECT_THROW(tfm::length_batches({1}, l), std::invalid_argument);
}

// The budget the server's queue fills round robin: the first sequence always, then each one while it fits.
TEST(BatchBudget, FirstAlwaysThenWhileItFits) {
  tfm::BatchLimits l;
  l.max_tokens = 10;
  l.max_real_tokens = 7;
  tfm::BatchBudget b(l);
  EXPECT_TRUE(b.fits(50));  // empty: anything
  b.add(3);
  EXPECT_TRUE(b.fits(4));    // 2 x 4 = 8 padded, 7 real
  EXPECT_FALSE(b.fits(5));   // 2 x 5 = 10 padded but 8 real
  EXPECT_FALSE(b.fits(6));   // 12 padded
  b.add(4);
  EXPECT_EQ(b.rows(), 2);
  EXPECT_EQ(b.longest(), 4);
  EXPECT_EQ(b.real_tokens(), 7);
  EXPECT_FALSE(b.fits(0));   // 3 x 4 = 12 padded
}

// ------------------------------------------------------------------------------------------ dimensions, L2

TEST(Dimensions, OneRuleOneMessage) {
  EXPECT_NO_THROW(tfm::check_dimensions(1, 32));
  EXPECT_NO_THROW(tfm::check_dimensions(32, 32));
  for (int64_t bad : {0, -3, 33}) {
    try {
      tfm::check_dimensions(bad, 32);
      ADD_FAILURE() << bad << " passed";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "dimensions must be >= 1 and at most the embedding size 32, got " + std::to_string(bad));
    }
  }
}

// torch.nn.functional.normalize(torch.tensor([[3., 4., 12.], [0., 0., 0.]])[:, :2]) = [[0.6, 0.8], [0, 0]];
// unnormalised the first values are kept as they are.
TEST(Dimensions, TruncateThenNormalizeAsSentenceTransformers) {
  std::shared_ptr<float> data(new float[6]{3, 4, 12, 0, 0, 0}, std::default_delete<float[]>());
  const tfm::FloatArray a(data, {2, 3});
  const tfm::FloatArray cut = tfm::truncate_dimensions(a, 2, true);
  ASSERT_EQ(cut.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_FLOAT_EQ(cut.data()[0], 0.6f);
  EXPECT_FLOAT_EQ(cut.data()[1], 0.8f);
  EXPECT_EQ(cut.data()[2], 0.0f);
  EXPECT_EQ(cut.data()[3], 0.0f);
  const tfm::FloatArray raw = tfm::truncate_dimensions(a, 1, false);
  EXPECT_EQ(raw.data()[0], 3.0f);
  EXPECT_EQ(raw.data()[1], 0.0f);
  EXPECT_EQ(tfm::truncate_dimensions(a, 0, false).data(), a.data()) << "nothing to do: the same array";
  const tfm::FloatArray all = tfm::truncate_dimensions(a, 0, true);  // 13 = |(3, 4, 12)|
  EXPECT_FLOAT_EQ(all.data()[2], 12.0f / 13.0f);
  EXPECT_THROW(tfm::truncate_dimensions(a, 4, true), std::invalid_argument);
  EXPECT_EQ(tfm::truncate_dimensions(std::vector<float>{3, 4, 12}, 2, true), (std::vector<float>{0.6f, 0.8f}));
  std::vector<float> v{1, 2, 2};  // |v| = 3
  tfm::l2_normalize(v.data(), 3);
  EXPECT_FLOAT_EQ(v[0], 1.0f / 3.0f);
  EXPECT_FLOAT_EQ(v[2], 2.0f / 3.0f);
}

TEST(TokenizerVocab, LargerThanTheEmbeddingTableIsRefused) {
  EXPECT_NO_THROW(tfm::check_tokenizer_vocab("m", 30522, 30522));
  EXPECT_NO_THROW(tfm::check_tokenizer_vocab("m", 30000, 30528));
  try {
    tfm::check_tokenizer_vocab("folder", 61, 60);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "folder: tokenizer vocabulary (61 tokens) is larger than config.json vocab_size (60)");
  }
}

}  // namespace

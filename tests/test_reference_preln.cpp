// The pre-LN (norm_first) seq2seq forward against PyTorch, with activations of tiny variance so that the eps of
// every LayerNorm it uses (each block's, encoder.ln, decoder.ln) shows in the outputs (issue 15, item 3).
// Expected values: tests/fixtures/reference/eps/seq2seq_preln, written by scripts/make_preln_fixtures.py from the
// d2l reference modules; none comes from this code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "io/safetensors.h"
#include "models/seq2seq.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::fixture;

namespace {

// max |got - want| / max |want| over the whole tensor (NaN counts as infinite).
double rel_err(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.numel() != want.numel()) return INFINITY;
  double scale = 1e-30, worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, (double)std::fabs(want.f32()[i]));
  for (int64_t i = 0; i < want.numel(); ++i) {
    double e = std::fabs((double)got.f32()[i] - want.f32()[i]) / scale;
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  return worst;
}

// Each wrong eps (1e-12, 1e-6) at any one LayerNorm moves logits or enc_outputs by >= 1.4e-2 of their scale
// (checked by the fixture script): 140x this.
constexpr double kTol = 1e-4;

}  // namespace

TEST(EpsSensitivePreLN, Seq2SeqTeacherForcedLogitsAndEncoderOutputsMatchPyTorch) {
  const std::string dir = fixture("reference/eps/seq2seq_preln");
  Seq2SeqModel m(Seq2SeqConfig::load(dir + "/config.json"));
  ASSERT_TRUE(m.config().norm_first);
  ASSERT_TRUE(m.config().shared_embeddings);
  ASSERT_TRUE(m.config().attention_bias);
  m.load(dir + "/model.safetensors");
  auto io = SafeTensors::open(dir + "/io.safetensors");
  Tensor enc_X = io.get("enc_X"), enc_vl = io.get("enc_valid_lens"), dec_X = io.get("dec_X");
  Seq2SeqBatch b;
  b.src = enc_X.i64();
  b.src_valid_len = enc_vl.i64();
  b.dec_input = dec_X.i64();
  b.batch = enc_X.size(0);
  b.src_len = enc_X.size(1);
  b.tgt_len = dec_X.size(1);
  EXPECT_LE(rel_err(m.forward_logits(b), io.get("logits")), kTol);
  Tensor enc = m.encode(enc_X.i64(), enc_vl.i64(), enc_X.size(0), enc_X.size(1));
  EXPECT_LE(rel_err(enc, io.get("enc_outputs")), kTol);
}

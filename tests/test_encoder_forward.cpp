// tfm::Encoder::forward and `tfm encode` on padded batches: the layers run on the real tokens only, real positions
// equal PyTorch's (tests/fixtures/bert golden) and the every-position path's, padded positions hold 0; the
// every-position (Hugging Face) result stays available through ForwardOptions::all_positions / --all-positions.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "run_tfm.h"
#include "test_util.h"
#include "tfm/tfm.h"

namespace tfm::test {
namespace {

EncoderOptions single_thread() {
  EncoderOptions o;
  o.threads = 1;
  return o;
}


namespace fs = std::filesystem;

constexpr float kTol = 1e-4f;  // tests/fixtures/README.md: forward activations
constexpr int64_t H = 32;

std::vector<int64_t> ids_of(const Tensor& t) { return std::vector<int64_t>(t.i64(), t.i64() + t.numel()); }

// The fixture's [3, 6] batch: rows of unequal length (attention_mask 0 at the end of rows 1 and 2).
struct Golden {
  SafeTensors io = SafeTensors::open(fixture("bert/io.safetensors"));
  std::vector<int64_t> ids = ids_of(io.get("input_ids")), mask = ids_of(io.get("attention_mask")),
                       types = ids_of(io.get("token_type_ids"));
  EncoderInputs inputs() const { return {ids.data(), mask.data(), types.data(), 3, 6}; }
};

TEST(EncoderForward, MixedLengthBatchRealPositionsMatchAndPaddingIsZero) {
  Golden g;
  int64_t padded = 0;
  for (int64_t m : g.mask) padded += m == 0;
  ASSERT_GT(padded, 0) << "the fixture batch must have padding";
  Encoder enc(fixture("bert"), single_thread());
  const FloatArray out = enc.forward(g.inputs());
  ForwardOptions every;
  every.all_positions = true;
  const EncoderOutputs full = enc.forward_all(g.inputs(), every);
  const Tensor ref = g.io.get("last_hidden_state");
  ASSERT_EQ(out.shape(), (std::vector<int64_t>{3, 6, H}));
  ASSERT_EQ(full.last_hidden_state.shape(), out.shape());
  // The every-position path is Hugging Face's result, padded positions included.
  EXPECT_TRUE(all_close(full.last_hidden_state.data(), ref.f32(), ref.numel(), kTol, kTol));
  for (int64_t t = 0; t < 18; ++t) {
    const float* got = out.data() + t * H;
    if (g.mask[t] == 1) {
      EXPECT_TRUE(all_close(got, ref.f32() + t * H, H, kTol, kTol)) << "token " << t;
      EXPECT_TRUE(all_close(got, full.last_hidden_state.data() + t * H, H, kTol, kTol)) << "token " << t;
    } else {
      EXPECT_NE(ref.f32()[t * H], 0.0f);  // Hugging Face's value there is not 0: the test can fail
      for (int64_t k = 0; k < H; ++k) ASSERT_EQ(got[k], 0.0f) << "token " << t << " dim " << k;
    }
  }
  // forward_all without all_positions runs the same path as forward; the pooler reads position 0 (real).
  const EncoderOutputs fast = enc.forward_all(g.inputs());
  for (size_t i = 0; i < (size_t)out.numel(); ++i) ASSERT_EQ(fast.last_hidden_state.data()[i], out.data()[i]) << i;
  ASSERT_EQ(fast.pooler_output.numel(), full.pooler_output.numel());
  EXPECT_TRUE(all_close(fast.pooler_output.data(), full.pooler_output.data(), full.pooler_output.numel(), kTol, kTol));
}

TEST(EncoderForward, HiddenStatesComputeEveryPosition) {
  Golden g;
  Encoder enc(fixture("bert"), single_thread());
  ForwardOptions o;
  o.output_hidden_states = true;
  const EncoderOutputs all = enc.forward_all(g.inputs(), o);
  const Tensor ref = g.io.get("last_hidden_state");
  EXPECT_TRUE(all_close(all.last_hidden_state.data(), ref.f32(), ref.numel(), kTol, kTol));
  ASSERT_EQ(all.hidden_states.shape(), (std::vector<int64_t>{3, 3, 6, H}));
  const float* last = all.hidden_states.data() + 2 * 18 * H;
  EXPECT_TRUE(all_close(last, all.last_hidden_state.data(), 18 * H, 0.0f));
}

TEST(EncoderForward, UnpaddedBatchIsUnchanged) {
  Golden g;
  Encoder enc(fixture("bert"), single_thread());
  // Row 0 alone has no padding: forward and the every-position path give the same bits.
  const EncoderInputs row0{g.ids.data(), g.mask.data(), g.types.data(), 1, 6};
  ForwardOptions every;
  every.all_positions = true;
  const FloatArray a = enc.forward(row0);
  const EncoderOutputs b = enc.forward_all(row0, every);
  for (int64_t i = 0; i < 6 * H; ++i) ASSERT_EQ(a.data()[i], b.last_hidden_state.data()[i]) << i;
}

// `tfm encode` on two texts of unequal length: 0 at padded positions by default, Hugging Face's values with
// --all-positions, the real positions equal.
TEST(EncoderForward, CliEncodeMixedBatch) {
  TempFolder tmp;
  const std::string& dir = tmp.path;
  const std::string m = dir + "/bert";
  fs::create_directories(m);
  fs::copy_file(fixture("bert/config.json"), m + "/config.json");
  fs::copy_file(fixture("bert/model.safetensors"), m + "/model.safetensors");
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nbig\ndog\nwas\nred\ncar\n";
  spit(m + "/vocab.txt", vocab);
  const std::vector<std::string> texts = {"--text", "red car", "--text", "the big dog was red"};
  std::vector<std::string> a = {"encode", "--model", m, "--threads", "1", "-o", dir + "/a.npy"};
  a.insert(a.end(), texts.begin(), texts.end());
  std::vector<std::string> b = {"encode", "--model", m, "--threads", "1", "--all-positions", "-o", dir + "/b.npy"};
  b.insert(b.end(), texts.begin(), texts.end());
  TfmRun ra = run_tfm_in(dir, a), rb = run_tfm_in(dir, b);
  ASSERT_EQ(ra.exit_code, 0) << ra.describe();
  ASSERT_EQ(rb.exit_code, 0) << rb.describe();
  const Tensor ha = load_npy(dir + "/a.npy"), hb = load_npy(dir + "/b.npy");
  ASSERT_EQ(ha.numel(), 2 * 7 * H);
  ASSERT_EQ(hb.numel(), 2 * 7 * H);
  const int64_t lengths[2] = {4, 7};  // [CLS] red car [SEP]; [CLS] the big dog was red [SEP]
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i = 0; i < 7; ++i) {
      const float* x = ha.f32() + (r * 7 + i) * H;
      const float* y = hb.f32() + (r * 7 + i) * H;
      if (i < lengths[r]) {
        EXPECT_TRUE(all_close(x, y, H, kTol, kTol)) << "row " << r << " position " << i;
      } else {
        EXPECT_NE(y[0], 0.0f);
        for (int64_t k = 0; k < H; ++k) ASSERT_EQ(x[k], 0.0f) << "row " << r << " position " << i;
      }
    }
}

}  // namespace
}  // namespace tfm::test

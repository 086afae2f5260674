// Decoding: the cached decoder against full recomputation and against the reference's predict loop.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "decode/decoder_cache.h"
#include "decode/search.h"
#include "io/safetensors.h"
#include "models/seq2seq.h"
#include "test_util.h"
#include "text/nmt_data.h"
#include "text/vocab.h"

using namespace tfm;
using tfm::test::fixture;

TEST(Decode, CachedGreedyEqualsFullRecomputation) {
  Seq2SeqModel model(Seq2SeqConfig::load(fixture("seq2seq/config.json")));
  model.load(fixture("seq2seq/model.safetensors"));
  auto io = SafeTensors::open(fixture("seq2seq/io.safetensors"));
  Tensor src = io.get("enc_X"), valid = io.get("enc_valid_lens");
  DecodeOptions opt;
  opt.max_steps = 8;
  opt.position_mode = PositionMode::kAbsolute;
  // Also with random weights, so a second model exercises the comparison.
  for (int trial = 0; trial < 2; ++trial) {
    if (trial == 1) {
      Rng rng(7);
      model.init(rng);
    }
    auto cached = greedy_decode(model, src.i64(), valid.i64(), src.size(0), src.size(1), opt);
    auto full = greedy_decode_recompute(model, src.i64(), valid.i64(), src.size(0), src.size(1), opt);
    EXPECT_EQ(cached, full) << "trial " << trial;
  }
}

TEST(Decode, D2lStepPositionsReproduceReferencePredictLoop) {
  Seq2SeqModel model(Seq2SeqConfig::load(fixture("seq2seq/config.json")));
  model.load(fixture("seq2seq/model.safetensors"));
  auto io = SafeTensors::open(fixture("seq2seq/io.safetensors"));
  Tensor src = io.get("enc_X"), valid = io.get("enc_valid_lens"), want = io.get("greedy_ids");
  DecodeOptions opt;
  opt.max_steps = 8;
  opt.position_mode = PositionMode::kD2lStep;
  auto got = greedy_decode(model, src.i64(), valid.i64(), src.size(0), src.size(1), opt);
  for (int64_t b = 0; b < src.size(0); ++b) {
    std::vector<int64_t> w;
    for (int64_t t = 0; t < want.size(1) && want.i64()[b * want.size(1) + t] >= 0; ++t) {
      int64_t id = want.i64()[b * want.size(1) + t];
      if (id == opt.eos_id) break;
      w.push_back(id);
    }
    EXPECT_EQ(got[b], w) << "row " << b;
  }
}

TEST(Decode, ModelTrainedByPyTorchReferenceTranslatesTheSame) {
  const std::string dir = fixture("d2l_trained");
  Seq2SeqModel model(Seq2SeqConfig::load(dir + "/config.json"));
  model.load(dir + "/model.safetensors");
  Vocab src_vocab = Vocab::load(dir + "/src_vocab.txt"), tgt_vocab = Vocab::load(dir + "/tgt_vocab.txt");
  std::ifstream f(dir + "/predictions.json");
  nlohmann::json j = nlohmann::json::parse(f);
  DecodeOptions opt;
  opt.max_steps = model.config().num_steps;
  opt.bos_id = tgt_vocab["<bos>"];
  opt.eos_id = tgt_vocab["<eos>"];
  opt.position_mode = PositionMode::kD2lStep;  // config.json has no decode_positions: reference behaviour
  ASSERT_EQ(model.config().decode_positions, "d2l_step");
  int checked = 0;
  for (const auto& p : j["predictions"]) {
    EncodedSource s = encode_source_sentence(p["src"].get<std::string>(), src_vocab, opt.max_steps);
    auto out = greedy_decode(model, s.ids.data(), &s.valid_len, 1, (int64_t)s.ids.size(), opt);
    std::string text;
    for (size_t i = 0; i < out[0].size(); ++i) text += (i ? " " : "") + tgt_vocab.to_token(out[0][i]);
    EXPECT_EQ(text, p["pred"].get<std::string>()) << p["src"];
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

TEST(Decode, BeamOfOneEqualsGreedyAndWiderBeamScoresNoWorse) {
  Seq2SeqModel model(Seq2SeqConfig::load(fixture("seq2seq/config.json")));
  model.load(fixture("seq2seq/model.safetensors"));
  auto io = SafeTensors::open(fixture("seq2seq/io.safetensors"));
  Tensor src = io.get("enc_X"), valid = io.get("enc_valid_lens");
  const int64_t Ls = src.size(1);
  DecodeOptions opt;
  opt.max_steps = 8;
  for (int64_t b = 0; b < src.size(0); ++b) {
    auto greedy = greedy_decode(model, src.i64() + b * Ls, valid.i64() + b, 1, Ls, opt);
    opt.beam_size = 1;
    EXPECT_EQ(beam_search(model, src.i64() + b * Ls, valid.i64()[b], Ls, opt), greedy[0]) << "row " << b;
    opt.beam_size = 4;
    auto beam = beam_search(model, src.i64() + b * Ls, valid.i64()[b], Ls, opt);
    EXPECT_LE((int64_t)beam.size(), opt.max_steps);
  }
}

TEST(Decode, BatchedBeamSearchEqualsOneSentenceAtATimeAndBeamOneEqualsGreedy) {
  Seq2SeqModel model(Seq2SeqConfig::load(fixture("seq2seq/config.json")));
  model.load(fixture("seq2seq/model.safetensors"));
  Rng rng(4);
  model.init(rng);  // random weights: longer, more varied outputs than the fixture's
  auto io = SafeTensors::open(fixture("seq2seq/io.safetensors"));
  Tensor src = io.get("enc_X"), valid = io.get("enc_valid_lens");
  const int64_t N = src.size(0), Ls = src.size(1);
  DecodeOptions opt;
  opt.max_steps = 8;
  opt.length_penalty = 0.6f;
  for (int64_t k : {1, 3}) {
    opt.beam_size = k;
    auto batched = beam_search_batch(model, src.i64(), valid.i64(), N, Ls, opt);
    for (int64_t b = 0; b < N; ++b) {
      // One sentence alone in the batch: the same hypothesis.
      auto single = beam_search_batch(model, src.i64() + b * Ls, valid.i64() + b, 1, Ls, opt)[0];
      EXPECT_EQ(batched[b], single) << "beam " << k << " row " << b;
    }
    if (k == 1) { EXPECT_EQ(batched, greedy_decode(model, src.i64(), valid.i64(), N, Ls, opt)); }
  }
}

// The decoder cache drops the keys / values no row reads any more (beams that lost): after two reorders that leave
// every row reading buffer rows 0 and 4 (step 0 of old row 0, step 1 of old row 1), compacting keeps exactly those
// two, and the next steps' logits are bit for bit those of the cache that kept everything.
TEST(Decode, CacheCompactionDropsUnreadRowsAndKeepsTheLogits) {
  Seq2SeqModel model(Seq2SeqConfig::load(fixture("seq2seq/config.json")));
  model.load(fixture("seq2seq/model.safetensors"));
  Rng rng(7);
  model.init(rng);
  model.prepare_inference(ops::ComputeType::F32);
  auto io = SafeTensors::open(fixture("seq2seq/io.safetensors"));
  Tensor src = io.get("enc_X"), valid = io.get("enc_valid_lens");
  const int64_t N = 3, Ls = src.size(1), V = model.config().tgt_vocab_size;
  Tensor enc = model.encode(src.i64(), valid.i64(), N, Ls);
  DecoderCache cache;
  start_decoding(model, cache, enc, valid.i64(), 6);
  std::vector<float> logits(N * V);
  std::vector<int64_t> tokens = {1, 2, 3};
  decode_step(model, cache, tokens.data(), logits.data(), PositionMode::kAbsolute);  // buffer rows 0, 1, 2
  reorder_cache(cache, {0, 0, 2});                                                   // row 1 unread
  decode_step(model, cache, tokens.data(), logits.data(), PositionMode::kAbsolute);  // rows 3, 4, 5
  reorder_cache(cache, {1, 1, 1});  // every row: old row 1's history, buffer rows 0 and 4
  DecoderCache kept = cache;
  EXPECT_EQ(cache.kv_rows_used, 6);
  EXPECT_EQ(compact_decoder_cache(cache), 4);
  EXPECT_EQ(cache.kv_rows_used, 2);
  for (const nn::LayerKV& kv : cache.layers) EXPECT_EQ((int64_t)kv.self_k.size(), 2 * model.config().num_hiddens);
  for (int64_t r = 0; r < N; ++r) {
    EXPECT_EQ(cache.kv_index[r * cache.capacity + 0], 0);
    EXPECT_EQ(cache.kv_index[r * cache.capacity + 1], 1);
  }
  EXPECT_EQ(compact_decoder_cache(cache), 0);  // nothing more to drop
  std::vector<float> a(N * V), b(N * V);
  for (int step = 0; step < 3; ++step) {
    tokens = {4, 5, (int64_t)(6 + step)};
    decode_step(model, cache, tokens.data(), a.data(), PositionMode::kAbsolute);
    decode_step(model, kept, tokens.data(), b.data(), PositionMode::kAbsolute);
    EXPECT_EQ(a, b) << "step " << step;
    reorder_cache(cache, {2, 0, 1});
    reorder_cache(kept, {2, 0, 1});
  }
}

// The Unigram model (src/text/tokenizer/models.cpp) against Hugging Face tokenizers on vocabularies written so that
// one detail of the Viterbi search decides the segmentation (tests/fixtures/tokenizer/detail_cases.json, from
// scripts/make_tokenizer_detail_fixtures.js): the unknown-piece score min_score - 10, byte_fallback, the fusing of
// unknown characters, and ties between segmentations of equal score.
#include "tokenizer_details.h"

namespace tfm::test {
namespace {

// min_score is -15 ("xab", "ya"). "yab" is "ya" + "b" (-17), not <unk> + "ab": <unk> scores min_score - 10 = -25,
// -26 with "ab"; an <unk> scored min_score (-15) would win with -16.
TEST(Unigram, UnknownPieceScoresTenBelowTheLowestPiece) {
  EXPECT_EQ(check_detail_cases("unigram_unknown_penalty"), 12);
  const HfTokenizer tok = detail_hf_tokenizer("unigram_unknown_penalty");
  EXPECT_EQ(tok.encode("xab").tokens, std::vector<std::string>{"xab"});
  EXPECT_EQ(tok.encode("zxab").tokens, (std::vector<std::string>{"z", "xab"}));
  EXPECT_EQ(tok.encode("yab").tokens, (std::vector<std::string>{"ya", "b"}));
}

TEST(Unigram, ByteFallbackSpellsUnknownCharactersInUtf8Bytes) {
  EXPECT_EQ(check_detail_cases("unigram_byte_fallback"), 6);
}

TEST(Unigram, UnknownCharactersNextToEachOtherAreOneUnk) { EXPECT_EQ(check_detail_cases("unigram_fuse_unk"), 6); }

TEST(Unigram, EqualScoresKeepHuggingFacesSegmentation) {
  EXPECT_EQ(check_detail_cases("unigram_equal_scores"), 7);
}

}  // namespace
}  // namespace tfm::test

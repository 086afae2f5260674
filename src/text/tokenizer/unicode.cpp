// Code point tables and normalization of the tokenizer engine (see unicode.h).
#include "text/tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <iterator>
#include <stdexcept>

namespace tfm::tok {

namespace {

// HF's BertNormalizer and BertPreTokenizer classify characters with the `unicode_categories` crate, whose
// tables are from Unicode 8.0, while NFD comes from utf8proc (Unicode 15 on Debian 12). Asking utf8proc for
// the categories would differ from HF on ~570 code points that were added or re-categorized since 8.0, so the
// three sets below are HF's own, listed by `node scripts/make_tokenizer_fixtures.js --unicode-tables`, which runs
// every code point through HF's normalizer and pre-tokenizer.

struct CodepointRange {
  char32_t first, last;
};

// clean_text drops: U+0000, U+FFFD, Cc/Cf/Co except \t \n \r (137681 code points, 25 ranges)
constexpr CodepointRange kCleanTextRemoved[] = {
    {0x0, 0x8},         {0xB, 0xC},         {0xE, 0x1F},        {0x7F, 0x9F},       {0xAD, 0xAD},
    {0x600, 0x605},     {0x61C, 0x61C},     {0x6DD, 0x6DD},     {0x70F, 0x70F},     {0x180E, 0x180E},
    {0x200B, 0x200F},   {0x202A, 0x202E},   {0x2060, 0x2064},   {0x2066, 0x206F},   {0xE000, 0xF8FF},
    {0xFEFF, 0xFEFF},   {0xFFF9, 0xFFFB},   {0xFFFD, 0xFFFD},   {0x110BD, 0x110BD}, {0x1BCA0, 0x1BCA3},
    {0x1D173, 0x1D17A}, {0xE0001, 0xE0001}, {0xE0020, 0xE007F}, {0xF0000, 0xFFFFD}, {0x100000, 0x10FFFD},
};
// strip_accents drops after NFD: Mn (1567 code points, 266 ranges)
constexpr CodepointRange kNonspacingMark[] = {
    {0x300, 0x36F},     {0x483, 0x487},     {0x591, 0x5BD},     {0x5BF, 0x5BF},     {0x5C1, 0x5C2},
    {0x5C4, 0x5C5},     {0x5C7, 0x5C7},     {0x610, 0x61A},     {0x64B, 0x65F},     {0x670, 0x670},
    {0x6D6, 0x6DC},     {0x6DF, 0x6E4},     {0x6E7, 0x6E8},     {0x6EA, 0x6ED},     {0x711, 0x711},
    {0x730, 0x74A},     {0x7A6, 0x7B0},     {0x7EB, 0x7F3},     {0x816, 0x819},     {0x81B, 0x823},
    {0x825, 0x827},     {0x829, 0x82D},     {0x859, 0x85B},     {0x8E3, 0x902},     {0x93A, 0x93A},
    {0x93C, 0x93C},     {0x941, 0x948},     {0x94D, 0x94D},     {0x951, 0x957},     {0x962, 0x963},
    {0x981, 0x981},     {0x9BC, 0x9BC},     {0x9C1, 0x9C4},     {0x9CD, 0x9CD},     {0x9E2, 0x9E3},
    {0xA01, 0xA02},     {0xA3C, 0xA3C},     {0xA41, 0xA42},     {0xA47, 0xA48},     {0xA4B, 0xA4D},
    {0xA51, 0xA51},     {0xA70, 0xA71},     {0xA75, 0xA75},     {0xA81, 0xA82},     {0xABC, 0xABC},
    {0xAC1, 0xAC5},     {0xAC7, 0xAC8},     {0xACD, 0xACD},     {0xAE2, 0xAE3},     {0xB01, 0xB01},
    {0xB3C, 0xB3C},     {0xB3F, 0xB3F},     {0xB41, 0xB44},     {0xB4D, 0xB4D},     {0xB56, 0xB56},
    {0xB62, 0xB63},     {0xB82, 0xB82},     {0xBC0, 0xBC0},     {0xBCD, 0xBCD},     {0xC00, 0xC00},
    {0xC3E, 0xC40},     {0xC46, 0xC48},     {0xC4A, 0xC4D},     {0xC55, 0xC56},     {0xC62, 0xC63},
    {0xC81, 0xC81},     {0xCBC, 0xCBC},     {0xCBF, 0xCBF},     {0xCC6, 0xCC6},     {0xCCC, 0xCCD},
    {0xCE2, 0xCE3},     {0xD01, 0xD01},     {0xD41, 0xD44},     {0xD4D, 0xD4D},     {0xD62, 0xD63},
    {0xDCA, 0xDCA},     {0xDD2, 0xDD4},     {0xDD6, 0xDD6},     {0xE31, 0xE31},     {0xE34, 0xE3A},
    {0xE47, 0xE4E},     {0xEB1, 0xEB1},     {0xEB4, 0xEB9},     {0xEBB, 0xEBC},     {0xEC8, 0xECD},
    {0xF18, 0xF19},     {0xF35, 0xF35},     {0xF37, 0xF37},     {0xF39, 0xF39},     {0xF71, 0xF7E},
    {0xF80, 0xF84},     {0xF86, 0xF87},     {0xF8D, 0xF97},     {0xF99, 0xFBC},     {0xFC6, 0xFC6},
    {0x102D, 0x1030},   {0x1032, 0x1037},   {0x1039, 0x103A},   {0x103D, 0x103E},   {0x1058, 0x1059},
    {0x105E, 0x1060},   {0x1071, 0x1074},   {0x1082, 0x1082},   {0x1085, 0x1086},   {0x108D, 0x108D},
    {0x109D, 0x109D},   {0x135D, 0x135F},   {0x1712, 0x1714},   {0x1732, 0x1734},   {0x1752, 0x1753},
    {0x1772, 0x1773},   {0x17B4, 0x17B5},   {0x17B7, 0x17BD},   {0x17C6, 0x17C6},   {0x17C9, 0x17D3},
    {0x17DD, 0x17DD},   {0x180B, 0x180D},   {0x18A9, 0x18A9},   {0x1920, 0x1922},   {0x1927, 0x1928},
    {0x1932, 0x1932},   {0x1939, 0x193B},   {0x1A17, 0x1A18},   {0x1A1B, 0x1A1B},   {0x1A56, 0x1A56},
    {0x1A58, 0x1A5E},   {0x1A60, 0x1A60},   {0x1A62, 0x1A62},   {0x1A65, 0x1A6C},   {0x1A73, 0x1A7C},
    {0x1A7F, 0x1A7F},   {0x1AB0, 0x1ABD},   {0x1B00, 0x1B03},   {0x1B34, 0x1B34},   {0x1B36, 0x1B3A},
    {0x1B3C, 0x1B3C},   {0x1B42, 0x1B42},   {0x1B6B, 0x1B73},   {0x1B80, 0x1B81},   {0x1BA2, 0x1BA5},
    {0x1BA8, 0x1BA9},   {0x1BAB, 0x1BAD},   {0x1BE6, 0x1BE6},   {0x1BE8, 0x1BE9},   {0x1BED, 0x1BED},
    {0x1BEF, 0x1BF1},   {0x1C2C, 0x1C33},   {0x1C36, 0x1C37},   {0x1CD0, 0x1CD2},   {0x1CD4, 0x1CE0},
    {0x1CE2, 0x1CE8},   {0x1CED, 0x1CED},   {0x1CF4, 0x1CF4},   {0x1CF8, 0x1CF9},   {0x1DC0, 0x1DF5},
    {0x1DFC, 0x1DFF},   {0x20D0, 0x20DC},   {0x20E1, 0x20E1},   {0x20E5, 0x20F0},   {0x2CEF, 0x2CF1},
    {0x2D7F, 0x2D7F},   {0x2DE0, 0x2DFF},   {0x302A, 0x302D},   {0x3099, 0x309A},   {0xA66F, 0xA66F},
    {0xA674, 0xA67D},   {0xA69E, 0xA69F},   {0xA6F0, 0xA6F1},   {0xA802, 0xA802},   {0xA806, 0xA806},
    {0xA80B, 0xA80B},   {0xA825, 0xA826},   {0xA8C4, 0xA8C4},   {0xA8E0, 0xA8F1},   {0xA926, 0xA92D},
    {0xA947, 0xA951},   {0xA980, 0xA982},   {0xA9B3, 0xA9B3},   {0xA9B6, 0xA9B9},   {0xA9BC, 0xA9BC},
    {0xA9E5, 0xA9E5},   {0xAA29, 0xAA2E},   {0xAA31, 0xAA32},   {0xAA35, 0xAA36},   {0xAA43, 0xAA43},
    {0xAA4C, 0xAA4C},   {0xAA7C, 0xAA7C},   {0xAAB0, 0xAAB0},   {0xAAB2, 0xAAB4},   {0xAAB7, 0xAAB8},
    {0xAABE, 0xAABF},   {0xAAC1, 0xAAC1},   {0xAAEC, 0xAAED},   {0xAAF6, 0xAAF6},   {0xABE5, 0xABE5},
    {0xABE8, 0xABE8},   {0xABED, 0xABED},   {0xFB1E, 0xFB1E},   {0xFE00, 0xFE0F},   {0xFE20, 0xFE2F},
    {0x101FD, 0x101FD}, {0x102E0, 0x102E0}, {0x10376, 0x1037A}, {0x10A01, 0x10A03}, {0x10A05, 0x10A06},
    {0x10A0C, 0x10A0F}, {0x10A38, 0x10A3A}, {0x10A3F, 0x10A3F}, {0x10AE5, 0x10AE6}, {0x11001, 0x11001},
    {0x11038, 0x11046}, {0x1107F, 0x11081}, {0x110B3, 0x110B6}, {0x110B9, 0x110BA}, {0x11100, 0x11102},
    {0x11127, 0x1112B}, {0x1112D, 0x11134}, {0x11173, 0x11173}, {0x11180, 0x11181}, {0x111B6, 0x111BE},
    {0x111CA, 0x111CC}, {0x1122F, 0x11231}, {0x11234, 0x11234}, {0x11236, 0x11237}, {0x112DF, 0x112DF},
    {0x112E3, 0x112EA}, {0x11300, 0x11301}, {0x1133C, 0x1133C}, {0x11340, 0x11340}, {0x11366, 0x1136C},
    {0x11370, 0x11374}, {0x114B3, 0x114B8}, {0x114BA, 0x114BA}, {0x114BF, 0x114C0}, {0x114C2, 0x114C3},
    {0x115B2, 0x115B5}, {0x115BC, 0x115BD}, {0x115BF, 0x115C0}, {0x115DC, 0x115DD}, {0x11633, 0x1163A},
    {0x1163D, 0x1163D}, {0x1163F, 0x11640}, {0x116AB, 0x116AB}, {0x116AD, 0x116AD}, {0x116B0, 0x116B5},
    {0x116B7, 0x116B7}, {0x1171D, 0x1171F}, {0x11722, 0x11725}, {0x11727, 0x1172B}, {0x16AF0, 0x16AF4},
    {0x16B30, 0x16B36}, {0x16F8F, 0x16F92}, {0x1BC9D, 0x1BC9E}, {0x1D167, 0x1D169}, {0x1D17B, 0x1D182},
    {0x1D185, 0x1D18B}, {0x1D1AA, 0x1D1AD}, {0x1D242, 0x1D244}, {0x1DA00, 0x1DA36}, {0x1DA3B, 0x1DA6C},
    {0x1DA75, 0x1DA75}, {0x1DA84, 0x1DA84}, {0x1DA9B, 0x1DA9F}, {0x1DAA1, 0x1DAAF}, {0x1E8D0, 0x1E8D6},
    {0xE0100, 0xE01EF},
};
// BertPreTokenizer isolates: ASCII punctuation and P* (726 code points, 156 ranges)
constexpr CodepointRange kPunctuation[] = {
    {0x21, 0x2F},       {0x3A, 0x40},       {0x5B, 0x60},       {0x7B, 0x7E},       {0xA1, 0xA1},
    {0xA7, 0xA7},       {0xAB, 0xAB},       {0xB6, 0xB7},       {0xBB, 0xBB},       {0xBF, 0xBF},
    {0x37E, 0x37E},     {0x387, 0x387},     {0x55A, 0x55F},     {0x589, 0x58A},     {0x5BE, 0x5BE},
    {0x5C0, 0x5C0},     {0x5C3, 0x5C3},     {0x5C6, 0x5C6},     {0x5F3, 0x5F4},     {0x609, 0x60A},
    {0x60C, 0x60D},     {0x61B, 0x61B},     {0x61E, 0x61F},     {0x66A, 0x66D},     {0x6D4, 0x6D4},
    {0x700, 0x70D},     {0x7F7, 0x7F9},     {0x830, 0x83E},     {0x85E, 0x85E},     {0x964, 0x965},
    {0x970, 0x970},     {0xAF0, 0xAF0},     {0xDF4, 0xDF4},     {0xE4F, 0xE4F},     {0xE5A, 0xE5B},
    {0xF04, 0xF12},     {0xF14, 0xF14},     {0xF3A, 0xF3D},     {0xF85, 0xF85},     {0xFD0, 0xFD4},
    {0xFD9, 0xFDA},     {0x104A, 0x104F},   {0x10FB, 0x10FB},   {0x1360, 0x1368},   {0x1400, 0x1400},
    {0x166D, 0x166E},   {0x169B, 0x169C},   {0x16EB, 0x16ED},   {0x1735, 0x1736},   {0x17D4, 0x17D6},
    {0x17D8, 0x17DA},   {0x1800, 0x180A},   {0x1944, 0x1945},   {0x1A1E, 0x1A1F},   {0x1AA0, 0x1AA6},
    {0x1AA8, 0x1AAD},   {0x1B5A, 0x1B60},   {0x1BFC, 0x1BFF},   {0x1C3B, 0x1C3F},   {0x1C7E, 0x1C7F},
    {0x1CC0, 0x1CC7},   {0x1CD3, 0x1CD3},   {0x2010, 0x2027},   {0x2030, 0x2043},   {0x2045, 0x2051},
    {0x2053, 0x205E},   {0x207D, 0x207E},   {0x208D, 0x208E},   {0x2308, 0x230B},   {0x2329, 0x232A},
    {0x2768, 0x2775},   {0x27C5, 0x27C6},   {0x27E6, 0x27EF},   {0x2983, 0x2998},   {0x29D8, 0x29DB},
    {0x29FC, 0x29FD},   {0x2CF9, 0x2CFC},   {0x2CFE, 0x2CFF},   {0x2D70, 0x2D70},   {0x2E00, 0x2E2E},
    {0x2E30, 0x2E42},   {0x3001, 0x3003},   {0x3008, 0x3011},   {0x3014, 0x301F},   {0x3030, 0x3030},
    {0x303D, 0x303D},   {0x30A0, 0x30A0},   {0x30FB, 0x30FB},   {0xA4FE, 0xA4FF},   {0xA60D, 0xA60F},
    {0xA673, 0xA673},   {0xA67E, 0xA67E},   {0xA6F2, 0xA6F7},   {0xA874, 0xA877},   {0xA8CE, 0xA8CF},
    {0xA8F8, 0xA8FA},   {0xA8FC, 0xA8FC},   {0xA92E, 0xA92F},   {0xA95F, 0xA95F},   {0xA9C1, 0xA9CD},
    {0xA9DE, 0xA9DF},   {0xAA5C, 0xAA5F},   {0xAADE, 0xAADF},   {0xAAF0, 0xAAF1},   {0xABEB, 0xABEB},
    {0xFD3E, 0xFD3F},   {0xFE10, 0xFE19},   {0xFE30, 0xFE52},   {0xFE54, 0xFE61},   {0xFE63, 0xFE63},
    {0xFE68, 0xFE68},   {0xFE6A, 0xFE6B},   {0xFF01, 0xFF03},   {0xFF05, 0xFF0A},   {0xFF0C, 0xFF0F},
    {0xFF1A, 0xFF1B},   {0xFF1F, 0xFF20},   {0xFF3B, 0xFF3D},   {0xFF3F, 0xFF3F},   {0xFF5B, 0xFF5B},
    {0xFF5D, 0xFF5D},   {0xFF5F, 0xFF65},   {0x10100, 0x10102}, {0x1039F, 0x1039F}, {0x103D0, 0x103D0},
    {0x1056F, 0x1056F}, {0x10857, 0x10857}, {0x1091F, 0x1091F}, {0x1093F, 0x1093F}, {0x10A50, 0x10A58},
    {0x10A7F, 0x10A7F}, {0x10AF0, 0x10AF6}, {0x10B39, 0x10B3F}, {0x10B99, 0x10B9C}, {0x11047, 0x1104D},
    {0x110BB, 0x110BC}, {0x110BE, 0x110C1}, {0x11140, 0x11143}, {0x11174, 0x11175}, {0x111C5, 0x111C9},
    {0x111CD, 0x111CD}, {0x111DB, 0x111DB}, {0x111DD, 0x111DF}, {0x11238, 0x1123D}, {0x112A9, 0x112A9},
    {0x114C6, 0x114C6}, {0x115C1, 0x115D7}, {0x11641, 0x11643}, {0x1173C, 0x1173E}, {0x12470, 0x12474},
    {0x16A6E, 0x16A6F}, {0x16AF5, 0x16AF5}, {0x16B37, 0x16B3B}, {0x16B44, 0x16B44}, {0x1BC9F, 0x1BC9F},
    {0x1DA87, 0x1DA8B},
};

template <size_t N>
bool in_table(const CodepointRange (&table)[N], char32_t c) {
  // First range whose end is >= c.
  auto it = std::lower_bound(std::begin(table), std::end(table), c,
                             [](const CodepointRange& r, char32_t v) { return r.last < v; });
  return it != std::end(table) && it->first <= c;
}

// Rust char::is_whitespace (Unicode White_Space), used by clean_text and by the pre-tokenizer split.
}  // namespace

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// HF bert.rs is_chinese_char: the CJK Unified Ideographs blocks (not Hangul, Hiragana or Katakana).
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Upper-case letters whose lower-case mapping is newer than utf8proc's Unicode 15 tables but known to Rust's
// char::to_lowercase (Unicode 16/17: Latin additions, Garay, Tulu-Tigalari...). {first, last, lowercase of first}.
struct LowerRange {
  char32_t first, last, lower_first;
};
constexpr LowerRange kLowerAfterUnicode15[] = {
    {0x1C89, 0x1C89, 0x1C8A},    {0xA7CB, 0xA7CB, 0x0264},    {0xA7CC, 0xA7CC, 0xA7CD}, {0xA7CE, 0xA7CE, 0xA7CF},
    {0xA7D2, 0xA7D2, 0xA7D3},    {0xA7D4, 0xA7D4, 0xA7D5},    {0xA7DA, 0xA7DA, 0xA7DB}, {0xA7DC, 0xA7DC, 0x019B},
    {0x10D50, 0x10D65, 0x10D70}, {0x16EA0, 0x16EB8, 0x16EBB},
};

// Rust char::to_lowercase: the full (SpecialCasing) mapping without context, so final sigma stays σ and the
// only multi-char result is U+0130 -> "i\u0307".
void append_lower(char32_t c, std::u32string& out) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  if (c == 0x130) {
    out.push_back(U'i');
    out.push_back(0x307);
    return;
  }
  for (const LowerRange& r : kLowerAfterUnicode15)
    if (c >= r.first && c <= r.last) {
      out.push_back(r.lower_first + (c - r.first));
      return;
    }
  out.push_back((char32_t)utf8proc_tolower((utf8proc_int32_t)c));
}


bool is_bert_punctuation(char32_t c) { return in_table(kPunctuation, c); }
bool is_nonspacing_mark(char32_t c) { return in_table(kNonspacingMark, c); }
bool is_clean_text_removed(char32_t c) { return in_table(kCleanTextRemoved, c); }

namespace {
utf8proc_propval_t category(char32_t c) { return utf8proc_category((utf8proc_int32_t)c); }
}  // namespace

bool is_combining_mark(char32_t c) {
  if (c < 0x300) return false;
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric_word(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// ---------------------------------------------------------------------------------------------------------
// UTF-8.

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0, n = s.size();
  auto bad = [&](size_t at) {
    return std::invalid_argument("text is not valid UTF-8 (byte offset " + std::to_string(at) + ")");
  };
  while (i < n) {
    unsigned char b0 = (unsigned char)s[i];
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    }
    int len;
    char32_t c, min;
    if ((b0 & 0xE0) == 0xC0) {
      len = 2, c = b0 & 0x1F, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      len = 3, c = b0 & 0x0F, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      len = 4, c = b0 & 0x07, min = 0x10000;
    } else {
      throw bad(i);
    }
    if (i + len > n) throw bad(i);
    for (int k = 1; k < len; ++k) {
      unsigned char b = (unsigned char)s[i + k];
      if ((b & 0xC0) != 0x80) throw bad(i);
      c = (c << 6) | (b & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) throw bad(i);
    out.push_back(c);
    i += len;
  }
  return out;
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back((char)c);
  } else if (c < 0x800) {
    out.push_back((char)(0xC0 | (c >> 6)));
    out.push_back((char)(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back((char)(0xE0 | (c >> 12)));
    out.push_back((char)(0x80 | ((c >> 6) & 0x3F)));
    out.push_back((char)(0x80 | (c & 0x3F)));
  } else {
    out.push_back((char)(0xF0 | (c >> 18)));
    out.push_back((char)(0x80 | ((c >> 12) & 0x3F)));
    out.push_back((char)(0x80 | ((c >> 6) & 0x3F)));
    out.push_back((char)(0x80 | (c & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(c, out);
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Normalization forms with alignment changes.

namespace {

int ccc(char32_t c) { return c < 0x300 ? 0 : (int)utf8proc_get_property((utf8proc_int32_t)c)->combining_class; }

// Canonical or compatibility decomposition of one char (Hangul included). U+11938 (Dives Akuru, Unicode 13) has
// a decomposition that HF's normalization tables predate, so it stays whole.
int decompose_char(char32_t c, bool compat, char32_t* out, int cap) {
  if (c < 0xA0 || c == 0x11938) {
    out[0] = c;
    return 1;
  }
  utf8proc_int32_t buf[32];
  int last = 0;
  utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)c, buf, 32,
                                               (utf8proc_option_t)(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0)),
                                               &last);
  if (n <= 0 || n > 32 || n > cap) {
    out[0] = c;
    return 1;
  }
  for (utf8proc_ssize_t i = 0; i < n; ++i) out[i] = (char32_t)buf[i];
  return (int)n;
}

// Canonical composition of a starter and the next char, or 0 (composition exclusions respected).
char32_t compose_pair(char32_t a, char32_t b) {
  if (b < 0x300) return 0;  // every second element of a composition is U+0300 or above
  utf8proc_int32_t buf[2] = {(utf8proc_int32_t)a, (utf8proc_int32_t)b};
  utf8proc_ssize_t n = utf8proc_normalize_utf32(buf, 2, (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n == 1) return (char32_t)buf[0];
  return 0;
}

struct Item {
  int cls;
  char32_t ch;
  int change;
};

// unicode_normalization_alignments::Decompositions.
void decompose_stream(std::u32string_view in, bool compat, std::vector<std::pair<char32_t, int>>& out) {
  std::vector<Item> buffer;  // pending (not yet sorted) chars
  char32_t d[32];
  auto flush_sorted = [&] {
    std::stable_sort(buffer.begin(), buffer.end(), [](const Item& a, const Item& b) { return a.cls < b.cls; });
    for (const Item& it : buffer) out.emplace_back(it.ch, it.change);
    buffer.clear();
  };
  for (char32_t c : in) {
    if (c < 0x80) {
      flush_sorted();
      out.emplace_back(c, 0);
      continue;
    }
    int n = decompose_char(c, compat, d, 32);
    for (int i = 0; i < n; ++i) {
      int k = ccc(d[i]);
      if (k == 0) flush_sorted();
      buffer.push_back({k, d[i], i == 0 ? 0 : 1});
    }
  }
  flush_sorted();
}

// unicode_normalization_alignments::Recompositions over the decomposed stream.
void recompose_stream(const std::vector<std::pair<char32_t, int>>& dec, std::vector<std::pair<char32_t, int>>& out) {
  bool have_composee = false;
  std::pair<char32_t, int> composee{0, 0};
  int last_ccc = -1;  // -1: None
  std::vector<std::pair<char32_t, int>> buffer;
  for (const auto& [ch, change] : dec) {
    int ch_class = ccc(ch);
    if (!have_composee) {
      if (ch_class != 0) {
        out.emplace_back(ch, change);
        continue;
      }
      composee = {ch, change};
      have_composee = true;
      continue;
    }
    if (last_ccc < 0) {
      char32_t r = compose_pair(composee.first, ch);
      if (r) {
        composee = {r, composee.second + change - 1};
        continue;
      }
      if (ch_class == 0) {
        out.push_back(composee);
        composee = {ch, change};
        continue;
      }
      buffer.emplace_back(ch, change);
      last_ccc = ch_class;
    } else {
      if (last_ccc >= ch_class) {
        if (ch_class == 0) {
          out.push_back(composee);
          composee = {ch, change};
          last_ccc = -1;
          for (auto& b : buffer) out.push_back(b);
          buffer.clear();
          continue;
        }
        buffer.emplace_back(ch, change);
        last_ccc = ch_class;
        continue;
      }
      char32_t r = compose_pair(composee.first, ch);
      if (r) {
        composee = {r, composee.second + change - 1};
        continue;
      }
      buffer.emplace_back(ch, change);
      last_ccc = ch_class;
    }
  }
  if (have_composee) out.push_back(composee);
  for (auto& b : buffer) out.push_back(b);
}

}  // namespace

void normalize_with_changes(std::u32string_view in, NormForm form, std::vector<std::pair<char32_t, int>>& out) {
  out.clear();
  bool ascii = true;
  for (char32_t c : in)
    if (c >= 0x80) {
      ascii = false;
      break;
    }
  if (ascii) {
    out.reserve(in.size());
    for (char32_t c : in) out.emplace_back(c, 0);
    return;
  }
  bool compat = form == NormForm::NFKD || form == NormForm::NFKC;
  if (form == NormForm::NFD || form == NormForm::NFKD) {
    decompose_stream(in, compat, out);
    return;
  }
  std::vector<std::pair<char32_t, int>> dec;
  decompose_stream(in, compat, dec);
  recompose_stream(dec, out);
}

std::vector<size_t> grapheme_sizes(std::u32string_view s) {
  std::vector<size_t> sizes;
  if (s.empty()) return sizes;
  utf8proc_int32_t state = 0;
  size_t cur = 1;
  for (size_t i = 1; i < s.size(); ++i) {
    if (utf8proc_grapheme_break_stateful((utf8proc_int32_t)s[i - 1], (utf8proc_int32_t)s[i], &state)) {
      sizes.push_back(cur);
      cur = 0;
    }
    ++cur;
  }
  sizes.push_back(cur);
  return sizes;
}

}  // namespace tfm::tok

#include "text/bert_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "io/atomic_file.h"
#include "io/json_util.h"

namespace tfm {

namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------------------
// Character classes.
//
// HF's BertNormalizer and BertPreTokenizer classify characters with the `unicode_categories` crate, whose
// tables are from Unicode 8.0, while NFD comes from utf8proc (Unicode 15 on Debian 12). Asking utf8proc for
// the categories would differ from HF on ~570 code points that were added or re-categorized since 8.0
// (e.g. U+2E43.. punctuation, U+1734 Mn -> Mc, the Egyptian format controls U+13430..), so the three sets
// below are HF's own, listed by `node scripts/make_tokenizer_fixtures.js --unicode-tables`, which runs every
// code point through HF's normalizer and pre-tokenizer.

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

// NFD as HF computes it: canonical decomposition, then canonical ordering of combining marks. U+11938 (Dives
// Akuru, Unicode 13) has a decomposition that HF's normalization tables predate, so it stays whole.
void append_nfd(const std::u32string& in, std::u32string& out) {
  size_t begin = out.size();
  utf8proc_int32_t buf[32];
  for (char32_t c : in) {
    if (c < 0xC0 || c == 0x11938) {
      out.push_back(c);
      continue;
    }
    int last_boundclass = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)c, buf, 32, UTF8PROC_DECOMPOSE, &last_boundclass);
    if (n < 0 || n > 32) {  // cannot happen for a valid scalar value; keep the char rather than lose it
      out.push_back(c);
      continue;
    }
    for (utf8proc_ssize_t i = 0; i < n; ++i) out.push_back((char32_t)buf[i]);
  }
  // Canonical ordering: stable sort each run of non-starters by combining class.
  auto ccc = [](char32_t c) {
    return c < 0x300 ? 0 : (int)utf8proc_get_property((utf8proc_int32_t)c)->combining_class;
  };
  size_t i = begin;
  while (i < out.size()) {
    if (ccc(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && ccc(out[j]) != 0) ++j;
    if (j - i > 1)
      std::stable_sort(out.begin() + i, out.begin() + j, [&](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
}

// ---------------------------------------------------------------------------------------------------------
// UTF-8.

// Strict decoding (no overlong forms, surrogates or values above U+10FFFF), as Rust's str requires.
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

// HF BertNormalizer::normalize on one span.
std::u32string bert_normalize(const std::u32string& in, const BertNormalizerOptions& o) {
  std::u32string s;
  s.reserve(in.size());
  for (char32_t c : in) {
    if (o.clean_text) {
      if (in_table(kCleanTextRemoved, c)) continue;
      if (is_whitespace(c)) c = U' ';
    }
    if (o.handle_chinese_chars && is_chinese_char(c)) {
      s.push_back(U' ');
      s.push_back(c);
      s.push_back(U' ');
    } else {
      s.push_back(c);
    }
  }
  // HF strips accents before lowercasing.
  if (o.strip_accents.value_or(o.lowercase)) {
    std::u32string d;
    d.reserve(s.size());
    append_nfd(s, d);
    s.clear();
    for (char32_t c : d)
      if (!in_table(kNonspacingMark, c)) s.push_back(c);
  }
  if (o.lowercase) {
    std::u32string l;
    l.reserve(s.size());
    for (char32_t c : s) append_lower(c, l);
    s.swap(l);
  }
  return s;
}

bool is_punctuation(char32_t c) { return in_table(kPunctuation, c); }


}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Encoding.

std::string BertTokenizer::normalize(std::string_view text) const {
  return encode_utf8(bert_normalize(decode_utf8(text), norm_));
}

void BertTokenizer::wordpiece(const std::u32string& word, std::vector<int64_t>& ids,
                              std::vector<std::string>& tokens) const {
  if ((int64_t)word.size() > max_input_chars_per_word_) {
    ids.push_back(unk_id_);
    tokens.push_back(unk_token_);
    return;
  }
  // Byte offset of every char boundary, so candidate pieces shrink one char at a time.
  std::string utf8;
  std::vector<size_t> bound{0};
  for (char32_t c : word) {
    append_utf8(c, utf8);
    bound.push_back(utf8.size());
  }
  size_t n_before = ids.size();
  std::string candidate;
  size_t start = 0, nchars = word.size();
  while (start < nchars) {
    size_t end = nchars;
    int64_t found = -1;
    while (start < end) {
      candidate.clear();
      if (start > 0) candidate += continuing_subword_prefix_;
      candidate.append(utf8, bound[start], bound[end] - bound[start]);
      auto it = vocab_.find(candidate);
      if (it != vocab_.end()) {
        found = it->second;
        break;
      }
      --end;
    }
    if (found < 0) {
      // One missing piece makes the whole word unknown.
      ids.resize(n_before);
      tokens.resize(n_before);
      ids.push_back(unk_id_);
      tokens.push_back(unk_token_);
      return;
    }
    ids.push_back(found);
    tokens.push_back(candidate);
    start = end;
  }
}

void BertTokenizer::normalize_and_split(const std::u32string& span, std::vector<int64_t>& ids,
                                        std::vector<std::string>& tokens, size_t stop_at, bool& stopped) const {
  std::u32string s = bert_normalize(span, norm_);
  // Added tokens with normalized=true are matched in the normalized text: [begin, end) and index into added_.
  struct Match {
    size_t begin, end, token;
  };
  std::vector<Match> matches;
  for (size_t i = 0; i < s.size();) {
    size_t best = added_.size(), best_len = 0;
    for (size_t k = 0; k < added_.size(); ++k) {
      const std::u32string& c = added_u32_[k];
      if (added_[k].normalized && c.size() > best_len && s.compare(i, c.size(), c) == 0) best = k, best_len = c.size();
    }
    if (best_len == 0) {
      ++i;
      continue;
    }
    matches.push_back({i, i + best_len, best});
    i += best_len;
  }
  // BertPreTokenizer: whitespace separates words and is dropped; each punctuation char is a word of its own.
  auto split_words = [&](size_t begin, size_t end) {
    std::u32string word;
    auto flush = [&] {
      if (!word.empty() && !stopped) {
        wordpiece(word, ids, tokens);
        // Only a WordPiece word ends the sequence early; an added token that reaches stop_at does not.
        stopped = stop_at > 0 && ids.size() >= stop_at;
      }
      word.clear();
    };
    for (size_t i = begin; i < end && !stopped; ++i) {
      char32_t c = s[i];
      if (is_whitespace(c)) {
        flush();
      } else if (is_punctuation(c)) {
        flush();
        word.push_back(c);
        flush();
      } else {
        word.push_back(c);
      }
    }
    flush();
  };
  size_t pos = 0;
  for (const Match& m : matches) {
    split_words(pos, m.begin);
    if (stopped) return;
    ids.push_back(added_[m.token].id);
    tokens.push_back(added_[m.token].content);
    pos = m.end;
  }
  split_words(pos, s.size());
}

void BertTokenizer::encode_text(std::string_view text, std::vector<int64_t>& ids, std::vector<std::string>& tokens,
                                size_t stop_at) const {
  std::u32string s = decode_utf8(text);
  bool stopped = false;
  // Added tokens with normalized=false are matched in the raw text, leftmost-longest (HF AddedVocabulary).
  size_t pos = 0;  // start of the text not yet emitted
  for (size_t i = 0; i < s.size() && !stopped;) {
    size_t best = added_.size(), best_len = 0;
    for (size_t k = 0; k < added_.size(); ++k) {
      const std::u32string& c = added_u32_[k];
      if (!added_[k].normalized && c.size() > best_len && s.compare(i, c.size(), c) == 0) best = k, best_len = c.size();
    }
    if (best_len == 0) {
      ++i;
      continue;
    }
    size_t mbegin = i, mend = i + best_len;
    if (added_[best].lstrip)
      while (mbegin > pos && is_whitespace(s[mbegin - 1])) --mbegin;
    if (added_[best].rstrip)
      while (mend < s.size() && is_whitespace(s[mend])) ++mend;
    if (mbegin > pos) normalize_and_split(s.substr(pos, mbegin - pos), ids, tokens, stop_at, stopped);
    if (stopped) return;
    ids.push_back(added_[best].id);
    tokens.push_back(added_[best].content);
    pos = i = mend;
  }
  if (pos < s.size() && !stopped) normalize_and_split(s.substr(pos), ids, tokens, stop_at, stopped);
}

std::vector<std::string> BertTokenizer::tokenize(std::string_view text) const {
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;
  encode_text(text, ids, tokens);
  return tokens;
}

Encoding BertTokenizer::encode(std::string_view text, const std::string* pair, bool add_special_tokens,
                               int64_t max_length) const {
  if (max_length < 0) throw std::invalid_argument("encode: max_length must be >= 0, got " + std::to_string(max_length));
  if (max_length == 0) max_length = truncation_max_length_;
  std::vector<int64_t> ids_a, ids_b;
  std::vector<std::string> tok_a, tok_b;
  // HF tokenizers (0.23) stops tokenizing a sequence after the WordPiece word that reaches max_length tokens
  // (added tokens count but do not trigger the stop), before the pair truncation below. longest_first then
  // compares these shortened lengths, which decides who gets the odd token, so mirror it exactly. (Found by
  // comparing with HF on 30k random pairs; it also saves work on long inputs.)
  size_t stop_at = (size_t)max_length;
  encode_text(text, ids_a, tok_a, stop_at);
  if (pair) encode_text(*pair, ids_b, tok_b, stop_at);

  if (max_length > 0) {
    int64_t n_added = add_special_tokens ? (pair ? 3 : 2) : 0;
    if (max_length < n_added)
      throw std::invalid_argument("encode: max_length " + std::to_string(max_length) + " cannot hold the " +
                                  std::to_string(n_added) + " special tokens");
    // HF utils/truncation.rs truncate_encodings, strategy longest_first, on the lengths without specials.
    size_t budget = (size_t)(max_length - n_added);
    if (!pair) {
      if (ids_a.size() > budget) ids_a.resize(budget), tok_a.resize(budget);
    } else if (ids_a.size() + ids_b.size() > budget) {
      size_t n1 = ids_a.size(), n2 = ids_b.size();
      bool swap = n1 > n2;  // make n1 the shorter
      if (swap) std::swap(n1, n2);
      n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
      if (n1 + n2 > budget) {
        n1 = budget / 2;
        n2 = n1 + budget % 2;
      }
      if (swap) std::swap(n1, n2);
      if (ids_a.size() > n1) ids_a.resize(n1), tok_a.resize(n1);
      if (ids_b.size() > n2) ids_b.resize(n2), tok_b.resize(n2);
    }
  }

  Encoding e;
  auto push = [&](int64_t id, const std::string& tok, int64_t type_id) {
    e.input_ids.push_back(id);
    e.tokens.push_back(tok);
    e.token_type_ids.push_back(type_id);
  };
  if (add_special_tokens) push(cls_id_, cls_token_, 0);
  for (size_t i = 0; i < ids_a.size(); ++i) push(ids_a[i], tok_a[i], 0);
  if (add_special_tokens) push(sep_id_, sep_token_, 0);
  if (pair) {
    for (size_t i = 0; i < ids_b.size(); ++i) push(ids_b[i], tok_b[i], 1);
    if (add_special_tokens) push(sep_id_, sep_token_, 1);
  }
  e.attention_mask.assign(e.input_ids.size(), 1);
  return e;
}

std::vector<Encoding> BertTokenizer::encode_batch(const std::vector<std::string>& texts, bool add_special_tokens,
                                                  int64_t max_length) const {
  std::vector<Encoding> out;
  out.reserve(texts.size());
  size_t longest = 0;
  for (const std::string& t : texts) {
    out.push_back(encode(t, nullptr, add_special_tokens, max_length));
    longest = std::max(longest, out.back().input_ids.size());
  }
  for (Encoding& e : out) {
    e.input_ids.resize(longest, pad_id_);
    e.token_type_ids.resize(longest, 0);
    e.attention_mask.resize(longest, 0);
    e.tokens.resize(longest, pad_token_);
  }
  return out;
}

int64_t BertTokenizer::token_to_id(const std::string& token) const {
  for (const AddedToken& t : added_)
    if (t.content == token) return t.id;
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string& BertTokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= (int64_t)id_to_token_.size())
    throw std::out_of_range("id_to_token: id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(id_to_token_.size()) + ")");
  return id_to_token_[(size_t)id];
}

// ---------------------------------------------------------------------------------------------------------
// Loading.

void BertTokenizer::finish(const std::string& source) {
  if (!id_to_token_.empty()) {  // from vocab.txt: ids are line numbers, nothing to check
    finish_special(source);
    return;
  }
  int64_t max_id = -1;
  for (const auto& [tok, id] : vocab_) {
    if (id < 0) throw std::runtime_error(source + ": token '" + tok + "' has negative id " + std::to_string(id));
    max_id = std::max(max_id, id);
  }
  for (const AddedToken& t : added_) max_id = std::max(max_id, t.id);
  // Dense ids need max_id < number of entries; check before allocating max_id + 1 strings (a file may say 1e15).
  const size_t entries = vocab_.size() + added_.size();
  if (max_id >= (int64_t)entries)
    throw std::runtime_error(source + ": largest id is " + std::to_string(max_id) + " but there are only " +
                             std::to_string(entries) + " tokens (ids must be 0.." + std::to_string(entries - 1) +
                             " without gaps)");
  id_to_token_.assign((size_t)(max_id + 1), std::string());
  std::vector<bool> seen((size_t)(max_id + 1), false);
  // One string per id, one id per string: otherwise encode() would return ids that decode to other tokens.
  for (const auto& [tok, id] : vocab_) {
    if (seen[(size_t)id])
      throw std::runtime_error(source + ": tokens '" + id_to_token_[(size_t)id] + "' and '" + tok +
                               "' both have id " + std::to_string(id));
    id_to_token_[(size_t)id] = tok, seen[(size_t)id] = true;
  }
  for (const AddedToken& t : added_) {
    if (t.id < 0) throw std::runtime_error(source + ": added token '" + t.content + "' has negative id");
    auto in_vocab = vocab_.find(t.content);
    if (in_vocab != vocab_.end() && in_vocab->second != t.id)
      throw std::runtime_error(source + ": added token '" + t.content + "' has id " + std::to_string(t.id) +
                               ", the vocabulary gives it id " + std::to_string(in_vocab->second));
    if (seen[(size_t)t.id] && id_to_token_[(size_t)t.id] != t.content)
      throw std::runtime_error(source + ": added token '" + t.content + "' has id " + std::to_string(t.id) +
                               ", which is already '" + id_to_token_[(size_t)t.id] + "'");
    id_to_token_[(size_t)t.id] = t.content, seen[(size_t)t.id] = true;
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i])
      throw std::runtime_error(source + ": no token has id " + std::to_string(i) + " (ids must be 0.." +
                               std::to_string(max_id) + " without gaps)");
  finish_special(source);
}

void BertTokenizer::finish_special(const std::string& source) {
  added_u32_.clear();
  for (const AddedToken& t : added_) {
    if (t.content.empty())
      throw std::runtime_error(source + ": added token with id " + std::to_string(t.id) + " is empty");
    added_u32_.push_back(decode_utf8(t.content));
  }
  auto special = [&](const std::string& tok, const char* role) {
    int64_t id = token_to_id(tok);
    if (id < 0) throw std::runtime_error(source + ": " + role + " token '" + tok + "' is not in the vocabulary");
    return id;
  };
  unk_id_ = special(unk_token_, "unknown");
  cls_id_ = special(cls_token_, "classifier");
  sep_id_ = special(sep_token_, "separator");
  pad_id_ = special(pad_token_, "padding");
}

BertTokenizer BertTokenizer::from_vocab_file(const std::string& path, const BertNormalizerOptions& options,
                                             int64_t model_max_length) {
  std::istringstream in(read_whole_file(path));
  BertTokenizer t;
  t.norm_ = options;
  t.model_max_length_ = model_max_length;
  std::string line;
  int64_t id = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    t.vocab_[line] = id;  // a repeated token takes its last id, as in transformers' load_vocab
    t.id_to_token_.push_back(line);
    ++id;
  }
  if (in.bad()) throw std::runtime_error(path + ": read error");
  if (id == 0) throw std::runtime_error(path + ": vocabulary file is empty");
  // As transformers' BertTokenizerFast: the special tokens are added tokens matched in the raw text.
  for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) {
    auto it = t.vocab_.find(s);
    if (it != t.vocab_.end()) t.added_.push_back(AddedToken{s, it->second, false, false, false});
  }
  t.finish(path);
  return t;
}

namespace {

std::string found_type(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_object() && j.contains("type") && j["type"].is_string())
    return "type '" + j["type"].get<std::string>() + "'";
  return std::string("a JSON ") + j.type_name();
}

// The [CLS]/[SEP] tokens of a BERT post-processor and the ids it declares for them (-1 when it declares none);
// throws unless it is exactly [CLS] A [SEP] (B [SEP]).
struct BertTemplate {
  std::string cls, sep;
  int64_t cls_id = -1, sep_id = -1;
};
BertTemplate bert_template(const json& pp, const std::string& path) {
  auto fail = [&](const std::string& what) {
    return std::runtime_error(path + ": post_processor is not the BERT template [CLS] A [SEP] B [SEP]: " + what);
  };
  std::string type = pp.is_object() ? json_string_or(pp, "type", "", path) : "";
  if (type == "BertProcessing") {
    const json& cls = pp.at("cls");
    const json& sep = pp.at("sep");
    return {cls.at(0).get<std::string>(), sep.at(0).get<std::string>(), cls.at(1).get<int64_t>(),
            sep.at(1).get<int64_t>()};
  }
  if (type != "TemplateProcessing") throw fail("found " + found_type(pp));
  // Each piece is {"SpecialToken": {"id", "type_id"}} or {"Sequence": {"id": "A"|"B", "type_id"}}.
  auto piece = [&](const json& p) {
    if (p.contains("SpecialToken"))
      return "S:" + p["SpecialToken"].at("id").get<std::string>() + ":" +
             std::to_string(p["SpecialToken"].at("type_id").get<int>());
    if (p.contains("Sequence"))
      return "Q:" + p["Sequence"].at("id").get<std::string>() + ":" +
             std::to_string(p["Sequence"].at("type_id").get<int>());
    throw fail("unknown piece " + p.dump());
  };
  std::vector<std::string> single, pair;
  for (const json& p : pp.at("single")) single.push_back(piece(p));
  for (const json& p : pp.at("pair")) pair.push_back(piece(p));
  if (single.size() != 3 || single[1] != "Q:A:0" || single[0].rfind("S:", 0) != 0 || single[2].rfind("S:", 0) != 0)
    throw fail("single is " + pp.at("single").dump());
  std::string cls = single[0].substr(2, single[0].size() - 4), sep = single[2].substr(2, single[2].size() - 4);
  std::vector<std::string> want_pair{"S:" + cls + ":0", "Q:A:0", "S:" + sep + ":0", "Q:B:1", "S:" + sep + ":1"};
  if (single[0] != "S:" + cls + ":0" || single[2] != "S:" + sep + ":0" || pair != want_pair)
    throw fail("pair is " + pp.at("pair").dump());
  // HF emits the ids listed under special_tokens, not the vocabulary's; both must agree.
  auto declared = [&](const std::string& tok) -> int64_t {
    const json& st = pp.at("special_tokens");
    if (!st.contains(tok)) throw fail("special_tokens has no entry for '" + tok + "'");
    const json& ids = st[tok].at("ids");
    if (!ids.is_array() || ids.size() != 1) throw fail("special_tokens['" + tok + "'].ids is " + ids.dump());
    return ids[0].get<int64_t>();
  };
  return {cls, sep, declared(cls), declared(sep)};
}

}  // namespace

BertTokenizer BertTokenizer::from_tokenizer_json(const std::string& path) {
  json j = load_json_file(path);
  if (!j.is_object()) throw std::runtime_error(path + ": expected a JSON object, found " + j.type_name());
  BertTokenizer t;
  BertTemplate tmpl;
  int64_t declared_pad_id = -1;
  try {
    // The model: WordPiece. Older files have no "type"; then tell WordPiece by its keys (BPE has "merges").
    const json& model = j.at("model");
    std::string mtype = json_string_or(model, "type", "", path);
    bool wordpiece = mtype == "WordPiece" ||
                     (mtype.empty() && model.contains("continuing_subword_prefix") && !model.contains("merges"));
    if (!wordpiece)
      throw std::runtime_error(path + ": model is not a WordPiece model, found " +
                               (mtype.empty() ? "keys " +
                                                    [&] {
                                                      std::string k;
                                                      for (auto it = model.begin(); it != model.end(); ++it)
                                                        k += (k.empty() ? "" : ",") + it.key();
                                                      return k;
                                                    }()
                                              : "type '" + mtype + "'"));
    const json& norm = j.at("normalizer");
    if (!norm.is_object() || json_string_or(norm, "type", "", path) != "BertNormalizer")
      throw std::runtime_error(path + ": normalizer is not BertNormalizer, found " + found_type(norm));
    const json& pre = j.at("pre_tokenizer");
    if (!pre.is_object() || json_string_or(pre, "type", "", path) != "BertPreTokenizer")
      throw std::runtime_error(path + ": pre_tokenizer is not BertPreTokenizer, found " + found_type(pre));

    t.norm_.clean_text = json_bool_or(norm, "clean_text", true, path);
    t.norm_.handle_chinese_chars = json_bool_or(norm, "handle_chinese_chars", true, path);
    t.norm_.lowercase = json_bool_or(norm, "lowercase", true, path);
    if (norm.contains("strip_accents") && !norm["strip_accents"].is_null())
      t.norm_.strip_accents = json_bool(norm, "strip_accents", path);

    t.unk_token_ = json_string_or(model, "unk_token", "[UNK]", path);
    t.continuing_subword_prefix_ = json_string_or(model, "continuing_subword_prefix", "##", path);
    t.max_input_chars_per_word_ = json_int_or(model, "max_input_chars_per_word", 100, path);
    const json& vocab = model.at("vocab");
    if (!vocab.is_object())
      throw std::runtime_error(path + ": model.vocab must be an object token -> id, found " + vocab.type_name());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (!it->is_number_integer())
        throw std::runtime_error(path + ": model.vocab['" + it.key() + "'] must be an integer id, found " +
                                 it->type_name());
      t.vocab_.emplace(it.key(), it->get<int64_t>());
    }

    if (j.contains("added_tokens") && !j["added_tokens"].is_null())
      for (const json& a : j["added_tokens"]) {
        AddedToken at;
        at.content = json_string(a, "content", path);
        at.id = json_int(a, "id", path);
        at.normalized = json_bool_or(a, "normalized", false, path);
        at.lstrip = json_bool_or(a, "lstrip", false, path);
        at.rstrip = json_bool_or(a, "rstrip", false, path);
        if (json_bool_or(a, "single_word", false, path))
          throw std::runtime_error(path + ": added token '" + at.content +
                                   "' has single_word=true, which is not supported");
        t.added_.push_back(at);
      }

    tmpl = bert_template(j.at("post_processor"), path);
    t.cls_token_ = tmpl.cls;
    t.sep_token_ = tmpl.sep;
    // Truncation and padding saved in the file apply to every encode in HF; the variants this class implements
    // are honoured, the others refused rather than ignored.
    if (j.contains("truncation") && !j["truncation"].is_null()) {
      const json& tr = j["truncation"];
      if (!tr.is_object()) throw std::runtime_error(path + ": truncation must be an object or null");
      if (json_string_or(tr, "strategy", "LongestFirst", path) != "LongestFirst" ||
          json_string_or(tr, "direction", "Right", path) != "Right" || json_int_or(tr, "stride", 0, path) != 0)
        throw std::runtime_error(path + ": truncation " + tr.dump() +
                                 " is not supported (only strategy LongestFirst, direction Right, stride 0)");
      t.truncation_max_length_ = json_int(tr, "max_length", path);
      if (t.truncation_max_length_ < 1)
        throw std::runtime_error(path + ": truncation max_length must be positive, found " +
                                 std::to_string(t.truncation_max_length_));
    }
    if (j.contains("padding") && !j["padding"].is_null()) {
      const json& pad = j["padding"];
      if (!pad.is_object()) throw std::runtime_error(path + ": padding must be an object or null");
      const json strategy = pad.contains("strategy") ? pad["strategy"] : json("BatchLongest");
      if (strategy != json("BatchLongest") || json_string_or(pad, "direction", "Right", path) != "Right" ||
          json_int_or(pad, "pad_type_id", 0, path) != 0 ||
          (pad.contains("pad_to_multiple_of") && !pad["pad_to_multiple_of"].is_null()))
        throw std::runtime_error(path + ": padding " + pad.dump() +
                                 " is not supported (only strategy BatchLongest, direction Right, pad_type_id 0)");
      t.pad_token_ = json_string_or(pad, "pad_token", "[PAD]", path);
      declared_pad_id = json_int_or(pad, "pad_id", -1, path);
    }
  } catch (const json::exception& e) {
    // at() on a missing key, get<> on a wrong type.
    throw std::runtime_error(path + ": not a BERT WordPiece tokenizer.json: " + e.what());
  }
  t.finish(path);
  auto check_id = [&](const char* what, const std::string& tok, int64_t declared, int64_t actual) {
    if (declared >= 0 && declared != actual)
      throw std::runtime_error(path + ": " + what + " gives '" + tok + "' id " + std::to_string(declared) +
                               ", the vocabulary gives it id " + std::to_string(actual));
  };
  check_id("post_processor", t.cls_token_, tmpl.cls_id, t.cls_id_);
  check_id("post_processor", t.sep_token_, tmpl.sep_id, t.sep_id_);
  check_id("padding", t.pad_token_, declared_pad_id, t.pad_id_);
  return t;
}

BertTokenizer BertTokenizer::from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path tok_json = fs::path(dir) / "tokenizer.json";
  fs::path vocab_txt = fs::path(dir) / "vocab.txt";
  fs::path config = fs::path(dir) / "tokenizer_config.json";
  json cfg = json::object();
  if (fs::exists(config)) cfg = load_json_file(config.string());
  std::string cfg_name = config.string();
  int64_t max_len = 512;
  if (cfg.is_object() && cfg.contains("model_max_length") && !cfg["model_max_length"].is_null()) {
    // transformers writes 1e30 for "no limit"; that does not fit int64.
    double v = json_number(cfg, "model_max_length", cfg_name);
    max_len = v >= 9.2e18 ? std::numeric_limits<int64_t>::max() : (int64_t)v;
  }
  if (fs::exists(tok_json)) {
    BertTokenizer t = from_tokenizer_json(tok_json.string());
    t.model_max_length_ = max_len;
    return t;
  }
  if (!fs::exists(vocab_txt))
    throw std::runtime_error(dir + ": no tokenizer.json or vocab.txt (looked for " + tok_json.string() + " and " +
                             vocab_txt.string() + ")");
  BertNormalizerOptions o;
  o.lowercase = json_bool_or(cfg, "do_lower_case", true, cfg_name);
  o.handle_chinese_chars = json_bool_or(cfg, "tokenize_chinese_chars", true, cfg_name);
  if (cfg.contains("strip_accents") && !cfg["strip_accents"].is_null())
    o.strip_accents = json_bool(cfg, "strip_accents", cfg_name);
  return from_vocab_file(vocab_txt.string(), o, max_len);
}

}  // namespace tfm

// Unicode helpers of the tokenizer engine, matching the Rust crates Hugging Face `tokenizers` uses:
// char::is_whitespace, unicode_categories (Unicode 8 tables for BERT), char::to_lowercase, and
// unicode-normalization with the (char, change) alignment stream of tokenizers' unicode_normalization_alignments.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tfm::tok {

// Strict UTF-8 decoding (no overlong forms, surrogates or values above U+10FFFF), as Rust's str requires.
// Throws std::invalid_argument "text is not valid UTF-8 (byte offset N)".
std::u32string decode_utf8(std::string_view s);
void append_utf8(char32_t c, std::string& out);
std::string encode_utf8(std::u32string_view s);
inline int utf8_len(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

bool is_whitespace(char32_t c);          // Rust char::is_whitespace (White_Space)
bool is_chinese_char(char32_t c);        // tokenizers bert.rs is_chinese_char
bool is_bert_punctuation(char32_t c);    // ASCII punctuation or P* (unicode_categories, Unicode 8)
bool is_nonspacing_mark(char32_t c);     // Mn (unicode_categories, Unicode 8)
bool is_clean_text_removed(char32_t c);  // BertNormalizer clean_text: U+0000, U+FFFD, Cc/Cf/Co but \t \n \r
bool is_combining_mark(char32_t c);      // General_Category M* (StripAccents)
bool is_numeric(char32_t c);             // Rust char::is_numeric (N*)
bool is_alphanumeric_word(char32_t c);   // Rust regex \w (Alphabetic, M*, Nd, Pc, Join_Control)
// Rust char::to_lowercase: full mapping without context (U+0130 -> "i\u0307").
void append_lower(char32_t c, std::u32string& out);

enum class NormForm { NFD, NFKD, NFC, NFKC };
// The normalized chars of `in` with tokenizers' change values (0 replaces the next char of `in`, 1 is inserted,
// -n replaces one and removes n more), as unicode_normalization_alignments yields them.
void normalize_with_changes(std::u32string_view in, NormForm form, std::vector<std::pair<char32_t, int>>& out);

// Extended grapheme cluster boundaries (unicode-segmentation graphemes(true)): sizes of each cluster in chars.
std::vector<size_t> grapheme_sizes(std::u32string_view s);

}  // namespace tfm::tok

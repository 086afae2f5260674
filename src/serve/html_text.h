// HTML for LibreTranslate's `format: "html"` and .html files of /translate_file: the markup is kept as it is and
// the text between tags is translated, one text node at a time (as LibreTranslate's translatehtml walks the
// BeautifulSoup tree), with the contents of script, style, code, pre, textarea, noscript and template left alone.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tfm::serve {

struct HtmlPiece {
  std::string raw;          // the piece as it is in the document (tags, comments, white space, skipped elements)
  bool translate = false;   // a text node with a letter or digit in it
  std::string text;         // translate: its text, entities decoded, white space runs as one space, trimmed
  std::string lead, trail;  // translate: the white space around the text in the document, kept
};

// Cuts `html` into pieces whose `raw` strings join back into it. A '<' that does not start a tag (a letter, '/',
// '!' or '?' after it) is text; a tag ends at the first '>' outside quotes; an unterminated tag or comment runs to
// the end of the document (kept as it is).
std::vector<HtmlPiece> split_html(std::string_view html);

// The document with each translated piece replaced by its lead, its translation (HTML-escaped: & < >) and its
// trail. `translations` holds one string per piece with translate set, in order.
std::string join_html(const std::vector<HtmlPiece>& pieces, const std::vector<std::string>& translations);

// &amp; &lt; &gt; &quot; &apos; &nbsp; and numeric references (&#39; &#x27;) decoded; other text as it is.
std::string html_unescape(std::string_view s);
// & < > as entities.
std::string html_escape(std::string_view s);

}  // namespace tfm::serve

#include "serve/html_text.h"

#include <cctype>
#include <cstdint>
#include <cstdlib>

namespace tfm::serve {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = (char)std::tolower((unsigned char)c);
  return o;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    out += (char)cp;
  } else if (cp < 0x800) {
    out += (char)(0xC0 | (cp >> 6)), out += (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += (char)(0xE0 | (cp >> 12)), out += (char)(0x80 | ((cp >> 6) & 0x3F)), out += (char)(0x80 | (cp & 0x3F));
  } else {
    out += (char)(0xF0 | (cp >> 18)), out += (char)(0x80 | ((cp >> 12) & 0x3F));
    out += (char)(0x80 | ((cp >> 6) & 0x3F)), out += (char)(0x80 | (cp & 0x3F));
  }
}

// The elements whose contents are not text to translate.
bool skipped_element(const std::string& name) {
  for (const char* n : {"script", "style", "code", "pre", "textarea", "noscript", "template"})
    if (name == n) return true;
  return false;
}

// The tag name of a start or end tag at html[i] == '<' ("" for comments, doctypes, processing instructions).
std::string tag_name(std::string_view html, size_t i, bool* end_tag) {
  size_t j = i + 1;
  *end_tag = j < html.size() && html[j] == '/';
  if (*end_tag) ++j;
  size_t k = j;
  while (k < html.size() && (std::isalnum((unsigned char)html[k]) || html[k] == '-' || html[k] == ':')) ++k;
  return lower(html.substr(j, k - j));
}

// The end of the tag starting at html[i] == '<': one past its '>' (quotes respected), or html.size().
size_t tag_end(std::string_view html, size_t i) {
  if (html.compare(i, 4, "<!--") == 0) {
    const size_t e = html.find("-->", i + 4);
    return e == std::string_view::npos ? html.size() : e + 3;
  }
  char quote = 0;
  for (size_t k = i + 1; k < html.size(); ++k) {
    const char c = html[k];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '>') {
      return k + 1;
    }
  }
  return html.size();
}

bool starts_tag(std::string_view html, size_t i) {
  if (i + 1 >= html.size()) return false;
  const unsigned char c = (unsigned char)html[i + 1];
  return std::isalpha(c) || c == '/' || c == '!' || c == '?';
}

void add_text(std::vector<HtmlPiece>& out, std::string_view raw) {
  if (raw.empty()) return;
  HtmlPiece p;
  p.raw = std::string(raw);
  size_t a = 0, b = raw.size();
  while (a < b && is_space(raw[a])) ++a;
  while (b > a && is_space(raw[b - 1])) --b;
  const std::string decoded = html_unescape(raw.substr(a, b - a));
  bool word = false;
  for (unsigned char c : decoded) word |= std::isalnum(c) || c >= 0x80;
  if (word) {
    p.translate = true;
    p.lead = std::string(raw.substr(0, a));
    p.trail = std::string(raw.substr(b));
    bool space = false;
    for (char c : decoded) {
      if (is_space(c)) {
        space = true;
        continue;
      }
      if (space && !p.text.empty()) p.text += ' ';
      space = false;
      p.text += c;
    }
  }
  out.push_back(std::move(p));
}

}  // namespace

std::string html_unescape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      o += s[i];
      continue;
    }
    const size_t semi = s.find(';', i + 1);
    if (semi == std::string_view::npos || semi - i > 12) {
      o += '&';
      continue;
    }
    const std::string_view name = s.substr(i + 1, semi - i - 1);
    std::string rep;
    if (name == "amp") rep = "&";
    else if (name == "lt") rep = "<";
    else if (name == "gt") rep = ">";
    else if (name == "quot") rep = "\"";
    else if (name == "apos") rep = "'";
    else if (name == "nbsp") rep = "\xC2\xA0";
    else if (name.size() > 1 && name[0] == '#') {
      const bool hex = name[1] == 'x' || name[1] == 'X';
      const std::string digits(name.substr(hex ? 2 : 1));
      const bool ok = !digits.empty() && digits.size() <= 7 &&
                      digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") == std::string::npos;
      if (ok) append_utf8(rep, (uint32_t)std::strtoul(digits.c_str(), nullptr, hex ? 16 : 10));
    }
    if (rep.empty()) {
      o += '&';
      continue;
    }
    o += rep;
    i = semi;
  }
  return o;
}

std::string html_escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else o += c;
  }
  return o;
}

std::vector<HtmlPiece> split_html(std::string_view html) {
  std::vector<HtmlPiece> out;
  size_t text_start = 0, i = 0;
  while (i < html.size()) {
    if (html[i] != '<' || !starts_tag(html, i)) {
      ++i;
      continue;
    }
    add_text(out, html.substr(text_start, i - text_start));
    bool end_tag = false;
    const std::string name = tag_name(html, i, &end_tag);
    size_t e = tag_end(html, i);
    // A skipped element runs, as raw markup, to its end tag.
    if (!end_tag && skipped_element(name) && html[e - 1] == '>' && !(e >= 2 && html[e - 2] == '/')) {
      const std::string lower_rest = lower(html.substr(e));
      const size_t close = lower_rest.find("</" + name);
      e = close == std::string::npos ? html.size() : tag_end(html, e + close);
    }
    HtmlPiece tag;
    tag.raw = std::string(html.substr(i, e - i));
    out.push_back(std::move(tag));
    i = text_start = e;
  }
  add_text(out, html.substr(text_start));
  return out;
}

std::string join_html(const std::vector<HtmlPiece>& pieces, const std::vector<std::string>& translations) {
  std::string o;
  size_t t = 0;
  for (const HtmlPiece& p : pieces) {
    if (!p.translate) {
      o += p.raw;
      continue;
    }
    o += p.lead;
    o += t < translations.size() ? html_escape(translations[t]) : html_escape(p.text);
    ++t;
    o += p.trail;
  }
  return o;
}

}  // namespace tfm::serve

// The page `tfm serve` answers at `/`: one self-contained HTML file (no CDN). For a translation model: type a
// sentence, see its translation and the attention heatmaps (layer selector, one panel per head, tokens on both
// axes). For an encoder: paste sentences, see their cosine-similarity matrix. `/?q=...` fills the box and runs
// at once (used by the headless-browser test).
#pragma once
#include <string>

namespace tfm::serve {
const std::string& web_page_html();
}  // namespace tfm::serve

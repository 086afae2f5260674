// Plots carry their labels: each text element is checked by rendering with and without it (or with another
// text) and comparing the pixels inside the box where the layout says it sits.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "io/plot.h"
#include "test_util.h"

namespace tfm {
namespace {

// Pixels that differ between a and b inside box (both images the same size).
int diff_in(const RgbImage& a, const RgbImage& b, const PlotBox& box) {
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.height, b.height);
  int n = 0;
  for (int y = std::max(0, (int)box.y); y < std::min(a.height, (int)(box.y + box.h + 1)); ++y)
    for (int x = std::max(0, (int)box.x); x < std::min(a.width, (int)(box.x + box.w + 1)); ++x)
      if (std::memcmp(a.at(x, y), b.at(x, y), 3) != 0) ++n;
  return n;
}

// Pixels in box whose colour is within tol of rgb.
int count_colour(const RgbImage& img, const PlotBox& box, int r, int g, int b, int tol = 40) {
  int n = 0;
  for (int y = std::max(0, (int)box.y); y < std::min(img.height, (int)(box.y + box.h)); ++y)
    for (int x = std::max(0, (int)box.x); x < std::min(img.width, (int)(box.x + box.w)); ++x) {
      const uint8_t* p = img.at(x, y);
      if (std::abs(p[0] - r) <= tol && std::abs(p[1] - g) <= tol && std::abs(p[2] - b) <= tol) ++n;
    }
  return n;
}

LinePlot two_curves() {
  LinePlot p;
  p.title = "Loss per epoch";
  p.series = {{"train", {4.6, 3.1, 2.4, 2.0, 1.7}}, {"validation", {4.4, 3.3, 2.9, 2.8, 2.8}}};
  return p;
}

TEST(PlotTicks, NiceStepsCoverTheRange) {
  // Hand-computed: range 4.57 / 5 intervals = 0.914 -> step 1; floor(0.13) = 0, ceil(4.7) = 5.
  EXPECT_EQ(nice_ticks(0.13, 4.7, 6), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  // 0.9 / 4 = 0.225 -> step 0.25 (2.5 x 10^-1).
  EXPECT_EQ(nice_ticks(0.0, 0.9, 5), (std::vector<double>{0, 0.25, 0.5, 0.75, 1.0}));
  EXPECT_EQ(nice_ticks(1, 20, 8), (std::vector<double>{0, 5, 10, 15, 20}));
}

TEST(PlotLine, SizeAndAxes) {
  PlotLayout lay;
  RgbImage img = render_line_plot(two_curves(), &lay);
  EXPECT_EQ(img.width, 640);
  EXPECT_EQ(img.height, 420);
  ASSERT_EQ(img.rgb.size(), 640u * 420u * 3u);
  // y ticks cover [1.7, 4.6] with a nice step; x ticks are whole epochs within [1, 5].
  ASSERT_GE(lay.y_ticks.size(), 3u);
  EXPECT_LE(lay.y_ticks.front(), 1.7);
  EXPECT_GE(lay.y_ticks.back(), 4.6);
  EXPECT_EQ(lay.x_ticks, (std::vector<double>{1, 2, 3, 4, 5}));
  // Both curves are drawn inside the axes in their colours (tab10 blue, orange).
  EXPECT_GT(count_colour(img, lay.plot_area, 31, 119, 180), 50);
  EXPECT_GT(count_colour(img, lay.plot_area, 255, 127, 14), 50);
  // The axes sit inside the image with room for labels on every side.
  EXPECT_GT(lay.plot_area.x, 30);
  EXPECT_LT(lay.plot_area.x + lay.plot_area.w, img.width);
  EXPECT_LT(lay.plot_area.y + lay.plot_area.h, img.height - 30);
}

TEST(PlotLine, EveryLabelIsDrawn) {
  LinePlot with = two_curves();
  PlotLayout lay;
  RgbImage a = render_line_plot(with, &lay);
  // Title, axis titles and legend: other text in the same place changes the pixels there.
  LinePlot other = with;
  other.title = "Something else";
  other.x_label = "step";
  other.y_label = "perplexity";
  other.series[0].name = "TRAIN!";
  other.series[1].name = "VALID?";
  RgbImage b = render_line_plot(other, nullptr);
  for (const PlotBox* box : {&lay.title, &lay.x_label, &lay.y_label, &lay.legend}) {
    ASSERT_GT(box->w * box->h, 20) << "empty layout box";
    EXPECT_GT(diff_in(a, b, *box), 10) << "box at " << box->x << "," << box->y;
  }
  // Without any text those regions are plain background.
  LinePlot bare = with;
  bare.title = bare.x_label = bare.y_label = "";
  for (auto& s : bare.series) s.name = "";
  PlotLayout bare_lay;
  RgbImage c = render_line_plot(bare, &bare_lay);
  EXPECT_EQ(bare_lay.title.w, 0);
  EXPECT_EQ(bare_lay.legend.w, 0);
  EXPECT_EQ(count_colour(c, {0, 0, (double)c.width, 12}, 0, 0, 0, 100), 0);  // nothing dark along the top edge
  EXPECT_GT(count_colour(a, lay.title, 0, 0, 0, 100), 20);                    // dark title text
}

TEST(PlotLine, TickValuesFollowTheData) {
  // The same curve shape at a 100x scale: the tick numbers left of the axes differ (more digits), the curve does not
  // need to.
  LinePlot small = two_curves(), large = two_curves();
  for (auto& s : large.series)
    for (auto& v : s.y) v *= 100;
  PlotLayout ls, ll;
  RgbImage a = render_line_plot(small, &ls), b = render_line_plot(large, &ll);
  EXPECT_EQ(ll.y_ticks.front(), 100 * ls.y_ticks.front());
  const PlotBox tick_column{ls.y_label.x + ls.y_label.w + 1, ls.plot_area.y - 8,
                            ls.plot_area.x - (ls.y_label.x + ls.y_label.w) - 2, ls.plot_area.h + 16};
  EXPECT_GT(diff_in(a, b, tick_column), 20);
  // x tick values under the axes: 5 epochs vs 12 epochs.
  LinePlot longer = two_curves();
  for (auto& s : longer.series) s.y.resize(12, 1.8);
  PlotLayout lx;
  RgbImage c = render_line_plot(longer, &lx);
  EXPECT_NE(lx.x_ticks, ls.x_ticks);
  EXPECT_GT(diff_in(a, c, {ls.plot_area.x - 10, ls.plot_area.y + ls.plot_area.h + 2, ls.plot_area.w + 20, 18}), 10);
}

TEST(PlotLine, RefusesAnEmptyPlot) {
  LinePlot p;
  p.series = {{"train", {NAN, INFINITY}}};
  EXPECT_THROW(render_line_plot(p), std::invalid_argument);
}

// Two heads, 3 queries x 4 keys, one-hot rows. labels: token strings, or empty strings (same counts, no text).
HeatmapFigure two_heads(bool labels) {
  HeatmapFigure f;
  f.title = "Cross-attention";
  f.panels_per_row = 2;
  for (int h = 0; h < 2; ++h) {
    Tensor t = Tensor::zeros({3, 4});
    for (int q = 0; q < 3; ++q) t.f32()[q * 4 + (q + h) % 4] = 1.0f;
    HeatmapPanel p{t, "Head " + std::to_string(h + 1), {"", "", ""}, {"", "", "", ""}};
    if (labels) {
      p.query_labels = {"va", "!", "<eos>"};
      p.key_labels = {"go", ".", "<eos>", "<pad>"};
    }
    f.panels.push_back(p);
  }
  return f;
}

// Dark (text) pixels in box.
int ink(const RgbImage& img, const PlotBox& box) { return count_colour(img, box, 0, 0, 0, 110); }

TEST(PlotHeatmap, TokenLabelsOnBothAxes) {
  HeatmapFigure with = two_heads(true), without = two_heads(false);
  for (HeatmapFigure* f : {&with, &without}) f->x_label = f->y_label = f->title = "";
  PlotLayout la, lb;
  RgbImage a = render_heatmaps(with, &la);
  RgbImage b = render_heatmaps(without, &lb);
  const PlotBox& ca = la.plot_area;
  const PlotBox& cb = lb.plot_area;
  EXPECT_EQ(ca.w, 4 * 22);
  EXPECT_EQ(ca.h, 3 * 22);
  // Query tokens left of the first panel, key tokens (rotated) below it; blank when the labels are empty.
  EXPECT_GT(ink(a, {ca.x - 30, ca.y, 28, ca.h}), 10);
  EXPECT_GT(ink(a, {ca.x, ca.y + ca.h + 2, ca.w, 30}), 10);
  EXPECT_EQ(ink(b, {0, cb.y, cb.x - 1, cb.h}), 0);
  EXPECT_EQ(ink(b, {cb.x, cb.y + cb.h + 2, cb.w, (double)b.height - (cb.y + cb.h + 2)}), 0);
  // The labelled figure is larger by the label space.
  EXPECT_GT(a.width, b.width);
  EXPECT_GT(a.height, b.height);
}

TEST(PlotHeatmap, CellsTitlesAndColourBar) {
  PlotLayout la;
  RgbImage a = render_heatmaps(two_heads(true), &la);
  const PlotBox& cells = la.plot_area;
  // Weight 1 is dark red, weight 0 near white (matplotlib Reds ends: (103, 0, 13) and (255, 245, 240)).
  const uint8_t* hot = a.at((int)(cells.x + 11), (int)(cells.y + 11));  // query 0, key 0 of head 1
  const uint8_t* cold = a.at((int)(cells.x + 33), (int)(cells.y + 11));
  EXPECT_NEAR(hot[0], 103, 3);
  EXPECT_NEAR(hot[1], 0, 3);
  EXPECT_NEAR(cold[0], 255, 3);
  EXPECT_NEAR(cold[1], 245, 3);
  // Panel title and figure title: other text in the same place changes the pixels there.
  HeatmapFigure retitled = two_heads(true);
  retitled.panels[0].title = "Head 9";
  retitled.title = "Something else";
  RgbImage c = render_heatmaps(retitled, nullptr);
  PlotLayout l0;
  HeatmapFigure no_fig_title = two_heads(true);
  no_fig_title.title = "";
  render_heatmaps(no_fig_title, &l0);  // l0.title = the first panel's title box
  ASSERT_GT(la.title.w, 0);
  ASSERT_EQ(a.width, c.width);
  EXPECT_GT(diff_in(a, c, la.title), 10);
  EXPECT_GT(diff_in(a, c, {l0.title.x, l0.title.y + (cells.y - l0.plot_area.y), l0.title.w, l0.title.h}), 5);
  // Colour bar: dark at the top, light at the bottom, with tick values 0 ... 1 beside it.
  const PlotBox& bar = la.legend;
  EXPECT_GT(count_colour(a, {bar.x + 3, bar.y + 2, bar.w - 6, 4}, 103, 0, 13, 30), 10);
  EXPECT_GT(count_colour(a, {bar.x + 3, bar.y + bar.h - 6, bar.w - 6, 4}, 255, 245, 240, 30), 10);
  EXPECT_EQ(la.y_ticks.front(), 0.0);
  EXPECT_EQ(la.y_ticks.back(), 1.0);
  EXPECT_GT(ink(a, {bar.x + bar.w + 4, bar.y - 8, 40, bar.h + 16}), 10);
  // Axis titles "Keys" / "Queries".
  HeatmapFigure unlabelled = two_heads(true);
  unlabelled.x_label = unlabelled.y_label = "";
  PlotLayout lu;
  RgbImage d = render_heatmaps(unlabelled, &lu);
  ASSERT_GT(la.x_label.w, 0);
  ASSERT_GT(la.y_label.h, 0);
  EXPECT_GT(ink(a, la.x_label), 10);
  EXPECT_GT(ink(a, la.y_label), 10);
  EXPECT_EQ(lu.x_label.w, 0);
  EXPECT_EQ(ink(d, {0, lu.plot_area.y, 9, (double)d.height - lu.plot_area.y}), 0);  // the margin is blank
}

TEST(PlotHeatmap, RefusesBadPanels) {
  HeatmapFigure f = two_heads(true);
  f.panels[1].key_labels.pop_back();
  try {
    render_heatmaps(f);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("3 key labels for 4 columns"), std::string::npos) << e.what();
  }
  EXPECT_THROW(render_heatmaps(HeatmapFigure{}), std::invalid_argument);
}

TEST(PlotFiles, PngAndSvg) {
  const std::string dir = ::testing::TempDir() + "/tfm_plot_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  write_line_plot(dir + "/loss.png", two_curves());
  write_heatmaps(dir + "/att.svg", two_heads(true));
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  std::string png = slurp(dir + "/loss.png");
  ASSERT_GE(png.size(), 24u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t off) {
    return (uint32_t)(uint8_t)png[off] << 24 | (uint32_t)(uint8_t)png[off + 1] << 16 |
           (uint32_t)(uint8_t)png[off + 2] << 8 | (uint8_t)png[off + 3];
  };
  EXPECT_EQ(be32(16), 640u);  // IHDR width, height
  EXPECT_EQ(be32(20), 420u);
  std::string svg = slurp(dir + "/att.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("glyph"), std::string::npos);  // cairo writes text as glyph symbols
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tfm

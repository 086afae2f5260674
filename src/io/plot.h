// Figures people can read, drawn with cairo: loss curves (titled axes, tick values, legend) and attention
// heatmaps laid out as d2l's show_heatmaps draws them (query/key token labels, one titled panel per head, a colour
// bar). PNG or SVG, chosen by the file extension; files are written atomically.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tfm {

// One curve: y[i] is drawn at x = i + 1 (epochs, steps). Non-finite values leave a gap.
struct PlotSeries {
  std::string name;  // legend entry; a series with an empty name has none
  std::vector<double> y;
};

struct LinePlot {
  std::string title;
  std::string x_label = "epoch";
  std::string y_label = "loss";
  std::vector<PlotSeries> series;  // drawn in blue, orange, green, red, purple (matplotlib's tab10 order)
  int width = 640, height = 420;   // pixels (SVG: points)
};

// One heatmap panel: weights [queries, keys] (float32, values in [0, 1]; larger = darker red).
struct HeatmapPanel {
  Tensor weights;                        // [queries, keys]
  std::string title;                     // e.g. "Head 1"
  std::vector<std::string> query_labels; // [queries] tokens down the left side, or empty (row numbers)
  std::vector<std::string> key_labels;   // [keys] tokens along the bottom, or empty (column numbers)
};

// d2l.show_heatmaps(matrices, xlabel, ylabel, titles): panels left to right, `panels_per_row` a row, shared axis
// labels, one colour bar for the whole figure spanning [0, max weight].
struct HeatmapFigure {
  std::string title;
  std::string x_label = "Keys";
  std::string y_label = "Queries";
  std::vector<HeatmapPanel> panels;
  int panels_per_row = 4;
  int cell = 22;  // pixels per matrix cell
};

// An RGB image in memory, row-major [height, width, 3], for tests and for callers that send the bytes elsewhere.
struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  const uint8_t* at(int x, int y) const { return &rgb[((size_t)y * width + x) * 3]; }
};

// Where the parts of a figure were drawn, in pixels, so tests can look at each region.
struct PlotBox {
  double x = 0, y = 0, w = 0, h = 0;
};
struct PlotLayout {
  PlotBox plot_area;               // LinePlot: the axes rectangle; HeatmapFigure: the first panel's cells
  PlotBox title, x_label, y_label; // where the text sits (zero size when the text is empty)
  PlotBox legend;                  // LinePlot legend / HeatmapFigure colour bar
  std::vector<double> x_ticks, y_ticks;  // LinePlot tick values (data units)
};

// Tick values for the range [lo, hi]: "nice" steps of 1, 2 or 5 x 10^k, about `target` of them, covering the range.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// Renders to pixels. Throws std::invalid_argument on an empty figure (no series with a finite value / no panels),
// a panel that is not a 2-D float32 tensor, or label counts that disagree with the panel's shape.
RgbImage render_line_plot(const LinePlot& plot, PlotLayout* layout = nullptr);
RgbImage render_heatmaps(const HeatmapFigure& fig, PlotLayout* layout = nullptr);

// Writes `path` as SVG when it ends in ".svg", else as PNG.
// Throws std::runtime_error naming the path when it cannot be written.
void write_line_plot(const std::string& path, const LinePlot& plot);
void write_heatmaps(const std::string& path, const HeatmapFigure& fig);

}  // namespace tfm

// Small PNG figures through stb_image_write: training curves and attention heatmaps.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tfm {

// Line plot of one or more series (x = index + 1) on a white canvas with axes; each series gets its own colour
// (blue, orange, green, ...). Non-finite values are skipped. Written atomically. Throws std::runtime_error on
// failure (path named).
void write_line_plot_png(const std::string& path, const std::vector<std::vector<double>>& series, int width = 640,
                         int height = 400);

// Heatmaps of attention weights in [0, 1]: one tile per matrix [rows, cols], tiles left to right in rows of
// `tiles_per_row`, each cell `cell` pixels, darker = larger weight. Written atomically.
void write_heatmaps_png(const std::string& path, const std::vector<Tensor>& matrices, int tiles_per_row, int cell = 12);

}  // namespace tfm

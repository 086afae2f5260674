#include "io/png.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb_image_write.h>

#include "io/atomic_file.h"

namespace tfm {

namespace {
struct Canvas {
  int w, h;
  std::vector<uint8_t> px;  // RGB
  Canvas(int w_, int h_) : w(w_), h(h_), px((size_t)w_ * h_ * 3, 255) {}
  void set(int x, int y, uint8_t r, uint8_t g, uint8_t b) {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    uint8_t* p = &px[((size_t)y * w + x) * 3];
    p[0] = r;
    p[1] = g;
    p[2] = b;
  }
  void line(double x0, double y0, double x1, double y1, uint8_t r, uint8_t g, uint8_t b) {
    int steps = (int)std::max(std::fabs(x1 - x0), std::fabs(y1 - y0)) + 1;
    for (int i = 0; i <= steps; ++i) {
      double t = (double)i / steps;
      int x = (int)std::lround(x0 + t * (x1 - x0)), y = (int)std::lround(y0 + t * (y1 - y0));
      set(x, y, r, g, b);
      set(x, y + 1, r, g, b);
    }
  }
  void save(const std::string& path) {
    std::vector<uint8_t> bytes;
    auto sink = [](void* ctx, void* data, int size) {
      auto* v = static_cast<std::vector<uint8_t>*>(ctx);
      v->insert(v->end(), (uint8_t*)data, (uint8_t*)data + size);
    };
    if (!stbi_write_png_to_func(sink, &bytes, w, h, 3, px.data(), w * 3))
      throw std::runtime_error(path + ": PNG encoding failed");
    write_file_atomic(path, std::string_view((const char*)bytes.data(), bytes.size()));
  }
};
}  // namespace

void write_line_plot_png(const std::string& path, const std::vector<std::vector<double>>& series, int width,
                         int height) {
  Canvas c(width, height);
  const int left = 50, right = 20, top = 20, bottom = 40;
  double lo = INFINITY, hi = -INFINITY;
  size_t n = 0;
  for (const auto& s : series) {
    n = std::max(n, s.size());
    for (double v : s)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (!(hi > lo)) hi = lo + 1, lo = std::isfinite(lo) ? lo : 0, hi = std::isfinite(hi) ? hi : 1;
  lo = std::min(lo, 0.0);
  // Axes and light horizontal grid at quarters.
  c.line(left, top, left, height - bottom, 0, 0, 0);
  c.line(left, height - bottom, width - right, height - bottom, 0, 0, 0);
  for (int q = 1; q <= 4; ++q) {
    double y = height - bottom - q * (height - bottom - top) / 4.0;
    for (int x = left + 1; x < width - right; x += 4) c.set(x, (int)y, 200, 200, 200);
  }
  static const uint8_t colours[][3] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}};
  auto X = [&](size_t i) { return left + (n > 1 ? (double)i / (n - 1) : 0.5) * (width - left - right); };
  auto Y = [&](double v) { return height - bottom - (v - lo) / (hi - lo) * (height - bottom - top); };
  for (size_t s = 0; s < series.size(); ++s) {
    const uint8_t* col = colours[s % 4];
    for (size_t i = 1; i < series[s].size(); ++i)
      if (std::isfinite(series[s][i - 1]) && std::isfinite(series[s][i]))
        c.line(X(i - 1), Y(series[s][i - 1]), X(i), Y(series[s][i]), col[0], col[1], col[2]);
  }
  c.save(path);
}

void write_heatmaps_png(const std::string& path, const std::vector<Tensor>& matrices, int tiles_per_row, int cell) {
  if (matrices.empty()) throw std::invalid_argument(path + ": no attention weights to draw");
  int64_t max_r = 0, max_c = 0;
  for (const Tensor& m : matrices) max_r = std::max(max_r, m.size(0)), max_c = std::max(max_c, m.size(1));
  const int gap = 8;
  const int tiles = (int)matrices.size();
  const int cols = std::min(tiles, std::max(1, tiles_per_row)), rows = (tiles + cols - 1) / cols;
  Canvas c(gap + cols * (int)(max_c * cell + gap), gap + rows * (int)(max_r * cell + gap));
  for (int t = 0; t < tiles; ++t) {
    const Tensor& m = matrices[t];
    int ox = gap + (t % cols) * (int)(max_c * cell + gap), oy = gap + (t / cols) * (int)(max_r * cell + gap);
    for (int64_t i = 0; i < m.size(0); ++i)
      for (int64_t j = 0; j < m.size(1); ++j) {
        float w = std::clamp(m.f32()[i * m.size(1) + j], 0.0f, 1.0f);
        // White (0) to dark red (1).
        uint8_t r = (uint8_t)(255 - 120 * w), g = (uint8_t)(255 - 235 * w), b = (uint8_t)(255 - 235 * w);
        for (int y = 0; y < cell; ++y)
          for (int x = 0; x < cell; ++x) c.set(ox + (int)j * cell + x, oy + (int)i * cell + y, r, g, b);
      }
  }
  c.save(path);
}

}  // namespace tfm

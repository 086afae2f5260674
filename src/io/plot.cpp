#include "io/plot.h"

#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>

#include "core/shared_library.h"
#include "io/atomic_file.h"

namespace tfm {

namespace {

// cairo (and its ~15 dependencies: X11, fontconfig, freetype, pixman, ...) is opened on the first plot
// (core/shared_library.h); TFM_CAIRO_SONAME is the SONAME of the cairo the build compiled against.
const SharedLibrary& cairo_library() {
  static const SharedLibrary lib(TFM_CAIRO_SONAME, "plots");
  return lib;
}
TFM_LAZY_FUNCTION(cairo_library(), cairo_arc);
TFM_LAZY_FUNCTION(cairo_library(), cairo_clip);
TFM_LAZY_FUNCTION(cairo_library(), cairo_create);
TFM_LAZY_FUNCTION(cairo_library(), cairo_destroy);
TFM_LAZY_FUNCTION(cairo_library(), cairo_fill);
TFM_LAZY_FUNCTION(cairo_library(), cairo_fill_preserve);
TFM_LAZY_FUNCTION(cairo_library(), cairo_font_extents);
TFM_LAZY_FUNCTION(cairo_library(), cairo_image_surface_create);
TFM_LAZY_FUNCTION(cairo_library(), cairo_image_surface_get_data);
TFM_LAZY_FUNCTION(cairo_library(), cairo_image_surface_get_height);
TFM_LAZY_FUNCTION(cairo_library(), cairo_image_surface_get_stride);
TFM_LAZY_FUNCTION(cairo_library(), cairo_image_surface_get_width);
TFM_LAZY_FUNCTION(cairo_library(), cairo_line_to);
TFM_LAZY_FUNCTION(cairo_library(), cairo_move_to);
TFM_LAZY_FUNCTION(cairo_library(), cairo_paint);
TFM_LAZY_FUNCTION(cairo_library(), cairo_rectangle);
TFM_LAZY_FUNCTION(cairo_library(), cairo_restore);
TFM_LAZY_FUNCTION(cairo_library(), cairo_rotate);
TFM_LAZY_FUNCTION(cairo_library(), cairo_save);
TFM_LAZY_FUNCTION(cairo_library(), cairo_select_font_face);
TFM_LAZY_FUNCTION(cairo_library(), cairo_set_font_size);
TFM_LAZY_FUNCTION(cairo_library(), cairo_set_line_width);
TFM_LAZY_FUNCTION(cairo_library(), cairo_set_source_rgb);
TFM_LAZY_FUNCTION(cairo_library(), cairo_set_source_rgba);
TFM_LAZY_FUNCTION(cairo_library(), cairo_show_text);
TFM_LAZY_FUNCTION(cairo_library(), cairo_stroke);
TFM_LAZY_FUNCTION(cairo_library(), cairo_surface_destroy);
TFM_LAZY_FUNCTION(cairo_library(), cairo_surface_finish);
TFM_LAZY_FUNCTION(cairo_library(), cairo_surface_flush);
TFM_LAZY_FUNCTION(cairo_library(), cairo_surface_status);
TFM_LAZY_FUNCTION(cairo_library(), cairo_surface_write_to_png_stream);
TFM_LAZY_FUNCTION(cairo_library(), cairo_svg_surface_create_for_stream);
TFM_LAZY_FUNCTION(cairo_library(), cairo_text_extents);
TFM_LAZY_FUNCTION(cairo_library(), cairo_translate);

struct SurfaceFree {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextFree {
  void operator()(cairo_t* cr) const { cairo_destroy(cr); }
};
using SurfacePtr = std::unique_ptr<cairo_surface_t, SurfaceFree>;
using ContextPtr = std::unique_ptr<cairo_t, ContextFree>;

constexpr const char* kFont = "DejaVu Sans";

// matplotlib tab10, the colours d2l's plots use.
constexpr double kSeriesRgb[][3] = {{0.122, 0.467, 0.706}, {1.000, 0.498, 0.055}, {0.173, 0.627, 0.173},
                                    {0.839, 0.153, 0.157}, {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294}};

// matplotlib "Reds" anchors (d2l.show_heatmaps' default cmap), 0 = white-ish, 1 = dark red.
constexpr double kReds[][3] = {{255, 245, 240}, {254, 224, 210}, {252, 187, 161}, {252, 146, 114}, {251, 106, 74},
                               {239, 59, 44},   {203, 24, 29},   {165, 15, 21},   {103, 0, 13}};

void reds(double t, double rgb[3]) {
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * 8.0;
  const int i = std::min((int)t, 7);
  const double f = t - i;
  for (int c = 0; c < 3; ++c) rgb[c] = (kReds[i][c] * (1 - f) + kReds[i + 1][c] * f) / 255.0;
}

void set_font(cairo_t* cr, double size, bool bold = false) {
  cairo_select_font_face(cr, kFont, CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

double text_width(cairo_t* cr, const std::string& s) {
  if (s.empty()) return 0;
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  return e.x_advance;
}

// Draws `s` with its anchor at (x, y): ax in {0 left, 0.5 centre, 1 right}, y is the vertical centre. `angle`
// rotates about the anchor (radians, -pi/2 reads bottom to top). Returns the box the text covers.
PlotBox draw_text(cairo_t* cr, const std::string& s, double x, double y, double ax, double angle = 0) {
  if (s.empty()) return {};
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_font_extents_t fe;
  cairo_font_extents(cr, &fe);
  cairo_save(cr);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, angle);
  cairo_move_to(cr, -ax * e.x_advance, (fe.ascent - fe.descent) / 2);
  cairo_show_text(cr, s.c_str());
  cairo_restore(cr);
  const double w = e.x_advance, h = fe.ascent + fe.descent;
  if (angle == 0) return {x - ax * w, y - h / 2, w, h};
  return {x - h / 2, y - (1 - ax) * w, h, w};  // rotated by -pi/2: text runs upwards
}

std::string tick_label(double v, double step) {
  // Enough decimals to show the step exactly (0.25 -> 2).
  int decimals = 0;
  while (decimals < 8 && std::fabs(step * std::pow(10.0, decimals) - std::round(step * std::pow(10.0, decimals))) >
                             1e-6 * step * std::pow(10.0, decimals))
    ++decimals;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::fabs(v) < step * 1e-6 ? 0.0 : v);
  return buf;
}

std::string surface_to_png(cairo_surface_t* s) {
  std::string bytes;
  auto sink = [](void* ctx, const unsigned char* data, unsigned int n) -> cairo_status_t {
    static_cast<std::string*>(ctx)->append(reinterpret_cast<const char*>(data), n);
    return CAIRO_STATUS_SUCCESS;
  };
  if (cairo_surface_write_to_png_stream(s, sink, &bytes) != CAIRO_STATUS_SUCCESS)
    throw std::runtime_error("cairo: PNG encoding failed");
  return bytes;
}

RgbImage surface_to_rgb(cairo_surface_t* s) {
  cairo_surface_flush(s);
  RgbImage img;
  img.width = cairo_image_surface_get_width(s);
  img.height = cairo_image_surface_get_height(s);
  const int stride = cairo_image_surface_get_stride(s);
  const unsigned char* data = cairo_image_surface_get_data(s);
  img.rgb.resize((size_t)img.width * img.height * 3);
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      uint32_t p = *reinterpret_cast<const uint32_t*>(data + (size_t)y * stride + 4 * x);  // opaque RGB24
      uint8_t* q = &img.rgb[((size_t)y * img.width + x) * 3];
      q[0] = (p >> 16) & 255;
      q[1] = (p >> 8) & 255;
      q[2] = p & 255;
    }
  return img;
}

enum class Format { kPng, kSvg };
Format format_of(const std::string& path) {
  auto ends = [&](const char* ext) {
    std::string e = ext;
    if (path.size() < e.size()) return false;
    std::string tail = path.substr(path.size() - e.size());
    std::transform(tail.begin(), tail.end(), tail.begin(), [](unsigned char c) { return (char)std::tolower(c); });
    return tail == e;
  };
  return ends(".svg") ? Format::kSvg : Format::kPng;
}

// Runs `draw` on a surface of the given size in the given format and returns the file bytes.
std::string render_bytes(Format f, int w, int h, const std::function<void(cairo_t*)>& draw) {
  std::string bytes;
  if (f == Format::kPng) {
    SurfacePtr s(cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h));
    ContextPtr cr(cairo_create(s.get()));
    draw(cr.get());
    return surface_to_png(s.get());
  }
  auto sink = [](void* ctx, const unsigned char* data, unsigned int n) -> cairo_status_t {
    static_cast<std::string*>(ctx)->append(reinterpret_cast<const char*>(data), n);
    return CAIRO_STATUS_SUCCESS;
  };
  {
    SurfacePtr s(cairo_svg_surface_create_for_stream(sink, &bytes, w, h));
    ContextPtr cr(cairo_create(s.get()));
    draw(cr.get());
    cairo_surface_finish(s.get());
    if (cairo_surface_status(s.get()) != CAIRO_STATUS_SUCCESS) throw std::runtime_error("cairo: SVG encoding failed");
  }
  return bytes;
}

// --------------------------------------------------------------------------------------------- line plot

void draw_line_plot(cairo_t* cr, const LinePlot& p, PlotLayout* out) {
  PlotLayout L;
  const double W = p.width, H = p.height;
  size_t n = 0;
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& s : p.series) {
    n = std::max(n, s.y.size());
    for (double v : s.y)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (!std::isfinite(lo)) throw std::invalid_argument("line plot: no series has a finite value");
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) lo -= 0.5, hi += 0.5;
  L.y_ticks = nice_ticks(lo, hi, 6);
  const double y0 = L.y_ticks.front(), y1 = L.y_ticks.back();
  const double x0 = n > 1 ? 1.0 : 0.0, x1 = n > 1 ? (double)n : 2.0;
  for (double t : nice_ticks(x0, x1, 8))
    if (t >= x0 && t <= x1 && std::fabs(t - std::round(t)) < 1e-9) L.x_ticks.push_back(t);

  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  set_font(cr, 11);
  double ytick_w = 0;
  const double ystep = L.y_ticks.size() > 1 ? L.y_ticks[1] - L.y_ticks[0] : 1.0;
  for (double t : L.y_ticks) ytick_w = std::max(ytick_w, text_width(cr, tick_label(t, ystep)));
  const double left = 14 + (p.y_label.empty() ? 0 : 18) + ytick_w + 8, right = 16;
  const double top = p.title.empty() ? 16 : 38, bottom = 26 + (p.x_label.empty() ? 0 : 20);
  L.plot_area = {left, top, W - left - right, H - top - bottom};
  const PlotBox& a = L.plot_area;
  auto px = [&](double x) { return a.x + (x - x0) / (x1 - x0) * a.w; };
  auto py = [&](double y) { return a.y + a.h - (y - y0) / (y1 - y0) * a.h; };

  // Grid, ticks and tick values.
  cairo_set_line_width(cr, 1);
  for (double t : L.y_ticks) {
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    cairo_move_to(cr, a.x, std::round(py(t)) + 0.5);
    cairo_line_to(cr, a.x + a.w, std::round(py(t)) + 0.5);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    draw_text(cr, tick_label(t, ystep), a.x - 6, py(t), 1.0);
  }
  for (double t : L.x_ticks) {
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    cairo_move_to(cr, std::round(px(t)) + 0.5, a.y);
    cairo_line_to(cr, std::round(px(t)) + 0.5, a.y + a.h);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    draw_text(cr, tick_label(t, 1.0), px(t), a.y + a.h + 12, 0.5);
  }
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  cairo_rectangle(cr, a.x + 0.5, a.y + 0.5, a.w - 1, a.h - 1);
  cairo_stroke(cr);

  // Curves, clipped to the axes.
  cairo_save(cr);
  cairo_rectangle(cr, a.x, a.y, a.w, a.h);
  cairo_clip(cr);
  for (size_t k = 0; k < p.series.size(); ++k) {
    const double* c = kSeriesRgb[k % 6];
    cairo_set_source_rgb(cr, c[0], c[1], c[2]);
    cairo_set_line_width(cr, 2);
    const auto& y = p.series[k].y;
    bool pen = false;
    for (size_t i = 0; i < y.size(); ++i) {
      if (!std::isfinite(y[i])) {
        pen = false;
        continue;
      }
      if (pen)
        cairo_line_to(cr, px((double)i + 1), py(y[i]));
      else
        cairo_move_to(cr, px((double)i + 1), py(y[i]));
      pen = true;
    }
    cairo_stroke(cr);
    if (y.size() <= 60)  // markers while the points are few enough to tell apart
      for (size_t i = 0; i < y.size(); ++i)
        if (std::isfinite(y[i])) {
          cairo_arc(cr, px((double)i + 1), py(y[i]), 3, 0, 2 * M_PI);
          cairo_fill(cr);
        }
  }
  cairo_restore(cr);

  // Axis labels and title.
  cairo_set_source_rgb(cr, 0, 0, 0);
  set_font(cr, 13);
  L.x_label = draw_text(cr, p.x_label, a.x + a.w / 2, H - 12, 0.5);
  L.y_label = draw_text(cr, p.y_label, 14, a.y + a.h / 2, 0.5, -M_PI / 2);
  set_font(cr, 15, true);
  L.title = draw_text(cr, p.title, W / 2, 19, 0.5);

  // Legend, top right inside the axes.
  set_font(cr, 12);
  double lw = 0;
  int entries = 0;
  for (const auto& s : p.series)
    if (!s.name.empty()) lw = std::max(lw, text_width(cr, s.name)), ++entries;
  if (entries > 0) {
    L.legend = {a.x + a.w - lw - 48, a.y + 8, lw + 40, 8.0 + 18.0 * entries};
    const PlotBox& g = L.legend;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.9);
    cairo_rectangle(cr, g.x, g.y, g.w, g.h);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.75, 0.75, 0.75);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    int row = 0;
    for (size_t k = 0; k < p.series.size(); ++k) {
      if (p.series[k].name.empty()) continue;
      const double* c = kSeriesRgb[k % 6];
      const double cy = g.y + 13 + 18.0 * row++;
      cairo_set_source_rgb(cr, c[0], c[1], c[2]);
      cairo_set_line_width(cr, 2);
      cairo_move_to(cr, g.x + 6, cy);
      cairo_line_to(cr, g.x + 28, cy);
      cairo_stroke(cr);
      cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
      draw_text(cr, p.series[k].name, g.x + 34, cy, 0.0);
    }
  }
  if (out) *out = L;
}

// ---------------------------------------------------------------------------------------------- heatmaps

struct HeatmapGeometry {
  int width = 0, height = 0;
  std::vector<double> col_x, row_y;        // left edge of each grid column / top edge of each grid row (cells)
  std::vector<double> col_w, row_h;        // cells extent of each grid column / row
  double qlabel_w = 0, klabel_h = 0, title_h = 0;
  double bar_x = 0, bar_y = 0, bar_h = 0;  // colour bar
  float vmax = 1;
};

std::vector<std::string> labels_or_numbers(const std::vector<std::string>& labels, int64_t n) {
  if (!labels.empty()) return labels;
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(std::to_string(i));
  return v;
}

void check_panels(const HeatmapFigure& f) {
  if (f.panels.empty()) throw std::invalid_argument("heatmaps: no panels");
  if (f.panels_per_row < 1 || f.cell < 2 || f.cell > 200)
    throw std::invalid_argument("heatmaps: panels_per_row must be >= 1 and cell in [2, 200]");
  for (size_t i = 0; i < f.panels.size(); ++i) {
    const auto& p = f.panels[i];
    const std::string who = "heatmaps: panel " + std::to_string(i);
    if (!p.weights.defined() || p.weights.ndim() != 2 || p.weights.dtype() != DType::F32)
      throw std::invalid_argument(who + ": weights must be a 2-D float32 tensor [queries, keys]");
    const int64_t q = p.weights.size(0), k = p.weights.size(1);
    if (q < 1 || k < 1 || q > 512 || k > 512) throw std::invalid_argument(who + ": shape must be within [1..512]^2");
    if (!p.query_labels.empty() && (int64_t)p.query_labels.size() != q)
      throw std::invalid_argument(who + ": " + std::to_string(p.query_labels.size()) + " query labels for " +
                                  std::to_string(q) + " rows");
    if (!p.key_labels.empty() && (int64_t)p.key_labels.size() != k)
      throw std::invalid_argument(who + ": " + std::to_string(p.key_labels.size()) + " key labels for " +
                                  std::to_string(k) + " columns");
  }
}

HeatmapGeometry heatmap_geometry(cairo_t* cr, const HeatmapFigure& f) {
  HeatmapGeometry g;
  const int per_row = f.panels_per_row;
  const size_t rows = (f.panels.size() + per_row - 1) / per_row;
  set_font(cr, 11);
  for (const auto& p : f.panels) {
    for (const auto& s : labels_or_numbers(p.query_labels, p.weights.size(0)))
      g.qlabel_w = std::max(g.qlabel_w, text_width(cr, s));
    for (const auto& s : labels_or_numbers(p.key_labels, p.weights.size(1)))
      g.klabel_h = std::max(g.klabel_h, text_width(cr, s));
    for (int64_t i = 0; i < p.weights.numel(); ++i)
      if (std::isfinite(p.weights.f32()[i])) g.vmax = std::max(g.vmax, p.weights.f32()[i]);
  }
  g.qlabel_w += 8, g.klabel_h += 8;
  g.title_h = 20;
  g.col_w.assign(std::min<size_t>(per_row, f.panels.size()), 0);
  g.row_h.assign(rows, 0);
  set_font(cr, 12, true);
  for (size_t i = 0; i < f.panels.size(); ++i) {
    // A title wider than its cells (centred on them) runs into the gap on the right: widen the column.
    const double cells_w = (double)f.cell * f.panels[i].weights.size(1);
    const double need = std::max(cells_w, (cells_w + text_width(cr, f.panels[i].title)) / 2 + 4);
    g.col_w[i % per_row] = std::max(g.col_w[i % per_row], need);
    g.row_h[i / per_row] = std::max<double>(g.row_h[i / per_row], f.cell * f.panels[i].weights.size(0));
  }
  const double left = 10 + (f.y_label.empty() ? 0 : 22), top = f.title.empty() ? 6 : 34;
  double x = left;
  for (double w : g.col_w) g.col_x.push_back(x + g.qlabel_w), x += g.qlabel_w + w + 16;
  double y = top;
  for (double h : g.row_h) g.row_y.push_back(y + g.title_h), y += g.title_h + h + g.klabel_h + 8;
  g.bar_x = x + 8;
  g.bar_y = top + g.title_h;
  g.bar_h = std::max(60.0, y - top - g.title_h - g.klabel_h - 8);
  set_font(cr, 11);
  const double bar_label_w = text_width(cr, "0.00") + 12;
  g.width = (int)std::ceil(g.bar_x + 16 + 6 + bar_label_w + 8);
  g.height = (int)std::ceil(y + (f.x_label.empty() ? 4 : 24));
  return g;
}

void draw_heatmaps_on(cairo_t* cr, const HeatmapFigure& f, const HeatmapGeometry& g, PlotLayout* out) {
  PlotLayout L;
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  const int per_row = f.panels_per_row;
  const double cell = f.cell;
  double rgb[3];
  for (size_t i = 0; i < f.panels.size(); ++i) {
    const HeatmapPanel& p = f.panels[i];
    const int64_t Q = p.weights.size(0), K = p.weights.size(1);
    const double ox = g.col_x[i % per_row], oy = g.row_y[i / per_row];
    for (int64_t q = 0; q < Q; ++q)
      for (int64_t k = 0; k < K; ++k) {
        reds(p.weights.f32()[q * K + k] / g.vmax, rgb);
        cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
        cairo_rectangle(cr, ox + k * cell, oy + q * cell, cell, cell);
        cairo_fill(cr);
      }
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, ox + 0.5, oy + 0.5, K * cell - 1, Q * cell - 1);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    set_font(cr, 11);
    auto ql = labels_or_numbers(p.query_labels, Q), kl = labels_or_numbers(p.key_labels, K);
    for (int64_t q = 0; q < Q; ++q) draw_text(cr, ql[q], ox - 4, oy + (q + 0.5) * cell, 1.0);
    for (int64_t k = 0; k < K; ++k) draw_text(cr, kl[k], ox + (k + 0.5) * cell, oy + Q * cell + 4, 1.0, -M_PI / 2);
    set_font(cr, 12, true);
    PlotBox t = draw_text(cr, p.title, ox + K * cell / 2, oy - g.title_h / 2, 0.5);
    if (i == 0) L.plot_area = {ox, oy, K * cell, Q * cell}, L.title = t;
  }
  // Shared axis labels and the figure title.
  cairo_set_source_rgb(cr, 0, 0, 0);
  set_font(cr, 13);
  const double grid_x0 = g.col_x.front() - g.qlabel_w, grid_x1 = g.bar_x - 8;
  PlotBox xl = draw_text(cr, f.x_label, (grid_x0 + grid_x1) / 2, g.height - 12, 0.5);
  PlotBox yl = draw_text(cr, f.y_label, 16, g.bar_y + g.bar_h / 2, 0.5, -M_PI / 2);
  L.x_label = xl, L.y_label = yl;
  set_font(cr, 15, true);
  if (!f.title.empty()) L.title = draw_text(cr, f.title, g.width / 2.0, 17, 0.5);
  // Colour bar: 0 at the bottom, vmax at the top, with tick values.
  const double bw = 16;
  for (int y = 0; y < (int)g.bar_h; ++y) {
    reds(1.0 - (y + 0.5) / g.bar_h, rgb);
    cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
    cairo_rectangle(cr, g.bar_x, g.bar_y + y, bw, 1);
    cairo_fill(cr);
  }
  cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
  cairo_rectangle(cr, g.bar_x + 0.5, g.bar_y + 0.5, bw - 1, g.bar_h - 1);
  cairo_stroke(cr);
  set_font(cr, 11);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  std::vector<double> ticks = nice_ticks(0, g.vmax, 5);
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (double t : ticks) {
    if (t > g.vmax * (1 + 1e-6)) continue;
    const double y = g.bar_y + g.bar_h * (1 - t / g.vmax);
    cairo_move_to(cr, g.bar_x + bw, y);
    cairo_line_to(cr, g.bar_x + bw + 4, y);
    cairo_stroke(cr);
    draw_text(cr, tick_label(t, step), g.bar_x + bw + 6, y, 0.0);
    L.y_ticks.push_back(t);
  }
  L.legend = {g.bar_x, g.bar_y, bw, g.bar_h};
  if (out) *out = L;
}

HeatmapGeometry measure_heatmaps(const HeatmapFigure& f) {
  check_panels(f);
  SurfacePtr s(cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1));
  ContextPtr cr(cairo_create(s.get()));
  return heatmap_geometry(cr.get(), f);
}

void check_line_plot(const LinePlot& p) {
  if (p.width < 160 || p.height < 120 || p.width > 8000 || p.height > 8000)
    throw std::invalid_argument("line plot: size must be within [160, 8000] x [120, 8000] pixels");
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(1, target - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  const double first = std::floor(lo / step + 1e-9) * step, last = std::ceil(hi / step - 1e-9) * step;
  for (double v = first; v <= last + step * 1e-6 && t.size() < 100; v += step) t.push_back(std::round(v / step) * step);
  return t;
}

RgbImage render_line_plot(const LinePlot& plot, PlotLayout* layout) {
  check_line_plot(plot);
  SurfacePtr s(cairo_image_surface_create(CAIRO_FORMAT_RGB24, plot.width, plot.height));
  ContextPtr cr(cairo_create(s.get()));
  draw_line_plot(cr.get(), plot, layout);
  return surface_to_rgb(s.get());
}

RgbImage render_heatmaps(const HeatmapFigure& fig, PlotLayout* layout) {
  HeatmapGeometry g = measure_heatmaps(fig);
  SurfacePtr s(cairo_image_surface_create(CAIRO_FORMAT_RGB24, g.width, g.height));
  ContextPtr cr(cairo_create(s.get()));
  draw_heatmaps_on(cr.get(), fig, g, layout);
  return surface_to_rgb(s.get());
}

void write_line_plot(const std::string& path, const LinePlot& plot) {
  const Format f = format_of(path);
  check_line_plot(plot);
  write_file_atomic(path, render_bytes(f, plot.width, plot.height,
                                       [&](cairo_t* cr) { draw_line_plot(cr, plot, nullptr); }));
}

void write_heatmaps(const std::string& path, const HeatmapFigure& fig) {
  const Format f = format_of(path);
  HeatmapGeometry g = measure_heatmaps(fig);
  write_file_atomic(path, render_bytes(f, g.width, g.height,
                                       [&](cairo_t* cr) { draw_heatmaps_on(cr, fig, g, nullptr); }));
}

}  // namespace tfm

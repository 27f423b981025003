// Hand-written SVG: axes with "nice" ticks, markers, labels and a legend.
#include "bench/simulator/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/xml_text.h"

namespace deepool::bench {
namespace {

constexpr double kPanelWidth = 380;
constexpr double kPanelHeight = 320;
constexpr double kMarginLeft = 60;
constexpr double kMarginRight = 20;
constexpr double kMarginTop = 60;
constexpr double kMarginBottom = 50;
constexpr double kLegendHeight = 70;

std::string Num(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.1f", value);
  return buffer;
}

// A tick step of 1, 2 or 5 x 10^k giving about `count` intervals over `span`.
double NiceStep(double span, int count) {
  const double raw = span / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

std::string MarkerSvg(Marker marker, double x, double y, const std::string& color) {
  std::ostringstream out;
  const double r = 5;
  switch (marker) {
    case Marker::kSquare:
      out << "<rect x=\"" << Num(x - r) << "\" y=\"" << Num(y - r) << "\" width=\"" << 2 * r
          << "\" height=\"" << 2 * r << "\"";
      break;
    case Marker::kCircle:
      out << "<circle cx=\"" << Num(x) << "\" cy=\"" << Num(y) << "\" r=\"" << r << "\"";
      break;
    case Marker::kDiamond:
      out << "<polygon points=\"" << Num(x) << "," << Num(y - r - 1) << " " << Num(x + r + 1) << ","
          << Num(y) << " " << Num(x) << "," << Num(y + r + 1) << " " << Num(x - r - 1) << ","
          << Num(y) << "\"";
      break;
    case Marker::kTriangle:
      out << "<polygon points=\"" << Num(x) << "," << Num(y - r) << " " << Num(x + r) << ","
          << Num(y + r) << " " << Num(x - r) << "," << Num(y + r) << "\"";
      break;
    case Marker::kDownTriangle:
      out << "<polygon points=\"" << Num(x) << "," << Num(y + r) << " " << Num(x + r) << ","
          << Num(y - r) << " " << Num(x - r) << "," << Num(y - r) << "\"";
      break;
  }
  out << " fill=\"" << color << "\" stroke=\"black\" stroke-width=\"0.6\"/>\n";
  return out.str();
}

}  // namespace

std::string RenderSvg(const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<PlotPanel>& panels) {
  const double width = kPanelWidth * static_cast<double>(panels.size());
  const double height = kPanelHeight + kLegendHeight;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << Num(width / 2) << "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">"
      << XmlEscape(title) << "</text>\n";

  for (size_t p = 0; p < panels.size(); ++p) {
    const PlotPanel& panel = panels[p];
    double x_min = 1e300, x_max = -1e300, y_min = 1e300, y_max = -1e300;
    for (const PlotSeries& series : panel.series) {
      for (const PlotPoint& point : series.points) {
        x_min = std::min(x_min, point.x);
        x_max = std::max(x_max, point.x);
        y_min = std::min(y_min, point.y);
        y_max = std::max(y_max, point.y);
      }
    }
    if (x_min > x_max) continue;
    // Axes start at 0 for throughput and just below the smallest speed-up.
    const double x_step = NiceStep(std::max(x_max - x_min, 0.5) * 1.1, 5);
    x_min = std::floor((x_min - 0.05 * (x_max - x_min)) / x_step) * x_step;
    x_max = std::ceil((x_max + 0.05 * (x_max - x_min)) / x_step) * x_step;
    const double y_step = NiceStep(y_max * 1.1, 5);
    y_min = 0;
    y_max = std::ceil(y_max * 1.08 / y_step) * y_step;

    const double left = kPanelWidth * static_cast<double>(p) + kMarginLeft;
    const double right = kPanelWidth * static_cast<double>(p + 1) - kMarginRight;
    const double top = kMarginTop;
    const double bottom = kPanelHeight - kMarginBottom;
    auto sx = [&](double x) { return left + (x - x_min) / (x_max - x_min) * (right - left); };
    auto sy = [&](double y) { return bottom - (y - y_min) / (y_max - y_min) * (bottom - top); };

    svg << "<text x=\"" << Num((left + right) / 2) << "\" y=\"" << Num(top - 12)
        << "\" text-anchor=\"middle\" font-size=\"12\" font-weight=\"bold\">"
        << XmlEscape(panel.title) << "</text>\n";
    for (double x = x_min; x <= x_max + 1e-9; x += x_step) {
      svg << "<line x1=\"" << Num(sx(x)) << "\" y1=\"" << Num(top) << "\" x2=\"" << Num(sx(x))
          << "\" y2=\"" << Num(bottom) << "\" stroke=\"#e4e4e4\"/>\n";
      char tick[32];
      std::snprintf(tick, sizeof(tick), "%g", std::round(x * 100) / 100);
      svg << "<text x=\"" << Num(sx(x)) << "\" y=\"" << Num(bottom + 15)
          << "\" text-anchor=\"middle\">" << tick << "</text>\n";
    }
    for (double y = y_min; y <= y_max + 1e-9; y += y_step) {
      svg << "<line x1=\"" << Num(left) << "\" y1=\"" << Num(sy(y)) << "\" x2=\"" << Num(right)
          << "\" y2=\"" << Num(sy(y)) << "\" stroke=\"#e4e4e4\"/>\n";
      char tick[32];
      std::snprintf(tick, sizeof(tick), "%g", std::round(y * 100) / 100);
      svg << "<text x=\"" << Num(left - 6) << "\" y=\"" << Num(sy(y) + 4)
          << "\" text-anchor=\"end\">" << tick << "</text>\n";
    }
    svg << "<rect x=\"" << Num(left) << "\" y=\"" << Num(top) << "\" width=\"" << Num(right - left)
        << "\" height=\"" << Num(bottom - top) << "\" fill=\"none\" stroke=\"black\"/>\n";
    svg << "<text x=\"" << Num((left + right) / 2) << "\" y=\"" << Num(bottom + 32)
        << "\" text-anchor=\"middle\">" << XmlEscape(x_label) << "</text>\n";
    svg << "<text transform=\"translate(" << Num(left - 40) << "," << Num((top + bottom) / 2)
        << ") rotate(-90)\" text-anchor=\"middle\">" << XmlEscape(y_label) << "</text>\n";

    for (const PlotSeries& series : panel.series) {
      if (series.joined && series.points.size() > 1) {
        svg << "<polyline fill=\"none\" stroke=\"" << series.color
            << "\" stroke-width=\"1.5\" stroke-dasharray=\"4,3\" points=\"";
        for (const PlotPoint& point : series.points) {
          svg << Num(sx(point.x)) << "," << Num(sy(point.y)) << " ";
        }
        svg << "\"/>\n";
      }
      for (const PlotPoint& point : series.points) {
        svg << MarkerSvg(series.marker, sx(point.x), sy(point.y), series.color);
        if (!point.label.empty()) {
          svg << "<text x=\"" << Num(sx(point.x) + 7) << "\" y=\"" << Num(sy(point.y) - 6)
              << "\" font-size=\"9\" fill=\"#333\">" << XmlEscape(point.label) << "</text>\n";
        }
      }
    }
  }

  // Legend: the first panel's series, in a row below the panels.
  if (!panels.empty()) {
    double x = kMarginLeft;
    double y = kPanelHeight + 10;
    for (const PlotSeries& series : panels.front().series) {
      const double entry_width = 40 + 6.2 * static_cast<double>(series.name.size());
      if (x + entry_width > width - kMarginRight) {
        x = kMarginLeft;
        y += 22;
      }
      svg << MarkerSvg(series.marker, x, y, series.color);
      svg << "<text x=\"" << Num(x + 10) << "\" y=\"" << Num(y + 4) << "\">"
          << XmlEscape(series.name) << "</text>\n";
      x += entry_width;
    }
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace deepool::bench

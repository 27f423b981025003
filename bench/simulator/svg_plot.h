// A small hand-written SVG scatter plot: one panel per model, x = FG speed-up, y = total
// cluster throughput relative to data parallelism; series of points, optionally joined.
#pragma once

#include <string>
#include <vector>

namespace deepool::bench {

struct PlotPoint {
  double x = 0;
  double y = 0;
  std::string label;  // written beside the point; empty: none
};

enum class Marker { kSquare, kCircle, kDiamond, kTriangle, kDownTriangle };

struct PlotSeries {
  std::string name;  // legend entry
  std::string color;
  Marker marker = Marker::kCircle;
  bool joined = false;  // draw a polyline through the points in order
  std::vector<PlotPoint> points;
};

struct PlotPanel {
  std::string title;
  std::vector<PlotSeries> series;
};

// Panels side by side with a shared legend below them.
std::string RenderSvg(const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<PlotPanel>& panels);

}  // namespace deepool::bench

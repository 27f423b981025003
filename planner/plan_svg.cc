// SVG rendering of a plan (see plan_svg.h).
#include "planner/plan_svg.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "common/xml_text.h"

namespace deepool::planner {
namespace {

constexpr int kMaxRows = 128;
constexpr double kLeft = 70, kTop = 60, kRight = 20, kBottom = 50;

std::string Number(double value, int decimals = 2) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

// White to dark blue as `fraction` goes from 0 to 1.
std::string Shade(double fraction) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  const int r = static_cast<int>(235 - 215 * fraction);
  const int g = static_cast<int>(240 - 180 * fraction);
  const int b = static_cast<int>(255 - 95 * fraction);
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "#%02x%02x%02x", r, g, b);
  return buffer;
}

}  // namespace

std::string PlanToSvg(const Plan& plan) {
  const int layers = static_cast<int>(plan.layers.size());
  const int devices = std::max(1, plan.num_devices);
  const int band = (devices + kMaxRows - 1) / kMaxRows;  // ranks per row
  const int rows = (devices + band - 1) / band;
  const double cell_width = std::clamp(1000.0 / std::max(1, layers), 2.0, 24.0);
  const double cell_height = std::clamp(480.0 / rows, 3.0, 24.0);
  const double width = kLeft + cell_width * layers + kRight;
  const double height = kTop + cell_height * rows + kBottom;
  double longest = 0;
  for (const LayerPlacement& p : plan.layers) {
    longest = std::max(longest, p.forward_ms + p.backward_ms + p.comm_ms);
  }

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << Number(width, 0) << "\" height=\""
      << Number(height, 0) << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << kLeft << "\" y=\"20\" font-size=\"14\">" << XmlEscape(plan.model)
      << ": global batch " << plan.global_batch << ", " << plan.num_devices
      << " devices, amplification limit "
      << (plan.amplification_limit > 0 ? Number(plan.amplification_limit) : "none") << "</text>\n";
  svg << "<text x=\"" << kLeft << "\" y=\"38\">burst-parallel " << Number(plan.totals.iteration_ms)
      << " ms/iteration (amplification " << Number(plan.totals.amplification) << "); data-parallel "
      << Number(plan.data_parallel.iteration_ms) << " ms (amplification "
      << Number(plan.data_parallel.amplification) << "). Darker: longer layer.</text>\n";
  // Grid background: where no layer runs.
  svg << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << Number(cell_width * layers)
      << "\" height=\"" << Number(cell_height * rows) << "\" fill=\"#f7f7f7\" stroke=\"#ccc\"/>\n";
  for (int l = 0; l < layers; ++l) {
    const LayerPlacement& p = plan.layers[static_cast<size_t>(l)];
    const double ms = p.forward_ms + p.backward_ms + p.comm_ms;
    const std::string fill = Shade(longest > 0 ? 0.15 + 0.85 * ms / longest : 1.0);
    svg << "<g><title>" << XmlEscape(p.layer) << ": " << p.devices.size() << " devices, "
        << Number(ms, 3) << " ms (fw " << Number(p.forward_ms, 3) << ", bw "
        << Number(p.backward_ms, 3) << ", comm " << Number(p.comm_ms, 3) << ")</title>";
    std::vector<int> used(static_cast<size_t>(rows), 0);
    for (int rank : p.devices) {
      if (rank >= 0 && rank < devices) ++used[static_cast<size_t>(rank / band)];
    }
    for (int r = 0; r < rows; ++r) {
      if (used[static_cast<size_t>(r)] == 0) continue;
      const double x = kLeft + cell_width * l, y = kTop + cell_height * r;
      svg << "<rect x=\"" << Number(x) << "\" y=\"" << Number(y) << "\" width=\""
          << Number(cell_width) << "\" height=\"" << Number(cell_height) << "\" fill=\"" << fill
          << "\"";
      if (band > 1) {
        svg << " fill-opacity=\""
            << Number(static_cast<double>(used[static_cast<size_t>(r)]) / band) << "\"";
      }
      svg << "/>";
    }
    svg << "</g>\n";
  }
  // Axes.
  svg << "<text x=\"" << kLeft << "\" y=\"" << Number(height - 18)
      << "\">layers in topological order (" << layers << ") &#8594;</text>\n";
  svg << "<text transform=\"translate(20," << Number(kTop + cell_height * rows)
      << ") rotate(-90)\">devices" << (band > 1 ? " (" + std::to_string(band) + " per row)" : "")
      << " &#8594;</text>\n";
  svg << "<text x=\"" << kLeft - 6 << "\" y=\"" << Number(kTop + 10)
      << "\" text-anchor=\"end\">0</text>\n";
  svg << "<text x=\"" << kLeft - 6 << "\" y=\"" << Number(kTop + cell_height * rows)
      << "\" text-anchor=\"end\">" << devices - 1 << "</text>\n";
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace deepool::planner

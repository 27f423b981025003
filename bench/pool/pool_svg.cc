// Grouped bar charts (pool_svg.h).
#include "bench/pool/pool_svg.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace deepool::bench {
namespace {

const char* kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948"};

// "%.1f" of each value between the pieces of `parts` (one more piece than values).
std::string Format(const std::vector<std::string>& parts, const std::vector<double>& values) {
  std::string out = parts.front();
  for (size_t i = 0; i < values.size(); ++i) {
    char number[32];
    std::snprintf(number, sizeof number, "%.1f", values[i]);
    out += number + parts[i + 1];
  }
  return out;
}

}  // namespace

std::string BarChartSvg(const std::string& title, const std::vector<std::string>& series,
                        const std::vector<BarGroup>& groups, bool normalise) {
  const double bar = 14, gap = 18, left = 50, top = 40, height = 220;
  const double group_width = bar * static_cast<double>(series.size()) + gap;
  const double width = std::max(left + group_width * static_cast<double>(groups.size()) + 20,
                                left + 150 * static_cast<double>(series.size()));
  double top_value = 0;
  for (const BarGroup& group : groups) {
    for (double value : group.values) top_value = std::max(top_value, value);
  }
  std::string svg = Format({"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", "\" height=\"",
                            "\" font-family=\"sans-serif\" font-size=\"11\">\n"},
                           {width, top + height + 110});
  svg += "<text x=\"10\" y=\"20\" font-size=\"14\">" + title + "</text>\n";
  svg += Format({"<line x1=\"", "\" y1=\"", "\" x2=\"", "\" y2=\"", "\" stroke=\"black\"/>\n"},
                {left, top + height, width - 10, top + height});
  for (size_t g = 0; g < groups.size(); ++g) {
    const BarGroup& group = groups[g];
    double scale = top_value;
    if (normalise) {
      scale = 0;
      for (double value : group.values) scale = std::max(scale, value);
    }
    const double x0 = left + group_width * static_cast<double>(g);
    for (size_t s = 0; s < group.values.size() && s < series.size(); ++s) {
      const double value = group.values[s];
      if (value < 0 || scale <= 0) continue;
      const double h = height * value / scale;
      svg += Format({"<rect x=\"", "\" y=\"", "\" width=\"", "\" height=\"", "\" "},
                    {x0 + bar * static_cast<double>(s), top + height - h, bar - 1, h});
      svg += std::string("fill=\"") + kColours[s % 6] + "\"/>\n";
    }
    svg += Format({"<text x=\"", "\" y=\"", "\" transform=\"rotate(40 ", " ", ")\">"},
                  {x0, top + height + 14, x0, top + height + 14}) +
           group.label + "</text>\n";
  }
  for (size_t s = 0; s < series.size(); ++s) {
    const double x = left + 150 * static_cast<double>(s);
    svg += Format({"<rect x=\"", "\" y=\"", "\" width=\"10\" height=\"10\" "},
                  {x, top + height + 90}) +
           "fill=\"" + kColours[s % 6] + "\"/>" +
           Format({"<text x=\"", "\" y=\"", "\">"}, {x + 14, top + height + 99}) + series[s] +
           "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace deepool::bench

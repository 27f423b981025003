// Grouped bar charts for the pool bench's results (one SVG per metric).
// Threading: pure functions.
#pragma once

#include <string>
#include <vector>

namespace deepool::bench {

struct BarGroup {
  std::string label;           // e.g. "512 dev, load 0.8"
  std::vector<double> values;  // one per series; < 0: not run
};

// A chart of `groups`, each with one bar per series, normalised per group to its largest value
// when `normalise` (bars then read as fractions of the group's best/worst).
std::string BarChartSvg(const std::string& title, const std::vector<std::string>& series,
                        const std::vector<BarGroup>& groups, bool normalise);

}  // namespace deepool::bench

// Small helpers the control-plane benchmarks share: percentiles of latencies, elapsed
// milliseconds, and the machine's load average for the header line of a run.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <vector>

namespace deepool::bench {

// The value at fraction p (0..1) of the sorted values, nearest rank; 0 for none.
inline double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t i = static_cast<size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(i, values.size() - 1)];
}

inline double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// /proc/loadavg's 1, 5 and 15 minute averages; -1 in the first when it cannot be read.
inline std::array<double, 3> LoadAverage() {
  std::array<double, 3> load{-1, 0, 0};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    std::fclose(f);
  }
  return load;
}

}  // namespace deepool::bench

// Prometheus' text exposition format (version 0.0.4), written by hand: families with their
// # HELP and # TYPE lines, samples with escaped label values, and a latency histogram whose
// buckets are cumulative as the format wants. What a daemon serves at /metrics.
// Threading: MetricsText is a single-threaded builder; Histogram and CounterMap are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deepool {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// The Content-Type of a /metrics answer in this format.
inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

class MetricsText {
 public:
  // Starts a family. type: "counter", "gauge" or "histogram". Names follow Prometheus'
  // conventions: base units in the name (_seconds, _bytes), counters end in _total.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // One sample of the current family (name may add a suffix such as _bucket, _sum, _count).
  void Sample(std::string_view name, const MetricLabels& labels, double value);

  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// Latency buckets in seconds, from 1 ms to 60 s (planning and RPCs).
const std::vector<double>& DefaultLatencyBuckets();

// A histogram of observations (seconds), per label set.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds = DefaultLatencyBuckets());
  void Observe(const MetricLabels& labels, double value);
  // Writes the family: _bucket (cumulative, with le="+Inf"), _sum and _count per label set.
  void Write(MetricsText* out, std::string_view name, std::string_view help) const;

 private:
  struct Series {
    std::vector<uint64_t> counts;  // per bucket, not cumulative; the last is +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<MetricLabels, Series> series_;
};

// Counters per label set.
class CounterMap {
 public:
  void Add(const MetricLabels& labels, double amount = 1);
  // Writes the family (name must end in _total); label sets never seen are not written.
  void Write(MetricsText* out, std::string_view name, std::string_view help) const;

 private:
  mutable std::mutex mu_;
  std::map<MetricLabels, double> values_;
};

}  // namespace deepool

#include "common/metrics_text.h"

#include <cmath>
#include <cstdio>

namespace deepool {
namespace {

// Label values escape backslash, double quote and line feed; HELP text backslash and line feed.
std::string Escape(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char text[32];
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(text, sizeof(text), "%.0f", value);
  } else {
    std::snprintf(text, sizeof(text), "%.9g", value);
  }
  return text;
}

}  // namespace

void MetricsText::Family(std::string_view name, std::string_view type, std::string_view help) {
  text_ += "# HELP ";
  text_ += name;
  text_ += ' ';
  text_ += Escape(help, /*quote=*/false);
  text_ += "\n# TYPE ";
  text_ += name;
  text_ += ' ';
  text_ += type;
  text_ += '\n';
}

void MetricsText::Sample(std::string_view name, const MetricLabels& labels, double value) {
  text_ += name;
  if (!labels.empty()) {
    text_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) text_ += ',';
      text_ += labels[i].first + "=\"" + Escape(labels[i].second, /*quote=*/true) + '"';
    }
    text_ += '}';
  }
  text_ += ' ';
  text_ += Number(value);
  text_ += '\n';
}

const std::vector<double>& DefaultLatencyBuckets() {
  static const std::vector<double> buckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                              0.5,   1,      2.5,   5,    10,    30,   60};
  return buckets;
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {}

void Histogram::Observe(const MetricLabels& labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& series = series_[labels];
  if (series.counts.empty()) series.counts.assign(bounds_.size() + 1, 0);
  size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  ++series.counts[bucket];
  series.sum += value;
  ++series.count;
}

void Histogram::Write(MetricsText* out, std::string_view name, std::string_view help) const {
  out->Family(name, "histogram", help);
  const std::string base(name);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [labels, series] : series_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      cumulative += series.counts[i];
      MetricLabels with_le = labels;
      with_le.emplace_back("le", i < bounds_.size() ? Number(bounds_[i]) : "+Inf");
      out->Sample(base + "_bucket", with_le, static_cast<double>(cumulative));
    }
    out->Sample(base + "_sum", labels, series.sum);
    out->Sample(base + "_count", labels, static_cast<double>(series.count));
  }
}

void CounterMap::Add(const MetricLabels& labels, double amount) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[labels] += amount;
}

void CounterMap::Write(MetricsText* out, std::string_view name, std::string_view help) const {
  out->Family(name, "counter", help);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [labels, value] : values_) out->Sample(name, labels, value);
}

}  // namespace deepool

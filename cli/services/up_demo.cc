#include "cli/services/up_demo.h"

#include <algorithm>
#include <cstdio>

#include "cli/services/format.h"

namespace deepool::cli {

LocalShape ShapeLocalCluster(int host_cores, int workers, int devices_per_worker) {
  LocalShape shape;
  shape.workers = std::max(1, workers);
  shape.cores_per_worker = std::max(1, host_cores / shape.workers);
  shape.devices_per_worker =
      devices_per_worker > 0 ? devices_per_worker : std::min(2, shape.cores_per_worker);
  shape.oversubscribed = shape.workers * shape.devices_per_worker > std::max(1, host_cores);
  return shape;
}

void IterationMeter::Observe(TimePoint at, int64_t done, int64_t iterations, bool running,
                             double last_iteration_ms) {
  if (last_iteration_ms > 0) last_iteration_ms_ = last_iteration_ms;
  if (!running || done < 1 || (iterations > 0 && done >= iterations)) return;
  if (!first_) {
    first_.emplace(at, done);
  } else if (done > first_->second) {
    last_.emplace(at, done);
  }
}

std::optional<double> IterationMeter::IterationMs() const {
  if (first_ && last_ && last_->second - first_->second >= kMinSpan) {
    const double ms =
        std::chrono::duration<double, std::milli>(last_->first - first_->first).count();
    return ms / static_cast<double>(last_->second - first_->second);
  }
  if (last_iteration_ms_ > 0) return last_iteration_ms_;
  return std::nullopt;
}

std::string IterationMeter::Basis() const {
  if (first_ && last_ && last_->second - first_->second >= kMinSpan) {
    return "mean of " + std::to_string(last_->second - first_->second) + " iterations";
  }
  return "rank 0's last iteration";
}

std::string MeasuredLine(const IterationMeter& meter, double predicted_ms) {
  const std::optional<double> measured = meter.IterationMs();
  if (!measured) return "  measured iteration: none (the job reported no iteration)\n";
  char ratio[64] = "";
  if (predicted_ms > 0) {
    std::snprintf(ratio, sizeof(ratio), ", %.2fx the prediction", *measured / predicted_ms);
  }
  return "  measured iteration " + FormatDuration(*measured) + " (" + meter.Basis() + ")" + ratio +
         "\n";
}

}  // namespace deepool::cli

#include "worker/runtime/layers/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace deepool::worker {

double LrFactor(const protocol::LrScheduleSpec& schedule, double lr, int64_t iteration,
                int64_t total_iterations) {
  const int64_t warmup = schedule.warmup_iterations;
  if (iteration < warmup) {
    return static_cast<double>(iteration) / static_cast<double>(warmup);
  }
  if (schedule.kind == "constant") return 1.0;
  const double decay_iterations =
      static_cast<double>(std::max<int64_t>(1, total_iterations - warmup));
  const double progress = std::min(1.0, static_cast<double>(iteration - warmup) / decay_iterations);
  const double min_ratio = schedule.min_lr / lr;
  if (schedule.kind == "linear") return min_ratio + (1.0 - min_ratio) * (1.0 - progress);
  return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

double ScheduledLr(const protocol::OptimizerSpec& spec, int64_t iteration,
                   int64_t total_iterations) {
  return spec.lr * LrFactor(spec.schedule, spec.lr, iteration, total_iterations);
}

}  // namespace deepool::worker

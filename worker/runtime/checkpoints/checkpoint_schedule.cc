#include "worker/runtime/checkpoints/checkpoint_schedule.h"

#include <algorithm>
#include <cmath>

namespace deepool::worker {

CheckpointSchedule::CheckpointSchedule(int64_t every_iterations, double every_seconds,
                                       int64_t first, int64_t total, double now_s)
    : every_iterations_(every_iterations),
      every_seconds_(every_seconds),
      total_(total),
      last_done_(first),
      last_s_(now_s) {
  if (every_seconds_ > 0) next_agree_ = first + kFirstAgreementAfter;
}

CheckpointSchedule::Step CheckpointSchedule::After(int64_t done) const {
  if (done >= total_) return Step::kWrite;
  if (every_iterations_ > 0 && done % every_iterations_ == 0) return Step::kWrite;
  if (next_agree_ >= 0 && done >= next_agree_) return Step::kAgree;
  return Step::kNothing;
}

bool CheckpointSchedule::Agreed(int64_t done, double mean_elapsed_s) {
  if (mean_elapsed_s >= every_seconds_) return true;
  PlanNextAgreement(done, mean_elapsed_s);
  return false;
}

void CheckpointSchedule::Written(int64_t done, double now_s) {
  const int64_t interval = done - last_done_;
  last_done_ = done;
  last_s_ = now_s;
  // The ranks meet again after as many iterations as this interval took: only iteration counts
  // enter the plan, which every rank has alike (their clocks differ).
  if (every_seconds_ > 0) next_agree_ = done + std::max<int64_t>(interval, 1);
}

void CheckpointSchedule::PlanNextAgreement(int64_t done, double mean_elapsed_s) {
  const int64_t iterations = std::max<int64_t>(1, done - last_done_);
  const double per_iteration = std::max(mean_elapsed_s / static_cast<double>(iterations), 1e-9);
  const double remaining = every_seconds_ - mean_elapsed_s;
  const double more = std::ceil(remaining / per_iteration);
  next_agree_ = done + static_cast<int64_t>(std::clamp(more, 1.0, 1e12));
}

}  // namespace deepool::worker

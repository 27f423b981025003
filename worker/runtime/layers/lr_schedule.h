// The learning rate of an iteration under the optimizer's schedule (protocol::LrScheduleSpec),
// as a PyTorch user writes it with torch.optim.lr_scheduler.LambdaLR (docs/runtime.md,
// "Training recipes"). With W = warmup_iterations, T = the run's iterations, r = min_lr / lr and
// i the 0-based iteration (LambdaLR's step count when scheduler.step() follows optimizer.step()):
//   i < W:      factor = i / W                        (linear warm-up from 0, as transformers')
//   otherwise:  p = min(1, (i - W) / max(1, T - W))
//               constant: 1;  linear: r + (1 - r) (1 - p);  cosine: r + (1 - r) (1 + cos(pi p)) / 2
// and the iteration's lr is lr * factor. The schedule is a function of the iteration alone, so a
// run resumed from a checkpoint (which keeps the iteration) continues it where it stopped.
// Threading: pure functions.
#pragma once

#include <cstdint>

#include "protocol/training_spec.h"

namespace deepool::worker {

// The factor above, for iteration `iteration` of a run of `total_iterations`.
double LrFactor(const protocol::LrScheduleSpec& schedule, double lr, int64_t iteration,
                int64_t total_iterations);

// spec.lr * LrFactor(spec.schedule, spec.lr, iteration, total_iterations).
double ScheduledLr(const protocol::OptimizerSpec& spec, int64_t iteration,
                   int64_t total_iterations);

}  // namespace deepool::worker

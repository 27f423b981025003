// Dynamic loss scaling for fp16 training (docs/runtime.md, "Precision"), as torch.amp's
// GradScaler does it: the loss's gradient is multiplied by `scale` before backward, so that
// small activation gradients do not flush to zero in fp16; the fp32 parameter gradients are
// divided by it before the optimizer step. When any gradient of the step is inf or nan (on any
// rank: the caller agrees on `found_inf` over the world first), the step is skipped and the
// scale halved; after `growth_interval` steps in a row without one, it doubles.
// Threading: a plain value, used by its executor's thread.
#pragma once

#include <cstdint>

namespace deepool::worker {

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16, GradScaler's default
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// What a checkpoint keeps of a scaler (its manifest's "loss_scaling"), so that a resumed fp16
// run goes on with the scale it had.
struct LossScalerState {
  double scale = 0;
  int64_t good_steps = 0;
  int64_t skipped_steps = 0;
  bool operator==(const LossScalerState& o) const {
    return scale == o.scale && good_steps == o.good_steps && skipped_steps == o.skipped_steps;
  }
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {})
      : options_(options), scale_(options.initial_scale) {}

  double scale() const { return scale_; }
  // Steps skipped since the start of the run (or of the checkpoint it resumed from).
  int64_t skipped_steps() const { return skipped_; }
  // After a step's gradients are known (and agreed over the world): true when the optimizer
  // steps (no inf or nan), false when the step is skipped. Updates the scale for the next step.
  bool Update(bool found_inf);
  LossScalerState state() const { return {scale_, good_steps_, skipped_}; }
  // Goes on from a checkpoint's state (its scale above 0).
  void Restore(const LossScalerState& state) {
    scale_ = state.scale;
    good_steps_ = state.good_steps;
    skipped_ = state.skipped_steps;
  }

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t good_steps_ = 0;  // in a row, since the last skip or growth
  int64_t skipped_ = 0;
};

}  // namespace deepool::worker

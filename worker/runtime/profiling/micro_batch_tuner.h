// How many micro-batches a BG job splits its batch into, so that its forward and backward units
// stay under the device gate's bound (DeviceGate::UnitBoundMs): chosen after each iteration from
// the longest such unit it timed.
//
// Over the bound, the count doubles (at most, and at most to the batch); a doubling that did not
// shorten the longest unit by a quarter shows that unit is not bound by the batch (a big layer's
// weight gradient, per-unit overhead), so the count goes back and never grows past it again: the
// FG rank's wait timeout (GateLimits::max_fg_wait_ms) is then what bounds its delay. Far under
// the bound (twice the longest unit under half of it), the count halves, giving the BG job its
// larger, more efficient units back once the FG rank's gaps allow.
//
// Threading: one thread (the BG runner's).
#pragma once

#include <cstdint>

namespace deepool::worker {

class MicroBatchTuner {
 public:
  explicit MicroBatchTuner(int64_t batch_size);

  // After an iteration split into `count` micro-batches whose longest forward or backward unit
  // took `longest_unit_ms`, under the gate's `bound_ms` (0: no bound): the count for the next
  // iteration, in [1, batch_size].
  int64_t Next(int64_t count, double longest_unit_ms, double bound_ms);

  // The count splitting stopped helping at (batch_size until a doubling failed).
  int64_t ceiling() const { return ceiling_; }

 private:
  const int64_t batch_size_;
  int64_t ceiling_;
  int64_t doubled_from_ = 0;  // the count before the last doubling; 0 when the last step was not
  double longest_before_doubling_ms_ = 0;
};

}  // namespace deepool::worker

#include "worker/runtime/profiling/micro_batch_tuner.h"

#include <algorithm>

namespace deepool::worker {

MicroBatchTuner::MicroBatchTuner(int64_t batch_size)
    : batch_size_(std::max<int64_t>(1, batch_size)), ceiling_(batch_size_) {}

int64_t MicroBatchTuner::Next(int64_t count, double longest_unit_ms, double bound_ms) {
  count = std::clamp<int64_t>(count, 1, ceiling_);
  const int64_t doubled_from = doubled_from_;
  doubled_from_ = 0;
  if (!(bound_ms > 0) || !(longest_unit_ms > 0)) return count;
  if (doubled_from > 0 && count > doubled_from &&
      longest_unit_ms > 0.75 * longest_before_doubling_ms_) {
    ceiling_ = doubled_from;  // the units did not shrink with the micro-batch
    return doubled_from;
  }
  if (longest_unit_ms > bound_ms && count < ceiling_) {
    doubled_from_ = count;
    longest_before_doubling_ms_ = longest_unit_ms;
    return std::min(2 * count, ceiling_);
  }
  if (count > 1 && 2 * longest_unit_ms < 0.5 * bound_ms) return count / 2;
  return count;
}

}  // namespace deepool::worker

// The "deepool" policy: FG jobs sized by their speed-up curves, so the pool's devices go where they
// shorten completion time most. Waiting FG jobs, in priority then submission order, each get one
// device of the type where they run fastest on one (while devices are free); then each further
// free device goes to the job whose remaining time (remaining iterations x the iteration time it
// saves) it shortens most, within the job's requested count, its curve, and its amplification
// limit (g x iteration time on g over the time on one). A job without a curve scales perfectly and
// so grows to its request. Placed jobs keep their devices (no moves). BG jobs as fifo: in the idle
// time the FG plans leave.
// Threading: immutable; Decide may run on any thread.
#pragma once

#include "coordinator/policy/policy.h"

namespace deepool::coordinator::policy {

class DeepoolPolicy : public Policy {
 public:
  std::string_view Name() const override { return "deepool"; }
  Decisions Decide(const PolicySnapshot& snapshot) const override;
};

// Whether g devices of `type` stay within the job's amplification limit.
bool WithinAmplification(const PolicyJob& job, const std::string& type, int g);

}  // namespace deepool::coordinator::policy

// The "deepool" policy: FG jobs sized by their speed-up curves, so the pool's devices go where they
// shorten completion time most. Waiting FG jobs, in priority then submission order, each get one
// device of the type where they run fastest on one (while devices are free); then each further
// free device goes to the job whose remaining time (remaining iterations x the iteration time it
// saves) it shortens most, within the job's requested count, its curve, and its amplification
// limit (g x iteration time on g over the time on one). A job without a curve scales perfectly and
// so grows to its request.
// Devices still free after that (every waiting FG job that could use them has been sized) grow
// running FG jobs, so that a job admitted onto few devices of a busy pool does not keep them to
// its end: a placed job that keeps periodic checkpoints (PolicyJob::preemptible) and has held its
// devices for PolicyOptions::min_slice_s is resized to the count, within its request, curve,
// amplification limit and the free devices of its type, where its curve runs fastest, if the time
// that saves (remaining iterations x iteration time saved), less the move's cost (restart_s +
// unsaved_s), is positive and at least PolicyOptions::min_growth_saving_s per added device. Jobs
// gaining most per added device go first. A resize is both a Resize and a
// Preemption (policy.h). Running jobs never shrink. BG jobs as fifo: in the idle time the FG plans
// leave.
// Threading: immutable; Decide may run on any thread.
#pragma once

#include "coordinator/policy/policy.h"

namespace deepool::coordinator::policy {

class DeepoolPolicy : public Policy {
 public:
  explicit DeepoolPolicy(PolicyOptions options = {}) : options_(options) {}
  std::string_view Name() const override { return "deepool"; }
  Decisions Decide(const PolicySnapshot& snapshot) const override;
  bool MovesRunningJobs() const override { return true; }

 private:
  const PolicyOptions options_;
};

// Whether g devices of `type` stay within the job's amplification limit.
bool WithinAmplification(const PolicyJob& job, const std::string& type, int g);
// The same from the job's iteration times on one device and on g.
bool WithinAmplificationOf(const PolicyJob& job, double one_s, int g, double on_g_s);

}  // namespace deepool::coordinator::policy

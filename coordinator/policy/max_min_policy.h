// The "max-min" policy: max-min fairness across users, heterogeneity-aware as Gavel's. A job's
// normalised throughput on a device type is its throughput there (speed-up curve, requested count)
// over its throughput on its fastest type; a user's share is the sum over its placed FG jobs. Each
// round water-fills: the user with the least share (ties: the least attained time, then the
// earliest job) gets its next job placed, among the types with room, on the one where its
// normalised throughput is highest relative to the mean of the round's FG jobs there (so a job
// that runs alike everywhere leaves the fast type to one that gains more; ties: the type it runs
// on, then the most room). A placed job
// holds its devices for at least PolicyOptions::min_slice_s and is never preempted without
// periodic checkpoints (PolicyJob::preemptible); past that, a placed job the allocation no longer
// holds, or holds on another type, is preempted. A user's own running jobs come before its waiting
// ones, so shares change hands between users, not within one. BG jobs as fifo.
// Threading: immutable; Decide may run on any thread.
#pragma once

#include "coordinator/policy/policy.h"

namespace deepool::coordinator::policy {

class MaxMinPolicy : public Policy {
 public:
  explicit MaxMinPolicy(PolicyOptions options) : options_(options) {}
  std::string_view Name() const override { return "max-min"; }
  Decisions Decide(const PolicySnapshot& snapshot) const override;

 private:
  const PolicyOptions options_;
};

}  // namespace deepool::coordinator::policy

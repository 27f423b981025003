// The "fifo" policy: today's admission (coordinator/admission.h's rules, which Admit runs through
// this policy): FG jobs in priority then submission order, each onto its requested count of one
// device type, packed on as few nodes as possible; a FG job that could fit the pool but does not
// fit now blocks the FG jobs behind it; then BG jobs on the idlest devices (none inside a FG rank
// predicted idle less than PolicyOptions::min_bg_idle_fraction). Placed jobs keep their
// devices; it preempts only BG jobs on devices a FG job takes.
// Threading: immutable; Decide may run on any thread.
#pragma once

#include "coordinator/policy/policy.h"
#include "coordinator/policy/pool_state.h"

namespace deepool::coordinator::policy {

class FifoPolicy : public Policy {
 public:
  explicit FifoPolicy(PolicyOptions options = {}) : options_(options) {}
  std::string_view Name() const override { return "fifo"; }
  Decisions Decide(const PolicySnapshot& snapshot) const override;

 private:
  const PolicyOptions options_;
};

// The devices a FG job's next attempt asks for: its request, or the largest group of devices of
// one type that read its protocol when it shrinks to fit and that group is smaller.
int DevicesWanted(const PolicyJob& job, const PoolState& pool);

// BG jobs waiting, in admission order, placed on the idlest devices left, none inside a FG rank
// predicted idle less than options.min_bg_idle_fraction (every policy's).
void PlaceBackgroundJobs(const std::vector<const PolicyJob*>& order, const PolicyOptions& options,
                         PoolState* pool, Decisions* out);

}  // namespace deepool::coordinator::policy

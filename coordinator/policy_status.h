// The scheduling policy's standing as the client API shows it: Job.policy (a job's user share,
// why it waits, who holds the devices it could use, when it is due, its last preemption) and
// ClusterSummary.user_shares, read from Scheduler::LastPolicyView (policy_standing.h computes).
#pragma once

#include "coordinator/job.h"
#include "coordinator/scheduler.h"
#include "deepool/v1/coordinator.pb.h"

namespace deepool::coordinator {

// Fills proto->policy for `job`. The wait is filled only while the job is PENDING and the last
// round with waiting jobs looked at it; the user's share not under fifo, which weighs no users.
void SetPolicyStanding(const Scheduler::PolicyView& view, const JobRecord& job, v1::Job* proto);

// Fills summary->policy and (but under fifo) summary->user_shares.
void SetPolicyShares(const Scheduler::PolicyView& view, v1::ClusterSummary* summary);

v1::PolicyWaitCode WaitCodeToProto(policy::WaitCode code);

}  // namespace deepool::coordinator

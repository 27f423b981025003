// The scheduling policy's part of `deepool status JOB --why` (why.h): the policy, the wait code
// in words, the job's user's share against the others', the FG jobs in its way and when it is
// due (max-min: when the earliest holder's minimum slice ends; fifo: the job it queues behind;
// deepool: a device freed by a job that ends), or for a placed job its user's share, its devices'
// type and the last time the policy moved it. A pure function over Job.policy and
// ClusterSummary.user_shares (what GetJob and ListJobs return).
#pragma once

#include <cstdint>
#include <string>

#include "deepool/v1/coordinator.pb.h"

namespace deepool::cli {

// "" when the coordinator sent no policy standing (one from before it did).
std::string PolicyWhyText(const v1::Job& job, const v1::ClusterSummary& summary, int64_t now_ms);

// "alice 0.50 on 4": a user's share and devices, as the status table and --why show it.
std::string ShareText(const std::string& user, double share, int devices);

}  // namespace deepool::cli

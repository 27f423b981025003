// Where the scheduling policy stands on each job, for people (`deepool status`, `status JOB
// --why`): what the Scheduler keeps of a policy round (PolicyRound, made by SummarizeRound from
// the round's snapshot and decisions), and one job's standing read from it (StandingOf): its
// user's share, why it waits, the FG jobs that hold the devices it could use, and when it is due.
// Pure functions over policy.h's types: no store, clock, lock or proto, so every rule is tested
// with hand-made snapshots and decisions (tests/unit/policy_standing_test.cc).
// Threading: plain values; a PolicyRound is immutable once made and shared between threads.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "coordinator/policy/policy.h"

namespace deepool::coordinator {

// A FG job holding devices after a round.
struct PolicyHolderView {
  std::string job_id;
  std::string user;
  std::string device_type;
  int devices = 0;
  double placed_at_s = 0;
  bool preemptible = false;
};

// What the Scheduler keeps of one round with waiting jobs.
struct PolicyRound {
  std::string policy;  // Policy::Name()
  double now_s = 0;
  std::vector<policy::UserShare> shares;  // by user name
  std::vector<PolicyHolderView> holders;  // placed FG jobs, in the snapshot's order
  std::unordered_map<std::string, policy::WaitCode> waits;
  // Waiting jobs that may use only one device type (PolicyJob::required_device_type).
  std::map<std::string, std::string> required_types;
  // The first FG job in queue order (priority, then submission) that waits for devices: the one
  // that fifo's kQueuedBehind jobs queue behind. "" when none, or when no job queues behind.
  std::string queue_head;
  // Preempted job -> the job it makes way for (Preemption::for_job), this round.
  std::map<std::string, std::string> preempted_for;
};

PolicyRound SummarizeRound(std::string_view policy_name, const policy::PolicySnapshot& snapshot,
                           const policy::Decisions& decisions);

struct WaitStanding {
  policy::WaitCode code = policy::WaitCode::kWaitingForDevices;
  std::string queued_behind;  // kQueuedBehind: PolicyRound::queue_head
  // The FG jobs in its way, on device types it may use: under max-min those of users whose share
  // is above its user's (the ones the policy would take devices from), elsewhere all; earliest
  // slice end (max-min) or placement first; at most kMaxHolders of them.
  std::vector<PolicyHolderView> holders;
  int holders_not_shown = 0;
  // max-min: when the earliest placed of the preemptible holders in its way may be preempted
  // (placed_at_s + min_slice_s); nullopt when none may, or under a policy that never preempts.
  std::optional<double> due_s;
  std::vector<std::string> making_way;  // jobs preempted for it, still stopping
};

struct JobStanding {
  double user_share = 0;
  int user_devices = 0;
  // Set when the round left it waiting, or granted it devices that jobs preempted for it still
  // hold (code kWaitingForDevices, making_way those jobs).
  std::optional<WaitStanding> wait;
};

inline constexpr int kMaxHolders = 4;

// The last time the policy moved a running job off its devices (Scheduler::PreemptLocked): a
// preemption, or a growth ("deepool") carried out through a checkpoint as a preemption is.
struct PreemptionNote {
  std::string policy;
  std::string for_job;  // "" : none in particular
  std::string message;  // the policy's reason
  int64_t time_ms = 0;  // wall clock
  // A growth: from_devices held, grow_to the devices the policy grew it to; both 0 for a
  // preemption.
  int from_devices = 0;
  int grow_to = 0;
};

// "fair_share", "queued_behind", ...: a wait code as metrics label it.
std::string_view WaitCodeName(policy::WaitCode code);

// The standing of `job_id` (submitted by `user`) after `round`. min_slice_s: the max-min policy's
// PolicyOptions::min_slice_s (ignored by the other policies).
JobStanding StandingOf(const PolicyRound& round, double min_slice_s, const std::string& job_id,
                       const std::string& user);

// The share of `user` after `round` (0 and 0 devices for a user the round did not list).
policy::UserShare ShareOf(const PolicyRound& round, const std::string& user);

}  // namespace deepool::coordinator

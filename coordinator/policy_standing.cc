#include "coordinator/policy_standing.h"

#include <algorithm>

#include "coordinator/policy/pool_state.h"

namespace deepool::coordinator {
namespace {

bool MayUse(const std::string& required_type, const PolicyHolderView& holder) {
  return required_type.empty() || required_type == holder.device_type;
}

// The waits whose way is blocked by FG jobs holding devices: those who fit the pool's largest
// group but find too few of its devices free, or whose user has had its share.
bool HeldUp(policy::WaitCode code) {
  return code == policy::WaitCode::kWaitingForDevices || code == policy::WaitCode::kFairShare;
}

}  // namespace

PolicyRound SummarizeRound(std::string_view policy_name, const policy::PolicySnapshot& snapshot,
                           const policy::Decisions& decisions) {
  PolicyRound round;
  round.policy = std::string(policy_name);
  round.now_s = snapshot.now_s;
  round.shares = decisions.shares;
  round.waits.reserve(decisions.waits.size());
  bool queued_behind = false;  // only then is the queue's head asked for
  for (const policy::Wait& wait : decisions.waits) {
    round.waits.emplace(wait.job_id, wait.code);
    queued_behind |= wait.code == policy::WaitCode::kQueuedBehind;
  }
  for (const policy::Preemption& preempted : decisions.preemptions) {
    round.preempted_for[preempted.job_id] = preempted.for_job;
  }
  for (const policy::PolicyJob& job : snapshot.jobs) {
    if (job.placed() && job.role == policy::Role::kFg) {
      round.holders.push_back({job.id, job.user, job.device_type,
                               static_cast<int>(job.devices.size()), job.placed_at_s,
                               job.preemptible});
    }
    if (!job.placed() && !job.required_device_type.empty()) {
      round.required_types[job.id] = job.required_device_type;
    }
  }
  if (!queued_behind) return round;
  for (const policy::PolicyJob* job : policy::AdmissionOrder(snapshot)) {
    if (job->role != policy::Role::kFg || job->placed()) continue;
    auto wait = round.waits.find(job->id);
    if (wait != round.waits.end() && wait->second == policy::WaitCode::kWaitingForDevices) {
      round.queue_head = job->id;
      break;
    }
  }
  return round;
}

policy::UserShare ShareOf(const PolicyRound& round, const std::string& user) {
  for (const policy::UserShare& share : round.shares) {
    if (share.user == user) return share;
  }
  return {user, 0, 0};
}

JobStanding StandingOf(const PolicyRound& round, double min_slice_s, const std::string& job_id,
                       const std::string& user) {
  JobStanding standing;
  const policy::UserShare own = ShareOf(round, user);
  standing.user_share = own.share;
  standing.user_devices = own.devices;
  std::vector<std::string> making_way;
  for (const auto& [preempted, for_job] : round.preempted_for) {
    if (for_job == job_id) making_way.push_back(preempted);
  }
  auto wait = round.waits.find(job_id);
  // A job granted the devices of jobs it preempted waits for them to stop.
  if (wait == round.waits.end() && making_way.empty()) return standing;
  WaitStanding& out = standing.wait.emplace();
  out.making_way = std::move(making_way);
  if (wait == round.waits.end()) return standing;
  out.code = wait->second;
  if (out.code == policy::WaitCode::kQueuedBehind) out.queued_behind = round.queue_head;
  if (!HeldUp(out.code)) return standing;

  const bool max_min = round.policy == "max-min";
  auto required = round.required_types.find(job_id);
  const std::string required_type = required == round.required_types.end() ? "" : required->second;
  std::vector<PolicyHolderView> in_the_way;
  for (const PolicyHolderView& holder : round.holders) {
    if (!MayUse(required_type, holder)) continue;
    // Max-min takes devices only from users above this one's share.
    if (out.code == policy::WaitCode::kFairShare &&
        ShareOf(round, holder.user).share <= own.share) {
      continue;
    }
    in_the_way.push_back(holder);
  }
  // Earliest placement first: under max-min also the earliest end of a minimum slice.
  std::stable_sort(in_the_way.begin(), in_the_way.end(),
                   [](const PolicyHolderView& a, const PolicyHolderView& b) {
                     return a.placed_at_s < b.placed_at_s;
                   });
  if (max_min) {
    for (const PolicyHolderView& holder : in_the_way) {
      if (!holder.preemptible) continue;
      out.due_s = holder.placed_at_s + min_slice_s;
      break;
    }
  }
  const size_t shown = std::min<size_t>(in_the_way.size(), kMaxHolders);
  out.holders_not_shown = static_cast<int>(in_the_way.size() - shown);
  in_the_way.resize(shown);
  out.holders = std::move(in_the_way);
  return standing;
}

std::string_view WaitCodeName(policy::WaitCode code) {
  switch (code) {
    case policy::WaitCode::kQueuedBehind:
      return "queued_behind";
    case policy::WaitCode::kWaitingForDevices:
      return "waiting_for_devices";
    case policy::WaitCode::kNotEnoughDevices:
      return "not_enough_devices";
    case policy::WaitCode::kWorkerProtocol:
      return "worker_protocol";
    case policy::WaitCode::kWaitingForBgSlot:
      return "waiting_for_bg_slot";
    case policy::WaitCode::kWaitingForFgRank:
      return "waiting_for_fg_rank";
    case policy::WaitCode::kFairShare:
      return "fair_share";
  }
  return "unknown";
}

}  // namespace deepool::coordinator

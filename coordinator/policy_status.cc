#include "coordinator/policy_status.h"

#include <cmath>

namespace deepool::coordinator {
namespace {

// fifo does not weigh users: the Scheduler tells it no placed job's user, so its shares would
// count every placed job as the anonymous user's.
bool WeighsUsers(const Scheduler::PolicyView& view) { return view.policy != "fifo"; }

int64_t Millis(double seconds) { return static_cast<int64_t>(std::llround(seconds * 1000)); }

void SetHolder(const PolicyRound& round, double slice_s, const PolicyHolderView& holder,
               v1::PolicyHolder* out) {
  out->set_job_id(holder.job_id);
  out->set_user(holder.user);
  out->set_device_type(holder.device_type);
  out->set_devices(holder.devices);
  out->set_placed_at_ms(Millis(holder.placed_at_s));
  if (round.policy == "max-min") out->set_slice_ends_ms(Millis(holder.placed_at_s + slice_s));
  out->set_preemptible(holder.preemptible);
  out->set_user_share(ShareOf(round, holder.user).share);
}

}  // namespace

v1::PolicyWaitCode WaitCodeToProto(policy::WaitCode code) {
  switch (code) {
    case policy::WaitCode::kQueuedBehind:
      return v1::POLICY_WAIT_CODE_QUEUED_BEHIND;
    case policy::WaitCode::kWaitingForDevices:
      return v1::POLICY_WAIT_CODE_WAITING_FOR_DEVICES;
    case policy::WaitCode::kNotEnoughDevices:
      return v1::POLICY_WAIT_CODE_NOT_ENOUGH_DEVICES;
    case policy::WaitCode::kWorkerProtocol:
      return v1::POLICY_WAIT_CODE_WORKER_PROTOCOL;
    case policy::WaitCode::kWaitingForBgSlot:
      return v1::POLICY_WAIT_CODE_WAITING_FOR_BG_SLOT;
    case policy::WaitCode::kWaitingForFgRank:
      return v1::POLICY_WAIT_CODE_WAITING_FOR_FG_RANK;
    case policy::WaitCode::kFairShare:
      return v1::POLICY_WAIT_CODE_FAIR_SHARE;
  }
  return v1::POLICY_WAIT_CODE_UNSPECIFIED;
}

void SetPolicyStanding(const Scheduler::PolicyView& view, const JobRecord& job, v1::Job* proto) {
  v1::PolicyStanding* out = proto->mutable_policy();
  out->set_policy(view.policy);
  out->set_min_slice_s(view.min_slice_s);
  if (view.preempted) {
    auto note = view.preempted->find(job.id);
    if (note != view.preempted->end()) {
      v1::PolicyPreemption* last = out->mutable_last_preemption();
      last->set_policy(note->second.policy);
      last->set_for_job(note->second.for_job);
      last->set_message(note->second.message);
      last->set_time_ms(note->second.time_ms);
    }
  }
  if (!view.round) return;
  const JobStanding standing = StandingOf(*view.round, view.min_slice_s, job.id, job.owner);
  if (WeighsUsers(view)) {
    out->set_user_share(standing.user_share);
    out->set_user_devices(standing.user_devices);
  }
  if (job.state != JobState::kPending || !standing.wait) return;
  const WaitStanding& wait = *standing.wait;
  v1::PolicyWait* wait_out = out->mutable_wait();
  wait_out->set_code(WaitCodeToProto(wait.code));
  wait_out->set_queued_behind(wait.queued_behind);
  for (const PolicyHolderView& holder : wait.holders) {
    SetHolder(*view.round, view.min_slice_s, holder, wait_out->add_holders());
  }
  wait_out->set_holders_not_shown(wait.holders_not_shown);
  if (wait.due_s) wait_out->set_due_ms(Millis(*wait.due_s));
  for (const std::string& id : wait.making_way) wait_out->add_making_way(id);
}

void SetPolicyShares(const Scheduler::PolicyView& view, v1::ClusterSummary* summary) {
  summary->set_policy(view.policy);
  if (!view.round || !WeighsUsers(view)) return;
  for (const policy::UserShare& share : view.round->shares) {
    v1::UserShare* out = summary->add_user_shares();
    out->set_user(share.user);
    out->set_share(share.share);
    out->set_devices(share.devices);
  }
}

}  // namespace deepool::coordinator

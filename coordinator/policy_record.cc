#include "coordinator/policy_record.h"

namespace deepool::coordinator {

PolicyRecord::PolicyRecord(std::shared_ptr<const policy::Policy> policy,
                           policy::PolicyOptions options)
    : policy_(std::move(policy)), options_(std::move(options)) {}

void PolicyRecord::RecordRound(const Admission& admission, int64_t fg_granted) {
  view_.shares = admission.shares;
  view_.round = admission.round;
  auto& counts = view_.decisions;
  counts[{"grant", "fg"}] += fg_granted;
  counts[{"grant", "bg"}] += static_cast<int64_t>(admission.background.size());
  counts[{"preemption", "fg"}] += static_cast<int64_t>(admission.preempted.size());
  counts[{"preemption", "bg"}] += static_cast<int64_t>(admission.displaced.size());
  if (!admission.round) return;
  for (const auto& [job_id, code] : admission.round->waits) {
    ++counts[{"wait", std::string(WaitCodeName(code))}];
  }
}

void PolicyRecord::RecordPreemption(const FgPreemption& preempted, int64_t now_ms) {
  ++view_.preemptions;
  // Copied on write: views handed out keep the map they were given.
  auto notes = view_.preempted
                   ? std::make_shared<std::map<std::string, PreemptionNote>>(*view_.preempted)
                   : std::make_shared<std::map<std::string, PreemptionNote>>();
  (*notes)[preempted.job_id] = {policy_ ? std::string(policy_->Name()) : "fifo", preempted.for_job,
                                preempted.message, now_ms};
  view_.preempted = std::move(notes);
}

PolicyView PolicyRecord::View() const {
  PolicyView view = view_;
  if (policy_) {
    view.policy = std::string(policy_->Name());
    view.min_slice_s = options_.min_slice_s;
  }
  return view;
}

}  // namespace deepool::coordinator

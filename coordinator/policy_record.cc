#include "coordinator/policy_record.h"

#include <algorithm>

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
  const auto grown = std::count_if(admission.preempted.begin(), admission.preempted.end(),
                                   [](const FgPreemption& moved) { return moved.growth(); });
  counts[{"preemption", "fg"}] += static_cast<int64_t>(admission.preempted.size()) - grown;
  counts[{"resize", "fg"}] += grown;
  counts[{"preemption", "bg"}] += static_cast<int64_t>(admission.displaced.size());
  if (!admission.round) return;
  for (const auto& [job_id, code] : admission.round->waits) {
    ++counts[{"wait", std::string(WaitCodeName(code))}];
  }
}

void PolicyRecord::RecordMove(const FgPreemption& moved, int64_t now_ms,
                              const std::function<bool(const std::string&)>& ended) {
  if (!moved.growth()) ++view_.preemptions;
  // Copied on write: views handed out keep the map they were given.
  auto notes = std::make_shared<std::map<std::string, PreemptionNote>>();
  if (view_.preempted) {
    for (const auto& [job_id, note] : *view_.preempted) {
      if (!ended(job_id)) notes->emplace_hint(notes->end(), job_id, note);
    }
  }
  (*notes)[moved.job_id] = {policy_ ? std::string(policy_->Name()) : "fifo",
                            moved.for_job,
                            moved.message,
                            now_ms,
                            moved.from_devices,
                            moved.grow_to};
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

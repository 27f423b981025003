// PolicyRecord: what the scheduling policy has decided, kept for `deepool status`
// (policy_standing.h), ListJobs and the metrics (coordinator_metrics.h): its last round with
// waiting jobs, each user's share after it, the FG jobs it has moved (preempted or grown) since
// the coordinator started, and every round's decisions counted by kind. A growth ("deepool"'s
// resize, FgPreemption::growth) is carried out through a checkpoint as a preemption is, but it is
// counted as a resize, never as a preemption.
//
// It records; it decides nothing and changes no job. A view handed out shares the round and the
// preemption notes it was given (both are replaced, never changed, by later records).
//
// Threading: not thread-safe; the Scheduler calls it under its mu_.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/admission.h"
#include "coordinator/policy/policy.h"
#include "coordinator/policy_standing.h"

namespace deepool::coordinator {

// What the policy decided last (Scheduler::LastPolicyView).
struct PolicyView {
  // Each user's share after the last round with waiting jobs.
  std::vector<policy::UserShare> shares;
  // FG jobs preempted since the coordinator started (for the metrics); growths are not counted.
  int64_t preemptions = 0;
  // For `deepool status` (policy_standing.h): the policy's name and minimum slice, its last
  // round with waiting jobs (null before one), and each job's last move (preemption or growth)
  // since start.
  std::string policy = "fifo";
  double min_slice_s = 0;
  std::shared_ptr<const PolicyRound> round;
  std::shared_ptr<const std::map<std::string, PreemptionNote>> preempted;
  // Decisions of every round since start, by (kind, code) as deepool_policy_decisions_total
  // labels them: ("grant", "fg"|"bg"), ("preemption", "fg"|"bg"), ("resize", "fg": a running FG
  // job grown), ("wait", WaitCodeName).
  std::map<std::pair<std::string, std::string>, int64_t> decisions;
};

class PolicyRecord {
 public:
  // `policy`: null for fifo; `options`: those it was made with (its minimum slice is shown).
  PolicyRecord(std::shared_ptr<const policy::Policy> policy, policy::PolicyOptions options);

  // A round with waiting jobs. `fg_granted`: the FG grants carried out (a grant of devices a
  // preempted job still holds waits, and is not counted).
  void RecordRound(const Admission& admission, int64_t fg_granted);
  // A running FG job the policy moved, at `now_ms` (wall clock): noted as its last move, and
  // counted in PolicyView::preemptions unless it is a growth. The notes of jobs that `ended`
  // says have ended go (their histories keep the sentence): the notes, copied at each move,
  // stay as many as the moved jobs still live.
  void RecordMove(const FgPreemption& moved, int64_t now_ms,
                  const std::function<bool(const std::string& job_id)>& ended);
  PolicyView View() const;

 private:
  const std::shared_ptr<const policy::Policy> policy_;
  const policy::PolicyOptions options_;
  PolicyView view_;
};

}  // namespace deepool::coordinator

// Domain types of the coordinator: the job record it keeps, its states and their reasons. The
// spec a user submits is jobspec's (jobspec/job_spec.h). Plain values; the proto conversion lives
// in the service adapters (coordinator/convert.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/shared_text.h"
#include "common/status.h"
#include "jobspec/job_spec.h"

namespace deepool::coordinator {

// The spec's types, by the names the coordinator's code has always used for them (the same
// types: jobspec/job_spec.h defines them). Its functions are found by argument-dependent lookup.
using jobspec::JobRole;
using jobspec::JobSpec;

enum class JobState { kPending, kProfiling, kPlanning, kRunning, kSucceeded, kFailed, kCancelled };
const char* StateName(JobState state);  // "PENDING", ...
std::optional<JobState> StateFromName(std::string_view name);
bool IsTerminal(JobState state);

// Why a job is in its state, for programs; the reason's message says it for people. The order
// matches deepool.v1.ReasonCode (proto/deepool/v1/job.proto).
enum class ReasonCode {
  kUnspecified,
  kSubmitted,             // PENDING, not yet looked at
  kQueuedBehind,          // PENDING behind a FG job that waits for devices
  kWaitingForDevices,     // PENDING: enough devices exist, too few are free now
  kNotEnoughDevices,      // PENDING: no device type has enough schedulable devices
  kWaitingForBgSlot,      // PENDING BG job: every device has a BG job or a busy FG rank
  kWaitingForFgRank,      // PENDING BG job: waits to run inside a FG rank not started yet
  kRequeued,              // PENDING again after a failure it may retry
  kDisplaced,             // PENDING BG job: a FG job took its device
  kCoordinatorRestarted,  // PENDING: a phase interrupted by a restart is redone
  kProgress,              // PROFILING, PLANNING, RUNNING, SUCCEEDED: nothing wrong
  kTaskFailed,            // an executor or its worker failed
  kNodeLost,              // a node stopped heartbeating or lost the job's task
  kPlanningFailed,
  kProfilingFailed,
  kCancelled,
  kResized,         // PENDING: stopped at a checkpoint to run on another number of devices
  kEvacuated,       // PENDING: stopped at a checkpoint to leave a node drained with evacuate
  kWorkerProtocol,  // PENDING: too few devices on workers that speak its run spec's protocol
};
const char* ReasonCodeName(ReasonCode code);  // "queued_behind", ...
std::optional<ReasonCode> ReasonCodeFromName(std::string_view name);

// A state's reason: a code and a sentence. A bare message (tools, tests) has no code.
struct Reason {
  Reason(const char* text) : message(text) {}             // NOLINT(google-explicit-constructor)
  Reason(std::string text) : message(std::move(text)) {}  // NOLINT(google-explicit-constructor)
  Reason(ReasonCode reason_code, std::string text) : code(reason_code), message(std::move(text)) {}
  ReasonCode code = ReasonCode::kUnspecified;
  std::string message;
};

// A reason a client gives (cancel, drain): bounded, and no control characters that could paint
// lines on another user's terminal.
Status CheckReason(const std::string& reason);
// A submission's idempotency key: at most 128 printable characters without spaces.
Status CheckRequestId(const std::string& request_id);

struct StateChange {
  JobState state = JobState::kPending;
  std::string reason;
  int64_t time_ms = 0;
  ReasonCode code = ReasonCode::kUnspecified;
};

// One device of a running job, from its rank's last iteration line (see DeviceProgress in
// proto/deepool/v1/job.proto for the meaning of the times).
struct DeviceProgress {
  int rank = 0;
  std::string node_id;
  std::string node_name;
  std::string device;
  int64_t iteration = 0;  // iterations the rank completed
  double fg_busy_ms = 0;
  double bg_busy_ms = 0;
  double idle_ms = 0;
  std::string fg_job_id;
  std::string bg_job_id;
  bool shared_executor = false;
  double bg_samples_per_s = 0;
  int64_t updated_ms = 0;
};

// One evaluation on the job's held-out set: rank 0's "evaluation" line (job.proto's
// Evaluation). top1/top5 are fractions in [0,1]; loss is absent when it was not finite.
struct Evaluation {
  int64_t iteration = 0;  // after this many iterations
  int64_t samples = 0;
  std::optional<double> loss;
  double top1 = 0;
  double top5 = 0;
  int64_t time_ms = 0;  // when the worker read it
};

struct JobProgress {
  // The evaluations kept, by iteration: the newest this many.
  static constexpr size_t kMaxEvaluations = 100;

  int64_t iteration = 0;  // iterations completed
  int64_t iterations = 0;
  std::optional<double> loss;
  double samples_per_s = 0;
  double iteration_ms = 0;
  double busy_ms = 0;
  double idle_ms = 0;
  int64_t updated_ms = 0;
  std::vector<DeviceProgress> devices;  // by rank
  // Set at a dispatch after an earlier attempt: the furthest iteration that attempt completed,
  // until this attempt's first report says where it resumed (a history line with the iterations
  // lost). 0: nothing to report.
  int64_t earlier_reached = 0;
  // At most kMaxEvaluations, by iteration, one per iteration; kept across attempts.
  std::vector<Evaluation> evaluations;
};

struct RankPlacement {
  int rank = 0;
  std::string node_id;
  std::string node_name;
  std::string device;
};

struct JobRecord {
  std::string id;
  int64_t seq = 0;  // submission order
  JobSpec spec;
  JobState state = JobState::kPending;
  std::string reason;
  ReasonCode reason_code = ReasonCode::kUnspecified;
  int64_t submitted_ms = 0;
  int64_t updated_ms = 0;
  int64_t attempt = 0;
  std::vector<StateChange> history;
  JobProgress progress;
  std::vector<RankPlacement> devices;  // the current attempt's placement
  std::vector<std::string> task_ids;   // the current attempt's TRAIN tasks
  std::string device_type;
  // What the current attempt trains at (jobspec::TrainingPrecision on its devices), kept so
  // that a restarted coordinator rebuilds the same run spec.
  planner::Precision precision = planner::Precision::kFp32;
  // The planned graph and the plan (large documents: every copy of the record shares them).
  SharedText graph_json;
  SharedText plan_json;
  double predicted_iteration_ms = 0;
  std::string checkpoint;
  std::string store_address;  // the c10d store's "HOST:PORT" once rank 0 reported it
  std::string request_id;     // the client's idempotency key for the submission ("": none)
  std::string owner;          // who submitted it ("": an open coordinator, no authentication)
  // A resize asked for while RUNNING: the device count for the attempt after its next
  // checkpoint (spec.gpus takes it then). 0: none.
  int resize_to = 0;
  // Set with resize_to by a drain with evacuate: the node it leaves (for the history).
  std::string evacuate_from;
  // Set with resize_to by a policy's growth ("deepool"): the (node id, device) pairs it grows
  // onto, reserved for it until it has stopped at its checkpoint. Stored, so a restarted
  // coordinator keeps the reservation and words the requeue as a growth.
  std::vector<std::pair<std::string, std::string>> grow_onto;
  // A checkpointed BG job whose FG hosts keep ending first: the furthest iteration any of its
  // dispatches reached, and how many dispatches in a row ended with their host without getting
  // past it (it is given up after SchedulerOptions::max_hosted_attempts of those).
  int64_t best_reached = 0;
  int hosted_stalls = 0;
};

// Where the current attempt placed `rank`; nullptr when it has no such rank.
const RankPlacement* FindRank(const JobRecord& job, int rank);

// A job's record as one change left it. Never modified: a change makes a new record, so a reader
// keeps a snapshot without the job table's lock, and a scheduling round reads 10,000 jobs without
// copying one (JobManager::Active).
using JobSnapshot = std::shared_ptr<const JobRecord>;
inline JobSnapshot Snapshot(JobRecord job) {
  return std::make_shared<const JobRecord>(std::move(job));
}
// Records built by hand (tests, tools) as snapshots, in order.
inline std::vector<JobSnapshot> Snapshots(std::vector<JobRecord> jobs) {
  std::vector<JobSnapshot> out;
  out.reserve(jobs.size());
  for (JobRecord& job : jobs) out.push_back(Snapshot(std::move(job)));
  return out;
}

// Jobs by (state, role), every job held counted once (JobManager::Counts).
using JobCounts = std::map<std::pair<JobState, JobRole>, int64_t>;

// A PENDING job as the queue order reads it (QueuePositions in admission.h).
struct QueuedJob {
  std::string id;
  int priority = 0;
  JobRole role = JobRole::kFg;
};

// With include_plan false, graph_json and plan_json are written empty (stores keep those large
// documents apart, so progress updates do not rewrite them).
nlohmann::json JobRecordToJson(const JobRecord& job, bool include_plan = true);
StatusOr<JobRecord> JobRecordFromJson(const nlohmann::json& doc);

// One stored log line of a job.
struct LogRecord {
  int64_t seq = 0;  // per job, from 1, assigned by the store
  int64_t time_ms = 0;
  std::string node_id;
  int rank = -1;
  std::string line;
};

}  // namespace deepool::coordinator

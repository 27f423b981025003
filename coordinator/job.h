// Domain types of the coordinator: the job spec a user submits and the job record it keeps.
// Plain values; the proto conversion lives in the service adapters (coordinator/convert.h).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/shared_text.h"
#include "common/status.h"
#include "planner/gradient_sync.h"
#include "protocol/training_spec.h"

namespace deepool::coordinator {

enum class JobRole { kFg, kBg };
const char* RoleName(JobRole role);  // "fg", "bg"

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
  kWaitingForBgSlot,      // PENDING BG job: every device has a BG job
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
  kResized,    // PENDING: stopped at a checkpoint to run on another number of devices
  kEvacuated,  // PENDING: stopped at a checkpoint to leave a node drained with evacuate
};
const char* ReasonCodeName(ReasonCode code);  // "queued_behind", ...
std::optional<ReasonCode> ReasonCodeFromName(std::string_view name);

// A state's reason: a code and a sentence. A bare message (tools, tests) has no code.
struct Reason {
  Reason(const char* text) : message(text) {}  // NOLINT(google-explicit-constructor)
  Reason(std::string text) : message(std::move(text)) {}  // NOLINT(google-explicit-constructor)
  Reason(ReasonCode reason_code, std::string text)
      : code(reason_code), message(std::move(text)) {}
  ReasonCode code = ReasonCode::kUnspecified;
  std::string message;
};

struct OptimizerSpec {
  std::string name = "sgd";
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
};

struct DataSpec {
  std::string kind = "synthetic";
  int64_t seed = 0;
  std::string path;
};

// The job spec (docs/formats.md, "Job specs"). Defaults are the documented ones.
struct JobSpec {
  std::string name;
  std::string model;  // a zoo name; or
  // An inline graph document (exactly one of the two). Shared by every copy of the spec.
  SharedText graph_json;
  JobRole role = JobRole::kFg;
  int priority = 0;
  int64_t global_batch = 0;
  int gpus = 1;
  double amplification_limit = 2.0;
  int64_t iterations = 0;
  OptimizerSpec optimizer;
  DataSpec data;
  int64_t seed = 0;
  bool requeue_on_failure = false;
  std::string on_node_loss;          // "", "fail", "wait" or "replan" (proto/deepool/v1/job.proto)
  std::string profile = "measured";  // or "analytical"
  std::string batch_norm = "synchronized";  // or "per_device" (proto/deepool/v1/job.proto)
  bool concurrent_branches = false;         // FG: PlanOptions::concurrent_branches
  std::string checkpoint_path;       // the final state_dict export
  // Periodic checkpoints (protocol::PeriodicCheckpoints); none without a directory.
  std::string checkpoint_dir;
  int64_t checkpoint_every_iterations = 0;
  double checkpoint_every_seconds = 0;
  int checkpoint_keep = 2;
  int64_t num_classes = 0;  // 0: the model's default
  int64_t image_size = 0;   // 0: the model's default
  // The executors' gradient bucket cap, which the planner's cost model charges too.
  double gradient_bucket_mb = planner::kDefaultGradientBucketMb;
};

// The bytes a spec holds in memory, for the per-user limit (JobLimits): its inline graph and
// its strings.
int64_t SpecBytes(const JobSpec& spec);
// A digest of the whole spec, its inline graph by its text: a submission repeated under one
// request id is recognised without keeping (or parsing) the first one's graph.
uint64_t SpecFingerprint(const JobSpec& spec);

// Whether a failed attempt goes back to the queue (on_node_loss "wait" or "replan", or
// requeue_on_failure), and whether its next attempt may be planned for fewer devices.
bool RequeuesOnFailure(const JobSpec& spec);
bool ReplansOnNodeLoss(const JobSpec& spec);
// Whether batch norm statistics are summed over each layer's devices (batch_norm
// "synchronized") rather than kept per device ("per_device").
bool SynchronizesBatchNorm(const JobSpec& spec);

// Parses the JSON job spec. Unknown fields and bad values are INVALID_ARGUMENT naming the field.
StatusOr<JobSpec> ParseJobSpecJson(std::string_view text);
StatusOr<JobSpec> JobSpecFromJson(const nlohmann::json& doc);
nlohmann::json JobSpecToJson(const JobSpec& spec);
// Checks ranges and combinations (not whether the model exists). Errors name the field.
Status ValidateJobSpec(const JobSpec& spec);
// A reason a client gives (cancel, drain): bounded, and no control characters that could paint
// lines on another user's terminal.
Status CheckReason(const std::string& reason);
// A submission's idempotency key: at most 128 printable characters without spaces.
Status CheckRequestId(const std::string& request_id);
// The optimizer and data of a job as its run spec carries them (protocol/training_spec.h).
protocol::OptimizerSpec ToRunSpec(const OptimizerSpec& optimizer);
protocol::DataSpec ToRunSpec(const DataSpec& data);

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

struct JobProgress {
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
  // A checkpointed BG job whose FG hosts keep ending first: the furthest iteration any of its
  // dispatches reached, and how many dispatches in a row ended with their host without getting
  // past it (it is given up after SchedulerOptions::max_hosted_attempts of those).
  int64_t best_reached = 0;
  int hosted_stalls = 0;
};

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

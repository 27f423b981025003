#include "coordinator/convert.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "jobspec/job_spec_proto.h"

namespace deepool::coordinator {

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

v1::JobState StateToProto(JobState state) {
  switch (state) {
    case JobState::kPending:
      return v1::JOB_STATE_PENDING;
    case JobState::kProfiling:
      return v1::JOB_STATE_PROFILING;
    case JobState::kPlanning:
      return v1::JOB_STATE_PLANNING;
    case JobState::kRunning:
      return v1::JOB_STATE_RUNNING;
    case JobState::kSucceeded:
      return v1::JOB_STATE_SUCCEEDED;
    case JobState::kFailed:
      return v1::JOB_STATE_FAILED;
    case JobState::kCancelled:
      return v1::JOB_STATE_CANCELLED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

std::optional<JobState> StateFromProto(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_PENDING:
      return JobState::kPending;
    case v1::JOB_STATE_PROFILING:
      return JobState::kProfiling;
    case v1::JOB_STATE_PLANNING:
      return JobState::kPlanning;
    case v1::JOB_STATE_RUNNING:
      return JobState::kRunning;
    case v1::JOB_STATE_SUCCEEDED:
      return JobState::kSucceeded;
    case v1::JOB_STATE_FAILED:
      return JobState::kFailed;
    case v1::JOB_STATE_CANCELLED:
      return JobState::kCancelled;
    default:
      return std::nullopt;
  }
}

v1::ReasonCode ReasonCodeToProto(ReasonCode code) {
  // The two enums list the same codes in the same order (job.h, job.proto).
  static_assert(static_cast<int>(ReasonCode::kCancelled) == v1::REASON_CODE_CANCELLED);
  static_assert(static_cast<int>(ReasonCode::kResized) == v1::REASON_CODE_RESIZED);
  static_assert(static_cast<int>(ReasonCode::kEvacuated) == v1::REASON_CODE_EVACUATED);
  static_assert(static_cast<int>(ReasonCode::kWorkerProtocol) == v1::REASON_CODE_WORKER_PROTOCOL);
  static_assert(v1::ReasonCode_MAX == v1::REASON_CODE_WORKER_PROTOCOL);
  return static_cast<v1::ReasonCode>(static_cast<int>(code));
}

v1::Job JobToProto(const JobRecord& job) {
  v1::Job p;
  p.set_job_id(job.id);
  p.set_owner(job.owner);
  p.set_resize_to(job.resize_to);
  p.set_device_type(job.device_type);
  // The inline graph (up to kMaxGraphJsonBytes per job) is left out, never copied: listing many
  // jobs stays one small message and costs no copy of their graphs.
  JobSpec shown = job.spec;  // shares the graph
  shown.graph_json = SharedText();
  *p.mutable_spec() = jobspec::JobSpecToProto(shown);
  p.set_state(StateToProto(job.state));
  p.set_reason(job.reason);
  p.set_reason_code(ReasonCodeToProto(job.reason_code));
  p.set_submitted_ms(job.submitted_ms);
  p.set_updated_ms(job.updated_ms);
  p.set_attempt(job.attempt);
  for (const StateChange& h : job.history) {
    v1::StateTransition* t = p.add_history();
    t->set_state(StateToProto(h.state));
    t->set_reason(h.reason);
    t->set_time_ms(h.time_ms);
    t->set_code(ReasonCodeToProto(h.code));
  }
  v1::JobProgress* progress = p.mutable_progress();
  progress->set_iteration(job.progress.iteration);
  progress->set_iterations(job.progress.iterations);
  if (job.progress.loss) progress->set_loss(*job.progress.loss);
  progress->set_samples_per_s(job.progress.samples_per_s);
  progress->set_iteration_ms(job.progress.iteration_ms);
  progress->set_busy_ms(job.progress.busy_ms);
  progress->set_idle_ms(job.progress.idle_ms);
  progress->set_updated_ms(job.progress.updated_ms);
  for (const DeviceProgress& d : job.progress.devices) {
    v1::DeviceProgress* row = progress->add_devices();
    row->set_rank(d.rank);
    row->set_node_id(d.node_id);
    row->set_node_name(d.node_name);
    row->set_device(d.device);
    row->set_iteration(d.iteration);
    row->set_fg_busy_ms(d.fg_busy_ms);
    row->set_bg_busy_ms(d.bg_busy_ms);
    row->set_idle_ms(d.idle_ms);
    row->set_fg_job_id(d.fg_job_id);
    row->set_bg_job_id(d.bg_job_id);
    row->set_shared_executor(d.shared_executor);
    row->set_bg_samples_per_s(d.bg_samples_per_s);
    row->set_updated_ms(d.updated_ms);
  }
  for (const Evaluation& e : job.progress.evaluations) {
    v1::Evaluation* row = progress->add_evaluations();
    row->set_iteration(e.iteration);
    row->set_samples(e.samples);
    if (e.loss) row->set_loss(*e.loss);
    row->set_top1(e.top1);
    row->set_top5(e.top5);
    row->set_time_ms(e.time_ms);
  }
  for (const RankPlacement& d : job.devices) {
    v1::DeviceAssignment* a = p.add_devices();
    a->set_rank(d.rank);
    a->set_node_id(d.node_id);
    a->set_node_name(d.node_name);
    a->set_device(d.device);
  }
  // A finished job's plan is no longer in memory (GetJobPlan reads it from the store); it had
  // one if it was ever dispatched.
  p.set_has_plan(!job.plan_json.empty() ||
                 (IsTerminal(job.state) &&
                  std::any_of(job.history.begin(), job.history.end(),
                              [](const StateChange& c) { return c.state == JobState::kRunning; })));
  p.set_predicted_iteration_ms(job.predicted_iteration_ms);
  p.set_checkpoint(job.checkpoint);
  return p;
}

std::vector<DeviceInfo> DevicesFromProto(
    const google::protobuf::RepeatedPtrField<v1::Device>& devices) {
  std::vector<DeviceInfo> out;
  for (const v1::Device& d : devices) out.push_back({d.device(), d.type(), d.memory_bytes()});
  return out;
}

v1::Node NodeToProto(const NodeRecord& node,
                     const std::map<std::pair<std::string, std::string>, DeviceUse>& uses,
                     const std::vector<std::string>& task_ids) {
  v1::Node p;
  p.set_node_id(node.id);
  p.set_name(node.name);
  p.set_address(node.address);
  switch (node.state) {
    case NodeState::kUp:
      p.set_state(v1::NODE_STATE_UP);
      break;
    case NodeState::kDraining:
      p.set_state(v1::NODE_STATE_DRAINING);
      break;
    case NodeState::kDown:
      p.set_state(v1::NODE_STATE_DOWN);
      break;
  }
  p.set_registered_ms(node.registered_ms);
  p.set_last_heartbeat_ms(node.last_heartbeat_ms);
  p.set_protocol_version(node.protocol.newest);
  for (const DeviceInfo& d : node.devices) {
    v1::Device* device = p.add_devices();
    device->set_device(d.device);
    device->set_type(d.type);
    device->set_memory_bytes(d.memory_bytes);
    v1::DeviceUse* use = p.add_device_uses();
    use->set_device(d.device);
    auto it = uses.find({node.id, d.device});
    const DeviceUse now = it == uses.end() ? DeviceUse{} : it->second;
    use->set_fg_job_id(now.fg_job);
    use->set_bg_job_id(now.bg_job);
    use->set_predicted_idle_fraction(now.idle_fraction);
  }
  for (const std::string& id : task_ids) p.add_task_ids(id);
  return p;
}

v1::ClusterSummary ClusterSummaryToProto(const ClusterSummary& s) {
  v1::ClusterSummary p;
  p.set_fg_jobs_running(s.fg_jobs_running);
  p.set_bg_jobs_running(s.bg_jobs_running);
  p.set_fg_samples_per_s(s.fg_samples_per_s);
  p.set_bg_samples_per_s(s.bg_samples_per_s);
  p.set_total_samples_per_s(s.total_samples_per_s);
  p.set_fg_iteration_ms(s.fg_iteration_ms);
  p.set_devices(s.devices);
  p.set_devices_busy(s.devices_busy);
  p.set_devices_idle(s.devices_idle);
  p.set_devices_fg(s.devices_fg);
  p.set_devices_bg(s.devices_bg);
  p.set_devices_shared(s.devices_shared);
  p.set_fg_busy_ms(s.fg_busy_ms);
  p.set_bg_busy_ms(s.bg_busy_ms);
  p.set_idle_ms(s.idle_ms);
  return p;
}

namespace {
// Page tokens name the seq the next page starts below, behind a prefix so that a token from
// elsewhere (or a job id) is refused rather than misread.
constexpr std::string_view kPageTokenPrefix = "before-seq-";
// States a ListJobs request may name, repeats included.
constexpr int kMaxListedStates = 32;
}  // namespace

StatusOr<JobQuery> JobQueryFromRequest(const v1::ListJobsRequest& request) {
  JobQuery query;
  // Every listed job is matched against the list under the job table's lock: a list of millions
  // (a request may be 64 MiB) would hold heartbeats and reports up for minutes.
  if (request.states_size() > kMaxListedStates) {
    return InvalidArgumentError("states: at most " + std::to_string(kMaxListedStates) +
                                " (there are fewer states than that)");
  }
  for (int s : request.states()) {
    std::optional<JobState> state = StateFromProto(static_cast<v1::JobState>(s));
    if (!state) return InvalidArgumentError("states: unknown state " + std::to_string(s));
    if (std::find(query.states.begin(), query.states.end(), *state) == query.states.end()) {
      query.states.push_back(*state);
    }
  }
  if (request.limit() < 0) return InvalidArgumentError("limit: must be >= 0");
  query.limit = request.limit() == 0 ? kMaxJobsPerPage : std::min(request.limit(), kMaxJobsPerPage);
  const std::string& token = request.page_token();
  if (!token.empty()) {
    const std::string_view digits =
        std::string_view(token).substr(std::min(token.size(), kPageTokenPrefix.size()));
    int64_t seq = 0;
    const bool parsed =
        token.rfind(kPageTokenPrefix, 0) == 0 && !digits.empty() && digits.size() <= 18 &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (parsed) seq = std::stoll(std::string(digits));
    if (!parsed || seq <= 0) {
      return InvalidArgumentError(
          "page_token: not a token this coordinator wrote (send back next_page_token as it "
          "came)");
    }
    query.before_seq = seq;
  }
  return query;
}

std::string NextPageToken(const JobPage& page) {
  if (page.next_before_seq <= 0) return "";
  return std::string(kPageTokenPrefix) + std::to_string(page.next_before_seq);
}

}  // namespace deepool::coordinator

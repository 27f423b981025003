#include "coordinator/convert.h"

#include <google/protobuf/unknown_field_set.h>

#include <algorithm>
#include <vector>

#include "coordinator/job_spec_json.h"

namespace deepool::coordinator {

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

namespace {

// Fields a newer (or hostile) client set that this coordinator does not know would be dropped
// without a word, and could pad a message: they are refused, naming the field number.
Status CheckNoUnknownFields(const google::protobuf::Message& message, const std::string& path) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = reflection->GetUnknownFields(message);
  if (!unknown.empty()) {
    return InvalidArgumentError("unknown field " + path + "#" +
                                std::to_string(unknown.field(0).number()) +
                                " (a newer client than this coordinator?)");
  }
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        RETURN_IF_ERROR(CheckNoUnknownFields(reflection->GetRepeatedMessage(message, field, i),
                                             path + field->name() + "."));
      }
    } else {
      RETURN_IF_ERROR(
          CheckNoUnknownFields(reflection->GetMessage(message, field), path + field->name() + "."));
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<JobSpec> JobSpecFromProto(const v1::JobSpec& p) {
  RETURN_IF_ERROR(CheckNoUnknownFields(p, ""));
  RETURN_IF_ERROR(CheckStringsAreUtf8(p, ""));
  JobSpec spec;
  spec.name = p.name();
  spec.model = p.model();
  spec.graph_json = p.graph_json();
  switch (p.role()) {
    case v1::JOB_ROLE_UNSPECIFIED:  // not given
    case v1::JOB_ROLE_FG:
      spec.role = JobRole::kFg;
      break;
    case v1::JOB_ROLE_BG:
      spec.role = JobRole::kBg;
      break;
    default:
      return InvalidArgumentError("role: unknown role " + std::to_string(p.role()) +
                                  "; must be JOB_ROLE_FG or JOB_ROLE_BG");
  }
  if (p.has_priority()) spec.priority = p.priority();
  if (!p.has_global_batch()) return InvalidArgumentError("global_batch: is required");
  spec.global_batch = p.global_batch();
  if (p.has_gpus()) spec.gpus = p.gpus();
  if (p.has_amplification_limit()) spec.amplification_limit = p.amplification_limit();
  if (!p.has_iterations()) return InvalidArgumentError("iterations: is required");
  spec.iterations = p.iterations();
  if (p.has_optimizer()) {
    const v1::OptimizerSpec& o = p.optimizer();
    if (!o.name().empty()) spec.optimizer.name = o.name();
    if (spec.optimizer.name == "adam") spec.optimizer.momentum = 0;
    if (o.has_lr()) spec.optimizer.lr = o.lr();
    if (o.has_momentum()) spec.optimizer.momentum = o.momentum();
    if (o.has_weight_decay()) spec.optimizer.weight_decay = o.weight_decay();
    if (o.has_eps()) spec.optimizer.eps = o.eps();
    if (o.betas_size() != 0) {
      if (o.betas_size() != 2) return InvalidArgumentError("optimizer.betas: must be two numbers");
      spec.optimizer.betas = {o.betas(0), o.betas(1)};
    }
  }
  if (p.has_data()) {
    if (!p.data().kind().empty()) spec.data.kind = p.data().kind();
    if (p.data().has_seed()) spec.data.seed = p.data().seed();
    spec.data.path = p.data().path();
  }
  if (p.has_seed()) spec.seed = p.seed();
  if (p.has_requeue_on_failure()) spec.requeue_on_failure = p.requeue_on_failure();
  spec.on_node_loss = p.on_node_loss();
  if (!p.profile().empty()) spec.profile = p.profile();
  if (!p.batch_norm().empty()) spec.batch_norm = p.batch_norm();
  if (p.has_concurrent_branches()) spec.concurrent_branches = p.concurrent_branches();
  spec.checkpoint_path = p.checkpoint_path();
  spec.checkpoint_dir = p.checkpoint_dir();
  if (p.has_checkpoint_every_iterations()) {
    spec.checkpoint_every_iterations = p.checkpoint_every_iterations();
  }
  if (p.has_checkpoint_keep()) spec.checkpoint_keep = p.checkpoint_keep();
  if (p.has_checkpoint_every_seconds())
    spec.checkpoint_every_seconds = p.checkpoint_every_seconds();
  if (p.has_num_classes()) spec.num_classes = p.num_classes();
  if (p.has_image_size()) spec.image_size = p.image_size();
  if (p.has_gradient_bucket_mb()) spec.gradient_bucket_mb = p.gradient_bucket_mb();
  if (spec.name.empty()) spec.name = spec.model.empty() ? "job" : spec.model;
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  return spec;
}

v1::JobSpec JobSpecToProto(const JobSpec& spec) {
  v1::JobSpec p;
  p.set_name(spec.name);
  p.set_model(spec.model);
  p.set_graph_json(spec.graph_json);
  p.set_role(spec.role == JobRole::kBg ? v1::JOB_ROLE_BG : v1::JOB_ROLE_FG);
  p.set_priority(spec.priority);
  p.set_global_batch(spec.global_batch);
  p.set_gpus(spec.gpus);
  p.set_amplification_limit(spec.amplification_limit);
  p.set_iterations(spec.iterations);
  v1::OptimizerSpec* o = p.mutable_optimizer();
  o->set_name(spec.optimizer.name);
  o->set_lr(spec.optimizer.lr);
  o->set_momentum(spec.optimizer.momentum);
  o->set_weight_decay(spec.optimizer.weight_decay);
  o->add_betas(spec.optimizer.betas[0]);
  o->add_betas(spec.optimizer.betas[1]);
  o->set_eps(spec.optimizer.eps);
  p.mutable_data()->set_kind(spec.data.kind);
  p.mutable_data()->set_seed(spec.data.seed);
  p.mutable_data()->set_path(spec.data.path);
  p.set_seed(spec.seed);
  p.set_requeue_on_failure(spec.requeue_on_failure);
  p.set_on_node_loss(spec.on_node_loss);
  p.set_profile(spec.profile);
  p.set_batch_norm(spec.batch_norm);
  p.set_concurrent_branches(spec.concurrent_branches);
  p.set_checkpoint_path(spec.checkpoint_path);
  if (!spec.checkpoint_dir.empty()) {
    p.set_checkpoint_dir(spec.checkpoint_dir);
    p.set_checkpoint_every_iterations(spec.checkpoint_every_iterations);
    p.set_checkpoint_keep(spec.checkpoint_keep);
    if (spec.checkpoint_every_seconds > 0) {
      p.set_checkpoint_every_seconds(spec.checkpoint_every_seconds);
    }
  }
  if (spec.num_classes > 0) p.set_num_classes(spec.num_classes);
  if (spec.image_size > 0) p.set_image_size(spec.image_size);
  p.set_gradient_bucket_mb(spec.gradient_bucket_mb);
  return p;
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
  static_assert(v1::ReasonCode_MAX == v1::REASON_CODE_EVACUATED);
  return static_cast<v1::ReasonCode>(static_cast<int>(code));
}

v1::Job JobToProto(const JobRecord& job) {
  v1::Job p;
  p.set_job_id(job.id);
  p.set_owner(job.owner);
  p.set_resize_to(job.resize_to);
  // The inline graph (up to kMaxGraphJsonBytes per job) is left out, never copied: listing many
  // jobs stays one small message and costs no copy of their graphs.
  JobSpec shown = job.spec;  // shares the graph
  shown.graph_json = SharedText();
  *p.mutable_spec() = JobSpecToProto(shown);
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

}  // namespace deepool::coordinator

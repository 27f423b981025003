#include "coordinator/job.h"

#include <algorithm>
#include <cmath>

#include "common/content_digest.h"
#include "common/json_fields.h"
#include "common/limits.h"
#include "common/utf8.h"
#include "coordinator/convert.h"
#include "coordinator/job_spec_json.h"

namespace deepool::coordinator {
namespace {

using nlohmann::json;

constexpr std::array<const char*, 7> kStateNames = {"PENDING",   "PROFILING", "PLANNING", "RUNNING",
                                                    "SUCCEEDED", "FAILED",    "CANCELLED"};

constexpr std::array<const char*, 18> kReasonCodeNames = {
    "unspecified",
    "submitted",
    "queued_behind",
    "waiting_for_devices",
    "not_enough_devices",
    "waiting_for_bg_slot",
    "waiting_for_fg_rank",
    "requeued",
    "displaced",
    "coordinator_restarted",
    "progress",
    "task_failed",
    "node_lost",
    "planning_failed",
    "profiling_failed",
    "cancelled",
    "resized",
    "evacuated",
};
static_assert(static_cast<size_t>(ReasonCode::kEvacuated) + 1 == kReasonCodeNames.size());

Status FieldError(const std::string& field, const std::string& what) {
  return InvalidArgumentError(field + ": " + what);
}

}  // namespace

const char* RoleName(JobRole role) { return role == JobRole::kBg ? "bg" : "fg"; }

const char* StateName(JobState state) { return kStateNames[static_cast<size_t>(state)]; }

std::optional<JobState> StateFromName(std::string_view name) {
  for (size_t i = 0; i < kStateNames.size(); ++i) {
    if (name == kStateNames[i]) return static_cast<JobState>(i);
  }
  return std::nullopt;
}

const char* ReasonCodeName(ReasonCode code) {
  return kReasonCodeNames[static_cast<size_t>(code)];
}

std::optional<ReasonCode> ReasonCodeFromName(std::string_view name) {
  for (size_t i = 0; i < kReasonCodeNames.size(); ++i) {
    if (name == kReasonCodeNames[i]) return static_cast<ReasonCode>(i);
  }
  return std::nullopt;
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

StatusOr<JobSpec> ParseJobSpecJson(std::string_view text) {
  ASSIGN_OR_RETURN(const v1::JobSpec proto, ParseJobSpecProto(text));
  return JobSpecFromProto(proto);
}

StatusOr<JobSpec> JobSpecFromJson(const json& doc) {
  // One reader for both forms: the JSON becomes the API message, and the message gets the one
  // set of defaults and the one validation.
  ASSIGN_OR_RETURN(const v1::JobSpec proto, JobSpecProtoFromJson(doc));
  return JobSpecFromProto(proto);
}

namespace {

// Upper bounds far above any real job, so a typo or a hostile spec fails here, not as a huge
// allocation on a worker.
constexpr int64_t kMaxGlobalBatch = 1 << 20;
constexpr int64_t kMaxIterations = 1'000'000'000;
constexpr int64_t kMaxNumClasses = 1'000'000;
constexpr int64_t kMaxImageSize = 4096;

// Text a client sets that others see in tables and logs: no character that could move a
// terminal's cursor or start an escape sequence.
bool HasControlCharacters(const std::string& text) {
  return std::any_of(text.begin(), text.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
}

Status CheckPath(const char* field, const std::string& path) {
  if (path.size() > kMaxPathBytes) {
    return FieldError(field, "must be at most " + std::to_string(kMaxPathBytes) + " bytes");
  }
  if (HasControlCharacters(path)) return FieldError(field, "has control characters");
  return Status::Ok();
}

}  // namespace

Status CheckReason(const std::string& reason) {
  if (reason.size() > kMaxReasonBytes) {
    return FieldError("reason", "must be at most " + std::to_string(kMaxReasonBytes) + " bytes");
  }
  if (HasControlCharacters(reason)) return FieldError("reason", "has control characters");
  if (!IsValidUtf8(reason)) return FieldError("reason", "is not valid UTF-8");
  return Status::Ok();
}

Status CheckRequestId(const std::string& request_id) {
  if (request_id.size() > 128) return FieldError("request_id", "must be at most 128 characters");
  if (HasControlCharacters(request_id) || request_id.find(' ') != std::string::npos) {
    return FieldError("request_id", "has spaces or control characters");
  }
  if (!IsValidUtf8(request_id)) return FieldError("request_id", "is not valid UTF-8");
  return Status::Ok();
}

int64_t SpecBytes(const JobSpec& spec) {
  return static_cast<int64_t>(sizeof(JobSpec) + spec.graph_json.size() + spec.name.size() +
                              spec.model.size() + spec.data.path.size() +
                              spec.checkpoint_path.size() + spec.checkpoint_dir.size());
}

uint64_t SpecFingerprint(const JobSpec& spec) {
  JobSpec rest = spec;
  rest.graph_json = SharedText();
  const std::string fields = JobSpecToJson(rest).dump();
  ContentDigest digest;
  digest.Update(fields.data(), fields.size());
  digest.Update("\0graph\0", 7);
  digest.Update(spec.graph_json.str().data(), spec.graph_json.size());
  return digest.Finish();
}

bool RequeuesOnFailure(const JobSpec& spec) {
  return spec.requeue_on_failure || spec.on_node_loss == "wait" || spec.on_node_loss == "replan";
}

bool ReplansOnNodeLoss(const JobSpec& spec) { return spec.on_node_loss == "replan"; }

bool SynchronizesBatchNorm(const JobSpec& spec) { return spec.batch_norm != "per_device"; }

Status ValidateJobSpec(const JobSpec& spec) {
  if (spec.name.size() > 128) return FieldError("name", "must be at most 128 characters");
  if (HasControlCharacters(spec.name)) return FieldError("name", "has control characters");
  if (spec.model.empty() == spec.graph_json.empty()) {
    return FieldError("model", "give exactly one of \"model\" (a zoo name) or \"graph\"");
  }
  if (spec.graph_json.size() > kMaxGraphJsonBytes) {
    return FieldError("graph", "is " + std::to_string(spec.graph_json.size()) +
                                   " bytes; at most " + std::to_string(kMaxGraphJsonBytes) +
                                   " are accepted");
  }
  RETURN_IF_ERROR(CheckPath("checkpoint.path", spec.checkpoint_path));
  RETURN_IF_ERROR(CheckPath("checkpoint.dir", spec.checkpoint_dir));
  if (spec.checkpoint_dir.empty() &&
      (spec.checkpoint_every_iterations != 0 || spec.checkpoint_every_seconds != 0 ||
       spec.checkpoint_keep != 2)) {
    return FieldError("checkpoint", "every_iterations, every_seconds and keep need checkpoint.dir");
  }
  if (!(spec.checkpoint_every_seconds >= 0 && spec.checkpoint_every_seconds <= 1e7)) {
    return FieldError("checkpoint.every_seconds", "must be in [0, 1e7]");
  }
  if (spec.checkpoint_every_iterations < 0) {
    return FieldError("checkpoint.every_iterations", "must be >= 0");
  }
  if (spec.checkpoint_keep < 1 || spec.checkpoint_keep > 1000) {
    return FieldError("checkpoint.keep", "must be in [1, 1000]");
  }
  RETURN_IF_ERROR(CheckPath("data.path", spec.data.path));
  if (spec.priority < -1000 || spec.priority > 1000) {
    return FieldError("priority", "must be in [-1000, 1000]");
  }
  if (spec.global_batch < 1 || spec.global_batch > kMaxGlobalBatch) {
    return FieldError("global_batch", "must be in [1, " + std::to_string(kMaxGlobalBatch) + "]");
  }
  if (spec.gpus < 1 || spec.gpus > 4096) return FieldError("gpus", "must be in [1, 4096]");
  if (spec.gpus > spec.global_batch) {
    return FieldError("gpus",
                      "must be <= global_batch (" + std::to_string(spec.global_batch) + ")");
  }
  if (spec.on_node_loss != "" && spec.on_node_loss != "fail" && spec.on_node_loss != "wait" &&
      spec.on_node_loss != "replan") {
    return FieldError("on_node_loss", "must be fail, wait or replan");
  }
  if (spec.on_node_loss == "fail" && spec.requeue_on_failure) {
    return FieldError("on_node_loss", "is fail but requeue_on_failure is true");
  }
  if (spec.concurrent_branches && spec.role == JobRole::kBg) {
    return FieldError("concurrent_branches",
                      "is for FG jobs (a BG job runs data parallel on one device)");
  }
  if (spec.on_node_loss == "replan" && spec.role == JobRole::kBg) {
    return FieldError("on_node_loss", "replan is for FG jobs (a BG job runs on one device)");
  }
  if (spec.role == JobRole::kBg && spec.gpus != 1) {
    return FieldError("gpus", "a bg job runs on exactly 1 device");
  }
  if (!std::isfinite(spec.amplification_limit) ||
      (spec.amplification_limit != 0 && spec.amplification_limit < 1)) {
    return FieldError("amplification_limit", "must be 0 (unconstrained) or >= 1");
  }
  if (spec.iterations < 1 || spec.iterations > kMaxIterations) {
    return FieldError("iterations", "must be in [1, " + std::to_string(kMaxIterations) + "]");
  }
  const OptimizerSpec& opt = spec.optimizer;
  if (opt.name != "sgd" && opt.name != "adam") {
    return FieldError("optimizer.name", "must be \"sgd\" or \"adam\", got \"" + opt.name + "\"");
  }
  if (!(opt.lr > 0) || !std::isfinite(opt.lr)) return FieldError("optimizer.lr", "must be > 0");
  if (!(opt.momentum >= 0 && opt.momentum < 1)) {
    return FieldError("optimizer.momentum", "must be in [0, 1)");
  }
  if (!(opt.weight_decay >= 0) || !std::isfinite(opt.weight_decay)) {
    return FieldError("optimizer.weight_decay", "must be >= 0");
  }
  for (double b : opt.betas) {
    if (!(b >= 0 && b < 1)) return FieldError("optimizer.betas", "each must be in [0, 1)");
  }
  if (!(opt.eps > 0)) return FieldError("optimizer.eps", "must be > 0");
  if (spec.data.kind != "synthetic" && spec.data.kind != "cifar10") {
    return FieldError("data.kind",
                      "must be \"synthetic\" or \"cifar10\", got \"" + spec.data.kind + "\"");
  }
  if (spec.data.kind == "cifar10" && spec.data.path.empty()) {
    return FieldError("data.path", "is required for cifar10");
  }
  if (spec.profile != "measured" && spec.profile != "analytical") {
    return FieldError("profile", "must be \"measured\" or \"analytical\"");
  }
  if (spec.batch_norm != "synchronized" && spec.batch_norm != "per_device") {
    return FieldError("batch_norm", "must be \"synchronized\" or \"per_device\"");
  }
  if (spec.num_classes < 0 || spec.num_classes > kMaxNumClasses) {
    return FieldError("num_classes", "must be in [1, " + std::to_string(kMaxNumClasses) + "]");
  }
  if (spec.image_size < 0 || spec.image_size > kMaxImageSize) {
    return FieldError("image_size", "must be in [1, " + std::to_string(kMaxImageSize) + "]");
  }
  if (!(spec.gradient_bucket_mb > 0 && spec.gradient_bucket_mb <= planner::kMaxGradientBucketMb)) {
    return FieldError("gradient_bucket_mb",
                      "must be > 0 and at most " +
                          std::to_string(static_cast<int>(planner::kMaxGradientBucketMb)) + " MiB");
  }
  return Status::Ok();
}

protocol::OptimizerSpec ToRunSpec(const OptimizerSpec& opt) {
  protocol::OptimizerSpec spec;
  spec.name = opt.name;
  spec.lr = opt.lr;
  spec.momentum = opt.momentum;
  spec.weight_decay = opt.weight_decay;
  spec.betas = opt.betas;
  spec.eps = opt.eps;
  return spec;
}

protocol::DataSpec ToRunSpec(const DataSpec& data) {
  protocol::DataSpec spec;
  spec.kind = data.kind;
  spec.seed = static_cast<uint64_t>(data.seed);  // unsigned in the run spec
  spec.path = data.path;
  return spec;
}

json JobSpecToJson(const JobSpec& spec) {
  json doc = {{"name", spec.name},
              {"role", RoleName(spec.role)},
              {"priority", spec.priority},
              {"global_batch", spec.global_batch},
              {"gpus", spec.gpus},
              {"amplification_limit", spec.amplification_limit},
              {"iterations", spec.iterations},
              {"optimizer",
               {{"name", spec.optimizer.name},
                {"lr", spec.optimizer.lr},
                {"momentum", spec.optimizer.momentum},
                {"weight_decay", spec.optimizer.weight_decay},
                {"betas", {spec.optimizer.betas[0], spec.optimizer.betas[1]}},
                {"eps", spec.optimizer.eps}}},
              {"data", {{"kind", spec.data.kind}, {"seed", spec.data.seed}}},
              {"seed", spec.seed},
              {"requeue_on_failure", spec.requeue_on_failure},
              {"profile", spec.profile},
              {"batch_norm", spec.batch_norm},
              {"concurrent_branches", spec.concurrent_branches},
              {"gradient_bucket_mb", spec.gradient_bucket_mb}};
  if (!spec.data.path.empty()) doc["data"]["path"] = spec.data.path;
  if (!spec.model.empty()) doc["model"] = spec.model;
  if (!spec.graph_json.empty()) {
    StatusOr<json> graph = ParseJson(spec.graph_json, "graph");
    doc["graph"] = graph.ok() ? std::move(*graph) : json(spec.graph_json);
  }
  if (!spec.on_node_loss.empty()) doc["on_node_loss"] = spec.on_node_loss;
  if (!spec.checkpoint_path.empty()) doc["checkpoint"]["path"] = spec.checkpoint_path;
  if (!spec.checkpoint_dir.empty()) {
    doc["checkpoint"]["dir"] = spec.checkpoint_dir;
    doc["checkpoint"]["every_iterations"] = spec.checkpoint_every_iterations;
    doc["checkpoint"]["keep"] = spec.checkpoint_keep;
    if (spec.checkpoint_every_seconds > 0) {
      doc["checkpoint"]["every_seconds"] = spec.checkpoint_every_seconds;
    }
  }
  if (spec.num_classes > 0) doc["num_classes"] = spec.num_classes;
  if (spec.image_size > 0) doc["image_size"] = spec.image_size;
  return doc;
}

json JobRecordToJson(const JobRecord& job, bool include_plan) {
  json history = json::array();
  for (const StateChange& h : job.history) {
    history.push_back({{"state", StateName(h.state)},
                       {"reason", h.reason},
                       {"code", ReasonCodeName(h.code)},
                       {"time_ms", h.time_ms}});
  }
  json devices = json::array();
  for (const RankPlacement& d : job.devices) {
    devices.push_back({{"rank", d.rank},
                       {"node_id", d.node_id},
                       {"node_name", d.node_name},
                       {"device", d.device}});
  }
  const JobProgress& p = job.progress;
  json progress = {{"iteration", p.iteration},
                   {"iterations", p.iterations},
                   {"samples_per_s", p.samples_per_s},
                   {"iteration_ms", p.iteration_ms},
                   {"busy_ms", p.busy_ms},
                   {"idle_ms", p.idle_ms},
                   {"updated_ms", p.updated_ms}};
  progress["loss"] = p.loss ? json(*p.loss) : json(nullptr);
  json device_rows = json::array();
  for (const DeviceProgress& d : p.devices) {
    device_rows.push_back({{"rank", d.rank},
                           {"node_id", d.node_id},
                           {"node_name", d.node_name},
                           {"device", d.device},
                           {"iteration", d.iteration},
                           {"fg_busy_ms", d.fg_busy_ms},
                           {"bg_busy_ms", d.bg_busy_ms},
                           {"idle_ms", d.idle_ms},
                           {"fg_job_id", d.fg_job_id},
                           {"bg_job_id", d.bg_job_id},
                           {"shared_executor", d.shared_executor},
                           {"bg_samples_per_s", d.bg_samples_per_s},
                           {"updated_ms", d.updated_ms}});
  }
  progress["devices"] = device_rows;
  progress["earlier_reached"] = p.earlier_reached;
  return {{"id", job.id},
          {"seq", job.seq},
          {"spec", JobSpecToJson(job.spec)},
          {"state", StateName(job.state)},
          {"reason", job.reason},
          {"reason_code", ReasonCodeName(job.reason_code)},
          {"submitted_ms", job.submitted_ms},
          {"updated_ms", job.updated_ms},
          {"attempt", job.attempt},
          {"history", history},
          {"progress", progress},
          {"devices", devices},
          {"task_ids", job.task_ids},
          {"device_type", job.device_type},
          {"graph_json", include_plan ? job.graph_json.str() : std::string()},
          {"plan_json", include_plan ? job.plan_json.str() : std::string()},
          {"predicted_iteration_ms", job.predicted_iteration_ms},
          {"checkpoint", job.checkpoint},
          {"store_address", job.store_address},
          {"request_id", job.request_id},
          {"owner", job.owner},
          {"resize_to", job.resize_to},
          {"evacuate_from", job.evacuate_from},
          {"best_reached", job.best_reached},
          {"hosted_stalls", job.hosted_stalls}};
}

StatusOr<JobRecord> JobRecordFromJson(const json& doc) {
  try {
    JobRecord job;
    job.id = doc.at("id").get<std::string>();
    job.seq = doc.at("seq").get<int64_t>();
    ASSIGN_OR_RETURN(job.spec, JobSpecFromJson(doc.at("spec")));
    auto state = StateFromName(doc.at("state").get<std::string>());
    if (!state) return DataLossError("job " + job.id + ": unknown state");
    job.state = *state;
    job.reason = doc.at("reason").get<std::string>();
    // Records stored before reason codes have none: unspecified.
    job.reason_code = ReasonCodeFromName(doc.value("reason_code", "unspecified"))
                          .value_or(ReasonCode::kUnspecified);
    job.submitted_ms = doc.at("submitted_ms").get<int64_t>();
    job.updated_ms = doc.at("updated_ms").get<int64_t>();
    job.attempt = doc.at("attempt").get<int64_t>();
    for (const json& h : doc.at("history")) {
      auto s = StateFromName(h.at("state").get<std::string>());
      if (!s) return DataLossError("job " + job.id + ": unknown state in history");
      job.history.push_back(
          {*s, h.at("reason").get<std::string>(), h.at("time_ms").get<int64_t>(),
           ReasonCodeFromName(h.value("code", "unspecified")).value_or(ReasonCode::kUnspecified)});
    }
    const json& p = doc.at("progress");
    job.progress.iteration = p.at("iteration").get<int64_t>();
    job.progress.iterations = p.at("iterations").get<int64_t>();
    if (!p.at("loss").is_null()) job.progress.loss = p.at("loss").get<double>();
    job.progress.samples_per_s = p.at("samples_per_s").get<double>();
    job.progress.iteration_ms = p.at("iteration_ms").get<double>();
    job.progress.busy_ms = p.at("busy_ms").get<double>();
    job.progress.idle_ms = p.at("idle_ms").get<double>();
    job.progress.updated_ms = p.at("updated_ms").get<int64_t>();
    job.progress.earlier_reached = p.value("earlier_reached", int64_t{0});
    // Records written before per-device progress existed have no "devices".
    for (const json& d : p.value("devices", json::array())) {
      DeviceProgress row;
      row.rank = d.at("rank").get<int>();
      row.node_id = d.at("node_id").get<std::string>();
      row.node_name = d.at("node_name").get<std::string>();
      row.device = d.at("device").get<std::string>();
      row.iteration = d.at("iteration").get<int64_t>();
      row.fg_busy_ms = d.at("fg_busy_ms").get<double>();
      row.bg_busy_ms = d.at("bg_busy_ms").get<double>();
      row.idle_ms = d.at("idle_ms").get<double>();
      row.fg_job_id = d.at("fg_job_id").get<std::string>();
      row.bg_job_id = d.at("bg_job_id").get<std::string>();
      row.shared_executor = d.at("shared_executor").get<bool>();
      row.bg_samples_per_s = d.at("bg_samples_per_s").get<double>();
      row.updated_ms = d.at("updated_ms").get<int64_t>();
      job.progress.devices.push_back(std::move(row));
    }
    for (const json& d : doc.at("devices")) {
      job.devices.push_back({d.at("rank").get<int>(), d.at("node_id").get<std::string>(),
                             d.at("node_name").get<std::string>(),
                             d.at("device").get<std::string>()});
    }
    job.task_ids = doc.at("task_ids").get<std::vector<std::string>>();
    job.device_type = doc.at("device_type").get<std::string>();
    job.graph_json = doc.at("graph_json").get<std::string>();
    job.plan_json = doc.at("plan_json").get<std::string>();
    job.predicted_iteration_ms = doc.at("predicted_iteration_ms").get<double>();
    job.checkpoint = doc.at("checkpoint").get<std::string>();
    job.store_address = doc.value("store_address", std::string());
    job.request_id = doc.value("request_id", std::string());
    job.owner = doc.value("owner", std::string());
    job.resize_to = doc.value("resize_to", 0);
    job.evacuate_from = doc.value("evacuate_from", std::string());
    job.best_reached = doc.value("best_reached", int64_t{0});
    job.hosted_stalls = doc.value("hosted_stalls", 0);
    return job;
  } catch (const json::exception& e) {
    return DataLossError(std::string("stored job record is malformed: ") + e.what());
  }
}

}  // namespace deepool::coordinator

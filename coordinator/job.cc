#include "coordinator/job.h"

#include <array>

#include "common/limits.h"
#include "common/utf8.h"
#include "jobspec/job_spec_json.h"

namespace deepool::coordinator {
namespace {

using nlohmann::json;

constexpr std::array<const char*, 7> kStateNames = {"PENDING",   "PROFILING", "PLANNING", "RUNNING",
                                                    "SUCCEEDED", "FAILED",    "CANCELLED"};

constexpr std::array<const char*, 19> kReasonCodeNames = {
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
    "worker_protocol",
};
static_assert(static_cast<size_t>(ReasonCode::kWorkerProtocol) + 1 == kReasonCodeNames.size());

Status FieldError(const std::string& field, const std::string& what) {
  return InvalidArgumentError(field + ": " + what);
}

}  // namespace

const char* StateName(JobState state) { return kStateNames[static_cast<size_t>(state)]; }

std::optional<JobState> StateFromName(std::string_view name) {
  for (size_t i = 0; i < kStateNames.size(); ++i) {
    if (name == kStateNames[i]) return static_cast<JobState>(i);
  }
  return std::nullopt;
}

const char* ReasonCodeName(ReasonCode code) { return kReasonCodeNames[static_cast<size_t>(code)]; }

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

const RankPlacement* FindRank(const JobRecord& job, int rank) {
  for (const RankPlacement& p : job.devices) {
    if (p.rank == rank) return &p;
  }
  return nullptr;
}

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
  json evaluations = json::array();
  for (const Evaluation& e : p.evaluations) {
    evaluations.push_back({{"iteration", e.iteration},
                           {"samples", e.samples},
                           {"loss", e.loss ? json(*e.loss) : json(nullptr)},
                           {"top1", e.top1},
                           {"top5", e.top5},
                           {"time_ms", e.time_ms}});
  }
  progress["evaluations"] = evaluations;
  json doc = {{"id", job.id},
              {"seq", job.seq},
              {"spec", jobspec::JobSpecToJson(job.spec)},
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
              {"grow_onto", job.grow_onto},
              {"best_reached", job.best_reached},
              {"hosted_stalls", job.hosted_stalls}};
  if (job.precision != planner::Precision::kFp32) {
    doc["precision"] = planner::PrecisionName(job.precision);
  }
  return doc;
}

StatusOr<JobRecord> JobRecordFromJson(const json& doc) {
  try {
    JobRecord job;
    job.id = doc.at("id").get<std::string>();
    job.seq = doc.at("seq").get<int64_t>();
    ASSIGN_OR_RETURN(job.spec, jobspec::JobSpecFromJson(doc.at("spec")));
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
    // Records written before evaluations existed have no "evaluations".
    for (const json& e : p.value("evaluations", json::array())) {
      Evaluation evaluation;
      evaluation.iteration = e.at("iteration").get<int64_t>();
      evaluation.samples = e.at("samples").get<int64_t>();
      if (!e.at("loss").is_null()) evaluation.loss = e.at("loss").get<double>();
      evaluation.top1 = e.at("top1").get<double>();
      evaluation.top5 = e.at("top5").get<double>();
      evaluation.time_ms = e.at("time_ms").get<int64_t>();
      job.progress.evaluations.push_back(evaluation);
    }
    for (const json& d : doc.at("devices")) {
      job.devices.push_back({d.at("rank").get<int>(), d.at("node_id").get<std::string>(),
                             d.at("node_name").get<std::string>(),
                             d.at("device").get<std::string>()});
    }
    job.task_ids = doc.at("task_ids").get<std::vector<std::string>>();
    job.device_type = doc.at("device_type").get<std::string>();
    if (doc.contains("precision")) {  // absent: fp32 (and records from before precisions)
      ASSIGN_OR_RETURN(job.precision,
                       planner::ParsePrecision(doc.at("precision").get<std::string>()));
    }
    job.graph_json = doc.at("graph_json").get<std::string>();
    job.plan_json = doc.at("plan_json").get<std::string>();
    job.predicted_iteration_ms = doc.at("predicted_iteration_ms").get<double>();
    job.checkpoint = doc.at("checkpoint").get<std::string>();
    job.store_address = doc.value("store_address", std::string());
    job.request_id = doc.value("request_id", std::string());
    job.owner = doc.value("owner", std::string());
    job.resize_to = doc.value("resize_to", 0);
    job.evacuate_from = doc.value("evacuate_from", std::string());
    if (doc.contains("grow_onto")) {  // absent in records from before growth reservations
      job.grow_onto = doc.at("grow_onto").get<std::vector<std::pair<std::string, std::string>>>();
    }
    job.best_reached = doc.value("best_reached", int64_t{0});
    job.hosted_stalls = doc.value("hosted_stalls", 0);
    return job;
  } catch (const json::exception& e) {
    return DataLossError(std::string("stored job record is malformed: ") + e.what());
  }
}

}  // namespace deepool::coordinator

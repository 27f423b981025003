#include "simulator/workload_file.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "common/json_fields.h"

namespace deepool::simulator {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

ordered_json OptionsToJson(const WorkloadOptions& options) {
  ordered_json out;
  out["seed"] = options.seed;
  out["jobs"] = options.jobs;
  out["jobs_per_hour"] = options.jobs_per_hour;
  out["load"] = options.load;
  out["devices"] = options.devices;
  ordered_json models = ordered_json::array();
  for (const ModelShare& share : options.models) {
    models.push_back(
        {{"model", share.model}, {"weight", share.weight}, {"global_batch", share.global_batch}});
  }
  out["models"] = std::move(models);
  ordered_json gpus = ordered_json::array();
  for (const GpuShare& share : options.gpus) {
    gpus.push_back({{"gpus", share.gpus}, {"weight", share.weight}});
  }
  out["gpus"] = std::move(gpus);
  out["bg_fraction"] = options.bg_fraction;
  out["users"] = options.users;
  out["user_skew"] = options.user_skew;
  out["device_types"] = options.device_types;
  out["constrained_fraction"] = options.constrained_fraction;
  out["reference_device"] = options.reference_device;
  out["durations"] = DurationDistributionName(options.durations);
  out["pareto_alpha"] = options.pareto_alpha;
  out["pareto_min_minutes"] = options.pareto_min_minutes;
  out["pareto_max_minutes"] = options.pareto_max_minutes;
  out["priority_fraction"] = options.priority_fraction;
  out["amplification_limit"] = options.amplification_limit;
  return out;
}

ordered_json JobToJson(const WorkloadJob& job) {
  ordered_json out;
  out["id"] = job.id;
  out["arrival_s"] = job.arrival_s;
  out["user"] = job.user;
  out["role"] = WorkloadRoleName(job.role);
  out["model"] = job.model;
  out["global_batch"] = job.global_batch;
  out["gpus"] = job.gpus;
  out["priority"] = job.priority;
  out["amplification_limit"] = job.amplification_limit;
  if (job.iterations > 0) out["iterations"] = job.iterations;
  if (job.duration_s > 0) out["duration_s"] = job.duration_s;
  if (!job.device_type.empty()) out["device_type"] = job.device_type;
  return out;
}

StatusOr<std::vector<ModelShare>> ReadModels(const json& doc, const std::string& path) {
  ASSIGN_OR_RETURN(const json* array, ReadRequiredArray(doc, "models", path));
  std::vector<ModelShare> models;
  for (size_t i = 0; i < array->size(); ++i) {
    const json& entry = (*array)[i];
    const std::string where = path + "models[" + std::to_string(i) + "].";
    if (!entry.is_object()) return InvalidArgumentError("field " + where + " must be an object");
    RETURN_IF_ERROR(CheckKnownFields(entry, {"model", "weight", "global_batch"}, where));
    ModelShare share;
    ASSIGN_OR_RETURN(share.model, ReadRequiredField<std::string>(entry, "model", where));
    ASSIGN_OR_RETURN(share.weight, ReadRequiredField<double>(entry, "weight", where));
    ASSIGN_OR_RETURN(share.global_batch, ReadRequiredField<int64_t>(entry, "global_batch", where));
    models.push_back(std::move(share));
  }
  return models;
}

StatusOr<std::vector<GpuShare>> ReadGpus(const json& doc, const std::string& path) {
  ASSIGN_OR_RETURN(const json* array, ReadRequiredArray(doc, "gpus", path));
  std::vector<GpuShare> gpus;
  for (size_t i = 0; i < array->size(); ++i) {
    const json& entry = (*array)[i];
    const std::string where = path + "gpus[" + std::to_string(i) + "].";
    if (!entry.is_object()) return InvalidArgumentError("field " + where + " must be an object");
    RETURN_IF_ERROR(CheckKnownFields(entry, {"gpus", "weight"}, where));
    GpuShare share;
    ASSIGN_OR_RETURN(share.gpus, ReadRequiredField<int>(entry, "gpus", where));
    ASSIGN_OR_RETURN(share.weight, ReadRequiredField<double>(entry, "weight", where));
    gpus.push_back(share);
  }
  return gpus;
}

// Every field is required: the header says exactly how the trace was drawn, whatever the
// defaults are when it is read.
StatusOr<WorkloadOptions> ReadOptions(const json& doc) {
  const std::string path = "generator.";
  if (!doc.is_object()) return InvalidArgumentError("field generator must be an object");
  RETURN_IF_ERROR(
      CheckKnownFields(doc,
                       {"seed", "jobs", "jobs_per_hour", "load", "devices", "models", "gpus",
                        "bg_fraction", "users", "user_skew", "device_types", "constrained_fraction",
                        "reference_device", "durations", "pareto_alpha", "pareto_min_minutes",
                        "pareto_max_minutes", "priority_fraction", "amplification_limit"},
                       path));
  WorkloadOptions options;
  ASSIGN_OR_RETURN(options.seed, ReadRequiredField<uint64_t>(doc, "seed", path));
  ASSIGN_OR_RETURN(options.jobs, ReadRequiredField<int64_t>(doc, "jobs", path));
  ASSIGN_OR_RETURN(options.jobs_per_hour, ReadRequiredField<double>(doc, "jobs_per_hour", path));
  ASSIGN_OR_RETURN(options.load, ReadRequiredField<double>(doc, "load", path));
  ASSIGN_OR_RETURN(options.devices, ReadRequiredField<int>(doc, "devices", path));
  ASSIGN_OR_RETURN(options.models, ReadModels(doc, path));
  ASSIGN_OR_RETURN(options.gpus, ReadGpus(doc, path));
  ASSIGN_OR_RETURN(options.bg_fraction, ReadRequiredField<double>(doc, "bg_fraction", path));
  ASSIGN_OR_RETURN(options.users, ReadRequiredField<int>(doc, "users", path));
  ASSIGN_OR_RETURN(options.user_skew, ReadRequiredField<double>(doc, "user_skew", path));
  ASSIGN_OR_RETURN(options.device_types, ReadRequiredList<std::string>(doc, "device_types", path));
  ASSIGN_OR_RETURN(options.constrained_fraction,
                   ReadRequiredField<double>(doc, "constrained_fraction", path));
  ASSIGN_OR_RETURN(options.reference_device,
                   ReadRequiredField<std::string>(doc, "reference_device", path));
  ASSIGN_OR_RETURN(std::string durations, ReadRequiredField<std::string>(doc, "durations", path));
  StatusOr<DurationDistribution> distribution = ParseDurationDistribution(durations);
  if (!distribution.ok()) return distribution.status().WithContext("generator");
  options.durations = *distribution;
  ASSIGN_OR_RETURN(options.pareto_alpha, ReadRequiredField<double>(doc, "pareto_alpha", path));
  ASSIGN_OR_RETURN(options.pareto_min_minutes,
                   ReadRequiredField<double>(doc, "pareto_min_minutes", path));
  ASSIGN_OR_RETURN(options.pareto_max_minutes,
                   ReadRequiredField<double>(doc, "pareto_max_minutes", path));
  ASSIGN_OR_RETURN(options.priority_fraction,
                   ReadRequiredField<double>(doc, "priority_fraction", path));
  ASSIGN_OR_RETURN(options.amplification_limit,
                   ReadRequiredField<double>(doc, "amplification_limit", path));
  const Status valid = ValidateWorkloadOptions(options);
  if (!valid.ok()) return Status(valid.code(), "generator." + valid.message());
  return options;
}

// The header, and the job count it states (-1: none).
StatusOr<std::pair<WorkloadHeader, int64_t>> ReadHeader(std::string_view line) {
  ASSIGN_OR_RETURN(json doc, ParseJson(line, "header"));
  if (!doc.is_object()) return InvalidArgumentError("the header must be a JSON object");
  RETURN_IF_ERROR(CheckFormatAndVersion(doc, kWorkloadFormat, kWorkloadVersion));
  RETURN_IF_ERROR(CheckKnownFields(
      doc, {"format", "version", "reference_device", "devices", "jobs", "generator"}, ""));
  WorkloadHeader header;
  ASSIGN_OR_RETURN(header.reference_device,
                   ReadRequiredField<std::string>(doc, "reference_device", ""));
  if (header.reference_device.empty()) {
    return InvalidArgumentError("reference_device: must not be empty");
  }
  RETURN_IF_ERROR(ReadOptionalField(doc, "devices", "", &header.devices));
  if (header.devices < 0 || header.devices > 1'000'000) {
    return InvalidArgumentError("devices: must be in [0, 1000000] (0: not stated)");
  }
  int64_t jobs = -1;
  RETURN_IF_ERROR(ReadOptionalField(doc, "jobs", "", &jobs));
  if (doc.contains("jobs") && jobs < 0) return InvalidArgumentError("jobs: must be >= 0");
  if (auto generator = doc.find("generator"); generator != doc.end() && !generator->is_null()) {
    ASSIGN_OR_RETURN(header.generator, ReadOptions(*generator));
  }
  return std::make_pair(std::move(header), jobs);
}

StatusOr<WorkloadJob> ReadJob(std::string_view line) {
  ASSIGN_OR_RETURN(json doc, ParseJson(line, "job"));
  if (!doc.is_object()) return InvalidArgumentError("a job must be a JSON object");
  RETURN_IF_ERROR(CheckKnownFields(
      doc,
      {"id", "arrival_s", "user", "role", "model", "global_batch", "gpus", "priority",
       "amplification_limit", "iterations", "duration_s", "device_type"},
      ""));
  WorkloadJob job;
  ASSIGN_OR_RETURN(job.id, ReadRequiredField<int64_t>(doc, "id", ""));
  ASSIGN_OR_RETURN(job.arrival_s, ReadRequiredField<double>(doc, "arrival_s", ""));
  ASSIGN_OR_RETURN(job.user, ReadRequiredField<std::string>(doc, "user", ""));
  ASSIGN_OR_RETURN(std::string role, ReadRequiredField<std::string>(doc, "role", ""));
  if (role != "fg" && role != "bg") return InvalidArgumentError("role: must be fg or bg");
  job.role = role == "fg" ? WorkloadRole::kFg : WorkloadRole::kBg;
  ASSIGN_OR_RETURN(job.model, ReadRequiredField<std::string>(doc, "model", ""));
  ASSIGN_OR_RETURN(job.global_batch, ReadRequiredField<int64_t>(doc, "global_batch", ""));
  // The rest have the job spec's defaults.
  RETURN_IF_ERROR(ReadOptionalField(doc, "gpus", "", &job.gpus));
  RETURN_IF_ERROR(ReadOptionalField(doc, "priority", "", &job.priority));
  RETURN_IF_ERROR(ReadOptionalField(doc, "amplification_limit", "", &job.amplification_limit));
  RETURN_IF_ERROR(ReadOptionalField(doc, "iterations", "", &job.iterations));
  RETURN_IF_ERROR(ReadOptionalField(doc, "duration_s", "", &job.duration_s));
  RETURN_IF_ERROR(ReadOptionalField(doc, "device_type", "", &job.device_type));
  RETURN_IF_ERROR(ValidateWorkloadJob(job));
  return job;
}

std::string LineName(size_t number) { return "line " + std::to_string(number); }

}  // namespace

std::string WriteWorkload(const Workload& workload) {
  ordered_json header;
  header["format"] = kWorkloadFormat;
  header["version"] = kWorkloadVersion;
  header["reference_device"] = workload.header.reference_device;
  if (workload.header.devices > 0) header["devices"] = workload.header.devices;
  header["jobs"] = workload.jobs.size();
  if (workload.header.generator) header["generator"] = OptionsToJson(*workload.header.generator);
  std::string text = header.dump();
  text += '\n';
  for (const WorkloadJob& job : workload.jobs) {
    text += JobToJson(job).dump();
    text += '\n';
  }
  return text;
}

StatusOr<Workload> ParseWorkload(std::string_view text) {
  Workload workload;
  int64_t stated_jobs = -1;
  std::unordered_map<int64_t, size_t> line_of_id;
  size_t number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++number;
    if (line.empty()) return InvalidArgumentError(LineName(number) + ": empty line");
    if (number == 1) {
      StatusOr<std::pair<WorkloadHeader, int64_t>> header = ReadHeader(line);
      if (!header.ok()) return header.status().WithContext(LineName(number));
      workload.header = std::move(header->first);
      stated_jobs = header->second;
      continue;
    }
    StatusOr<WorkloadJob> job = ReadJob(line);
    if (!job.ok()) return job.status().WithContext(LineName(number));
    if (auto [seen, inserted] = line_of_id.emplace(job->id, number); !inserted) {
      return InvalidArgumentError(LineName(number) + ": id: " + std::to_string(job->id) +
                                  " is already the id on " + LineName(seen->second));
    }
    if (!workload.jobs.empty() && job->arrival_s < workload.jobs.back().arrival_s) {
      return InvalidArgumentError(LineName(number) +
                                  ": arrival_s: is before the previous job's (jobs must be in "
                                  "arrival order)");
    }
    workload.jobs.push_back(std::move(*job));
  }
  if (number == 0) return InvalidArgumentError("line 1: missing header (the file is empty)");
  if (stated_jobs >= 0 && static_cast<size_t>(stated_jobs) != workload.jobs.size()) {
    return InvalidArgumentError("line 1: jobs: the header states " + std::to_string(stated_jobs) +
                                " jobs but the file has " + std::to_string(workload.jobs.size()) +
                                " (cut short?)");
  }
  return workload;
}

}  // namespace deepool::simulator

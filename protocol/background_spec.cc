#include "protocol/background_spec.h"

#include <limits>

#include "common/json_fields.h"

namespace deepool::protocol {
namespace {

using nlohmann::json;

constexpr const char* kWhere = "background.";

Status ReadRanks(const json& doc, std::vector<int>* ranks) {
  if (!doc.contains("ranks")) return Status::Ok();
  const json& list = doc["ranks"];
  if (!list.is_array()) return InvalidArgumentError("background.ranks must be a list of ranks");
  for (const json& rank : list) {
    if (!rank.is_number_integer() || rank.get<int64_t>() < 0 ||
        rank.get<int64_t>() > std::numeric_limits<int>::max()) {
      return InvalidArgumentError("background.ranks must hold ranks >= 0");
    }
    ranks->push_back(rank.get<int>());
  }
  return Status::Ok();
}

Status ReadSharing(const json& doc, SharingOptions* sharing) {
  if (!doc.contains("sharing")) return Status::Ok();
  const json& object = doc["sharing"];
  const std::string where = std::string(kWhere) + "sharing.";
  if (!object.is_object()) return InvalidArgumentError("background.sharing must be an object");
  std::string mode;
  RETURN_IF_ERROR(ReadOptionalField(object, "mode", where, &mode));
  if (!mode.empty()) {
    StatusOr<SharingMode> parsed = ParseSharingMode(mode);
    if (!parsed.ok()) return parsed.status().WithContext("background.sharing.mode");
    sharing->mode = *parsed;
  }
  RETURN_IF_ERROR(ReadOptionalField(object, "priority_streams", where, &sharing->priority_streams));
  RETURN_IF_ERROR(ReadOptionalField(object, "cuda_graphs", where, &sharing->cuda_graphs));
  RETURN_IF_ERROR(
      ReadOptionalField(object, "idle_thread_priority", where, &sharing->idle_thread_priority));
  RETURN_IF_ERROR(ReadOptionalField(object, "max_fg_wait_ms", where, &sharing->max_fg_wait_ms));
  RETURN_IF_ERROR(
      ReadOptionalField(object, "unit_bound_fraction", where, &sharing->unit_bound_fraction));
  return ReadOptionalField(object, "split_units", where, &sharing->split_units);
}

Status ReadCheckpoints(const json& doc, std::optional<PeriodicCheckpoints>* checkpoints) {
  auto found = doc.find("checkpoint");
  if (found == doc.end() || found->is_null()) return Status::Ok();
  const std::string where = std::string(kWhere) + "checkpoint.";
  if (!found->is_object()) return InvalidArgumentError("background.checkpoint must be an object");
  RETURN_IF_ERROR(
      CheckKnownFields(*found, {"dir", "every_iterations", "every_seconds", "keep"}, where));
  PeriodicCheckpoints periodic;
  RETURN_IF_ERROR(ReadPeriodicCheckpointFields(*found, where, &periodic));
  *checkpoints = periodic;
  return Status::Ok();
}

// The one writer; the graph comes as a document already.
json WriteBackground(const BackgroundSpec& spec, json graph) {
  json doc;
  doc["job_id"] = spec.job_id;
  doc["graph"] = std::move(graph);
  doc["batch_size"] = spec.batch_size;
  doc["iterations"] = spec.iterations;
  doc["seed"] = spec.seed;
  doc["optimizer"] = OptimizerToJson(spec.optimizer);
  doc["data"] = DataToJson(spec.data);
  json sharing{{"priority_streams", spec.sharing.priority_streams},
               {"cuda_graphs", spec.sharing.cuda_graphs},
               {"idle_thread_priority", spec.sharing.idle_thread_priority},
               {"max_fg_wait_ms", spec.sharing.max_fg_wait_ms},
               {"unit_bound_fraction", spec.sharing.unit_bound_fraction},
               {"split_units", spec.sharing.split_units}};
  if (spec.sharing.mode) sharing["mode"] = SharingModeName(*spec.sharing.mode);
  doc["sharing"] = sharing;
  if (!spec.ranks.empty()) doc["ranks"] = spec.ranks;
  if (spec.precision != planner::Precision::kFp32) {
    doc["precision"] = planner::PrecisionName(spec.precision);
  }
  if (spec.checkpoints) {
    json checkpoint = json::object();
    AddPeriodicCheckpointFields(*spec.checkpoints, &checkpoint);
    doc["checkpoint"] = std::move(checkpoint);
  }
  return doc;
}

}  // namespace

StatusOr<SharingMode> ParseSharingMode(std::string_view text) {
  if (text == "idle_only") return SharingMode::kIdleOnly;
  if (text == "concurrent") return SharingMode::kConcurrent;
  return InvalidArgumentError("sharing mode must be idle_only or concurrent, not '" +
                              std::string(text) + "'");
}

std::string SharingModeName(SharingMode mode) {
  return mode == SharingMode::kIdleOnly ? "idle_only" : "concurrent";
}

Status ValidateBackgroundSpec(const BackgroundSpec& spec) {
  if (!spec.graph) return InvalidArgumentError("background.graph is missing");
  if (spec.batch_size < 1) return InvalidArgumentError("background.batch_size must be >= 1");
  if (spec.iterations < 0) return InvalidArgumentError("background.iterations must be >= 0");
  RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer).WithContext("background"));
  // The BG trainer (worker/runtime/background) steps without the executor's recipes; decay_1d
  // is the optimizer's own and applies.
  if (spec.optimizer.clip_grad_norm != 0 || !(spec.optimizer.schedule == LrScheduleSpec{})) {
    return InvalidArgumentError(
        "background.optimizer.schedule and clip_grad_norm are not supported for BG jobs");
  }
  RETURN_IF_ERROR(ValidateDataSpec(spec.data).WithContext("background"));
  if (spec.precision == planner::Precision::kFp16) {  // the BG trainer has no loss scaler
    return InvalidArgumentError("background.precision fp16 needs loss scaling: use bf16");
  }
  // Written so that NaN fails too.
  if (!(spec.sharing.max_fg_wait_ms > 0 && spec.sharing.max_fg_wait_ms <= 60'000)) {
    return InvalidArgumentError("background.sharing.max_fg_wait_ms must be in (0, 60000]");
  }
  if (!(spec.sharing.unit_bound_fraction > 0 && spec.sharing.unit_bound_fraction <= 1)) {
    return InvalidArgumentError("background.sharing.unit_bound_fraction must be in (0, 1]");
  }
  if (spec.checkpoints) {
    RETURN_IF_ERROR(ValidatePeriodicCheckpoints(*spec.checkpoints, "background.checkpoint."));
  }
  return Status::Ok();
}

StatusOr<BackgroundSpec> ParseBackgroundJson(const json& doc) {
  if (!doc.is_object()) return InvalidArgumentError("background must be an object");
  BackgroundSpec spec;
  RETURN_IF_ERROR(ReadOptionalField(doc, "job_id", kWhere, &spec.job_id));
  if (!doc.contains("graph") || !doc["graph"].is_object()) {
    return InvalidArgumentError("background.graph must be a graph document");
  }
  auto graph = planner::ParseGraphJson(doc["graph"].dump());
  if (!graph.ok()) return graph.status().WithContext("background.graph");
  spec.graph = std::make_shared<const planner::Graph>(std::move(graph).value());
  ASSIGN_OR_RETURN(spec.batch_size, ReadRequiredField<int64_t>(doc, "batch_size", kWhere));
  RETURN_IF_ERROR(ReadOptionalField(doc, "iterations", kWhere, &spec.iterations));
  RETURN_IF_ERROR(ReadOptionalField(doc, "seed", kWhere, &spec.seed));
  if (doc.contains("optimizer")) {
    ASSIGN_OR_RETURN(spec.optimizer,
                     ParseOptimizerJson(doc["optimizer"], std::string(kWhere) + "optimizer."));
  }
  if (doc.contains("data")) {
    ASSIGN_OR_RETURN(spec.data, ParseDataJson(doc["data"], std::string(kWhere) + "data."));
  }
  RETURN_IF_ERROR(ReadRanks(doc, &spec.ranks));
  RETURN_IF_ERROR(ReadSharing(doc, &spec.sharing));
  RETURN_IF_ERROR(ReadCheckpoints(doc, &spec.checkpoints));
  if (doc.contains("precision")) {
    std::string precision;
    RETURN_IF_ERROR(ReadOptionalField(doc, "precision", kWhere, &precision));
    StatusOr<planner::Precision> parsed = planner::ParsePrecision(precision);
    if (!parsed.ok()) return parsed.status().WithContext("background.precision");
    spec.precision = *parsed;
  }
  RETURN_IF_ERROR(ValidateBackgroundSpec(spec));
  return spec;
}

json BackgroundToJson(const BackgroundSpec& spec) {
  return WriteBackground(spec,
                         spec.graph ? json::parse(planner::GraphToJson(*spec.graph)) : json());
}

json BackgroundToJson(const BackgroundSpec& spec, std::string_view graph_json) {
  return WriteBackground(spec, DocumentOrNull(graph_json));
}

}  // namespace deepool::protocol

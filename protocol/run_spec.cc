#include "protocol/run_spec.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/json_fields.h"

namespace deepool::protocol {
namespace {

using nlohmann::json;

// A required sub-document ("graph", "plan") parsed by the planner's own reader, whose errors
// get the field's name in front.
template <typename T>
StatusOr<T> ReadDocument(const json& doc, const char* name,
                         StatusOr<T> (*parse)(std::string_view)) {
  if (!doc.contains(name) || !doc[name].is_object()) {
    return InvalidArgumentError(std::string(name) + " must be a " + name + " document");
  }
  StatusOr<T> parsed = parse(doc[name].dump());
  if (!parsed.ok()) return parsed.status().WithContext(name);
  return parsed;
}

Status CheckPlacements(const RunSpec& spec) {
  std::set<std::string> placed;
  for (const auto& placement : spec.plan.layers) {
    if (!spec.graph->FindLayer(placement.layer)) {
      return InvalidArgumentError("plan places layer " + placement.layer +
                                  ", which the graph does not have");
    }
    if (!placed.insert(placement.layer).second) {
      return InvalidArgumentError("plan places layer " + placement.layer + " twice");
    }
  }
  for (const auto& layer : spec.graph->layers()) {
    if (!placed.count(layer.name)) {
      return InvalidArgumentError("plan has no placement for layer " + layer.name);
    }
  }
  return Status::Ok();
}

Status ReadCheckpoint(const json& doc, RunSpec* spec) {
  auto found = doc.find("checkpoint");
  if (found == doc.end() || found->is_null()) return Status::Ok();
  if (!found->is_object()) return InvalidArgumentError("checkpoint must be an object");
  RETURN_IF_ERROR(CheckKnownFields(
      *found, {"path", "dir", "every_iterations", "every_seconds", "keep"}, "checkpoint."));
  if (found->contains("path")) {
    std::string path;
    RETURN_IF_ERROR(ReadOptionalField(*found, "path", "checkpoint.", &path));
    spec->checkpoint_path = path;
  }
  if (found->contains("dir")) {
    PeriodicCheckpoints periodic;
    RETURN_IF_ERROR(ReadPeriodicCheckpointFields(*found, "checkpoint.", &periodic));
    spec->checkpoints = periodic;
  } else if (found->contains("every_iterations") || found->contains("every_seconds") ||
             found->contains("keep")) {
    return InvalidArgumentError(
        "checkpoint.every_iterations, every_seconds and keep need checkpoint.dir");
  }
  return Status::Ok();
}

// A spec read at `version` must not use a feature of a later one: such a document was written
// by a writer that broke the rule in version.h, and an executor of that version would refuse it.
Status CheckExpressibleAt(const RunSpec& spec, int version) {
  // `field` (with its value `value`, unless empty) needs protocol `needed`.
  auto check = [version](int needed, const std::string& field, const std::string& value) {
    if (needed <= version) return Status::Ok();
    const std::string named = value.empty() ? field : field + " \"" + value + "\"";
    return InvalidArgumentError(named + " needs executor protocol version " +
                                std::to_string(needed) + "; this run spec is version " +
                                std::to_string(version));
  };
  auto check_job = [&](const OptimizerSpec& optimizer, const DataSpec& data,
                       const std::string& where) -> Status {
    RETURN_IF_ERROR(
        check(OptimizerProtocolVersion(optimizer.name), where + "optimizer.name", optimizer.name));
    if (optimizer.UsesRecipes()) {
      RETURN_IF_ERROR(check(kRecipesProtocolVersion,
                            where + "optimizer's decay_1d, schedule or clip_grad_norm", ""));
    }
    return check(DataProtocolVersion(data.kind), where + "data.kind", data.kind);
  };
  RETURN_IF_ERROR(check_job(spec.optimizer, spec.data, ""));
  if (spec.background) {
    RETURN_IF_ERROR(check_job(spec.background->optimizer, spec.background->data, "background."));
    if (spec.background->precision != planner::Precision::kFp32) {
      RETURN_IF_ERROR(check(kPrecisionProtocolVersion, "background.precision",
                            planner::PrecisionName(spec.background->precision)));
    }
  }
  if (spec.epochs > 0) RETURN_IF_ERROR(check(kEpochsProtocolVersion, "epochs", ""));
  if (spec.precision != planner::Precision::kFp32) {
    RETURN_IF_ERROR(
        check(kPrecisionProtocolVersion, "precision", planner::PrecisionName(spec.precision)));
  }
  if (spec.init_path) RETURN_IF_ERROR(check(kInitProtocolVersion, "init", ""));
  if (spec.accumulation_steps != 1) {
    RETURN_IF_ERROR(check(kAccumulationProtocolVersion, "accumulation_steps", ""));
  }
  if (spec.gradient_precision != planner::Precision::kFp32) {
    RETURN_IF_ERROR(check(kAccumulationProtocolVersion, "gradient_precision",
                          planner::PrecisionName(spec.gradient_precision)));
  }
  if (spec.memory_format != planner::MemoryFormat::kAuto) {
    RETURN_IF_ERROR(check(kMemoryFormatProtocolVersion, "memory_format",
                          planner::MemoryFormatName(spec.memory_format)));
  }
  if (spec.eval) {
    RETURN_IF_ERROR(check(kEvaluationProtocolVersion, "eval", ""));
    RETURN_IF_ERROR(
        check(DataProtocolVersion(spec.eval->data.kind), "eval.data.kind", spec.eval->data.kind));
  }
  return Status::Ok();
}

json CheckpointToJson(const RunSpec& spec) {
  json doc = json::object();
  if (spec.checkpoint_path) doc["path"] = *spec.checkpoint_path;
  if (spec.checkpoints) AddPeriodicCheckpointFields(*spec.checkpoints, &doc);
  return doc;
}

// The one writer; graph and plan come as documents already.
json WriteRunSpec(const RunSpec& spec, json graph, json plan) {
  json doc;
  doc["format"] = kRunSpecFormat;
  doc["version"] = RequiredProtocolVersion(spec);
  doc["job_id"] = spec.job_id;
  doc["graph"] = std::move(graph);
  doc["plan"] = std::move(plan);
  if (spec.epochs > 0) {
    doc["epochs"] = spec.epochs;
  } else {
    doc["iterations"] = spec.iterations;
  }
  doc["seed"] = spec.seed;
  doc["optimizer"] = OptimizerToJson(spec.optimizer);
  doc["data"] = DataToJson(spec.data);
  if (spec.checkpoint_path || spec.checkpoints) doc["checkpoint"] = CheckpointToJson(spec);
  doc["gradient_bucket_mb"] = spec.gradient_bucket_mb;
  doc["batch_norm"] = spec.sync_batch_norm ? "synchronized" : "per_device";
  if (spec.precision != planner::Precision::kFp32) {
    doc["precision"] = planner::PrecisionName(spec.precision);
  }
  if (spec.accumulation_steps != 1) doc["accumulation_steps"] = spec.accumulation_steps;
  if (spec.gradient_precision != planner::Precision::kFp32) {
    doc["gradient_precision"] = planner::PrecisionName(spec.gradient_precision);
  }
  if (spec.memory_format != planner::MemoryFormat::kAuto) {
    doc["memory_format"] = planner::MemoryFormatName(spec.memory_format);
  }
  if (spec.background) doc["background"] = BackgroundToJson(*spec.background);
  if (spec.eval) doc["eval"] = EvalToJson(*spec.eval);
  if (spec.init_path) doc["init"] = {{"path", *spec.init_path}};
  return doc;
}

}  // namespace

Status ValidateRunSpec(const RunSpec& spec) {
  if (!spec.graph) return InvalidArgumentError("graph is missing");
  if (spec.iterations < 1) return InvalidArgumentError("iterations must be >= 1");
  if (spec.epochs < 0) return InvalidArgumentError("epochs must be >= 1");
  if (spec.init_path && spec.init_path->empty()) return InvalidArgumentError("init.path is empty");
  RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer));
  RETURN_IF_ERROR(ValidateDataSpec(spec.data));
  RETURN_IF_ERROR(spec.plan.Validate().WithContext("plan"));
  RETURN_IF_ERROR(CheckPlacements(spec));
  RETURN_IF_ERROR(
      planner::CheckBatchNormTraining(*spec.graph, spec.plan.global_batch).WithContext("plan"));
  if (!spec.sync_batch_norm) {
    RETURN_IF_ERROR(planner::CheckPerDeviceBatchNormTraining(spec.plan, *spec.graph)
                        .WithContext("plan with per-device batch norm"));
  }
  if (!(spec.gradient_bucket_mb >= 0 && spec.gradient_bucket_mb <= planner::kMaxGradientBucketMb)) {
    return InvalidArgumentError("gradient_bucket_mb must be between 0 and " +
                                std::to_string(static_cast<int>(planner::kMaxGradientBucketMb)));
  }
  if (spec.checkpoint_path && spec.checkpoint_path->empty()) {
    return InvalidArgumentError("checkpoint.path is empty");
  }
  if (spec.checkpoints) {
    RETURN_IF_ERROR(ValidatePeriodicCheckpoints(*spec.checkpoints, "checkpoint."));
  }
  if (spec.background) RETURN_IF_ERROR(ValidateBackgroundSpec(*spec.background));
  if (spec.eval) RETURN_IF_ERROR(ValidateEvalSpec(*spec.eval, "eval."));
  if (spec.accumulation_steps < 1 || spec.accumulation_steps > kMaxAccumulationSteps) {
    return InvalidArgumentError("accumulation_steps must be in [1, " +
                                std::to_string(kMaxAccumulationSteps) + "]");
  }
  if (spec.gradient_precision != planner::Precision::kFp32 &&
      spec.gradient_precision != planner::Precision::kBf16) {
    return InvalidArgumentError(std::string("gradient_precision must be fp32 or bf16, not ") +
                                planner::PrecisionName(spec.gradient_precision));
  }
  return Status::Ok();
}

int RequiredProtocolVersion(const RunSpec& spec) {
  int version =
      std::max(OptimizerProtocolVersion(spec.optimizer), DataProtocolVersion(spec.data.kind));
  if (spec.background) {
    version = std::max({version, OptimizerProtocolVersion(spec.background->optimizer),
                        DataProtocolVersion(spec.background->data.kind)});
    if (spec.background->precision != planner::Precision::kFp32) {
      version = std::max(version, kPrecisionProtocolVersion);
    }
  }
  if (spec.eval) {
    version =
        std::max({version, kEvaluationProtocolVersion, DataProtocolVersion(spec.eval->data.kind)});
  }
  if (spec.epochs > 0) version = std::max(version, kEpochsProtocolVersion);
  if (spec.precision != planner::Precision::kFp32) {
    version = std::max(version, kPrecisionProtocolVersion);
  }
  if (spec.init_path) version = std::max(version, kInitProtocolVersion);
  if (spec.accumulation_steps != 1 || spec.gradient_precision != planner::Precision::kFp32) {
    version = std::max(version, kAccumulationProtocolVersion);
  }
  if (spec.memory_format != planner::MemoryFormat::kAuto) {
    version = std::max(version, kMemoryFormatProtocolVersion);
  }
  return version;
}

StatusOr<int64_t> IterationsForEpochs(int64_t epochs, int64_t samples, int64_t global_batch) {
  if (epochs < 1 || samples < 1 || global_batch < 1) {
    return InvalidArgumentError("epochs, samples and global batch must be >= 1");
  }
  // epochs * samples may overflow 64 bits long before the count is unreasonable: in 128.
  __extension__ using Wide = __int128;
  const Wide rows = static_cast<Wide>(epochs) * samples;
  const Wide iterations = (rows + global_batch - 1) / global_batch;
  if (iterations > kMaxRunIterations) {
    return InvalidArgumentError("epochs: " + std::to_string(epochs) + " epochs of " +
                                std::to_string(samples) + " samples at a global batch of " +
                                std::to_string(global_batch) + " are more than " +
                                std::to_string(kMaxRunIterations) + " iterations");
  }
  return static_cast<int64_t>(iterations);
}

StatusOr<RunSpec> ParseRunSpecJson(std::string_view text) {
  ASSIGN_OR_RETURN(const json doc, ParseJson(text, "run spec"));
  if (!doc.is_object()) {
    return InvalidArgumentError("run spec is not a JSON object");
  }
  ASSIGN_OR_RETURN(
      const int version,
      CheckFormatAndVersionRange(doc, kRunSpecFormat, kOldestProtocolVersion, kProtocolVersion));
  RunSpec spec;
  RETURN_IF_ERROR(ReadOptionalField(doc, "job_id", "", &spec.job_id));
  ASSIGN_OR_RETURN(planner::Graph graph, ReadDocument(doc, "graph", &planner::ParseGraphJson));
  spec.graph = std::make_shared<const planner::Graph>(std::move(graph));
  ASSIGN_OR_RETURN(spec.plan, ReadDocument(doc, "plan", &planner::ParsePlanJson));
  if (doc.contains("epochs")) {
    if (doc.contains("iterations")) {
      return InvalidArgumentError("iterations and epochs: give one of the two");
    }
    ASSIGN_OR_RETURN(spec.epochs, ReadRequiredField<int64_t>(doc, "epochs", ""));
    if (spec.epochs < 1) return InvalidArgumentError("epochs must be >= 1");
  } else {
    ASSIGN_OR_RETURN(spec.iterations, ReadRequiredField<int64_t>(doc, "iterations", ""));
  }
  RETURN_IF_ERROR(ReadOptionalField(doc, "seed", "", &spec.seed));
  if (doc.contains("optimizer")) {
    ASSIGN_OR_RETURN(spec.optimizer, ParseOptimizerJson(doc["optimizer"], "optimizer."));
  }
  if (doc.contains("data")) {
    ASSIGN_OR_RETURN(spec.data, ParseDataJson(doc["data"], "data."));
  }
  RETURN_IF_ERROR(ReadCheckpoint(doc, &spec));
  RETURN_IF_ERROR(ReadOptionalField(doc, "gradient_bucket_mb", "", &spec.gradient_bucket_mb));
  std::string batch_norm = "synchronized";
  RETURN_IF_ERROR(ReadOptionalField(doc, "batch_norm", "", &batch_norm));
  if (batch_norm != "synchronized" && batch_norm != "per_device") {
    return InvalidArgumentError("batch_norm must be \"synchronized\" or \"per_device\", got \"" +
                                batch_norm + "\"");
  }
  spec.sync_batch_norm = batch_norm == "synchronized";
  if (doc.contains("precision")) {
    std::string precision;
    RETURN_IF_ERROR(ReadOptionalField(doc, "precision", "", &precision));
    // ParsePrecision's message names the field ("unknown precision ...").
    ASSIGN_OR_RETURN(spec.precision, planner::ParsePrecision(precision));
  }
  RETURN_IF_ERROR(ReadOptionalField(doc, "accumulation_steps", "", &spec.accumulation_steps));
  if (doc.contains("gradient_precision")) {
    std::string precision;
    RETURN_IF_ERROR(ReadOptionalField(doc, "gradient_precision", "", &precision));
    auto parsed = planner::ParsePrecision(precision);
    if (!parsed.ok()) return parsed.status().WithContext("gradient_precision");
    spec.gradient_precision = *parsed;
  }
  if (doc.contains("memory_format")) {
    std::string format;
    RETURN_IF_ERROR(ReadOptionalField(doc, "memory_format", "", &format));
    auto parsed = planner::ParseMemoryFormat(format);
    if (!parsed.ok()) return parsed.status().WithContext("memory_format");
    spec.memory_format = *parsed;
  }
  if (doc.contains("background") && !doc["background"].is_null()) {
    ASSIGN_OR_RETURN(spec.background, ParseBackgroundJson(doc["background"]));
  }
  if (doc.contains("eval") && !doc["eval"].is_null()) {
    ASSIGN_OR_RETURN(spec.eval, ParseEvalJson(doc["eval"], "eval."));
  }
  if (doc.contains("init") && !doc["init"].is_null()) {
    const json& init = doc["init"];
    if (!init.is_object() || !init.contains("path") || !init["path"].is_string()) {
      return InvalidArgumentError("init must be {\"path\": FILE}");
    }
    spec.init_path = init["path"].get<std::string>();
  }
  RETURN_IF_ERROR(ValidateRunSpec(spec));
  RETURN_IF_ERROR(CheckExpressibleAt(spec, version));
  return spec;
}

std::string RunSpecToJson(const RunSpec& spec, int indent) {
  return WriteRunSpec(spec, spec.graph ? json::parse(planner::GraphToJson(*spec.graph)) : json(),
                      json::parse(planner::PlanToJson(spec.plan)))
      .dump(indent);
}

std::string RunSpecToJson(const RunSpec& spec, const PlannedDocuments& documents, int indent) {
  return WriteRunSpec(spec, DocumentOrNull(documents.graph_json),
                      DocumentOrNull(documents.plan_json))
      .dump(indent);
}

StatusOr<RunSpec> ReadRunSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open run spec " + path);
  std::ostringstream text;
  text << in.rdbuf();
  auto spec = ParseRunSpecJson(text.str());
  if (!spec.ok()) return spec.status().WithContext(path);
  return spec;
}

Status WriteRunSpecFile(const RunSpec& spec, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return UnavailableError("cannot write run spec " + path);
  out << RunSpecToJson(spec) << '\n';
  out.close();
  if (!out) return UnavailableError("cannot write run spec " + path);
  return Status::Ok();
}

}  // namespace deepool::protocol

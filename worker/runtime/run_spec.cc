#include "worker/runtime/run_spec.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "worker/runtime/spec_json.h"

namespace deepool::worker {
namespace {

using nlohmann::json;

StatusOr<OptimizerSpec> ParseOptimizer(const json& doc) {
  ASSIGN_OR_RETURN(OptimizerSpec spec, ParseOptimizerJson(doc, "optimizer."));
  RETURN_IF_ERROR(ValidateOptimizer(spec));
  return spec;
}

json OptimizerToJson(const OptimizerSpec& spec) {
  if (spec.name == "adam") {
    return {{"name", spec.name},
            {"lr", spec.lr},
            {"betas", {spec.betas[0], spec.betas[1]}},
            {"eps", spec.eps},
            {"weight_decay", spec.weight_decay}};
  }
  return {{"name", spec.name},
          {"lr", spec.lr},
          {"momentum", spec.momentum},
          {"weight_decay", spec.weight_decay}};
}

}  // namespace

Status ValidateRunSpec(const RunSpec& spec) {
  if (!spec.graph) return InvalidArgumentError("graph is missing");
  if (spec.iterations < 1) return InvalidArgumentError("iterations must be >= 1");
  RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer));
  RETURN_IF_ERROR(ValidateDataSpec(spec.data));
  RETURN_IF_ERROR(spec.plan.Validate().WithContext("plan"));
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
  RETURN_IF_ERROR(
      planner::CheckBatchNormTraining(*spec.graph, spec.plan.global_batch).WithContext("plan"));
  if (spec.checkpoint_path && spec.checkpoint_path->empty()) {
    return InvalidArgumentError("checkpoint.path is empty");
  }
  if (spec.background) RETURN_IF_ERROR(ValidateBackgroundSpec(*spec.background));
  return Status::Ok();
}

StatusOr<RunSpec> ParseRunSpecJson(std::string_view text) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgumentError("run spec is not a JSON object");
  }
  if (doc.value("format", std::string()) != "deepool.run") {
    return InvalidArgumentError("format must be \"deepool.run\"");
  }
  if (!doc.contains("version") || !doc["version"].is_number_integer() ||
      doc["version"].get<int>() != kRunSpecFormatVersion) {
    return InvalidArgumentError("version must be " + std::to_string(kRunSpecFormatVersion));
  }
  RunSpec spec;
  RETURN_IF_ERROR(ReadSpecField(doc, "job_id", "", spec.job_id));
  if (!doc.contains("graph") || !doc["graph"].is_object()) {
    return InvalidArgumentError("graph must be a graph document");
  }
  auto graph = planner::ParseGraphJson(doc["graph"].dump());
  if (!graph.ok()) return graph.status().WithContext("graph");
  spec.graph = std::make_shared<const planner::Graph>(std::move(graph).value());
  if (!doc.contains("plan") || !doc["plan"].is_object()) {
    return InvalidArgumentError("plan must be a plan document");
  }
  auto plan = planner::ParsePlanJson(doc["plan"].dump());
  if (!plan.ok()) return plan.status().WithContext("plan");
  spec.plan = std::move(plan).value();
  if (!doc.contains("iterations") || !doc["iterations"].is_number_integer()) {
    return InvalidArgumentError("iterations must be an integer");
  }
  spec.iterations = doc["iterations"].get<int64_t>();
  RETURN_IF_ERROR(ReadSpecField(doc, "seed", "", spec.seed));
  if (doc.contains("optimizer")) {
    ASSIGN_OR_RETURN(spec.optimizer, ParseOptimizer(doc["optimizer"]));
  }
  if (doc.contains("data")) {
    const json& data = doc["data"];
    if (!data.is_object()) return InvalidArgumentError("data must be an object");
    RETURN_IF_ERROR(ReadSpecField(data, "kind", "data.", spec.data.kind));
    RETURN_IF_ERROR(ReadSpecField(data, "seed", "data.", spec.data.seed));
    RETURN_IF_ERROR(ReadSpecField(data, "path", "data.", spec.data.path));
  }
  if (doc.contains("checkpoint") && !doc["checkpoint"].is_null()) {
    const json& checkpoint = doc["checkpoint"];
    if (!checkpoint.is_object() || !checkpoint.contains("path") ||
        !checkpoint["path"].is_string()) {
      return InvalidArgumentError("checkpoint.path must be a string");
    }
    spec.checkpoint_path = checkpoint["path"].get<std::string>();
  }
  if (doc.contains("background") && !doc["background"].is_null()) {
    ASSIGN_OR_RETURN(BackgroundSpec background, ParseBackgroundJson(doc["background"]));
    spec.background = std::move(background);
  }
  RETURN_IF_ERROR(ValidateRunSpec(spec));
  return spec;
}

std::string RunSpecToJson(const RunSpec& spec, int indent) {
  json doc;
  doc["format"] = "deepool.run";
  doc["version"] = kRunSpecFormatVersion;
  doc["job_id"] = spec.job_id;
  doc["graph"] = spec.graph ? json::parse(planner::GraphToJson(*spec.graph)) : json();
  doc["plan"] = json::parse(planner::PlanToJson(spec.plan));
  doc["iterations"] = spec.iterations;
  doc["seed"] = spec.seed;
  doc["optimizer"] = OptimizerToJson(spec.optimizer);
  json data{{"kind", spec.data.kind}};
  if (spec.data.kind == "cifar10") {
    data["path"] = spec.data.path;
  } else {
    data["seed"] = spec.data.seed;
  }
  doc["data"] = data;
  if (spec.checkpoint_path) doc["checkpoint"] = {{"path", *spec.checkpoint_path}};
  if (spec.background) doc["background"] = BackgroundToJson(*spec.background);
  return doc.dump(indent);
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

}  // namespace deepool::worker

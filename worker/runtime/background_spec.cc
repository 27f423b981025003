#include "worker/runtime/background_spec.h"

#include "worker/runtime/spec_json.h"

namespace deepool::worker {
namespace {

using nlohmann::json;

constexpr const char* kWhere = "background.";

}  // namespace

Status ValidateBackgroundSpec(const BackgroundSpec& spec) {
  if (!spec.graph) return InvalidArgumentError("background.graph is missing");
  if (spec.batch_size < 1) return InvalidArgumentError("background.batch_size must be >= 1");
  if (spec.iterations < 0) return InvalidArgumentError("background.iterations must be >= 0");
  RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer).WithContext("background"));
  RETURN_IF_ERROR(ValidateDataSpec(spec.data).WithContext("background"));
  return Status::Ok();
}

StatusOr<BackgroundSpec> ParseBackgroundJson(const json& doc) {
  if (!doc.is_object()) return InvalidArgumentError("background must be an object");
  BackgroundSpec spec;
  RETURN_IF_ERROR(ReadSpecField(doc, "job_id", kWhere, spec.job_id));
  if (!doc.contains("graph") || !doc["graph"].is_object()) {
    return InvalidArgumentError("background.graph must be a graph document");
  }
  auto graph = planner::ParseGraphJson(doc["graph"].dump());
  if (!graph.ok()) return graph.status().WithContext("background.graph");
  spec.graph = std::make_shared<const planner::Graph>(std::move(graph).value());
  if (!doc.contains("batch_size") || !doc["batch_size"].is_number_integer()) {
    return InvalidArgumentError("background.batch_size must be an integer");
  }
  spec.batch_size = doc["batch_size"].get<int64_t>();
  if (doc.contains("iterations") && !doc["iterations"].is_number_integer()) {
    return InvalidArgumentError("background.iterations must be an integer");
  }
  RETURN_IF_ERROR(ReadSpecField(doc, "iterations", kWhere, spec.iterations));
  RETURN_IF_ERROR(ReadSpecField(doc, "seed", kWhere, spec.seed));
  if (doc.contains("optimizer")) {
    ASSIGN_OR_RETURN(spec.optimizer, ParseOptimizerJson(doc["optimizer"], std::string(kWhere) + "optimizer."));
  }
  if (doc.contains("data")) {
    const json& data = doc["data"];
    const std::string where = std::string(kWhere) + "data.";
    if (!data.is_object()) return InvalidArgumentError("background.data must be an object");
    RETURN_IF_ERROR(ReadSpecField(data, "kind", where, spec.data.kind));
    RETURN_IF_ERROR(ReadSpecField(data, "seed", where, spec.data.seed));
    RETURN_IF_ERROR(ReadSpecField(data, "path", where, spec.data.path));
  }
  if (doc.contains("ranks")) {
    const json& ranks = doc["ranks"];
    if (!ranks.is_array()) return InvalidArgumentError("background.ranks must be a list of ranks");
    for (const json& rank : ranks) {
      if (!rank.is_number_integer() || rank.get<int64_t>() < 0) {
        return InvalidArgumentError("background.ranks must hold ranks >= 0");
      }
      spec.ranks.push_back(rank.get<int>());
    }
  }
  if (doc.contains("sharing")) {
    const json& sharing = doc["sharing"];
    const std::string where = std::string(kWhere) + "sharing.";
    if (!sharing.is_object()) return InvalidArgumentError("background.sharing must be an object");
    std::string mode;
    RETURN_IF_ERROR(ReadSpecField(sharing, "mode", where, mode));
    if (!mode.empty()) {
      auto parsed = ParseSharingMode(mode);
      if (!parsed.ok()) return parsed.status().WithContext("background.sharing.mode");
      spec.sharing.mode = *parsed;
    }
    RETURN_IF_ERROR(
        ReadSpecField(sharing, "priority_streams", where, spec.sharing.priority_streams));
    RETURN_IF_ERROR(ReadSpecField(sharing, "cuda_graphs", where, spec.sharing.cuda_graphs));
    RETURN_IF_ERROR(ReadSpecField(sharing, "idle_thread_priority", where,
                                 spec.sharing.idle_thread_priority));
  }
  RETURN_IF_ERROR(ValidateBackgroundSpec(spec));
  return spec;
}

json BackgroundToJson(const BackgroundSpec& spec) {
  json doc;
  doc["job_id"] = spec.job_id;
  doc["graph"] = spec.graph ? json::parse(planner::GraphToJson(*spec.graph)) : json();
  doc["batch_size"] = spec.batch_size;
  doc["iterations"] = spec.iterations;
  doc["seed"] = spec.seed;
  const OptimizerSpec& opt = spec.optimizer;
  if (opt.name == "adam") {
    doc["optimizer"] = {{"name", opt.name},
                        {"lr", opt.lr},
                        {"betas", {opt.betas[0], opt.betas[1]}},
                        {"eps", opt.eps},
                        {"weight_decay", opt.weight_decay}};
  } else {
    doc["optimizer"] = {{"name", opt.name},
                        {"lr", opt.lr},
                        {"momentum", opt.momentum},
                        {"weight_decay", opt.weight_decay}};
  }
  json data{{"kind", spec.data.kind}};
  if (spec.data.kind == "cifar10") {
    data["path"] = spec.data.path;
  } else {
    data["seed"] = spec.data.seed;
  }
  doc["data"] = data;
  json sharing{{"priority_streams", spec.sharing.priority_streams},
               {"cuda_graphs", spec.sharing.cuda_graphs},
               {"idle_thread_priority", spec.sharing.idle_thread_priority}};
  if (spec.sharing.mode) sharing["mode"] = SharingModeName(*spec.sharing.mode);
  doc["sharing"] = sharing;
  if (!spec.ranks.empty()) doc["ranks"] = spec.ranks;
  return doc;
}

}  // namespace deepool::worker

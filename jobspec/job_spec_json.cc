#include "jobspec/job_spec_json.h"

#include <string>
#include <utility>

#include "common/json_fields.h"
#include "jobspec/job_spec_proto.h"

namespace deepool::jobspec {
namespace {

using nlohmann::json;

// Reads an optional field into a proto setter; absent or null leaves the field unset.
template <typename T, typename Set>
Status ReadInto(const json& object, const char* name, const std::string& path, Set set) {
  auto found = object.find(name);
  if (found == object.end() || found->is_null()) return Status::Ok();
  T value{};
  RETURN_IF_ERROR(ReadOptionalField(object, name, path, &value));
  set(value);
  return Status::Ok();
}

Status ReadRole(const json& doc, v1::JobSpec* spec) {
  std::string role;
  if (!doc.contains("role")) return Status::Ok();
  RETURN_IF_ERROR(ReadOptionalField(doc, "role", "", &role));
  if (role == "fg") {
    spec->set_role(v1::JOB_ROLE_FG);
  } else if (role == "bg") {
    spec->set_role(v1::JOB_ROLE_BG);
  } else {
    return InvalidArgumentError("role: must be \"fg\" or \"bg\", got \"" + role + "\"");
  }
  return Status::Ok();
}

Status ReadGraph(const json& doc, v1::JobSpec* spec) {
  auto graph = doc.find("graph");
  if (graph == doc.end() || graph->is_null()) return Status::Ok();
  if (graph->is_object()) {
    spec->set_graph_json(graph->dump());
  } else if (graph->is_string()) {
    spec->set_graph_json(graph->get<std::string>());
  } else {
    return InvalidArgumentError("graph: must be a graph document (object)");
  }
  return Status::Ok();
}

Status ReadOptimizer(const json& doc, v1::OptimizerSpec* opt) {
  if (!doc.is_object()) return InvalidArgumentError("optimizer: must be an object");
  RETURN_IF_ERROR(CheckKnownFields(doc,
                                   {"name", "lr", "momentum", "weight_decay", "betas", "eps",
                                    "decay_1d", "schedule", "clip_grad_norm"},
                                   "optimizer."));
  const std::string path = "optimizer.";
  RETURN_IF_ERROR(ReadInto<std::string>(doc, "name", path, [&](auto v) { opt->set_name(v); }));
  RETURN_IF_ERROR(ReadInto<double>(doc, "lr", path, [&](auto v) { opt->set_lr(v); }));
  RETURN_IF_ERROR(ReadInto<double>(doc, "momentum", path, [&](auto v) { opt->set_momentum(v); }));
  RETURN_IF_ERROR(
      ReadInto<double>(doc, "weight_decay", path, [&](auto v) { opt->set_weight_decay(v); }));
  RETURN_IF_ERROR(ReadInto<double>(doc, "eps", path, [&](auto v) { opt->set_eps(v); }));
  if (doc.contains("betas")) {
    const json& betas = doc["betas"];
    if (!betas.is_array() || betas.size() != 2 || !betas[0].is_number() || !betas[1].is_number()) {
      return InvalidArgumentError("optimizer.betas: must be an array of two numbers");
    }
    opt->add_betas(betas[0].get<double>());
    opt->add_betas(betas[1].get<double>());
  }
  RETURN_IF_ERROR(ReadInto<bool>(doc, "decay_1d", path, [&](auto v) { opt->set_decay_1d(v); }));
  RETURN_IF_ERROR(
      ReadInto<double>(doc, "clip_grad_norm", path, [&](auto v) { opt->set_clip_grad_norm(v); }));
  if (doc.contains("schedule")) {
    const json& schedule = doc["schedule"];
    if (!schedule.is_object()) return InvalidArgumentError("optimizer.schedule: must be an object");
    const std::string where = "optimizer.schedule.";
    RETURN_IF_ERROR(CheckKnownFields(schedule, {"kind", "warmup_iterations", "min_lr"}, where));
    v1::LrSchedule* s = opt->mutable_schedule();
    RETURN_IF_ERROR(
        ReadInto<std::string>(schedule, "kind", where, [&](auto v) { s->set_kind(v); }));
    RETURN_IF_ERROR(ReadInto<int64_t>(schedule, "warmup_iterations", where,
                                      [&](auto v) { s->set_warmup_iterations(v); }));
    RETURN_IF_ERROR(ReadInto<double>(schedule, "min_lr", where, [&](auto v) { s->set_min_lr(v); }));
  }
  return Status::Ok();
}

// `where` is "data." or "eval.data.".
Status ReadData(const json& doc, const std::string& where, v1::DataSpec* data) {
  if (!doc.is_object()) {
    return InvalidArgumentError(where.substr(0, where.size() - 1) + ": must be an object");
  }
  RETURN_IF_ERROR(CheckKnownFields(doc, {"kind", "seed", "path", "skip_bad", "dtype"}, where));
  RETURN_IF_ERROR(ReadInto<std::string>(doc, "kind", where, [&](auto v) { data->set_kind(v); }));
  RETURN_IF_ERROR(ReadInto<int64_t>(doc, "seed", where, [&](auto v) { data->set_seed(v); }));
  RETURN_IF_ERROR(ReadInto<std::string>(doc, "path", where, [&](auto v) { data->set_path(v); }));
  RETURN_IF_ERROR(
      ReadInto<int64_t>(doc, "skip_bad", where, [&](auto v) { data->set_skip_bad(v); }));
  return ReadInto<std::string>(doc, "dtype", where, [&](auto v) { data->set_dtype(v); });
}

// {"data": {...}, "every_iterations": N, "batch": B}; JobSpecFromProto requires the data.
Status ReadEval(const json& doc, v1::EvalSpec* eval) {
  if (!doc.is_object()) return InvalidArgumentError("eval: must be an object");
  RETURN_IF_ERROR(CheckKnownFields(doc, {"data", "every_iterations", "batch"}, "eval."));
  if (doc.contains("data") && !doc["data"].is_null()) {
    RETURN_IF_ERROR(ReadData(doc["data"], "eval.data.", eval->mutable_data()));
  }
  RETURN_IF_ERROR(ReadInto<int64_t>(doc, "batch", "eval.", [&](auto v) { eval->set_batch(v); }));
  return ReadInto<int64_t>(doc, "every_iterations", "eval.",
                           [&](auto v) { eval->set_every_iterations(v); });
}

json DataToJson(const DataSpec& data) {
  json doc = {{"kind", data.kind}, {"seed", data.seed}};
  if (!data.path.empty()) doc["path"] = data.path;
  if (data.skip_bad != 0) doc["skip_bad"] = data.skip_bad;
  if (data.kind == "tokens") doc["dtype"] = data.dtype;
  return doc;
}

Status ReadCheckpoint(const json& doc, v1::JobSpec* spec) {
  auto checkpoint = doc.find("checkpoint");
  if (checkpoint == doc.end() || checkpoint->is_null()) return Status::Ok();
  if (checkpoint->is_string()) {
    spec->set_checkpoint_path(checkpoint->get<std::string>());
    return Status::Ok();
  }
  if (!checkpoint->is_object()) {
    return InvalidArgumentError(
        "checkpoint: must be {\"path\": FILE, \"dir\": DIR, \"every_iterations\": N, "
        "\"every_seconds\": T, \"keep\": K} (each optional)");
  }
  RETURN_IF_ERROR(CheckKnownFields(
      *checkpoint, {"path", "dir", "every_iterations", "every_seconds", "keep"}, "checkpoint."));
  RETURN_IF_ERROR(ReadInto<std::string>(*checkpoint, "path", "checkpoint.",
                                        [&](auto v) { spec->set_checkpoint_path(v); }));
  RETURN_IF_ERROR(ReadInto<std::string>(*checkpoint, "dir", "checkpoint.",
                                        [&](auto v) { spec->set_checkpoint_dir(v); }));
  RETURN_IF_ERROR(ReadInto<int64_t>(*checkpoint, "every_iterations", "checkpoint.",
                                    [&](auto v) { spec->set_checkpoint_every_iterations(v); }));
  RETURN_IF_ERROR(ReadInto<double>(*checkpoint, "every_seconds", "checkpoint.",
                                   [&](auto v) { spec->set_checkpoint_every_seconds(v); }));
  return ReadInto<int32_t>(*checkpoint, "keep", "checkpoint.",
                           [&](auto v) { spec->set_checkpoint_keep(v); });
}

}  // namespace

StatusOr<v1::JobSpec> JobSpecProtoFromJson(const json& doc) {
  if (!doc.is_object()) return InvalidArgumentError("job spec: must be a JSON object");
  RETURN_IF_ERROR(CheckKnownFields(doc,
                                   {"name",
                                    "model",
                                    "graph",
                                    "role",
                                    "priority",
                                    "global_batch",
                                    "gpus",
                                    "amplification_limit",
                                    "iterations",
                                    "epochs",
                                    "init",
                                    "precision",
                                    "accumulation_steps",
                                    "gradient_precision",
                                    "memory_format",
                                    "optimizer",
                                    "data",
                                    "seed",
                                    "requeue_on_failure",
                                    "on_node_loss",
                                    "profile",
                                    "checkpoint",
                                    "num_classes",
                                    "image_size",
                                    "batch_norm",
                                    "concurrent_branches",
                                    "gradient_bucket_mb",
                                    "eval"},
                                   ""));
  v1::JobSpec spec;
  RETURN_IF_ERROR(ReadInto<std::string>(doc, "name", "", [&](auto v) { spec.set_name(v); }));
  RETURN_IF_ERROR(ReadInto<std::string>(doc, "model", "", [&](auto v) { spec.set_model(v); }));
  RETURN_IF_ERROR(ReadGraph(doc, &spec));
  RETURN_IF_ERROR(ReadRole(doc, &spec));
  RETURN_IF_ERROR(ReadInto<int32_t>(doc, "priority", "", [&](auto v) { spec.set_priority(v); }));
  RETURN_IF_ERROR(
      ReadInto<int64_t>(doc, "global_batch", "", [&](auto v) { spec.set_global_batch(v); }));
  RETURN_IF_ERROR(ReadInto<int32_t>(doc, "gpus", "", [&](auto v) { spec.set_gpus(v); }));
  RETURN_IF_ERROR(ReadInto<double>(doc, "amplification_limit", "",
                                   [&](auto v) { spec.set_amplification_limit(v); }));
  RETURN_IF_ERROR(
      ReadInto<int64_t>(doc, "iterations", "", [&](auto v) { spec.set_iterations(v); }));
  RETURN_IF_ERROR(ReadInto<int64_t>(doc, "epochs", "", [&](auto v) { spec.set_epochs(v); }));
  if (doc.contains("optimizer")) {
    RETURN_IF_ERROR(ReadOptimizer(doc["optimizer"], spec.mutable_optimizer()));
  }
  if (doc.contains("data")) RETURN_IF_ERROR(ReadData(doc["data"], "data.", spec.mutable_data()));
  if (doc.contains("eval") && !doc["eval"].is_null()) {
    RETURN_IF_ERROR(ReadEval(doc["eval"], spec.mutable_eval()));
  }
  if (doc.contains("init") && !doc["init"].is_null()) {
    const json& init = doc["init"];
    if (!init.is_object()) return InvalidArgumentError("init: must be {\"path\": FILE}");
    RETURN_IF_ERROR(CheckKnownFields(init, {"path"}, "init."));
    spec.mutable_init();  // present, so that a missing path is named
    RETURN_IF_ERROR(ReadInto<std::string>(init, "path", "init.",
                                          [&](auto v) { spec.mutable_init()->set_path(v); }));
  }
  RETURN_IF_ERROR(
      ReadInto<std::string>(doc, "precision", "", [&](auto v) { spec.set_precision(v); }));
  RETURN_IF_ERROR(ReadInto<int64_t>(doc, "accumulation_steps", "",
                                    [&](auto v) { spec.set_accumulation_steps(v); }));
  RETURN_IF_ERROR(ReadInto<std::string>(doc, "gradient_precision", "",
                                        [&](auto v) { spec.set_gradient_precision(v); }));
  RETURN_IF_ERROR(
      ReadInto<std::string>(doc, "memory_format", "", [&](auto v) { spec.set_memory_format(v); }));
  RETURN_IF_ERROR(ReadInto<int64_t>(doc, "seed", "", [&](auto v) { spec.set_seed(v); }));
  RETURN_IF_ERROR(ReadInto<bool>(doc, "requeue_on_failure", "",
                                 [&](auto v) { spec.set_requeue_on_failure(v); }));
  RETURN_IF_ERROR(
      ReadInto<std::string>(doc, "on_node_loss", "", [&](auto v) { spec.set_on_node_loss(v); }));
  RETURN_IF_ERROR(ReadInto<std::string>(doc, "profile", "", [&](auto v) { spec.set_profile(v); }));
  RETURN_IF_ERROR(
      ReadInto<std::string>(doc, "batch_norm", "", [&](auto v) { spec.set_batch_norm(v); }));
  RETURN_IF_ERROR(ReadInto<bool>(doc, "concurrent_branches", "",
                                 [&](auto v) { spec.set_concurrent_branches(v); }));
  RETURN_IF_ERROR(ReadCheckpoint(doc, &spec));
  RETURN_IF_ERROR(
      ReadInto<int64_t>(doc, "num_classes", "", [&](auto v) { spec.set_num_classes(v); }));
  RETURN_IF_ERROR(
      ReadInto<int64_t>(doc, "image_size", "", [&](auto v) { spec.set_image_size(v); }));
  RETURN_IF_ERROR(ReadInto<double>(doc, "gradient_bucket_mb", "",
                                   [&](auto v) { spec.set_gradient_bucket_mb(v); }));
  // Parsed text is UTF-8 already; a document built in memory (`deepool submit --name` from
  // argv) may not be, and would only fail at the coordinator, as an unparsable request.
  RETURN_IF_ERROR(CheckStringsAreUtf8(spec, ""));
  return spec;
}

StatusOr<v1::JobSpec> ParseJobSpecProto(std::string_view text) {
  ASSIGN_OR_RETURN(const json doc, ParseJson(text, "job spec"));
  return JobSpecProtoFromJson(doc);
}

StatusOr<JobSpec> JobSpecFromJson(const json& doc) {
  // One reader for both forms: the JSON becomes the API message, and the message gets the one
  // set of defaults and the one validation.
  ASSIGN_OR_RETURN(const v1::JobSpec proto, JobSpecProtoFromJson(doc));
  return JobSpecFromProto(proto);
}

StatusOr<JobSpec> ParseJobSpecJson(std::string_view text) {
  ASSIGN_OR_RETURN(const v1::JobSpec proto, ParseJobSpecProto(text));
  return JobSpecFromProto(proto);
}

json JobSpecToJson(const JobSpec& spec) {
  json doc = {{"name", spec.name},
              {"role", RoleName(spec.role)},
              {"priority", spec.priority},
              {"global_batch", spec.global_batch},
              {"gpus", spec.gpus},
              {"amplification_limit", spec.amplification_limit},
              {"optimizer",
               {{"name", spec.optimizer.name},
                {"lr", spec.optimizer.lr},
                {"momentum", spec.optimizer.momentum},
                {"weight_decay", spec.optimizer.weight_decay},
                {"betas", {spec.optimizer.betas[0], spec.optimizer.betas[1]}},
                {"eps", spec.optimizer.eps}}},
              {"data", DataToJson(spec.data)},
              {"seed", spec.seed},
              {"requeue_on_failure", spec.requeue_on_failure},
              {"profile", spec.profile},
              {"batch_norm", spec.batch_norm},
              {"concurrent_branches", spec.concurrent_branches},
              {"gradient_bucket_mb", spec.gradient_bucket_mb}};
  if (spec.epochs > 0) {
    doc["epochs"] = spec.epochs;
  } else {
    doc["iterations"] = spec.iterations;
  }
  if (!spec.model.empty()) doc["model"] = spec.model;
  // The training recipes only when set, as the run spec writes them.
  json& optimizer = doc["optimizer"];
  if (!spec.optimizer.decay_1d) optimizer["decay_1d"] = false;
  if (spec.optimizer.clip_grad_norm != 0) {
    optimizer["clip_grad_norm"] = spec.optimizer.clip_grad_norm;
  }
  if (!(spec.optimizer.schedule == protocol::LrScheduleSpec{})) {
    optimizer["schedule"] = {{"kind", spec.optimizer.schedule.kind},
                             {"warmup_iterations", spec.optimizer.schedule.warmup_iterations},
                             {"min_lr", spec.optimizer.schedule.min_lr}};
  }
  if (!spec.graph_json.empty()) {
    StatusOr<json> graph = ParseJson(spec.graph_json, "graph");
    doc["graph"] = graph.ok() ? std::move(*graph) : json(spec.graph_json);
  }
  if (!spec.on_node_loss.empty()) doc["on_node_loss"] = spec.on_node_loss;
  if (!spec.init_path.empty()) doc["init"] = {{"path", spec.init_path}};
  if (spec.precision) doc["precision"] = planner::PrecisionName(*spec.precision);
  if (spec.accumulation_steps != 1) doc["accumulation_steps"] = spec.accumulation_steps;
  if (spec.gradient_precision != planner::Precision::kFp32) {
    doc["gradient_precision"] = planner::PrecisionName(spec.gradient_precision);
  }
  if (spec.memory_format != planner::MemoryFormat::kAuto) {
    doc["memory_format"] = planner::MemoryFormatName(spec.memory_format);
  }
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
  if (spec.eval) {
    doc["eval"] = {{"data", DataToJson(spec.eval->data)},
                   {"every_iterations", spec.eval->every_iterations}};
    if (spec.eval->batch) doc["eval"]["batch"] = *spec.eval->batch;
  }
  return doc;
}

}  // namespace deepool::jobspec

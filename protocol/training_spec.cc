#include "protocol/training_spec.h"

#include <algorithm>

#include "common/json_fields.h"
#include "protocol/version.h"

namespace deepool::protocol {
namespace {

using nlohmann::json;

// "optimizer." -> "optimizer": the object's own name, for errors about the object itself.
std::string ObjectName(const std::string& where) { return where.substr(0, where.size() - 1); }

}  // namespace

Status ValidateOptimizer(const OptimizerSpec& spec) {
  if (spec.name != "sgd" && spec.name != "adam" && spec.name != "adamw") {
    return InvalidArgumentError("optimizer.name \"" + spec.name + "\" is not sgd, adam or adamw");
  }
  if (!(spec.lr > 0)) return InvalidArgumentError("optimizer.lr must be > 0");
  if (spec.momentum < 0) return InvalidArgumentError("optimizer.momentum must be >= 0");
  if (spec.weight_decay < 0) return InvalidArgumentError("optimizer.weight_decay must be >= 0");
  for (double beta : spec.betas) {
    if (beta < 0 || beta >= 1) return InvalidArgumentError("optimizer.betas must be in [0, 1)");
  }
  if (!(spec.eps > 0)) return InvalidArgumentError("optimizer.eps must be > 0");
  const LrScheduleSpec& schedule = spec.schedule;
  if (schedule.kind != "constant" && schedule.kind != "cosine" && schedule.kind != "linear") {
    return InvalidArgumentError("optimizer.schedule.kind \"" + schedule.kind +
                                "\" is not constant, cosine or linear");
  }
  if (schedule.warmup_iterations < 0) {
    return InvalidArgumentError("optimizer.schedule.warmup_iterations must be >= 0");
  }
  if (!(schedule.min_lr >= 0 && schedule.min_lr <= spec.lr)) {
    return InvalidArgumentError("optimizer.schedule.min_lr must be in [0, optimizer.lr]");
  }
  if (!(spec.clip_grad_norm >= 0)) {
    return InvalidArgumentError("optimizer.clip_grad_norm must be >= 0 (0: no clipping)");
  }
  return Status::Ok();
}

StatusOr<OptimizerSpec> ParseOptimizerJson(const json& doc, const std::string& where) {
  if (!doc.is_object()) return InvalidArgumentError(ObjectName(where) + " must be an object");
  OptimizerSpec spec;
  RETURN_IF_ERROR(ReadOptionalField(doc, "name", where, &spec.name));
  if (spec.name == "adamw") spec.weight_decay = kAdamWDefaultWeightDecay;
  RETURN_IF_ERROR(ReadOptionalField(doc, "lr", where, &spec.lr));
  RETURN_IF_ERROR(ReadOptionalField(doc, "momentum", where, &spec.momentum));
  RETURN_IF_ERROR(ReadOptionalField(doc, "weight_decay", where, &spec.weight_decay));
  RETURN_IF_ERROR(ReadOptionalField(doc, "eps", where, &spec.eps));
  if (doc.contains("betas")) {
    const json& betas = doc["betas"];
    if (!betas.is_array() || betas.size() != 2 || !betas[0].is_number() || !betas[1].is_number()) {
      return InvalidArgumentError(where + "betas must be two numbers");
    }
    spec.betas = {betas[0].get<double>(), betas[1].get<double>()};
  }
  RETURN_IF_ERROR(ReadOptionalField(doc, "decay_1d", where, &spec.decay_1d));
  RETURN_IF_ERROR(ReadOptionalField(doc, "clip_grad_norm", where, &spec.clip_grad_norm));
  if (doc.contains("schedule")) {
    const json& schedule = doc["schedule"];
    const std::string schedule_where = where + "schedule.";
    if (!schedule.is_object()) return InvalidArgumentError(where + "schedule must be an object");
    RETURN_IF_ERROR(ReadOptionalField(schedule, "kind", schedule_where, &spec.schedule.kind));
    RETURN_IF_ERROR(ReadOptionalField(schedule, "warmup_iterations", schedule_where,
                                      &spec.schedule.warmup_iterations));
    RETURN_IF_ERROR(ReadOptionalField(schedule, "min_lr", schedule_where, &spec.schedule.min_lr));
  }
  return spec;
}

int OptimizerProtocolVersion(std::string_view name) {
  return name == "adamw" ? kAdamWProtocolVersion : kOldestProtocolVersion;
}

int OptimizerProtocolVersion(const OptimizerSpec& spec) {
  const int version = OptimizerProtocolVersion(spec.name);
  return spec.UsesRecipes() ? std::max(version, kRecipesProtocolVersion) : version;
}

int DataProtocolVersion(std::string_view kind) {
  if (kind == "image_folder") return kImageFolderProtocolVersion;
  if (kind == "tokens") return kTokensProtocolVersion;
  return kOldestProtocolVersion;
}

int TokenBytes(std::string_view dtype) {
  if (dtype == "uint16") return 2;
  if (dtype == "uint32") return 4;
  return 0;
}

json OptimizerToJson(const OptimizerSpec& spec) {
  json doc;
  if (spec.name == "adam" || spec.name == "adamw") {
    doc = {{"name", spec.name},
           {"lr", spec.lr},
           {"betas", {spec.betas[0], spec.betas[1]}},
           {"eps", spec.eps},
           {"weight_decay", spec.weight_decay}};
  } else {
    doc = {{"name", spec.name},
           {"lr", spec.lr},
           {"momentum", spec.momentum},
           {"weight_decay", spec.weight_decay}};
  }
  if (!spec.decay_1d) doc["decay_1d"] = false;
  if (spec.clip_grad_norm != 0) doc["clip_grad_norm"] = spec.clip_grad_norm;
  if (!(spec.schedule == LrScheduleSpec{})) {
    doc["schedule"] = {{"kind", spec.schedule.kind},
                       {"warmup_iterations", spec.schedule.warmup_iterations},
                       {"min_lr", spec.schedule.min_lr}};
  }
  return doc;
}

Status ValidateDataSpec(const DataSpec& spec, const std::string& where) {
  if (spec.kind == "synthetic") return Status::Ok();
  if (spec.kind == "cifar10" || spec.kind == "image_folder" || spec.kind == "tokens") {
    if (spec.path.empty()) return InvalidArgumentError(where + "path is required for " + spec.kind);
    if (spec.skip_bad < 0) return InvalidArgumentError(where + "skip_bad must be >= 0");
    if (TokenBytes(spec.dtype) == 0) {
      return InvalidArgumentError(where + "dtype must be uint16 or uint32, not " + spec.dtype);
    }
    return Status::Ok();
  }
  return InvalidArgumentError(where + "kind \"" + spec.kind +
                              "\" is not synthetic, cifar10, image_folder or tokens");
}

StatusOr<DataSpec> ParseDataFlag(std::string_view text, std::string_view flag) {
  DataSpec data;
  if (text == "synthetic") return data;
  for (const char* kind : {"cifar10", "image_folder", "tokens"}) {
    const std::string prefix = std::string(kind) + ":";
    if (text.substr(0, prefix.size()) == prefix && text.size() > prefix.size()) {
      data.kind = kind;
      data.path = std::string(text.substr(prefix.size()));
      return data;
    }
  }
  return InvalidArgumentError(std::string(flag) +
                              " must be synthetic, cifar10:PATH, image_folder:PATH or tokens:PATH, "
                              "not " +
                              std::string(text));
}

StatusOr<DataSpec> ParseDataJson(const json& doc, const std::string& where) {
  if (!doc.is_object()) return InvalidArgumentError(ObjectName(where) + " must be an object");
  DataSpec spec;
  RETURN_IF_ERROR(ReadOptionalField(doc, "kind", where, &spec.kind));
  RETURN_IF_ERROR(ReadOptionalField(doc, "seed", where, &spec.seed));
  RETURN_IF_ERROR(ReadOptionalField(doc, "path", where, &spec.path));
  RETURN_IF_ERROR(ReadOptionalField(doc, "skip_bad", where, &spec.skip_bad));
  RETURN_IF_ERROR(ReadOptionalField(doc, "dtype", where, &spec.dtype));
  return spec;
}

Status ValidateEvalSpec(const EvalSpec& spec, const std::string& where) {
  RETURN_IF_ERROR(ValidateDataSpec(spec.data, where + "data."));
  if (spec.every_iterations < 0) {
    return InvalidArgumentError(where + "every_iterations must be >= 0");
  }
  if (spec.batch && *spec.batch < 1) {
    return InvalidArgumentError(where +
                                "batch must be >= 1 (the samples of one evaluation pass; leave it "
                                "out for the job's global batch)");
  }
  return Status::Ok();
}

StatusOr<EvalSpec> ParseEvalJson(const json& doc, const std::string& where) {
  if (!doc.is_object()) return InvalidArgumentError(ObjectName(where) + " must be an object");
  RETURN_IF_ERROR(CheckKnownFields(doc, {"data", "every_iterations", "batch"}, where));
  EvalSpec spec;
  ASSIGN_OR_RETURN(const json* data, ReadRequiredObject(doc, "data", where));
  ASSIGN_OR_RETURN(spec.data, ParseDataJson(*data, where + "data."));
  RETURN_IF_ERROR(ReadOptionalField(doc, "every_iterations", where, &spec.every_iterations));
  if (doc.contains("batch") && !doc["batch"].is_null()) {
    int64_t batch = 0;
    RETURN_IF_ERROR(ReadOptionalField(doc, "batch", where, &batch));
    spec.batch = batch;
  }
  return spec;
}

json EvalToJson(const EvalSpec& spec) {
  json doc{{"data", DataToJson(spec.data)}, {"every_iterations", spec.every_iterations}};
  if (spec.batch) doc["batch"] = *spec.batch;
  return doc;
}

Status ValidatePeriodicCheckpoints(const PeriodicCheckpoints& spec, const std::string& where) {
  if (spec.dir.empty()) return InvalidArgumentError(where + "dir is empty");
  if (spec.every_iterations < 0) {
    return InvalidArgumentError(where + "every_iterations must be >= 0");
  }
  if (!(spec.every_seconds >= 0 && spec.every_seconds <= 1e7)) {
    return InvalidArgumentError(where + "every_seconds must be between 0 and 1e7");
  }
  if (spec.keep < 1) return InvalidArgumentError(where + "keep must be >= 1");
  return Status::Ok();
}

Status ReadPeriodicCheckpointFields(const json& doc, const std::string& where,
                                    PeriodicCheckpoints* spec) {
  RETURN_IF_ERROR(ReadOptionalField(doc, "dir", where, &spec->dir));
  RETURN_IF_ERROR(ReadOptionalField(doc, "every_iterations", where, &spec->every_iterations));
  RETURN_IF_ERROR(ReadOptionalField(doc, "every_seconds", where, &spec->every_seconds));
  return ReadOptionalField(doc, "keep", where, &spec->keep);
}

void AddPeriodicCheckpointFields(const PeriodicCheckpoints& spec, json* doc) {
  (*doc)["dir"] = spec.dir;
  (*doc)["every_iterations"] = spec.every_iterations;
  if (spec.every_seconds > 0) (*doc)["every_seconds"] = spec.every_seconds;
  (*doc)["keep"] = spec.keep;
}

json DocumentOrNull(std::string_view text) {
  StatusOr<json> doc = ParseJson(text, "training spec");
  return doc.ok() ? std::move(*doc) : json();
}

json DataToJson(const DataSpec& spec) {
  if (spec.kind == "cifar10") return {{"kind", spec.kind}, {"path", spec.path}};
  if (spec.kind == "image_folder") {
    return {
        {"kind", spec.kind}, {"path", spec.path}, {"seed", spec.seed}, {"skip_bad", spec.skip_bad}};
  }
  if (spec.kind == "tokens") {
    return {{"kind", spec.kind}, {"path", spec.path}, {"seed", spec.seed}, {"dtype", spec.dtype}};
  }
  return {{"kind", spec.kind}, {"seed", spec.seed}};
}

}  // namespace deepool::protocol

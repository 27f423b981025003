#include "jobspec/job_spec.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/content_digest.h"
#include "common/limits.h"
#include "common/utf8.h"
#include "jobspec/job_spec_json.h"
#include "planner/device_model.h"
#include "protocol/run_spec.h"
#include "protocol/version.h"

namespace deepool::jobspec {
namespace {

// Upper bounds far above any real job, so a typo or a hostile spec fails here, not as a huge
// allocation on a worker.
constexpr int64_t kMaxGlobalBatch = 1 << 20;
constexpr int64_t kMaxEpochs = 1'000'000;
constexpr int64_t kMaxNumClasses = 1'000'000;
constexpr int64_t kMaxImageSize = 4096;

Status FieldError(const std::string& field, const std::string& what) {
  return InvalidArgumentError(field + ": " + what);
}

Status CheckPath(const std::string& field, const std::string& path) {
  if (path.size() > kMaxPathBytes) {
    return FieldError(field, "must be at most " + std::to_string(kMaxPathBytes) + " bytes");
  }
  if (HasControlCharacters(path)) return FieldError(field, "has control characters");
  return Status::Ok();
}

// `where` is "data." or "eval.data.".
Status CheckData(const DataSpec& data, const std::string& where) {
  RETURN_IF_ERROR(CheckPath(where + "path", data.path));
  if (data.kind != "synthetic" && data.kind != "cifar10" && data.kind != "image_folder" &&
      data.kind != "tokens") {
    return FieldError(where + "kind",
                      "must be \"synthetic\", \"cifar10\", \"image_folder\" or \"tokens\", got \"" +
                          data.kind + "\"");
  }
  if (data.kind != "synthetic" && data.path.empty()) {
    return FieldError(where + "path", "is required for " + data.kind);
  }
  if (data.skip_bad < 0) return FieldError(where + "skip_bad", "must be >= 0");
  if (protocol::TokenBytes(data.dtype) == 0) {
    return FieldError(where + "dtype",
                      "must be \"uint16\" or \"uint32\", got \"" + data.dtype + "\"");
  }
  return Status::Ok();
}

// Exactly one of iterations and epochs; epochs only for FG jobs, whose executors count their
// training set (a BG job trains a number of iterations, or until its FG job ends).
Status CheckLength(const JobSpec& spec) {
  if ((spec.iterations != 0) == (spec.epochs != 0)) {
    return FieldError("iterations", "give exactly one of \"iterations\" and \"epochs\"");
  }
  if (spec.epochs != 0) {
    if (spec.role == JobRole::kBg) {
      return FieldError("epochs", "are for foreground jobs (give a bg job iterations)");
    }
    if (spec.epochs < 1 || spec.epochs > kMaxEpochs) {
      return FieldError("epochs", "must be in [1, " + std::to_string(kMaxEpochs) + "]");
    }
    return Status::Ok();
  }
  if (spec.iterations < 1 || spec.iterations > protocol::kMaxRunIterations) {
    return FieldError("iterations",
                      "must be in [1, " + std::to_string(protocol::kMaxRunIterations) + "]");
  }
  return Status::Ok();
}

Status CheckEval(const JobSpec& spec) {
  if (spec.role == JobRole::kBg) return FieldError("eval", "only foreground jobs are evaluated");
  if (spec.eval->every_iterations < 0) return FieldError("eval.every_iterations", "must be >= 0");
  if (spec.eval->batch && *spec.eval->batch < 1) {
    return FieldError("eval.batch",
                      "must be >= 1 (the samples of one evaluation pass; leave it out for the "
                      "global batch)");
  }
  return CheckData(spec.eval->data, "eval.data.");
}

// The optimizer's training recipes (protocol::ValidateOptimizer's rules, in this file's form).
Status CheckRecipes(const JobSpec& spec) {
  const OptimizerSpec& opt = spec.optimizer;
  const protocol::LrScheduleSpec& schedule = opt.schedule;
  if (schedule.kind != "constant" && schedule.kind != "cosine" && schedule.kind != "linear") {
    return FieldError(
        "optimizer.schedule.kind",
        "must be \"constant\", \"cosine\" or \"linear\", got \"" + schedule.kind + "\"");
  }
  if (schedule.warmup_iterations < 0) {
    return FieldError("optimizer.schedule.warmup_iterations", "must be >= 0");
  }
  if (!(schedule.min_lr >= 0 && schedule.min_lr <= opt.lr)) {
    return FieldError("optimizer.schedule.min_lr", "must be in [0, optimizer.lr]");
  }
  if (!(opt.clip_grad_norm >= 0) || !std::isfinite(opt.clip_grad_norm)) {
    return FieldError("optimizer.clip_grad_norm", "must be >= 0 (0: no clipping)");
  }
  if (spec.role == JobRole::kBg &&
      (opt.clip_grad_norm != 0 || !(schedule == protocol::LrScheduleSpec{}))) {
    return FieldError("optimizer", "schedule and clip_grad_norm are for foreground jobs only");
  }
  return Status::Ok();
}

// Gradient accumulation and the all-reduce width: both shape how an FG job's gradients are
// made and summed, so a BG job (one device, no all-reduce, its iterations squeezed into an FG
// job's idle time) takes neither.
Status CheckAccumulation(const JobSpec& spec) {
  if (spec.accumulation_steps < 1 || spec.accumulation_steps > protocol::kMaxAccumulationSteps) {
    return FieldError("accumulation_steps",
                      "must be in [1, " + std::to_string(protocol::kMaxAccumulationSteps) + "]");
  }
  if (spec.global_batch % spec.accumulation_steps != 0) {
    return FieldError("accumulation_steps",
                      std::to_string(spec.accumulation_steps) + " does not divide global_batch " +
                          std::to_string(spec.global_batch) +
                          " (global_batch counts an iteration's samples, each pass takes "
                          "global_batch / accumulation_steps)");
  }
  if (spec.gradient_precision != planner::Precision::kFp32 &&
      spec.gradient_precision != planner::Precision::kBf16) {
    return FieldError("gradient_precision",
                      "must be \"fp32\" or \"bf16\", got \"" +
                          std::string(planner::PrecisionName(spec.gradient_precision)) + "\"");
  }
  if (spec.role == JobRole::kBg && spec.accumulation_steps != 1) {
    return FieldError("accumulation_steps",
                      "is for foreground jobs (a bg job trains one pass per iteration)");
  }
  if (spec.role == JobRole::kBg && spec.gradient_precision != planner::Precision::kFp32) {
    return FieldError("gradient_precision",
                      "is for foreground jobs (a bg job runs on one device and all-reduces "
                      "nothing)");
  }
  if (spec.gpus > PassBatch(spec)) {
    return FieldError("gpus", "must be <= global_batch / accumulation_steps (" +
                                  std::to_string(PassBatch(spec)) + ", one pass's samples)");
  }
  return Status::Ok();
}

}  // namespace

const char* RoleName(JobRole role) { return role == JobRole::kBg ? "bg" : "fg"; }

Status ValidateJobSpec(const JobSpec& spec) {
  if (spec.name.size() > 128) return FieldError("name", "must be at most 128 characters");
  if (HasControlCharacters(spec.name)) return FieldError("name", "has control characters");
  if (spec.model.empty() == spec.graph_json.empty()) {
    return FieldError("model", "give exactly one of \"model\" (a zoo name) or \"graph\"");
  }
  if (spec.graph_json.size() > kMaxGraphJsonBytes) {
    return FieldError("graph", "is " + std::to_string(spec.graph_json.size()) + " bytes; at most " +
                                   std::to_string(kMaxGraphJsonBytes) + " are accepted");
  }
  RETURN_IF_ERROR(CheckPath("checkpoint.path", spec.checkpoint_path));
  RETURN_IF_ERROR(CheckPath("checkpoint.dir", spec.checkpoint_dir));
  RETURN_IF_ERROR(CheckPath("init.path", spec.init_path));
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
  if (spec.role == JobRole::kBg && spec.precision == planner::Precision::kFp16) {
    return FieldError("precision", "fp16 needs loss scaling, which BG jobs lack: use bf16");
  }
  if (!std::isfinite(spec.amplification_limit) ||
      (spec.amplification_limit != 0 && spec.amplification_limit < 1)) {
    return FieldError("amplification_limit", "must be 0 (unconstrained) or >= 1");
  }
  RETURN_IF_ERROR(CheckLength(spec));
  RETURN_IF_ERROR(CheckAccumulation(spec));
  // The background trainer keeps NCHW tensors (its CUDA graphs are captured as they are), and
  // auto resolves to contiguous for it.
  if (spec.role == JobRole::kBg && spec.memory_format != planner::MemoryFormat::kAuto) {
    return FieldError("memory_format", "is for foreground jobs (a bg job trains contiguous)");
  }
  const OptimizerSpec& opt = spec.optimizer;
  if (opt.name != "sgd" && opt.name != "adam" && opt.name != "adamw") {
    return FieldError("optimizer.name",
                      "must be \"sgd\", \"adam\" or \"adamw\", got \"" + opt.name + "\"");
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
  RETURN_IF_ERROR(CheckRecipes(spec));
  RETURN_IF_ERROR(CheckData(spec.data, "data."));
  if (spec.eval) RETURN_IF_ERROR(CheckEval(spec));
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

int64_t PassBatch(const JobSpec& spec) {
  return spec.accumulation_steps > 0 ? spec.global_batch / spec.accumulation_steps
                                     : spec.global_batch;
}

bool RequeuesOnFailure(const JobSpec& spec) {
  return spec.requeue_on_failure || spec.on_node_loss == "wait" || spec.on_node_loss == "replan";
}

bool ReplansOnNodeLoss(const JobSpec& spec) { return spec.on_node_loss == "replan"; }

bool SynchronizesBatchNorm(const JobSpec& spec) { return spec.batch_norm != "per_device"; }

protocol::OptimizerSpec RunSpecOptimizer(const OptimizerSpec& opt) {
  protocol::OptimizerSpec spec;
  spec.name = opt.name;
  spec.lr = opt.lr;
  spec.momentum = opt.momentum;
  spec.weight_decay = opt.weight_decay;
  spec.betas = opt.betas;
  spec.eps = opt.eps;
  spec.decay_1d = opt.decay_1d;
  spec.schedule = opt.schedule;
  spec.clip_grad_norm = opt.clip_grad_norm;
  return spec;
}

int RequiredProtocolVersion(const JobSpec& spec) {
  int version = std::max(protocol::OptimizerProtocolVersion(RunSpecOptimizer(spec.optimizer)),
                         protocol::DataProtocolVersion(spec.data.kind));
  if (spec.eval) {
    version = std::max({version, protocol::kEvaluationProtocolVersion,
                        protocol::DataProtocolVersion(spec.eval->data.kind)});
  }
  if (spec.epochs > 0) version = std::max(version, protocol::kEpochsProtocolVersion);
  if (!spec.init_path.empty()) version = std::max(version, protocol::kInitProtocolVersion);
  if (spec.precision && *spec.precision != planner::Precision::kFp32) {
    version = std::max(version, protocol::kPrecisionProtocolVersion);
  }
  if (spec.accumulation_steps != 1 || spec.gradient_precision != planner::Precision::kFp32) {
    version = std::max(version, protocol::kAccumulationProtocolVersion);
  }
  if (spec.memory_format != planner::MemoryFormat::kAuto) {
    version = std::max(version, protocol::kMemoryFormatProtocolVersion);
  }
  return version;
}

planner::Precision TrainingPrecision(const JobSpec& spec, const std::string& device_type,
                                     bool nodes_read_precision) {
  if (spec.precision) return *spec.precision;
  if (device_type == "cpu" || !nodes_read_precision) return planner::Precision::kFp32;
  const StatusOr<std::vector<planner::Precision>> supported =
      planner::SupportedPrecisions(device_type);
  const bool bf16 = supported.ok() && std::find(supported->begin(), supported->end(),
                                                planner::Precision::kBf16) != supported->end();
  return bf16 ? planner::Precision::kBf16 : planner::Precision::kFp32;
}

int64_t SpecBytes(const JobSpec& spec) {
  return static_cast<int64_t>(
      sizeof(JobSpec) + spec.graph_json.size() + spec.name.size() + spec.model.size() +
      spec.data.path.size() + spec.checkpoint_path.size() + spec.checkpoint_dir.size() +
      spec.init_path.size() + (spec.eval ? spec.eval->data.path.size() : 0));
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

}  // namespace deepool::jobspec

// The parts of a training job that both the run spec and its background part carry: the
// optimizer, the data set and periodic checkpoints (docs/formats.md, "Run specs").
//   "optimizer": {"name":"sgd","lr":L,"momentum":M,"weight_decay":W}
//              | {"name":"adam","lr":L,"betas":[B1,B2],"eps":E,"weight_decay":W}
//              | {"name":"adamw",...as adam}  (decoupled weight decay; executor protocol 2)
//                any of them with the training recipes (executor protocol 7):
//                "decay_1d":false, "clip_grad_norm":C,
//                "schedule":{"kind":"constant"|"cosine"|"linear","warmup_iterations":W,"min_lr":M}
//   "data":      {"kind":"synthetic","seed":S} | {"kind":"cifar10","path":P}
//              | {"kind":"image_folder","path":P,"seed":S,"skip_bad":N}
//              | {"kind":"tokens","path":P,"seed":S,"dtype":"uint16"|"uint32"}  (protocol 4)
//   "checkpoint": {"dir":"DIR","every_iterations":N,"every_seconds":T,"keep":K}  (periodic part)
//   "eval":      {"data":{...as "data"},"every_iterations":N,"batch":B}  (executor protocol 4)
// Readers take `where`, what precedes the field names in errors ("optimizer.",
// "background.data."); they check types, and the Validate functions check values.
// Threading: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace deepool::protocol {

// The learning rate over a run (worker/runtime/layers/lr_schedule.h has the formula): linear
// warm-up over `warmup_iterations`, then constant, or a cosine or linear decay to `min_lr` at the
// run's last iteration.
struct LrScheduleSpec {
  std::string kind = "constant";  // "constant", "cosine" or "linear"
  int64_t warmup_iterations = 0;  // >= 0
  double min_lr = 0;              // cosine, linear: in [0, lr]
  bool operator==(const LrScheduleSpec& o) const {
    return kind == o.kind && warmup_iterations == o.warmup_iterations && min_lr == o.min_lr;
  }
};

struct OptimizerSpec {
  // "sgd", "adam" (weight decay added to the gradient, as torch.optim.Adam) or "adamw" (weight
  // decay applied to the weights apart from the adaptive step, as torch.optim.AdamW).
  std::string name = "sgd";
  double lr = 0.01;
  double momentum = 0.0;  // sgd
  // ParseOptimizerJson defaults it to kAdamWDefaultWeightDecay for adamw, as torch does.
  double weight_decay = 0.0;
  std::array<double, 2> betas{0.9, 0.999};  // adam, adamw
  double eps = 1e-8;                        // adam, adamw
  // The training recipes (executor protocol kRecipesProtocolVersion; docs/runtime.md, "Training
  // recipes"). false: parameters of at most one dimension (biases, norm weights) go in a second
  // param group without weight decay, as timm's and nanoGPT's recipes (`p.ndim <= 1`).
  bool decay_1d = true;
  LrScheduleSpec schedule;
  // > 0: the gradients of all the job's parameters are scaled so that their global L2 norm is
  // at most this, as torch.nn.utils.clip_grad_norm_; 0: no clipping.
  double clip_grad_norm = 0;
  // Whether any recipe field differs from its default (the spec then needs protocol 7).
  bool UsesRecipes() const {
    return !decay_1d || !(schedule == LrScheduleSpec{}) || clip_grad_norm != 0;
  }
  bool operator==(const OptimizerSpec& o) const {
    return name == o.name && lr == o.lr && momentum == o.momentum &&
           weight_decay == o.weight_decay && betas == o.betas && eps == o.eps &&
           decay_1d == o.decay_1d && schedule == o.schedule && clip_grad_norm == o.clip_grad_norm;
  }
};

// torch.optim.AdamW's default weight decay, which an adamw optimizer without one gets.
inline constexpr double kAdamWDefaultWeightDecay = 0.01;

// Names the offending field: "optimizer.lr must be > 0".
Status ValidateOptimizer(const OptimizerSpec& spec);

// The oldest executor protocol (protocol/version.h) that can express an optimizer of this name:
// kAdamWProtocolVersion for "adamw", else kOldestProtocolVersion. The one rule for both the run
// spec's version (RequiredProtocolVersion) and where the coordinator may place a job.
int OptimizerProtocolVersion(std::string_view name);
// The oldest executor protocol that can express the whole optimizer object: its name's, and
// kRecipesProtocolVersion when it uses a training recipe (OptimizerSpec::UsesRecipes).
int OptimizerProtocolVersion(const OptimizerSpec& spec);

// Absent fields keep their defaults. Writes only the fields of the named optimizer, and the
// recipe fields only when they differ from their defaults (so older readers see what they know).
StatusOr<OptimizerSpec> ParseOptimizerJson(const nlohmann::json& doc, const std::string& where);
nlohmann::json OptimizerToJson(const OptimizerSpec& spec);

struct DataSpec {
  std::string kind = "synthetic";  // "synthetic", "cifar10", "image_folder" or "tokens"
  // synthetic; image_folder: shuffling and augmentation; tokens: the windows' offsets
  uint64_t seed = 0;
  // cifar10: a .bin file or a folder of them; image_folder: a folder of class folders or a list
  // file (worker/runtime/data/image_folder.h); tokens: a flat file of token ids
  // (worker/runtime/data/token_file.h)
  std::string path;
  int64_t skip_bad = 0;          // image_folder: unreadable samples skipped before the job fails
  std::string dtype = "uint16";  // tokens: the ids' type, "uint16" or "uint32"
  bool operator==(const DataSpec& o) const {
    return kind == o.kind && seed == o.seed && path == o.path && skip_bad == o.skip_bad &&
           dtype == o.dtype;
  }
};

// The bytes of one token id of `dtype` ("uint16": 2, "uint32": 4); 0 for another name.
int TokenBytes(std::string_view dtype);

// The oldest executor protocol that can read data of this kind: kImageFolderProtocolVersion for
// "image_folder", kTokensProtocolVersion for "tokens", else kOldestProtocolVersion (with
// OptimizerProtocolVersion, the rule for RequiredProtocolVersion and for placement).
int DataProtocolVersion(std::string_view kind);

// Names the offending field: "data.path is required for cifar10" (`where` is "data." or
// "eval.data.").
Status ValidateDataSpec(const DataSpec& spec, const std::string& where = "data.");

// The command-line form of a data set, which deepool-train's --data and --eval-data and
// `deepool submit`'s --eval-data take: "synthetic", "cifar10:PATH", "image_folder:PATH" or
// "tokens:PATH" (uint16 ids). The path is kept as given and seed, skip_bad and dtype keep their
// defaults (the caller's to set). Errors name `flag`: "--eval-data must be synthetic,
// cifar10:PATH, image_folder:PATH or tokens:PATH, not imagenet".
StatusOr<DataSpec> ParseDataFlag(std::string_view text, std::string_view flag);

// Absent fields keep their defaults. Writes only the fields of the named kind.
StatusOr<DataSpec> ParseDataJson(const nlohmann::json& doc, const std::string& where);
nlohmann::json DataToJson(const DataSpec& spec);

// The run spec's and job spec's "eval" object: a held-out data set that the job's plan runs
// through, in passes of `batch` samples (default: the job's global batch), every
// `every_iterations` iterations (0: only at the end) and after the last iteration. Evaluation
// needs executor protocol kEvaluationProtocolVersion (and the data kind's DataProtocolVersion).
struct EvalSpec {
  DataSpec data;                 // kind "image_folder", "cifar10" or "synthetic"
  int64_t every_iterations = 0;  // >= 0
  // Samples per pass, >= 1; absent: the plan's global batch. Other batches run under the plan
  // scaled to them (planner::ScalePlan); without autograd a pass holds no activations for
  // backward, so a batch larger than training's usually evaluates faster.
  std::optional<int64_t> batch = std::nullopt;
  // The samples of one pass under a plan for `global_batch`.
  int64_t PassBatch(int64_t global_batch) const { return batch.value_or(global_batch); }
  bool operator==(const EvalSpec& o) const {
    return data == o.data && every_iterations == o.every_iterations && batch == o.batch;
  }
};

// Names the offending field after `where` ("eval."): "eval.every_iterations must be >= 0",
// "eval.data.path is required for cifar10", "eval.batch must be >= 1 ...".
Status ValidateEvalSpec(const EvalSpec& spec, const std::string& where);
// "data" is required; every_iterations defaults to 0; batch is optional; other fields are
// refused by name.
StatusOr<EvalSpec> ParseEvalJson(const nlohmann::json& doc, const std::string& where);
nlohmann::json EvalToJson(const EvalSpec& spec);

// Periodic checkpoints (worker/runtime/checkpoints/checkpoint_dir.h): the whole training state in
// `dir` every `every_iterations` iterations (0: only at the end) and at the end, the `keep` newest
// kept. A job that starts with checkpoints in `dir` resumes from the newest whole one.
struct PeriodicCheckpoints {
  std::string dir;
  int64_t every_iterations = 0;
  int keep = 2;
  double every_seconds = 0;  // 0: none; the ranks agree on when (checkpoint_schedule.h)
  bool operator==(const PeriodicCheckpoints& o) const {
    return dir == o.dir && every_iterations == o.every_iterations &&
           every_seconds == o.every_seconds && keep == o.keep;
  }
};

// Names the offending field: "checkpoint.keep must be >= 1" (`where` is "checkpoint." or
// "background.checkpoint.").
Status ValidatePeriodicCheckpoints(const PeriodicCheckpoints& spec, const std::string& where);
// Reads dir, every_iterations, every_seconds and keep of a "checkpoint" object (other fields are
// the caller's to check); absent fields keep their defaults.
Status ReadPeriodicCheckpointFields(const nlohmann::json& doc, const std::string& where,
                                    PeriodicCheckpoints* spec);
// Adds those fields to `doc` (every_seconds only when set).
void AddPeriodicCheckpointFields(const PeriodicCheckpoints& spec, nlohmann::json* doc);

// A document another component wrote (a graph, a plan), to embed unparsed; null when `text` is
// not JSON, so that the reader refuses it by name instead of the whole line being invalid.
nlohmann::json DocumentOrNull(std::string_view text);

}  // namespace deepool::protocol

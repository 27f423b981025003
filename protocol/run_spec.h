// The run spec: everything one executor rank needs to train (docs/formats.md, "Run specs").
//   {"format":"deepool.run","version":V,"job_id":"...","graph":{graph doc},
//    "plan":{plan doc},"iterations":K (or "epochs":E),"seed":S,"optimizer":{...},"data":{...},
//    "checkpoint":{"path":"FILE","dir":"DIR","every_iterations":N,"keep":K},
//    "gradient_bucket_mb":25,"batch_norm":"synchronized","precision":"bf16","background":{...},
//    "accumulation_steps":N,"gradient_precision":"bf16","memory_format":"channels_last",
//    "eval":{"data":{...},"every_iterations":N},"init":{"path":"FILE"}}
// The coordinator fills a RunSpec and writes it with RunSpecToJson; every executor rank parses
// it with ParseRunSpecJson, which validates the whole spec (the plan against the graph included)
// and names the field that is wrong. V is the executor protocol's version (protocol/version.h):
// written as RequiredProtocolVersion, read in [kOldestProtocolVersion, kProtocolVersion].
// Threading: plain values and pure functions (the file helpers do file I/O).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "planner/gradient_sync.h"
#include "planner/graph.h"
#include "planner/memory_format.h"
#include "planner/plan.h"
#include "planner/precision.h"
#include "protocol/background_spec.h"
#include "protocol/training_spec.h"
#include "protocol/version.h"

namespace deepool::protocol {

inline constexpr const char* kRunSpecFormat = "deepool.run";

struct RunSpec {
  std::string job_id;
  std::shared_ptr<const planner::Graph> graph;
  planner::Plan plan;
  // How long to train: `iterations`, or, when `epochs` is above 0 ("epochs" in the document, in
  // place of "iterations"; protocol 5), that many passes over the training set: the executor
  // sets `iterations` to IterationsForEpochs of its data set's size once it has opened it.
  int64_t iterations = 1;
  int64_t epochs = 0;
  uint64_t seed = 0;  // weight initialisation
  OptimizerSpec optimizer;
  DataSpec data;
  std::optional<std::string> checkpoint_path;  // the final state_dict export
  std::optional<PeriodicCheckpoints> checkpoints;
  // "gradient_bucket_mb": gradient sums are bucketed to this size, as DDP's (default
  // planner::kDefaultGradientBucketMb, DDP's too); 0: one sum per layer. Fractions allowed.
  double gradient_bucket_mb = planner::kDefaultGradientBucketMb;
  // "batch_norm": "synchronized" (true: a layer's statistics summed over its devices, so
  // training equals one device's) or "per_device" (false: each device's own batch, as DDP
  // without SyncBatchNorm).
  bool sync_batch_norm = true;
  // "precision": the math and activation width the job trains at (planner/precision.h;
  // docs/runtime.md, "Precision"): weights, their gradients and the optimizer stay fp32 whatever
  // it is. Written only when not fp32 (protocol 6); absent: fp32, as executors before it train.
  planner::Precision precision = planner::Precision::kFp32;
  // "accumulation_steps" (protocol 8; absent: 1): each iteration is this many forward and
  // backward passes of the plan's batch (plan.global_batch samples, the micro-batch), their
  // gradients accumulated, then one gradient sum and one optimizer step (docs/runtime.md,
  // "Gradient accumulation"). An iteration consumes IterationBatch() samples.
  int64_t accumulation_steps = 1;
  // "gradient_precision" (protocol 8; absent: fp32): the width gradient all-reduces move, fp32 or
  // bf16 (worker::ExecutorOptions::gradient_precision; the gradients stay fp32).
  planner::Precision gradient_precision = planner::Precision::kFp32;
  // "memory_format" (protocol 9; absent: auto): the layout of 4-D parameters and activations
  // (planner/memory_format.h; docs/runtime.md, "Memory format"). auto lets each rank choose
  // (planner::ResolveMemoryFormat: channels_last on CUDA for a convolutional model at 16 bits);
  // "contiguous" and "channels_last" pin it and need version 9.
  planner::MemoryFormat memory_format = planner::MemoryFormat::kAuto;
  // The samples one iteration consumes from the data set: the plan's batch times the
  // accumulation steps (what epochs, checkpoints' data positions and samples/s count).
  int64_t IterationBatch() const { return plan.global_batch * accumulation_steps; }
  // A BG job sharing this rank's device (docs/multiplexing.md); the same for every rank that
  // gets one.
  std::optional<BackgroundSpec> background;
  // "eval": a held-out data set evaluated every eval->every_iterations iterations and after the
  // last (training_spec.h); absent: no evaluation.
  std::optional<EvalSpec> eval;
  // "init": {"path": P}: a weights file (a torch state_dict archive or safetensors) every rank
  // loads its layers from before the first iteration, strictly (protocol 6); absent: the seed's
  // initialisation.
  std::optional<std::string> init_path;
};

// The iterations that `epochs` passes over `samples` samples take at `global_batch` samples an
// iteration: ceil(epochs * samples / global_batch). The last iteration of an epoch may reach
// into the next one's samples (data.h: rows are numbered across iterations), so every sample is
// seen `epochs` times, and at most global_batch - 1 of them once more. INVALID_ARGUMENT when the
// count exceeds kMaxRunIterations ("epochs: 100000 epochs of 1281167 samples at a global batch
// of 32 are more than 1000000000 iterations").
StatusOr<int64_t> IterationsForEpochs(int64_t epochs, int64_t samples, int64_t global_batch);
// The most iterations a job may train (the job spec's bound too): far above any real job, so
// that a typo fails early.
inline constexpr int64_t kMaxRunIterations = 1'000'000'000;
// The most accumulation steps a run spec (and a job spec) may ask for.
inline constexpr int64_t kMaxAccumulationSteps = 4096;

// Checks the spec's own fields and that the plan places exactly the graph's layers.
Status ValidateRunSpec(const RunSpec& spec);

// The oldest executor protocol that can express the spec, the version RunSpecToJson writes: the
// newest that its optimizers and data sets (its background job's and its eval data too) need
// (OptimizerProtocolVersion, DataProtocolVersion), and at least kEvaluationProtocolVersion when
// eval is set, kEpochsProtocolVersion with epochs, kPrecisionProtocolVersion with a precision
// other than fp32, kAccumulationProtocolVersion with accumulation_steps above 1 or a
// gradient_precision other than fp32, kMemoryFormatProtocolVersion with a memory_format other
// than auto. Pure.
int RequiredProtocolVersion(const RunSpec& spec);

// INVALID_ARGUMENT naming the field, for a wrong format or version too: a version outside
// [kOldestProtocolVersion, kProtocolVersion], or one older than the spec's features need
// ("optimizer.name \"adamw\" needs executor protocol version 2; this run spec is version 1";
// "eval needs executor protocol version 4; this run spec is version 3").
StatusOr<RunSpec> ParseRunSpecJson(std::string_view text);
// Writes RequiredProtocolVersion(spec), so an executor of an older build reads every spec that
// needs nothing newer. Does not validate: a spec without a graph is written with "graph": null,
// which ParseRunSpecJson refuses.
std::string RunSpecToJson(const RunSpec& spec, int indent = 2);

// The graph and plan as the documents a planner wrote (planner::GraphToJson, PlanToJson). The
// coordinator holds them so (its planner may run in another process) and forwards them
// unparsed: the executor ranks parse and check them. Text that is not JSON is written as null.
struct PlannedDocuments {
  std::string graph_json;
  std::string plan_json;
};
// The same writer, embedding `documents` in place of spec.graph and spec.plan (not read).
std::string RunSpecToJson(const RunSpec& spec, const PlannedDocuments& documents, int indent = -1);

// Reads and parses a run spec file (NOT_FOUND when it cannot be opened).
StatusOr<RunSpec> ReadRunSpecFile(const std::string& path);
Status WriteRunSpecFile(const RunSpec& spec, const std::string& path);

}  // namespace deepool::protocol

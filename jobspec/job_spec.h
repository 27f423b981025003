// The job spec a user submits (docs/formats.md, "Job specs"): its struct with the one set of
// defaults, its validation, and what its fields mean to the rest of the system. Its JSON form is
// jobspec/job_spec_json.h, its API message jobspec/job_spec_proto.h; the CLI and the coordinator
// both link this library (deepool_job_spec) and nothing else defines a job spec.
// Threading: plain values and pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "common/shared_text.h"
#include "common/status.h"
#include "planner/gradient_sync.h"
#include "planner/memory_format.h"
#include "planner/precision.h"
#include "protocol/training_spec.h"

namespace deepool::jobspec {

enum class JobRole { kFg, kBg };
const char* RoleName(JobRole role);  // "fg", "bg"

struct OptimizerSpec {
  // "sgd", "adam" or "adamw" (decoupled weight decay, as torch.optim.AdamW; its run spec needs
  // executor protocol 2, so the coordinator places it only on workers that speak it).
  std::string name = "sgd";
  double lr = 0.01;
  double momentum = 0.9;  // JobSpecFromProto makes it 0 for "adam" and "adamw" unless given
  // JobSpecFromProto makes it protocol::kAdamWDefaultWeightDecay (0.01, as torch's) for
  // "adamw" unless given.
  double weight_decay = 0;
  std::array<double, 2> betas{0.9, 0.999};  // adam, adamw
  double eps = 1e-8;                        // adam, adamw
  // The training recipes, as the run spec's (protocol::OptimizerSpec; FG jobs only for schedule
  // and clip_grad_norm).
  bool decay_1d = true;
  protocol::LrScheduleSpec schedule;
  double clip_grad_norm = 0;
};

// The optimizer as the run spec carries it (the coordinator's copy, and the protocol version
// rule's input).
protocol::OptimizerSpec RunSpecOptimizer(const OptimizerSpec& opt);

struct DataSpec {
  std::string kind = "synthetic";  // "synthetic", "cifar10" or "image_folder"
  int64_t seed = 0;
  std::string path;
  int64_t skip_bad = 0;          // image_folder
  std::string dtype = "uint16";  // tokens: "uint16" or "uint32" ids
};

// Periodic evaluation on a held-out data set (protocol::EvalSpec, which the coordinator copies
// it into): every `every_iterations` iterations (0: only at the end) and after the last.
struct EvalSpec {
  DataSpec data;  // kind and path as the job's data
  int64_t every_iterations = 0;
  // Samples per evaluation pass, >= 1; absent: the global batch.
  std::optional<int64_t> batch = std::nullopt;
};

// Defaults are the documented ones. JobSpecFromProto (job_spec_proto.h) applies them to a
// message's unset fields, so a JSON spec and a message with the same fields are the same spec.
struct JobSpec {
  std::string name;   // JobSpecFromProto: the model's name, or "job", when not given
  std::string model;  // a zoo name; or
  // An inline graph document (exactly one of the two). Shared by every copy of the spec.
  SharedText graph_json;
  JobRole role = JobRole::kFg;
  int priority = 0;
  int64_t global_batch = 0;  // required
  int gpus = 1;
  double amplification_limit = 2.0;
  // How long to train: exactly one of the two. epochs (FG only): passes over the training set,
  // which the executors turn into iterations once they know its size (protocol::RunSpec).
  int64_t iterations = 0;
  int64_t epochs = 0;
  OptimizerSpec optimizer;
  DataSpec data;
  int64_t seed = 0;
  bool requeue_on_failure = false;
  std::string on_node_loss;          // "", "fail", "wait" or "replan" (proto/deepool/v1/job.proto)
  std::string profile = "measured";  // or "analytical"
  std::string batch_norm = "synchronized";  // or "per_device" (proto/deepool/v1/job.proto)
  bool concurrent_branches = false;         // FG: PlanOptions::concurrent_branches
  std::string checkpoint_path;              // the final state_dict export
  // Periodic checkpoints (protocol::PeriodicCheckpoints); none without a directory.
  std::string checkpoint_dir;
  int64_t checkpoint_every_iterations = 0;
  double checkpoint_every_seconds = 0;
  int checkpoint_keep = 2;
  int64_t num_classes = 0;  // 0: the model's default
  int64_t image_size = 0;   // 0: the model's default
  // The executors' gradient bucket cap, which the planner's cost model charges too.
  double gradient_bucket_mb = planner::kDefaultGradientBucketMb;
  std::optional<EvalSpec> eval;  // FG only; absent: no evaluation
  // "init": {"path": P}: weights on every worker that the job starts from; empty: none.
  std::string init_path;
  // "precision" (planner/precision.h): what the job trains at. Absent: the coordinator picks
  // one for the devices it places the job on (TrainingPrecision).
  std::optional<planner::Precision> precision;
  // "accumulation_steps" (FG only; 1..protocol::kMaxAccumulationSteps; default 1): each
  // iteration is this many forward and backward passes of global_batch / N samples, gradients
  // summed over the passes and reduced and stepped once (docs/runtime.md, "Gradient
  // accumulation"). global_batch stays the iteration's samples; the plan is for one pass
  // (PassBatch). Needs executor protocol 8 above 1.
  int64_t accumulation_steps = 1;
  // "gradient_precision" (FG only): the width gradient all-reduces move, fp32 (default) or bf16
  // (the gradients and the step stay fp32). bf16 needs executor protocol 8.
  planner::Precision gradient_precision = planner::Precision::kFp32;
  // "memory_format" (FG only; planner/memory_format.h): the layout of 4-D tensors, "auto"
  // (default: each rank chooses, channels_last on CUDA for a convolutional model at 16 bits),
  // "contiguous" or "channels_last". Either of the last two needs executor protocol 9.
  planner::MemoryFormat memory_format = planner::MemoryFormat::kAuto;
};

// The samples of one forward and backward pass: global_batch / accumulation_steps (which
// ValidateJobSpec checks divide), the batch the job's plan, profiles and memory check are for.
int64_t PassBatch(const JobSpec& spec);

// Checks ranges and combinations (not whether the model exists). Errors are INVALID_ARGUMENT
// and start with the field's name ("gpus: must be in [1, 4096]").
Status ValidateJobSpec(const JobSpec& spec);

// Whether a failed attempt goes back to the queue (on_node_loss "wait" or "replan", or
// requeue_on_failure), and whether its next attempt may be planned for fewer devices.
bool RequeuesOnFailure(const JobSpec& spec);
bool ReplansOnNodeLoss(const JobSpec& spec);
// Whether batch norm statistics are summed over each layer's devices (batch_norm
// "synchronized") rather than kept per device ("per_device").
bool SynchronizesBatchNorm(const JobSpec& spec);
// The executor protocol version (protocol/version.h) of the job's run spec: the one the
// coordinator writes it at (protocol::RequiredProtocolVersion, by the same rule:
// protocol::OptimizerProtocolVersion and DataProtocolVersion, of the eval data too, and
// protocol::kEvaluationProtocolVersion with eval, kEpochsProtocolVersion with epochs,
// kPrecisionProtocolVersion with a precision other than fp32 asked for,
// kAccumulationProtocolVersion with accumulation_steps above 1 or bf16 gradient_precision,
// kMemoryFormatProtocolVersion with a memory_format other than auto) and that every node the job
// is placed on must read.
int RequiredProtocolVersion(const JobSpec& spec);

// The precision a job trains at on devices of `device_type` (a device preset name,
// planner/device_model.h): the spec's when it names one; else bf16 where the type's preset has
// bf16 math and is not "cpu" and `nodes_read_precision` (every node the job is placed on reads
// executor protocol 6, so old workers still get fp32 jobs); else fp32 (CPUs, V100s, device
// types without a preset).
planner::Precision TrainingPrecision(const JobSpec& spec, const std::string& device_type,
                                     bool nodes_read_precision);

// The bytes a spec holds in memory, for the coordinator's per-user limit (JobLimits): its
// inline graph and its strings.
int64_t SpecBytes(const JobSpec& spec);
// A digest of the whole spec, its inline graph by its text: a submission repeated under one
// request id is recognised without keeping (or parsing) the first one's graph.
uint64_t SpecFingerprint(const JobSpec& spec);

}  // namespace deepool::jobspec

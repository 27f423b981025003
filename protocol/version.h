// The executor protocol's versions: the contract between the coordinator, the worker daemon,
// the launcher and deepool-executor (run specs, executor commands, executor events;
// docs/formats.md). Run specs carry a version in their "version" field; it goes up whenever one
// side would misread a document or a line the other writes, or a document gains a feature an
// older reader does not know.
//
// A build speaks a range of versions, so that a coordinator and workers one version apart keep
// working while a pool is upgraded node by node (docs/operations.md, "Upgrading a pool"):
// - Writers write a document at the oldest version that can express it
//   (RequiredProtocolVersion in protocol/run_spec.h), never older than kOldestProtocolVersion:
//   a run spec that needs nothing newer reaches an old executor as the version it reads.
// - Readers accept [kOldestProtocolVersion, kProtocolVersion]; a document that uses a feature
//   newer than its own version (version 1 naming the adamw optimizer) is refused, naming the
//   field and the version it needs.
// - At registration the worker sends its range and the coordinator uses the newest version both
//   speak with it (coordinator/node_registry.h, NegotiateWorkerProtocol); a job whose run spec
//   needs a version is placed only on nodes that read it (coordinator/admission.h).
//
// Versions:
//   1: sgd and adam.
//   2: adds the adamw optimizer (decoupled weight decay).
//   3: adds image_folder data (data.kind "image_folder", data.skip_bad).
//   4: adds evaluation (eval: a held-out data set run every N iterations) and tokens data
//      (data.kind "tokens", data.dtype).
//   5: adds epochs (the run spec's "epochs" instead of "iterations": the executor counts the
//      iterations from its training set's size) and iteration events' "total_iterations".
//   6: adds precision (the run spec's "precision": "tf32", "bf16" or "fp16"; absent: fp32) and
//      init (the run spec's "init": {"path": P}, weights to start from).
//   7: adds the training recipes in the optimizer object: "decay_1d", "schedule" (learning-rate
//      warm-up and decay) and "clip_grad_norm".
//   8: adds gradient accumulation (the run spec's "accumulation_steps": an iteration of N passes
//      of the plan's batch, one optimizer step) and the gradient all-reduces' width (the run
//      spec's "gradient_precision": "bf16"; absent: fp32), and PROFILE tasks at a precision
//      (the ProfileTask's "precision": deepool-profile --precision; node.proto).
//   9: adds the memory format (the run spec's "memory_format": "contiguous" or "channels_last";
//      absent: auto, which an executor resolves itself).
#pragma once

namespace deepool::protocol {

// The newest version this build speaks.
inline constexpr int kProtocolVersion = 9;
// The oldest version this build still reads and writes.
inline constexpr int kOldestProtocolVersion = 1;

// The version that introduced the adamw optimizer.
inline constexpr int kAdamWProtocolVersion = 2;
// The version that introduced image_folder data.
inline constexpr int kImageFolderProtocolVersion = 3;
// The version that introduced evaluation (the run spec's "eval").
inline constexpr int kEvaluationProtocolVersion = 4;
// The version that introduced tokens data.
inline constexpr int kTokensProtocolVersion = 4;
// The version that introduced epochs (the run spec's "epochs").
inline constexpr int kEpochsProtocolVersion = 5;
// The version that introduced precision (the run spec's "precision").
inline constexpr int kPrecisionProtocolVersion = 6;
// The version that introduced starting from weights (the run spec's "init").
inline constexpr int kInitProtocolVersion = 6;
// The version that introduced the optimizer's training recipes (decay_1d, schedule,
// clip_grad_norm).
inline constexpr int kRecipesProtocolVersion = 7;
// The version that introduced gradient accumulation (the run spec's "accumulation_steps") and
// bf16 gradient all-reduces (its "gradient_precision"): how an iteration's gradients are made
// and summed.
inline constexpr int kAccumulationProtocolVersion = 8;
// The version whose workers profile at the ProfileTask's precision (16-bit profiles); an older
// worker ignores the field and measures fp32.
inline constexpr int kPrecisionProfileProtocolVersion = 8;
// The version that introduced the run spec's "memory_format" (contiguous or channels_last 4-D
// tensors); auto, the default, is written as no field and needs nothing newer.
inline constexpr int kMemoryFormatProtocolVersion = 9;

// Versions oldest..newest, both included: what a build speaks, or what a worker and the
// coordinator have in common (newest is then the version they use with each other).
struct ProtocolRange {
  int oldest = kOldestProtocolVersion;
  int newest = kProtocolVersion;
  bool Contains(int version) const { return oldest <= version && version <= newest; }
  bool operator==(const ProtocolRange& o) const { return oldest == o.oldest && newest == o.newest; }
};

}  // namespace deepool::protocol

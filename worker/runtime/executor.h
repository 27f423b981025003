// One executor per device rank: runs a plan's training iterations.
//
// Forward walks the graph in topological order; a layer runs only on the ranks of its device
// set, each on its contiguous sample range (planner/plan.h). Its inputs are re-split from the
// producers' layouts (resplit.h): pieces a rank already holds are sliced locally, the rest
// arrive over the communicator. Graph inputs and labels come from the DataSource, which gives
// every rank the same global batch. Output layers add their loss part (loss.h). Consecutive
// layers with the same placement (device set and shares) form one autograd segment: activations
// between them need no re-split, so they stay in one autograd graph; only inputs that come from
// another segment (or the graph input) are detached leaves. Backward walks the segments in
// reverse: each segment's output gradients are gathered by the mirror re-split of its consumers'
// input gradients, autograd runs once through the segment, and each layer's parameter gradients
// are summed over its device set (one group per distinct set, created once). Then the optimizer
// steps on every rank's own layers. Because each rank's loss part is already divided by the
// global batch, summing gradients gives exactly single-device training on the whole batch (up to
// fp32 rounding). That includes batch norm layers split over several devices, uneven shares
// too: in training they normalise with the statistics of their whole device set (synchronised
// batch norm, batch_norm.h; the executor hands each such module a group sum over the layer's
// RankGroup), and their running statistics, updated from those global statistics, are the same
// on every rank and equal single-device training's. ExecutorOptions::sync_batch_norm = false
// (a run spec's "batch_norm": "per_device") gives per-device statistics instead: cheaper, and
// no longer single-device training; running statistics then differ between ranks.
//
// The canonical order of communication. NCCL matches point-to-point messages first-in first-out
// per pair (ignoring tags), runs a rank's groups one after another, and blocks a send until its
// receive is reached (communicator.h). So every rank posts every transfer of an iteration in one
// order it derives from the plan alone, as a sequence of "walk points" that is the same on all
// ranks:
//   - forward, for every layer P in id order, run or not: compute P (if this rank runs it; a
//     batch norm layer on several ranks all-reduces its statistics over its device set inside
//     the computation, and every member computes P at this point), then post one group with
//     this rank's part of all transfers of P's output edges that leave its segment: sends of
//     the pieces it holds, receives (into preallocated buffers) of the pieces it needs, listed in
//     one global order (edge id, then piece order). A consumer waits on the groups of its inputs
//     only when it is about to compute;
//   - backward, for every segment S in reverse, run or not: run S's backward (if this rank runs
//     it; it first waits on the gradient groups of S's outputs; inside it, each batch norm layer
//     of S on several ranks all-reduces its statistics' gradients over its set, in the order
//     autograd reaches them, which is the same on every member since they all run the same
//     segment graph), then post one group with the input-gradient transfers of S's layers
//     (consumers send, producers receive early into buffers), in the same global order, then
//     S's gradient all-reduces, layer by layer;
//   - the loss sum over the world: one more element of the first gradient bucket over the world
//     (every rank of the world starts the same buckets in the same order), or, where no such
//     bucket starts (no layer on every rank, one rank, a bucket narrower than float32), its own
//     all-reduce, after the buckets;
//   - tied parameters (executor_tied.cc), where the graph has any: after waiting for the
//     gradient sums, one all-reduce over the world of both uses' gradients of every tie.
// Why this cannot deadlock or mismatch: both sides of a transfer post it at the same walk point,
// and each rank's groups are posted in walk order, so for every ordered pair the k-th send
// matches the k-th receive, and each collective sees its members in the same relative order. A
// rank's host only ever waits on groups posted at earlier walk points, or on a batch norm
// all-reduce that every member posts at the current one. Take the earliest walk
// point whose group never completes: every rank reaches it (what it waits on before is earlier,
// hence completes), and everything before it on every stream completed, so all its ops start on
// both sides and complete - a contradiction.
// No host synchronisation on the hot path: on CUDA the backend orders its streams after the
// current one when an op is posted, and Wait only makes the current stream wait (communicator.h);
// the host blocks once per iteration, on the loss.
//
// Threading: an Executor, its communicator and its data source are used by one thread. (On CUDA
// autograd runs a segment's backward, and so a batch norm layer's gradient sum, on its device
// thread while the executor's thread blocks in the backward call: never two at once.)
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "planner/gradient_sync.h"
#include "planner/graph.h"
#include "planner/memory_format.h"
#include "planner/plan.h"
#include "planner/precision.h"
#include "worker/runtime/communication/communicator.h"
#include "worker/runtime/data/data.h"
#include "worker/runtime/layers/layer_module.h"
#include "worker/runtime/layers/loss_scaler.h"
#include "worker/runtime/layers/optimizer.h"
#include "worker/runtime/layers/resplit.h"
#include "worker/runtime/profiling/span_recorder.h"

namespace deepool::worker {

using ModuleFactory = std::function<StatusOr<std::shared_ptr<LayerModule>>(
    const planner::Graph& graph, int layer_id, uint64_t seed)>;

struct ExecutorOptions {
  uint64_t seed = 0;  // weight initialisation, passed to the module factory
  OptimizerSpec optimizer;
  // The run's iterations: the T over which optimizer.schedule decays (layers/lr_schedule.h).
  int64_t total_iterations = 1;
  torch::Device device = torch::kCPU;
  // Runs once at the end of each iteration, so that the iteration time covers the device's work
  // on asynchronous devices. Empty on CPU.
  std::function<void()> synchronize;
  // Batch norm layers on several ranks normalise with the statistics of their whole device set
  // (synchronised batch norm, batch_norm.h). false gives per-rank statistics, as plain data
  // parallelism without SyncBatchNorm does: a run spec's "batch_norm": "per_device".
  bool sync_batch_norm = true;
  // Gradient sums go in buckets, as DistributedDataParallel's do: the gradients of consecutive
  // layers (in backward order) with the same device set share one all-reduce, started once they
  // reach this many bytes (the first bucket of a device set in an iteration once it reaches
  // planner::kFirstGradientBucketBytes, so that communication starts early) or when backward
  // ends, and overlapped with the rest of backward; all are waited on before the optimizer step.
  // 0: one all-reduce per layer. The default is the job spec's (planner/gradient_sync.h).
  int64_t gradient_bucket_bytes = planner::GradientBucketBytes(planner::kDefaultGradientBucketMb);
  // The math and activation width (docs/runtime.md, "Precision"): bf16 and fp16 run each
  // layer's forward under autocast (layers/precision_scope.h) with the parameters, their
  // gradients, their all-reduces and the optimizer in fp32, batch norm statistics and the loss in
  // fp32; activations and their gradients cross between device sets in the compute dtype (bf16:
  // half the bytes). tf32 sets the CUDA math mode (process-wide) and computes like fp32 on CPU.
  planner::Precision precision = planner::Precision::kFp32;
  // What gradient all-reduces move (docs/runtime.md, "Precision"): fp32 (the default) or bf16,
  // for which each bucket is cast to bf16 for its sum and back to fp32 after it (the gradients
  // the optimizer steps stay fp32: the master copy), moving half the bytes at the cost of
  // rounding each rank's gradients and their sum to bf16's 8 bits of mantissa. The loss then
  // takes its own all-reduce instead of riding in a bucket. GradientSyncOptions::precision
  // (planner/gradient_sync.h) charges the same halving.
  planner::Precision gradient_precision = planner::Precision::kFp32;
  // Gradient accumulation (docs/runtime.md, "Gradient accumulation"; executor_step.cc): each
  // iteration is this many forward and backward passes of the plan's global batch (the
  // micro-batch), each pass's loss divided by the iteration's samples (N times the plan's batch)
  // so that the accumulated gradient is the mean-loss gradient of the whole iteration batch; the
  // gradient sums, the tied parameters' sum, clipping and the optimizer step run once, after the
  // last pass. The data source must present micro-batches: pass m of iteration i reads its
  // iteration i * N + m (data/micro_batches.h gives that view of an iteration-batch source).
  // 1: no accumulation.
  int64_t accumulation_steps = 1;
  // The layout of 4-D tensors (docs/runtime.md, "Memory format"; layers/memory_format.h):
  // channels_last puts convolutions' 4-D weights, the data batch and the receive buffers of 4-D
  // activations and their gradients in NHWC, sends 4-D pieces NHWC-dense, and flattens 4-D
  // gradients into their buckets in NHWC order (every rank of a run uses the same format).
  // Checkpoints stay NCHW. kAuto: Create resolves it (planner::ResolveMemoryFormat).
  planner::MemoryFormat memory_format = planner::MemoryFormat::kAuto;
  // fp16 only: dynamic loss scaling (loss_scaler.h). The loss's gradient is scaled; after the
  // gradient sums, one all-reduce over the world tells every rank whether any rank's gradients
  // hold an inf or nan (a host wait, fp16 only): then every rank skips the step and halves the
  // scale, else every rank divides its gradients by the scale and steps.
  LossScalerOptions loss_scaling;
  // Test hook (fp16): sees, and may change, this rank's parameter gradients (scaled) before the
  // overflow check. Empty: none.
  std::function<void(int64_t iteration, std::vector<torch::Tensor>& grads)> before_unscale;
  // Where Step marks its spans while a trace window is recorded (`deepool trace`); null: none.
  // Must outlive the executor.
  SpanRecorder* spans = nullptr;
};

struct IterationStats {
  int64_t iteration = 0;
  // The iteration's loss (summed over ranks): with accumulation, the mean over its passes of each
  // pass's mean loss.
  double loss = 0;
  double iteration_ms = 0;
  double samples_per_s = 0;
  // The host's view: time in communication waits is idle, the rest busy. Exact on CPU; on CUDA,
  // where waits only order streams, nearly all the time counts as busy (the device's idle time
  // is not seen from the host).
  double busy_ms = 0;  // computing
  double idle_ms = 0;  // waiting for transfers and reductions
  // Of busy_ms: waiting for this iteration's rows from the data source (for what the prefetch
  // thread had not finished, or for the whole batch without prefetch).
  double data_ms = 0;
  // fp16: the steps skipped so far for inf or nan gradients, and the loss scale the next
  // iteration uses; 0 and 0 at other precisions.
  int64_t skipped_steps = 0;
  double loss_scale = 0;
};

// A held-out set's results (Executor::Evaluate), the same on every rank.
// Classification counts one prediction per sample; a sequence output ([T, V] per sample, labels
// [T]) one per token, so its loss is the mean over tokens (exp(loss): the perplexity) and its
// accuracies are the tokens'.
struct EvaluationStats {
  int64_t samples = 0;
  int64_t predictions = 0;  // samples, or samples x tokens
  double loss = 0;          // mean cross-entropy of the evaluated output per prediction
  double top1 = 0;          // fraction of predictions whose label is the highest logit
  double top5 = 0;          // ... among the five highest (all of them with fewer classes)
  double evaluation_ms = 0;
};

class Executor {
 public:
  // Builds this rank's layers and optimizer and creates the communication groups. The graph,
  // plan, communicator, data source and clock must outlive the executor. Fails when the plan
  // does not fit the graph or the world (plan.num_devices != comm->world_size()).
  static StatusOr<std::unique_ptr<Executor>> Create(const planner::Graph& graph,
                                                    const planner::Plan& plan, Communicator* comm,
                                                    DataSource* data, const ModuleFactory& factory,
                                                    ExecutorOptions options, const Clock* clock);

  // One training iteration (forward, backward, gradient sums, optimizer step).
  StatusOr<IterationStats> Step(int64_t iteration);

  // Evaluates the current parameters on the first `samples` samples of `data` (a held-out set
  // read with DataUse::kEvaluation): the forward walk of Step, in passes of B =
  // data->global_batch() samples (pass k is data's iteration k; rows past `samples` in the last
  // pass are computed and not counted), with every layer in eval mode (batch norm normalises
  // with its running statistics, dropout is off) and no autograd. B is the plan's global batch,
  // or any other: then the passes run under planner::ScalePlan(plan, B) (every layer on its
  // devices, their shares scaled to B; a device may get none) by an evaluation executor built
  // for the call that shares this executor's modules (the same parameter tensors) and nothing
  // else, so training goes on exactly as without the evaluation. Counts come from the graph
  // output with the largest loss weight, on the ranks that compute it, and are summed over the
  // world (one all-reduce), so every rank must call Evaluate at the same point between Steps,
  // with the same B. The result equals one device's evaluation of the same parameters (up to
  // the float32 rounding of a split batch).
  StatusOr<EvaluationStats> Evaluate(DataSource* data, int64_t samples);

  // This rank's layers, by layer id. Split batch norm layers hold a group sum bound to this
  // executor and its communicator: run them in training mode only through Step, and only while
  // the executor lives (eval mode and checkpointing do not use it).
  const std::map<int, std::shared_ptr<LayerModule>>& modules() const { return modules_; }
  // This rank's optimizer; null when it holds no parameters. For checkpoints: step it only
  // through Step.
  torch::optim::Optimizer* optimizer() const { return optimizer_.get(); }
  // "<layer>.<parameter>" -> tensor, for this rank's layers.
  std::map<std::string, torch::Tensor> NamedParameters() const;
  // The loss scaler of an fp16 run (the same on every rank); null at other precisions.
  const LossScaler* loss_scaler() const { return loss_scaler_ ? &*loss_scaler_ : nullptr; }
  // Resuming an fp16 run: the scaler goes on from a checkpoint's state (no-op at other
  // precisions). Every rank restores the same state (the checkpoint's manifest).
  void RestoreLossScaler(const LossScalerState& state) {
    if (loss_scaler_) loss_scaler_->Restore(state);
  }

 private:
  struct Edge {
    int producer = planner::kGraphInputId;
    int consumer = 0;
    int input_index = 0;
    // Producer and consumer are in the same segment: the consumer reads the producer's output
    // as it is, and autograd carries the gradient back (no pieces are moved).
    bool in_segment = false;
    std::vector<ResplitPiece> pieces;  // producer layout -> consumer layout
  };
  // Layers [first, last] (consecutive ids) with the same placement.
  struct Segment {
    int first = 0, last = 0;
  };
  struct LayerState {
    const planner::LayerPlacement* placement = nullptr;
    bool runs = false;
    int64_t first = 0, last = 0;   // this rank's samples
    std::vector<int> input_edges;  // edge id per input index
    std::vector<int> output_edges;
    int segment = 0;
    double loss_weight = 0;  // > 0 for graph outputs
    std::vector<torch::Tensor> params;
    RankGroup group;  // the layer's device set
    // This iteration's parameter gradients as autograd hands them to the parameters' hooks
    // (before they are accumulated into .grad); once all are in, the layer joins its bucket.
    std::vector<torch::Tensor> hooked_grads;
    size_t hooked = 0;
    bool in_bucket = false;
    // Per iteration.
    // Inputs from another segment are leaves that require grad (graph inputs do not); inputs
    // from the same segment are the producer's output itself.
    std::vector<torch::Tensor> inputs;
    torch::Tensor output;
    torch::Tensor loss;
  };
  // A bucket of gradient sums: layers of one device set, in the order backward finished them.
  struct GradientBucket {
    std::vector<int> layers;
    int64_t bytes = 0;
  };
  struct PendingReduce {
    std::vector<int> layers;  // their gradients, flattened in this order
    torch::Tensor flat;
    std::unique_ptr<CommWork> work;
  };
  // A piece of an edge that this rank sends or receives (edges_[edge].pieces[piece]).
  struct Transfer {
    int edge = 0;
    int piece = 0;
    bool send = false;
  };
  // A posted group of transfers; consumers wait on it once.
  struct PendingGroup {
    std::unique_ptr<CommWork> work;
    bool waited = false;
  };

  Executor(const planner::Graph& graph, const planner::Plan& plan, Communicator* comm,
           DataSource* data, ExecutorOptions options, const Clock* clock)
      : graph_(graph),
        plan_(plan),
        comm_(comm),
        data_(data),
        options_(std::move(options)),
        clock_(clock) {}
  // An executor for evaluation only, in passes of `batch` samples: it runs ScalePlan(training's
  // plan, batch), which it owns, on training's graph, communicator, options and modules (shared,
  // not copied). It has no optimizer, no parameter hooks (they would fire in training's
  // backward), no batch norm group sums and no gradient groups; only Evaluate runs it, through
  // EvaluateOnOwnPlan. Training must outlive it.
  static StatusOr<std::unique_ptr<Executor>> CreateForEvaluation(const Executor& training,
                                                                 int64_t batch);
  // Builds the layers' modules, hooks, communication groups and optimizer on BuildLayout.
  Status Init(const ModuleFactory& factory);
  // This rank's view of the plan: layer states, segments, edges and transfers.
  Status BuildLayout();
  // Evaluate in passes of this executor's plan's global batch (data's must be that).
  StatusOr<EvaluationStats> EvaluateOnOwnPlan(DataSource* data, int64_t samples);
  Status BuildEdges();
  // This rank's transfers, per producer layer (forward) and per consumer segment (backward), in
  // the canonical order (edge id, then piece).
  void BuildTransfers();
  // Sets labels for the pass, and zeroes gradients on an iteration's first pass.
  void PrepareIteration(const Batch& batch);
  // Pass `pass` of the iteration (executor_step.cc): its data, forward and backward walks, and
  // after the last pass FinishIteration, whose loss it returns (0 before). Adds the time spent
  // waiting for the data to `data_ms`.
  StatusOr<double> RunPass(int64_t iteration, int64_t pass, double* data_ms);
  // Whether this pass's backward sums gradients: the iteration's last pass. Before it, parameter
  // hooks and AddToBucket leave the gradients to accumulate in .grad.
  bool SumsGradients() const { return pass_ + 1 == options_.accumulation_steps; }
  // The labels of the graph outputs this rank computes, from the batch.
  void SetLabels(const Batch& batch);
  // Evaluate's pass `pass`: adds this rank's loss sum, top-1 and top-5 counts, predictions and
  // rows of the evaluated output's samples below `samples` to `totals` (float64 [5], on the
  // device).
  Status EvaluatePass(DataSource* data, int64_t pass, int64_t samples, torch::Tensor& totals);
  // Train or eval mode for every module of this rank.
  void SetTraining(bool training);
  // Waits on every posted transfer group of the iteration.
  Status AwaitTransfers();
  Status RunForward(const Batch& batch);
  Status RunBackward();
  // This rank's loss parts, summed (float64, on the device).
  torch::Tensor LocalLoss() const;
  // Finishes the gradient sums and the transfers, steps the optimizer and sums the loss.
  StatusOr<double> FinishIteration();
  // fp16: agrees over the world whether any gradient is inf or nan, updates the scaler, and
  // unscales this rank's gradients when the step goes ahead. Returns whether it does.
  StatusOr<bool> UnscaleGradients();
  // Tied parameters (executor_tied.cc): sums both uses' gradients of every tie over the world
  // and gives each copy this rank holds the sum. Every rank calls it, after FinishReductions.
  Status SumTiedGradients();
  // Layer `id`'s parameter `name` when this rank runs the layer; undefined otherwise.
  torch::Tensor HeldParameter(int id, const std::string& name) const;
  // The optimizer's training recipes before a step (executor_recipes.cc): sets the schedule's
  // learning rate of the iteration, and with clip_grad_norm clips the gradients by the global
  // norm over all the job's parameters: the lowest rank of each layer's device set adds the
  // squares of the layer's (already summed) gradients, one all-reduce over the world adds those
  // up, and every rank scales its gradients by the same coefficient. Every rank calls it.
  Status ApplyRecipes();
  Status Forward(int layer_id, const Batch& batch);
  // Posts this rank's group of the transfers of `layer_id`'s output edges.
  Status PostForwardTransfers(int layer_id);
  Status Backward(int segment);
  // Adds the gradient of `layer_id`'s output that its consumers in other segments computed
  // (local, or received into the receive buffers) to `contributions` (tensor, first sample).
  void GatherOutputGradient(int layer_id,
                            std::vector<std::pair<torch::Tensor, int64_t>>& contributions);
  // Posts this rank's group of the input-gradient transfers of `segment`'s layers.
  Status PostBackwardTransfers(int segment);
  // Adds the layer's gradients to its device set's open bucket and starts that bucket's sum once
  // it is full (ExecutorOptions::gradient_bucket_bytes). Called from the parameters' hooks as
  // soon as autograd has produced all of them, so sums start during the segment's backward;
  // and after the segment's backward for layers whose hooks did not all fire. No-op for a layer
  // already in a bucket this iteration.
  Status AddToBucket(int layer_id);
  // A parameter hook (autograd's thread): records the gradient, adds the layer when complete.
  // An error is kept in bucket_error_ (it cannot cross autograd).
  void OnParamGradient(int layer_id, size_t param, const torch::Tensor& grad);
  Status StartBucketSum(const RankGroup& group);
  // Starts the sums of the buckets still open when backward ends, in the same order on every
  // rank (by the backward position of their first layer).
  Status FlushGradientBuckets();
  // The group sum a batch norm layer on several ranks normalises with: an all-reduce over the
  // layer's device set, waited on at once (on CUDA, the stream waits). A failure is kept in
  // layer_error_, since it crosses autograd as an exception.
  GroupSum MakeGroupSum(int layer_id);
  // Waits on the gradient sums and makes the gradients views of them. Where the loss rode in a
  // bucket, sets `local_loss` to its sum and hands over that bucket's work for the host wait.
  Status FinishReductions(torch::Tensor& local_loss, std::unique_ptr<CommWork>& loss_sum);
  // Drops a pass's activations, labels and transfer groups (the accumulated gradients and loss
  // stay for the next pass).
  void ReleasePassTensors();
  // Drops the activations, gradients and pending transfers of the iteration, so that its memory
  // goes back to the allocator before the next one starts (as in a plain training loop).
  void ReleaseIterationTensors();
  // After the forward pass, drops what backward does not need, as a plain loop does when its
  // forward returns: autograd keeps the tensors it saved, and holding every activation to the
  // end of the iteration raises the peak memory (on CPU, the page faults of a heap that grows and
  // shrinks every iteration). Backward needs only inputs from other segments (their .grad) and
  // outputs that consumers in other segments send a gradient for. Dropping them layer by layer
  // during forward instead measured 5-10 % slower on CPU (glibc then grows the heap in backward).
  void ReleaseForwardOnlyTensors();
  // Waits on a posted group (once), counting the time as idle. `what` names the wait's span
  // (a callable returning the name, called only while tracing).
  template <typename Name>
  Status AwaitGroup(PendingGroup& group, Name what);
  template <typename Name>
  Status WaitOne(CommWork& work, Name what);
  void Synchronize();
  // A receive buffer in the dtype activations cross in (ComputeDtype of the precision).
  torch::Tensor NewBuffer(int64_t rows, const planner::Shape& shape);
  // An activation or gradient piece as it crosses between device sets: in the compute dtype,
  // whatever dtype the op that made it left it in, so that both sides agree on the bytes and a
  // consumer's input does not depend on which of its pieces were local.
  torch::Tensor ToTransferDtype(const torch::Tensor& tensor) const;
  // The receive buffer of one transfer (tag, peer, first sample), allocated once.
  torch::Tensor RecvBuffer(int tag, const ResplitPiece& piece, const planner::Shape& shape);
  // The gradient of a layer's input from another segment (zeros when autograd left none).
  torch::Tensor InputGradient(int layer_id, int input_index);
  static int ForwardTag(int edge) { return 2 * edge; }
  static int BackwardTag(int edge) { return 2 * edge + 1; }
  std::string SegmentName(int segment) const;
  // "conv1" or "conv1 + 3 more": a bucket's layers, in messages and trace spans.
  std::string LayersName(const std::vector<int>& layers) const;

  const planner::Graph& graph_;
  const planner::Plan& plan_;
  std::unique_ptr<const planner::Plan> owned_plan_;  // plan_, for an evaluation executor
  Communicator* comm_;
  DataSource* data_;
  std::pair<int64_t, int64_t> data_rows_{0, 0};  // the global batch rows this rank reads
  int evaluated_output_ = 0;                     // the layer Evaluate counts from
  ExecutorOptions options_;
  const Clock* clock_;
  int rank_ = 0;
  std::vector<Edge> edges_;
  std::vector<LayerState> layers_;
  std::vector<Segment> segments_;  // in layer order
  std::map<int, std::shared_ptr<LayerModule>> modules_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<torch::Tensor> labels_;  // per layer: labels of its samples (outputs only)
  std::vector<std::vector<Transfer>> forward_transfers_;   // per producer layer
  std::vector<std::vector<Transfer>> backward_transfers_;  // per consumer segment
  // Per iteration: the groups posted at each walk point.
  std::vector<PendingGroup> forward_groups_;   // per producer layer
  std::vector<PendingGroup> backward_groups_;  // per consumer segment
  std::vector<PendingReduce> reduces_;
  torch::Tensor iteration_loss_;       // this rank's loss, from forward to the bucket it rides in
  std::optional<size_t> loss_reduce_;  // the reduce in reduces_ that carries it
  std::map<RankGroup, GradientBucket> open_buckets_;  // by device set, this iteration
  std::set<RankGroup> started_bucket_groups_;         // device sets with a bucket started
  Status bucket_error_;                               // from a parameter hook, this iteration
  std::map<std::tuple<int, int, int64_t>, torch::Tensor> recv_buffers_;
  Clock::Duration idle_{};
  int64_t iteration_ = 0;
  int64_t pass_ = 0;  // the accumulation pass within the iteration; 0 outside Step
  // The first failed group sum of the iteration, with its code (it reaches Step as an
  // exception from inside a module or autograd, which would lose the code).
  Status layer_error_;
  std::optional<LossScaler> loss_scaler_;  // fp16 only
};

}  // namespace deepool::worker

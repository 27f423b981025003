// One executor per device rank: runs a plan's training iterations.
//
// Forward walks the graph in topological order; a layer runs only on the ranks of its device
// set, each on its contiguous sample range (planner/plan.h). Its inputs are re-split from the
// producers' layouts (resplit.h): pieces a rank already holds are sliced locally, the rest
// arrive by Recv, and a producer Sends its pieces as soon as it computed them. Graph inputs
// and labels come from the DataSource, which gives every rank the same global batch. Output
// layers add their loss part (loss.h). Consecutive layers with the same placement (device set
// and shares) form one autograd segment: activations between them need no re-split, so they stay
// in one autograd graph; only inputs that come from another segment (or the graph input) are
// detached leaves. Backward walks the segments in reverse: each segment's output gradients are
// gathered by the mirror re-split of its consumers' input gradients, autograd runs once through
// the segment, and each layer's parameter gradients are summed over its device set (one group per
// distinct set, created once). Then the optimizer steps on every rank's own layers.
// Because each rank's loss part is already divided by the global batch, summing gradients gives
// exactly single-device training on the whole batch (up to fp32 rounding); batch norm layers
// split over several devices see per-device batch statistics, as in any data parallelism.
//
// Threading: an Executor, its communicator and its data source are used by one thread.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "worker/runtime/communicator.h"
#include "worker/runtime/data.h"
#include "worker/runtime/layer_module.h"
#include "worker/runtime/optimizer.h"
#include "worker/runtime/resplit.h"

namespace deepool::worker {

using ModuleFactory = std::function<StatusOr<std::shared_ptr<LayerModule>>(
    const planner::Graph& graph, int layer_id, uint64_t seed)>;

struct ExecutorOptions {
  uint64_t seed = 0;  // weight initialisation, passed to the module factory
  OptimizerSpec optimizer;
  torch::Device device = torch::kCPU;
  // Runs after each layer's forward/backward and before timing points, so that the busy/idle
  // split is right on asynchronous devices. Empty on CPU.
  std::function<void()> synchronize;
};

struct IterationStats {
  int64_t iteration = 0;
  double loss = 0;  // the global batch's loss (summed over ranks)
  double iteration_ms = 0;
  double samples_per_s = 0;
  double busy_ms = 0;  // computing
  double idle_ms = 0;  // waiting for transfers and reductions
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

  // This rank's layers, by layer id.
  const std::map<int, std::shared_ptr<LayerModule>>& modules() const { return modules_; }
  // "<layer>.<parameter>" -> tensor, for this rank's layers.
  std::map<std::string, torch::Tensor> NamedParameters() const;

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
    // Per iteration.
    // Inputs from another segment are leaves that require grad (graph inputs do not); inputs
    // from the same segment are the producer's output itself.
    std::vector<torch::Tensor> inputs;
    torch::Tensor output;
    torch::Tensor loss;
  };
  struct PendingReduce {
    int layer = 0;
    torch::Tensor flat;
    std::unique_ptr<CommWork> work;
  };

  Executor(const planner::Graph& graph, const planner::Plan& plan, Communicator* comm,
           DataSource* data, ExecutorOptions options, const Clock* clock)
      : graph_(graph),
        plan_(plan),
        comm_(comm),
        data_(data),
        options_(std::move(options)),
        clock_(clock) {}
  Status Init(const ModuleFactory& factory);
  Status Forward(int layer_id, const Batch& batch);
  Status Backward(const Segment& segment);
  // Adds the gradient of `layer_id`'s output that its consumers in other segments computed
  // (local or received) to `roots`/`root_grads`; receives are appended to `recvs`.
  Status GatherOutputGradient(int layer_id, std::vector<std::unique_ptr<CommWork>>& recvs,
                              std::vector<std::pair<torch::Tensor, int64_t>>& contributions);
  // Sends each producer in another segment on another rank the gradient of its samples.
  Status SendInputGradients(int layer_id);
  Status ReduceGradients(int layer_id);
  Status FinishReductions();
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
  // Waits on transfers, counting the time as idle.
  Status WaitAndCount(std::vector<std::unique_ptr<CommWork>>& works);
  Status WaitOne(CommWork& work);
  void Synchronize();
  torch::Tensor NewBuffer(int64_t rows, const planner::Shape& shape);
  // The receive buffer of one transfer (tag, peer, first sample), allocated once.
  torch::Tensor RecvBuffer(int tag, const ResplitPiece& piece, const planner::Shape& shape);
  static int ForwardTag(int edge) { return 2 * edge; }
  static int BackwardTag(int edge) { return 2 * edge + 1; }

  const planner::Graph& graph_;
  const planner::Plan& plan_;
  Communicator* comm_;
  DataSource* data_;
  ExecutorOptions options_;
  const Clock* clock_;
  int rank_ = 0;
  std::vector<Edge> edges_;
  std::vector<LayerState> layers_;
  std::vector<Segment> segments_;  // in layer order
  std::map<int, std::shared_ptr<LayerModule>> modules_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<torch::Tensor> labels_;  // per layer: labels of its samples (outputs only)
  std::vector<std::unique_ptr<CommWork>> sends_;
  std::vector<PendingReduce> reduces_;
  std::map<std::tuple<int, int, int64_t>, torch::Tensor> recv_buffers_;
  Clock::Duration idle_{};
  int64_t iteration_ = 0;
};

}  // namespace deepool::worker

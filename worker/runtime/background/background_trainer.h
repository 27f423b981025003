// The background (BG) job's trainer: the whole model on one device with its own batch, no
// communication, steppable one unit at a time so that it can yield to the foreground rank
// between layers.
//
// One iteration is 2 * num_layers + 1 units: the forward of each layer in topological order
// (the first also fetches the batch and zeroes the gradients), the backward of each layer in
// reverse order (autograd through that layer alone, from the summed gradients of its consumers'
// inputs and its loss part), then the optimizer step. The result is plain single-device
// training (the same arithmetic as ForwardGraph + loss.backward(), up to summation order).
// Split into k micro-batches (SetMicroBatches), an iteration is k * 2 * num_layers + 1 units,
// the forward and backward ones shorter: each micro-batch is fetched, run forward and backward in
// turn, gradients summed, then one step; the same training up to summation order, which is why a
// model with batch norm is never split.
//
// Threading: a stepper is driven by one thread at a time (the BG thread).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"
#include "worker/runtime/background/background_spec.h"
#include "worker/runtime/data/data.h"
#include "worker/runtime/layers/layer_module.h"

namespace deepool::worker {

struct BgUnitResult {
  bool iteration_done = false;  // this unit was the optimizer step
  int64_t iteration = 0;        // the iteration the unit belonged to
  double loss = 0;              // the finished iteration's loss (iteration_done only)
  bool splittable = false;      // a forward or backward unit, which micro-batches shorten
};

// A source of BG work in units: the eager trainer below, or a GraphStepper (replayed graphs on a
// device with streams, background_graph_stepper.h).
class BackgroundStepper {
 public:
  virtual ~BackgroundStepper() = default;
  // Prepares the calling thread to drive the stepper (e.g. makes the BG stream current). The
  // driving thread calls it before its first unit and releases the result on that thread when it
  // stops. nullptr: nothing to prepare.
  virtual std::shared_ptr<void> EnterThread() { return nullptr; }
  virtual StatusOr<BgUnitResult> RunUnit() = 0;
  // Whether the next unit may start only while the FG rank is idle, whatever the gate's mode
  // (DeviceGate::BgBegin).
  virtual bool NextUnitNeedsFgIdle() const { return false; }
  // Work after a unit that needs no device (e.g. writing a checkpoint's files): the driving
  // thread calls it once the gate has been released, so the FG rank never waits for it.
  virtual void AfterUnit() {}
  virtual int64_t batch_size() const = 0;
  // The iteration the job starts at: 0, or the iteration of the checkpoint it resumed from.
  virtual int64_t first_iteration() const { return 0; }
  // Runs each later iteration (from the next one to start) as `count` micro-batches, which
  // shortens its forward and backward units. UNIMPLEMENTED where the stepper cannot split;
  // FAILED_PRECONDITION where splitting would change the training.
  virtual Status SetMicroBatches(int64_t count) {
    return count == 1 ? Status::Ok() : UnimplementedError("this BG stepper runs whole batches");
  }
  virtual int64_t micro_batches() const { return 1; }
};

class BackgroundTrainer final : public BackgroundStepper {
 public:
  // Builds the modules (weights from spec.seed, as in every executor), the optimizer and the
  // data source, on `device`; with spec.checkpoints, then loads the newest whole checkpoint
  // there and starts at its iteration (background_checkpoints.h).
  static StatusOr<std::unique_ptr<BackgroundTrainer>> Create(const BackgroundSpec& spec,
                                                             torch::Device device);

  StatusOr<BgUnitResult> RunUnit() override;
  int64_t batch_size() const override { return batch_size_; }
  int64_t first_iteration() const override { return first_iteration_; }
  // count in [1, batch_size]; FAILED_PRECONDITION above 1 for a model with batch norm (its
  // statistics would be a micro-batch's).
  Status SetMicroBatches(int64_t count) override;
  int64_t micro_batches() const override { return next_micro_batches_; }

  int units_per_iteration() const {
    return static_cast<int>(2 * graph_->num_layers() * next_micro_batches_ + 1);
  }
  int64_t iteration() const { return iteration_; }  // the next iteration to finish
  const planner::Graph& graph() const { return *graph_; }
  const BackgroundSpec& spec() const { return spec_; }
  const std::vector<std::shared_ptr<LayerModule>>& modules() const { return modules_; }
  DataSource& data() { return *data_; }
  torch::Device device() const { return device_; }
  // "<layer>.<parameter>" -> tensor.
  std::map<std::string, torch::Tensor> NamedParameters() const;
  // Every layer's module by layer id, as training_state.h takes them.
  std::map<int, std::shared_ptr<LayerModule>> ModulesById() const;
  torch::optim::Optimizer* optimizer() const { return optimizer_.get(); }

  // Whole-iteration building blocks (the CUDA graph stepper captures them as one sequence).
  // `batch` must already be on the device. Loss accumulates in loss_tensor(), on the device.
  void BeginIteration(const Batch& batch);
  void ForwardLayer(int id);
  void BackwardLayer(int id);
  void StepOptimizer();
  const torch::Tensor& loss_tensor() const { return loss_sum_; }
  void set_iteration(int64_t iteration) { iteration_ = iteration; }

 private:
  struct Consumer {
    int layer = 0;
    int input_index = 0;
  };
  struct LayerState {
    std::vector<Consumer> consumers;
    double loss_weight = 0;
    std::vector<torch::Tensor> inputs;  // leaves (those from other layers require grad)
    torch::Tensor output;
    torch::Tensor loss;
  };
  enum class Phase { kForward, kBackward, kStep };

  BackgroundTrainer() = default;
  Status RunUnitUnguarded(BgUnitResult& result);
  // At an iteration's start: zeroes the gradients and the loss.
  void ZeroGradients();
  // The layers train on `batch` (rows from `offset` of the iteration's batch) from now on.
  void UseBatch(const Batch& batch, int64_t offset);
  // Fetches the current micro-batch (the whole batch when unsplit) to the device and uses it;
  // the first of an iteration also zeroes the gradients and takes up a new split.
  Status FetchMicroBatch();

  BackgroundSpec spec_;
  std::shared_ptr<const planner::Graph> graph_;
  int64_t batch_size_ = 1;
  torch::Device device_ = torch::kCPU;
  std::vector<std::shared_ptr<LayerModule>> modules_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<DataSource> data_;
  std::vector<LayerState> layers_;
  Batch batch_;  // what the layers train on: the batch, or the current micro-batch of it
  torch::Tensor loss_sum_;
  Phase phase_ = Phase::kForward;
  int cursor_ = 0;
  int64_t iteration_ = 0;
  int64_t first_iteration_ = 0;
  int64_t micro_batches_ = 1;       // the current iteration's
  int64_t next_micro_batches_ = 1;  // from the next iteration on
  int64_t micro_batch_ = 0;         // the current one's index
  int64_t micro_batch_offset_ = 0;  // its first sample in the batch
};

}  // namespace deepool::worker

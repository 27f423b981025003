// Executor::Step: one training iteration, as the passes of gradient accumulation
// (ExecutorOptions::accumulation_steps; docs/runtime.md, "Gradient accumulation"), and what it
// does around them: the data, the per-pass and per-iteration state, the loss and the step. In its
// own file: executor.cc was near 800 lines.
//
// Pass m of iteration i reads the data source's iteration i * N + m (a micro-batch view,
// data/micro_batches.h), runs the forward and backward walks (executor.h) on it, and keeps its
// loss. Its gradients build up in the parameters' .grad as autograd accumulates them; only the
// last pass's backward starts gradient sums (AddToBucket and the parameter hooks do nothing
// before it), each bucket then carrying the earlier passes' gradients with the last one's. So
// the gradient all-reduces, the tied parameters' sum, the clip norm and the optimizer step run
// once per iteration, whatever N. What cannot wait, does not: re-split transfers and batch norm's
// statistics are per pass (they belong to its forward and backward), and every transfer of a
// pass is waited on before the next pass posts into the same receive buffers.
#include <algorithm>
#include <optional>
#include <string>

#include "worker/runtime/executor.h"
#include "worker/runtime/executor_guard.h"
#include "worker/runtime/layers/memory_format.h"

namespace deepool::worker {

void Executor::ReleasePassTensors() {
  for (LayerState& state : layers_) {
    state.inputs.clear();
    state.output = torch::Tensor();
    state.loss = torch::Tensor();
  }
  for (torch::Tensor& labels : labels_) labels = torch::Tensor();
  for (PendingGroup& group : forward_groups_) group = PendingGroup();
  for (PendingGroup& group : backward_groups_) group = PendingGroup();
}

void Executor::ReleaseIterationTensors() {
  ReleasePassTensors();
  reduces_.clear();
  loss_reduce_.reset();
  iteration_loss_ = torch::Tensor();
  open_buckets_.clear();
  started_bucket_groups_.clear();
  bucket_error_ = Status::Ok();
  for (LayerState& state : layers_) {
    for (auto& grad : state.hooked_grads) grad = torch::Tensor();
  }
}

void Executor::PrepareIteration(const Batch& batch) {
  SetLabels(batch);
  if (pass_ > 0) return;  // the earlier passes' gradients stay: they accumulate
  for (size_t id = 0; id < layers_.size(); ++id) {
    LayerState& state = layers_[id];
    if (!state.runs) continue;
    state.hooked = 0;
    state.in_bucket = false;
    for (auto& grad : state.hooked_grads) grad = torch::Tensor();
    // As zero_grad(set_to_none): autograd then hands each parameter its gradient tensor
    // instead of adding it to zeros, and a bucket's sum becomes the gradient in place.
    for (auto& param : state.params) param.mutable_grad() = torch::Tensor();
  }
}

torch::Tensor Executor::LocalLoss() const {
  torch::Tensor local_loss =
      torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(options_.device));
  for (int id = graph_.num_layers() - 1; id >= 0; --id) {
    const LayerState& state = layers_[static_cast<size_t>(id)];
    if (state.runs && state.loss.defined()) local_loss += state.loss.detach().to(torch::kFloat64);
  }
  return local_loss;
}

StatusOr<double> Executor::FinishIteration() {
  // The global loss: each rank's parts, summed over the world on the device. It rode in the
  // first world bucket where one started (StartBucketSum); otherwise it is the last collective
  // of the iteration on every rank, started before the waits for the gradient sums, right
  // behind them, so it costs no round trip of its own. Waited on after the step either way.
  torch::Tensor local_loss = std::move(iteration_loss_);
  std::unique_ptr<CommWork> loss_sum;
  if (comm_->world_size() > 1 && !loss_reduce_) {
    RankGroup world(static_cast<size_t>(comm_->world_size()));
    for (int r = 0; r < comm_->world_size(); ++r) world[static_cast<size_t>(r)] = r;
    ASSIGN_OR_RETURN(loss_sum, comm_->AllReduceSum(local_loss, world));
  }
  RETURN_IF_ERROR(FinishReductions(local_loss, loss_sum));
  RETURN_IF_ERROR(SumTiedGradients());
  RETURN_IF_ERROR(AwaitTransfers());
  bool step = true;
  if (loss_scaler_) {
    ASSIGN_OR_RETURN(step, UnscaleGradients());
  }
  if (step) RETURN_IF_ERROR(ApplyRecipes());
  if (optimizer_ && step) {
    SpanScope span(options_.spans, SpanKind::kOptimizer, [] { return std::string("step"); });
    optimizer_->step();
  }
  if (loss_sum) {
    // The one host wait of the iteration: it also bounds, with the timeout, every operation the
    // device still had queued before it.
    SpanScope span(options_.spans, SpanKind::kWait, [] { return std::string("loss sum"); });
    auto start = clock_->Now();
    Status summed = loss_sum->WaitHost(comm_->timeout());
    idle_ += clock_->Now() - start;
    RETURN_IF_ERROR(summed.WithContext("summing the loss"));
  }
  double loss = local_loss.item<double>();
  Synchronize();
  return loss;
}

StatusOr<double> Executor::RunPass(int64_t iteration, int64_t pass, double* data_ms) {
  pass_ = pass;
  const int64_t steps = options_.accumulation_steps;
  std::optional<SpanScope<const char*>> data_span;
  data_span.emplace(options_.spans, SpanKind::kData, "batch");
  // Only the rows this rank's layers read, sliced on the host before the copy to the device.
  const auto data_start = clock_->Now();
  ASSIGN_OR_RETURN(Batch batch,
                   data_->Samples(iteration * steps + pass, data_rows_.first, data_rows_.second));
  *data_ms += Millis(clock_->Now() - data_start);
  double loss = 0;
  RETURN_IF_ERROR(
      Guarded("iteration " + std::to_string(iteration) + " on rank " + std::to_string(rank_),
              [&]() -> Status {
                // From pinned memory the copy is queued on the stream, not waited for.
                const bool queued = options_.device.is_cuda() && batch.inputs.is_pinned();
                batch.inputs = batch.inputs.to(options_.device, queued);
                batch.labels = batch.labels.to(options_.device, queued);
                batch.inputs = InMemoryFormat(ModelInputs(batch.inputs), options_.memory_format);
                PrepareIteration(batch);
                data_span.reset();
                RETURN_IF_ERROR(RunForward(batch));
                ReleaseForwardOnlyTensors();
                // The iteration's loss so far, known before the last backward starts any bucket.
                iteration_loss_ = pass == 0 ? LocalLoss() : iteration_loss_ + LocalLoss();
                RETURN_IF_ERROR(RunBackward());
                if (SumsGradients()) {
                  ASSIGN_OR_RETURN(loss, FinishIteration());
                  return Status::Ok();
                }
                // The next pass posts into the same receive buffers and group slots.
                RETURN_IF_ERROR(AwaitTransfers());
                ReleasePassTensors();
                return Status::Ok();
              }));
  return loss;
}

StatusOr<IterationStats> Executor::Step(int64_t iteration) {
  auto start = clock_->Now();
  iteration_ = iteration;
  idle_ = {};
  layer_error_ = Status::Ok();
  ReleaseIterationTensors();  // after a failed iteration
  double data_ms = 0;
  double loss = 0;
  Status status = Status::Ok();
  for (int64_t pass = 0; pass < options_.accumulation_steps && status.ok(); ++pass) {
    StatusOr<double> pass_loss = RunPass(iteration, pass, &data_ms);
    if (pass_loss.ok()) {
      loss = *pass_loss;  // the last pass's: the iteration's, summed over its passes
    } else {
      status = pass_loss.status();
    }
  }
  pass_ = 0;
  ReleaseIterationTensors();
  if (!status.ok() && !layer_error_.ok()) {
    // A group sum failed inside a layer or autograd: report its own code (UNAVAILABLE, ...).
    status = layer_error_.WithContext("iteration " + std::to_string(iteration) + " on rank " +
                                      std::to_string(rank_));
  }
  if (!status.ok()) return status;
  IterationStats stats;
  stats.iteration = iteration;
  stats.loss = loss;
  auto elapsed = clock_->Now() - start;
  stats.iteration_ms = Millis(elapsed);
  stats.idle_ms = Millis(idle_);
  stats.busy_ms = std::max(0.0, stats.iteration_ms - stats.idle_ms);
  stats.data_ms = std::min(data_ms, stats.busy_ms);
  if (loss_scaler_) {
    stats.skipped_steps = loss_scaler_->skipped_steps();
    stats.loss_scale = loss_scaler_->scale();
  }
  const double samples = static_cast<double>(plan_.global_batch * options_.accumulation_steps);
  stats.samples_per_s = stats.iteration_ms > 0 ? samples * 1000.0 / stats.iteration_ms : 0;
  return stats;
}

}  // namespace deepool::worker

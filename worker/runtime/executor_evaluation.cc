// Executor::Evaluate: the forward walk in eval mode over a held-out set (executor.h).
#include <algorithm>

#include "worker/runtime/executor.h"
#include "worker/runtime/executor_guard.h"

namespace deepool::worker {

void Executor::SetTraining(bool training) {
  for (auto& [id, module] : modules_) module->train(training);
}

Status Executor::EvaluatePass(DataSource* data, int64_t pass, int64_t samples,
                              torch::Tensor& totals) {
  ReleaseIterationTensors();
  ASSIGN_OR_RETURN(Batch batch, data->Samples(pass, data_rows_.first, data_rows_.second));
  batch.inputs = ModelInputs(batch.inputs.to(options_.device));
  batch.labels = batch.labels.to(options_.device);
  SetLabels(batch);
  RETURN_IF_ERROR(RunForward(batch));
  RETURN_IF_ERROR(AwaitTransfers());
  const LayerState& state = layers_[static_cast<size_t>(evaluated_output_)];
  if (!state.runs) return Status::Ok();
  // Rows at or past `samples` pad the last pass (the data wrapped around): not counted.
  const int64_t counted = std::clamp<int64_t>(samples - pass * plan_.global_batch - state.first, 0,
                                              state.last - state.first);
  if (counted == 0) return Status::Ok();
  // Sequence outputs ([n, T, V] with labels [n, T]) count every token's prediction.
  torch::Tensor logits = state.output.narrow(0, 0, counted).to(torch::kFloat64);
  torch::Tensor labels = labels_[static_cast<size_t>(evaluated_output_)].narrow(0, 0, counted);
  logits = logits.reshape({-1, logits.size(-1)});
  labels = labels.reshape({-1});
  const int64_t k = std::min<int64_t>(5, logits.size(1));
  const torch::Tensor hits = std::get<1>(logits.topk(k, 1)).eq(labels.unsqueeze(1));
  namespace F = torch::nn::functional;
  totals[0] +=
      F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().reduction(torch::kSum));
  totals[1] += hits.select(1, 0).sum();
  totals[2] += hits.any(1).sum();
  totals[3] += labels.numel();
  totals[4] += counted;
  return Status::Ok();
}

StatusOr<EvaluationStats> Executor::Evaluate(DataSource* data, int64_t samples) {
  const int64_t batch = data->global_batch();
  if (batch < 1) return InvalidArgumentError("evaluation needs passes of at least one sample");
  if (batch == plan_.global_batch) return EvaluateOnOwnPlan(data, samples);
  // Built for this call and dropped after it: its receive buffers are the size of the
  // evaluation's passes, memory that training should have back.
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> evaluator, CreateForEvaluation(*this, batch));
  return evaluator->EvaluateOnOwnPlan(data, samples);
}

StatusOr<EvaluationStats> Executor::EvaluateOnOwnPlan(DataSource* data, int64_t samples) {
  if (samples < 1) return InvalidArgumentError("evaluation needs at least one sample");
  const auto start = clock_->Now();
  const std::string where = "evaluation on rank " + std::to_string(rank_);
  torch::Tensor totals =
      torch::zeros({5}, torch::TensorOptions().dtype(torch::kFloat64).device(options_.device));
  SetTraining(false);
  Status status = Guarded(where, [&]() -> Status {
    torch::NoGradGuard no_grad;
    const int64_t passes = (samples + plan_.global_batch - 1) / plan_.global_batch;
    for (int64_t pass = 0; pass < passes; ++pass) {
      RETURN_IF_ERROR(EvaluatePass(data, pass, samples, totals));
    }
    return Status::Ok();
  });
  ReleaseIterationTensors();
  SetTraining(true);
  RETURN_IF_ERROR(status);
  if (comm_->world_size() > 1) {
    RankGroup world(static_cast<size_t>(comm_->world_size()));
    for (int r = 0; r < comm_->world_size(); ++r) world[static_cast<size_t>(r)] = r;
    ASSIGN_OR_RETURN(auto sum, comm_->AllReduceSum(totals, world));
    RETURN_IF_ERROR(sum->WaitHost(comm_->timeout()).WithContext(where + ": summing the counts"));
  }
  const torch::Tensor host = totals.cpu();
  const double* sums = host.data_ptr<double>();
  EvaluationStats stats;
  stats.samples = static_cast<int64_t>(sums[4]);
  if (stats.samples != samples) {
    return InternalError(where + ": counted " + std::to_string(stats.samples) + " samples of " +
                         std::to_string(samples));
  }
  stats.predictions = static_cast<int64_t>(sums[3]);
  stats.loss = sums[0] / sums[3];
  stats.top1 = sums[1] / sums[3];
  stats.top5 = sums[2] / sums[3];
  stats.evaluation_ms = Millis(clock_->Now() - start);
  return stats;
}

}  // namespace deepool::worker

// Gradient accumulation (ExecutorOptions::accumulation_steps; docs/runtime.md, "Gradient
// accumulation"): an iteration of N passes of a micro-batch of B / N samples, over a burst plan
// whose layers sit on uneven device sets, trains exactly as one device training the whole batch
// B without accumulation (the same rows in the same order, the mean loss over B, one step); its
// gradient all-reduces do not grow with N (one sum per iteration, after the last pass); and the
// micro-batch view of a data source reads the iteration's rows in order.
#include <catch2/catch.hpp>
#include <cstdint>
#include <utility>
#include <vector>

#include "tests/runtime/executor_test_util.h"
#include "worker/runtime/data/micro_batches.h"
#include "worker/runtime/layers/gradient_clipping.h"

namespace deepool::worker::testing {
namespace {

constexpr int64_t kSteps = 4;
constexpr int64_t kMicroBatch = 7;  // over 3 ranks: shares 3, 2, 2
constexpr int64_t kBatch = kSteps * kMicroBatch;
constexpr int kIterations = 4;
constexpr uint64_t kSeed = 7;
constexpr uint64_t kDataSeed = 57;

// The mlp with every layer on its own uneven device set: re-splits between every pair of layers,
// fc1 data parallel over the world (its gradients summed over 3 ranks), fc3 over two.
planner::Plan Burst(const planner::Graph& graph, int64_t batch) {
  return MakePlan(graph, batch, 3, {0, 1, 2},
                  {{"relu1", {1, 2}}, {"fc2", {0}}, {"relu2", {0, 2}}, {"fc3", {1, 2}}});
}

// Each rank's data: the iteration batch (B rows) seen as N micro-batches.
RankOptions Accumulating(int64_t steps) {
  RankOptions options;
  options.make_data = [steps]() -> StatusOr<std::unique_ptr<DataSource>> {
    const planner::Graph graph = Zoo("mlp");
    ASSIGN_OR_RETURN(auto source, MakeDataSource(DataSpec{"synthetic", kDataSeed, ""}, graph,
                                                 steps * kMicroBatch));
    return MicroBatches(std::move(source), steps);
  };
  options.configure = [steps](int, ExecutorOptions& executor) {
    executor.accumulation_steps = steps;
    executor.total_iterations = kIterations;
  };
  return options;
}

// A PyTorch user's accumulation loop on one device: per iteration, zero the gradients, then for
// each micro-batch (rows m * B/N ..) forward, the mean loss over the micro-batch divided by N
// (LossPart over B), backward; then one step. Its rounding is the executor's: each pass's
// gradients summed into .grad.
TrainResult TrainAccumulatingOnOneDevice(const planner::Graph& graph,
                                         const OptimizerSpec& optimizer) {
  return TrainReference(
      graph, kIterations, optimizer, kSeed,
      [&] {
        return MakeDataSource(DataSpec{"synthetic", kDataSeed, ""}, graph, kBatch);
      },
      [&](int i, const Batch& batch, ReferenceModel& model) {
        double loss = 0;
        for (int64_t m = 0; m < kSteps; ++m) {
          const int64_t first = m * kMicroBatch;
          auto outputs = ForwardGraph(graph, model.modules,
                                      ModelInputs(batch.inputs.narrow(0, first, kMicroBatch)),
                                      StepContext{i, first});
          REQUIRE(outputs.ok());
          torch::Tensor part =
              GraphLoss(graph, *outputs, batch.labels.narrow(0, first, kMicroBatch), kBatch);
          part.backward();
          loss += part.item<double>();
        }
        return loss;
      });
}

std::vector<RankRun> RunAccumulating(const planner::Graph& graph, const OptimizerSpec& optimizer) {
  return RunRanks(graph, Burst(graph, kMicroBatch), kIterations, optimizer, kSeed, kDataSeed,
                  GlooComms(3), Accumulating(kSteps));
}

// The iteration's loss is the whole batch's mean loss: the mean of its passes'.
void RequireLossesMatch(const std::vector<RankRun>& runs, const TrainResult& reference) {
  for (const RankRun& run : runs) {
    REQUIRE(run.result.losses.size() == reference.losses.size());
    for (size_t i = 0; i < reference.losses.size(); ++i) {
      INFO("iteration " << i);
      CHECK(run.result.losses[i] == Approx(reference.losses[i]).epsilon(1e-5));
    }
  }
}

// One device on the whole batch B, without accumulation: the ground truth. `tolerance` bounds
// |got - want| <= tolerance (1 + |want|).
void RequireAccumulationMatchesOneDevice(const OptimizerSpec& optimizer, double tolerance) {
  torch::set_num_threads(1);
  const planner::Graph graph = Zoo("mlp");
  // Clipping, where asked for, as a PyTorch user clips: once, after the last micro-batch.
  const TrainResult reference = TrainSingleDevice(
      graph, kBatch, kIterations, optimizer, kSeed,
      [&] {
        return MakeDataSource(DataSpec{"synthetic", kDataSeed, ""}, graph, kBatch);
      },
      [&](int, std::vector<torch::Tensor>& params, torch::optim::Optimizer&) {
        if (optimizer.clip_grad_norm > 0) {
          torch::nn::utils::clip_grad_norm_(params, optimizer.clip_grad_norm);
        }
      });
  auto runs = RunAccumulating(graph, optimizer);
  RequireMatchesReference(runs, reference, tolerance, tolerance);
  RequireLossesMatch(runs, reference);
}

TEST_CASE(
    "4 accumulation steps on an uneven 3-rank burst plan equal one device on the whole "
    "batch with SGD momentum",
    "[executor][accumulation][gloo]") {
  RequireAccumulationMatchesOneDevice(Sgd(), 1e-5);
}

// AdamW whose eps (1e-6 instead of 1e-8) keeps gradients at fp32 rounding level from being
// magnified: with eps 1e-8 a gradient of 1e-10, noise where the exact one is 0 (a unit no sample
// activates), steps by lr / 100, so runs that only sum in another order differ by 1e-4 (measured
// 5e-5 between the executor and the one-device accumulation loop, 1.4e-5 to the whole batch).
OptimizerSpec AdamWForComparison() {
  OptimizerSpec adamw = AdamW();
  adamw.eps = 1e-6;
  return adamw;
}

TEST_CASE(
    "4 accumulation steps on an uneven 3-rank burst plan equal one device on the whole "
    "batch with AdamW",
    "[executor][accumulation][gloo]") {
  RequireAccumulationMatchesOneDevice(AdamWForComparison(), 1e-5);
}

TEST_CASE(
    "4 accumulation steps on an uneven 3-rank burst plan equal PyTorch's accumulation loop "
    "with AdamW",
    "[executor][accumulation][gloo]") {
  torch::set_num_threads(1);
  const planner::Graph graph = Zoo("mlp");
  const TrainResult accumulated = TrainAccumulatingOnOneDevice(graph, AdamWForComparison());
  auto runs = RunAccumulating(graph, AdamWForComparison());
  RequireMatchesReference(runs, accumulated, 1e-5, 1e-5);
  RequireLossesMatch(runs, accumulated);
}

TEST_CASE("accumulation clips the accumulated gradient once per iteration",
          "[executor][accumulation][recipes][gloo]") {
  OptimizerSpec clipped = Sgd();
  clipped.clip_grad_norm = 0.05;  // below the mlp's gradient norms here, so clipping acts
  RequireAccumulationMatchesOneDevice(clipped, 1e-5);
}

// Bytes all-reduced and point-to-point messages of one iteration over the FakeNetwork.
std::pair<int64_t, int64_t> TrafficOfOneIteration(int64_t steps) {
  torch::set_num_threads(1);
  const planner::Graph graph = Zoo("mlp");
  auto net = std::make_shared<FakeNetwork>(3, FakeSemantics::kNccl);
  CommMaker comms = [net](int rank) -> StatusOr<std::unique_ptr<Communicator>> {
    return net->Join(rank, std::chrono::seconds(30));
  };
  auto runs = RunRanks(graph, Burst(graph, kMicroBatch), 1, Sgd(), kSeed, kDataSeed, comms,
                       Accumulating(steps));
  for (const RankRun& run : runs) {
    INFO(run.status.ToString());
    REQUIRE(run.status.ok());
  }
  return {net->bytes_all_reduced(), net->messages_sent()};
}

TEST_CASE("gradient all-reduces do not grow with the accumulation steps",
          "[executor][accumulation]") {
  const auto [once_bytes, once_messages] = TrafficOfOneIteration(1);
  const auto [four_bytes, four_messages] = TrafficOfOneIteration(kSteps);
  INFO("1 step: " << once_bytes << " bytes all-reduced, " << once_messages << " messages; 4 steps: "
                  << four_bytes << " bytes, " << four_messages << " messages");
  // The mlp has no batch norm: all-reduces are the gradient buckets (and the loss riding in
  // one), once per iteration whatever the passes.
  CHECK(once_bytes > 0);
  CHECK(four_bytes == once_bytes);
  // The re-splits are per pass (each pass's activations and their gradients).
  CHECK(four_messages == kSteps * once_messages);
}

TEST_CASE("the micro-batch view reads each iteration's rows in order", "[data][accumulation]") {
  const planner::Graph graph = Zoo("mlp");
  const DataSpec spec{"synthetic", kDataSeed, ""};
  auto whole = MakeDataSource(spec, graph, kBatch);
  auto source = MakeDataSource(spec, graph, kBatch);
  REQUIRE(whole.ok());
  REQUIRE(source.ok());
  auto view = MicroBatches(std::move(*source), kSteps);
  REQUIRE(view.ok());
  CHECK((*view)->global_batch() == kMicroBatch);
  CHECK((*view)->num_samples() == (*whole)->num_samples());
  for (int64_t iteration : {0, 3}) {
    auto batch = (*whole)->GlobalBatch(iteration);
    REQUIRE(batch.ok());
    for (int64_t pass = 0; pass < kSteps; ++pass) {
      // Rows 2..5 of the pass: rows pass * 7 + 2 .. of the iteration.
      auto part = (*view)->Samples(iteration * kSteps + pass, 2, 6);
      REQUIRE(part.ok());
      CHECK(part->first == 2);
      CHECK(torch::equal(part->inputs, batch->inputs.narrow(0, pass * kMicroBatch + 2, 4)));
      CHECK(torch::equal(part->labels, batch->labels.narrow(0, pass * kMicroBatch + 2, 4)));
    }
  }
}

TEST_CASE("a batch that does not split into the accumulation steps is refused",
          "[data][accumulation]") {
  const planner::Graph graph = Zoo("mlp");
  auto source = MakeDataSource(DataSpec{"synthetic", 1, ""}, graph, 30);
  REQUIRE(source.ok());
  auto view = MicroBatches(std::move(*source), 4);
  REQUIRE_FALSE(view.ok());
  CHECK(view.status().message() ==
        "a global batch of 30 does not split into 4 micro-batches of equal size");
}

}  // namespace
}  // namespace deepool::worker::testing

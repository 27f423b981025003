// Mixed precision in the executor (ExecutorOptions::precision, docs/runtime.md "Precision"),
// measured on CPU, where libtorch's autocast runs bf16:
//   - one rank at bf16 trains like a plain libtorch loop that runs the same modules' forward
//     under autocast (bf16), with the loss in fp32;
//   - burst and uneven plans over 3 ranks at bf16 train like one device at bf16, within a
//     tolerance measured below;
//   - activations and their gradients cross between ranks in bf16: half the bytes of fp32.
// Each test also shows the property it checks is not vacuous: fp32 misses the bf16 reference
// by far more than the tolerance, and fp32 transfers send twice the bytes.
#include <ATen/autocast_mode.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

#include "planner/precision.h"
#include "tests/runtime/executor_test_util.h"
#include "worker/runtime/layers/loss_scaler.h"

namespace deepool::worker::testing {
namespace {

using planner::Precision;

// A plain bf16 training loop on one device: the graph's modules in order, the forward under
// autocast at bf16 (set by hand here, not through the runtime's AutocastScope), the loss from
// the outputs cast to fp32, fp32 parameters stepped by the optimizer.
TrainResult TrainAutocastReference(const planner::Graph& graph, int64_t global_batch,
                                   int iterations, const OptimizerSpec& optimizer, uint64_t seed,
                                   uint64_t data_seed, at::ScalarType dtype = at::kBFloat16) {
  TrainResult result = TrainReference(
      graph, iterations, optimizer, seed,
      [&] {
        return MakeDataSource(DataSpec{"synthetic", data_seed, ""}, graph, global_batch);
      },
      [&](int i, const Batch& batch, ReferenceModel& model) {
        at::autocast::set_autocast_enabled(c10::DeviceType::CPU, true);
        at::autocast::set_autocast_dtype(c10::DeviceType::CPU, dtype);
        auto outputs =
            ForwardGraph(graph, model.modules, ModelInputs(batch.inputs), StepContext{i, 0});
        at::autocast::set_autocast_enabled(c10::DeviceType::CPU, false);
        at::autocast::clear_cache();
        REQUIRE(outputs.ok());
        for (torch::Tensor& output : *outputs) output = output.to(torch::kFloat);
        torch::Tensor loss = GraphLoss(graph, *outputs, batch.labels, global_batch);
        loss.backward();
        return loss.item<double>();
      });
  for (const auto& [name, param] : result.params) {
    INFO(name);
    REQUIRE(param.scalar_type() == torch::kFloat);  // master weights stay fp32
  }
  return result;
}

// The worst |got - want| / (atol + rtol |want|) over every parameter and buffer of the
// reference (float64), taken from whichever rank holds it; and over the losses. Requires every
// rank to have run and every tensor of the reference to be held.
double WorstRatio(const std::vector<RankRun>& runs, const TrainResult& reference, double rtol,
                  double atol) {
  double worst = 0;
  size_t found = 0;
  for (const ParamMap* tensors : {&reference.params, &reference.buffers}) {
    for (const auto& [name, want] : *tensors) {
      for (const RankRun& run : runs) {
        INFO(run.status.ToString());
        REQUIRE(run.status.ok());
        for (const ParamMap* held : {&run.result.params, &run.result.buffers}) {
          auto it = held->find(name);
          if (it == held->end()) continue;
          REQUIRE(it->second.scalar_type() == want.scalar_type());  // fp32 weights, long counter
          torch::Tensor w = want.to(torch::kFloat64);
          torch::Tensor ratio =
              (it->second.to(torch::kFloat64) - w).abs() / (atol + rtol * w.abs());
          worst = std::max(worst, ratio.max().item<double>());
          ++found;
        }
      }
    }
  }
  REQUIRE(found >= reference.params.size() + reference.buffers.size());
  for (const RankRun& run : runs) {
    REQUIRE(run.result.losses.size() == reference.losses.size());
    for (size_t i = 0; i < reference.losses.size(); ++i) {
      const double want = reference.losses[i];
      worst =
          std::max(worst, std::abs(run.result.losses[i] - want) / (atol + rtol * std::abs(want)));
    }
  }
  return worst;
}

RankOptions AtPrecision(Precision precision) {
  RankOptions options;
  options.precision = precision;
  return options;
}

// small_cnn (with its two batch norm layers) and the residual block (three), trained for a few
// iterations with SGD with momentum.
constexpr int kIterations = 3;
constexpr int64_t kBatch = 12;

TEST_CASE("one rank at bf16 equals a plain autocast loop", "[executor][precision]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  auto plan = MakePlan(graph, kBatch, 1, {0});
  TrainResult reference = TrainAutocastReference(graph, kBatch, kIterations, Sgd(), 7, 57);
  auto bf16 =
      RunRanks(graph, plan, kIterations, Sgd(), 7, 57, FakeComms(1), AtPrecision(Precision::kBf16));
  // The same ops on the same tensors: measured 0 (bit for bit); the tolerance only allows for
  // a kernel that picks another blocking.
  const double ratio = WorstRatio(bf16, reference, 1e-6, 1e-7);
  INFO("worst ratio to the tolerance " << ratio);
  CHECK(ratio <= 1.0);
  // Not vacuous: fp32 training misses the bf16 loop by far more.
  auto fp32 =
      RunRanks(graph, plan, kIterations, Sgd(), 7, 57, FakeComms(1), AtPrecision(Precision::kFp32));
  CHECK(WorstRatio(fp32, reference, 1e-6, 1e-7) > 100);
}

// A plan against one device, both at bf16. Measured with the seeds below (3 SGD steps):
//   - the first iteration's loss (forward only) equals one device's: relative difference 0 for
//     small_cnn and 1.1e-7 for the residual block (whose batch norm statistics are summed in
//     float64 over ranks), while the same plan at fp32 misses the bf16 loss by 1.3e-4 to
//     1.9e-4: the check below (1e-6) sees that every rank computes in bf16;
//   - after the steps, parameters, buffers and losses differ by up to 1.5e-3 absolute (conv
//     weights): a split batch rounds each rank's partial weight gradient to bf16 (autocast's
//     convolution backward) before the fp32 sum, where one device rounds the whole sum once, so
//     the difference is of bf16's unit roundoff (2^-8) times a gradient, per step. That is of
//     the order of bf16 against fp32 itself (the fp32 plan misses the bf16 device by 2.7e-3 on
//     the same weight): bf16 training is reproducible across plans only to bf16's precision.
//     Tolerance |got - want| <= 2e-3 + 2e-2 |want|, reached at most to 0.39 (small_cnn) and
//     0.68 (residual block) of it; batch norm with per-device statistics misses it.
constexpr double kBf16Rtol = 2e-2;
constexpr double kBf16Atol = 2e-3;
constexpr double kFirstLossRtol = 1e-6;

// Trains `plan` at `precision` (batch norm synchronised unless told) on the fake network.
std::vector<RankRun> RunAt(const planner::Graph& graph, const planner::Plan& plan,
                           Precision precision, uint64_t seed, uint64_t data_seed,
                           bool sync_batch_norm = true) {
  RankOptions options = AtPrecision(precision);
  options.sync_batch_norm = sync_batch_norm;
  return RunRanks(graph, plan, kIterations, Sgd(), seed, data_seed, FakeComms(plan.num_devices),
                  options);
}

// The worst relative difference of the first iteration's loss from `want`, over the ranks.
double FirstLossDifference(const std::vector<RankRun>& runs, double want) {
  double worst = 0;
  for (const RankRun& run : runs) {
    INFO(run.status.ToString());
    REQUIRE(run.status.ok());
    REQUIRE_FALSE(run.result.losses.empty());
    worst = std::max(worst, std::abs(run.result.losses.front() - want) / std::abs(want));
  }
  return worst;
}

// Checks the plan at bf16 against one device at bf16 (and that fp32 misses the first loss).
TrainResult RequireBf16PlanMatchesOneDevice(const planner::Graph& graph, const planner::Plan& plan,
                                            uint64_t seed, uint64_t data_seed) {
  TrainResult reference =
      TrainAutocastReference(graph, plan.global_batch, kIterations, Sgd(), seed, data_seed);
  auto bf16 = RunAt(graph, plan, Precision::kBf16, seed, data_seed);
  const double first = FirstLossDifference(bf16, reference.losses.front());
  INFO("bf16 plan: first loss off by " << first);
  CHECK(first <= kFirstLossRtol);
  const double ratio = WorstRatio(bf16, reference, kBf16Rtol, kBf16Atol);
  INFO("bf16 plan: worst ratio to the tolerance " << ratio);
  CHECK(ratio <= 1.0);
  auto fp32 = RunAt(graph, plan, Precision::kFp32, seed, data_seed);
  const double fp32_first = FirstLossDifference(fp32, reference.losses.front());
  INFO("fp32 plan against the bf16 device: first loss off by " << fp32_first);
  CHECK(fp32_first > 100 * kFirstLossRtol);
  return reference;
}

TEST_CASE("small_cnn burst plan over 3 ranks at bf16 equals one device at bf16",
          "[executor][precision]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  RequireBf16PlanMatchesOneDevice(graph, MakePlan(graph, kBatch, 3, {0, 1, 2}, SmallCnnBurst()), 7,
                                  57);
}

TEST_CASE("residual block uneven plan over 3 ranks at bf16 equals one device at bf16",
          "[executor][precision]") {
  torch::set_num_threads(1);
  auto graph = ResidualBlock();
  // Batch 8 over 3 ranks: shares 3, 3, 2; batch norm synchronised over all three; the second
  // conv and its batch norm on two ranks (4, 4), the head on one.
  auto plan = MakePlan(graph, 8, 3, {0, 1, 2},
                       {{"block.conv2", {1, 2}}, {"block.bn2", {1, 2}}, {"fc", {2}}});
  TrainResult reference = RequireBf16PlanMatchesOneDevice(graph, plan, 3, 53);
  // Not vacuous: per-device batch norm statistics at bf16 miss the tolerance.
  auto per_device = RunAt(graph, plan, Precision::kBf16, 3, 53, /*sync_batch_norm=*/false);
  const double ratio = WorstRatio(per_device, reference, kBf16Rtol, kBf16Atol);
  INFO("per-device batch norm: worst ratio " << ratio);
  CHECK(ratio > 1.0);
}

TEST_CASE("activations and their gradients cross between ranks in bf16", "[executor][precision]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  auto plan = MakePlan(graph, kBatch, 3, {0, 1, 2}, SmallCnnBurst());
  auto bytes_at = [&](Precision precision) {
    auto net = std::make_shared<FakeNetwork>(3, FakeSemantics::kNccl);
    CommMaker comms = [net](int rank) -> StatusOr<std::unique_ptr<Communicator>> {
      return net->Join(rank, std::chrono::seconds(30));
    };
    auto runs = RunRanks(graph, plan, 1, Sgd(), 7, 57, comms, AtPrecision(precision));
    for (const auto& run : runs) {
      INFO(run.status.ToString());
      REQUIRE(run.status.ok());
    }
    return std::make_pair(net->bytes_sent(), net->half_bytes_sent());
  };
  auto [fp32_bytes, fp32_half] = bytes_at(Precision::kFp32);
  auto [bf16_bytes, bf16_half] = bytes_at(Precision::kBf16);
  INFO("fp32 " << fp32_bytes << " bytes, bf16 " << bf16_bytes << " bytes");
  CHECK(fp32_bytes > 0);
  CHECK(fp32_half == 0);
  CHECK(bf16_half == bf16_bytes);  // every activation and gradient piece in bf16
  CHECK(2 * bf16_bytes == fp32_bytes);
}

TEST_CASE("loss scaler: halves and skips on an overflow and doubles after good steps",
          "[precision][loss_scaling]") {
  LossScalerOptions options;
  options.initial_scale = 1024;
  options.growth_interval = 3;
  LossScaler scaler(options);
  CHECK(scaler.Update(false));
  CHECK(scaler.Update(false));
  CHECK(scaler.scale() == 1024);
  CHECK(scaler.Update(false));  // the third good step in a row
  CHECK(scaler.scale() == 2048);
  CHECK(scaler.Update(false));
  CHECK_FALSE(scaler.Update(true));  // skipped: halved, and the count of good steps restarts
  CHECK(scaler.scale() == 1024);
  CHECK(scaler.skipped_steps() == 1);
  CHECK(scaler.Update(false));
  CHECK(scaler.Update(false));
  CHECK(scaler.scale() == 1024);
  CHECK(scaler.Update(false));
  CHECK(scaler.scale() == 2048);
  CHECK(scaler.skipped_steps() == 1);
}

// Ranks of small_cnn's burst plan at fp16 with loss scaling from 2^10; on `inject_rank`, the
// first parameter gradient of iteration `inject_at` becomes inf before the overflow check.
RankOptions Fp16WithOverflow(int inject_rank, int64_t inject_at) {
  RankOptions options = AtPrecision(Precision::kFp16);
  options.configure = [=](int rank, ExecutorOptions& executor) {
    executor.loss_scaling.initial_scale = 1024;
    if (rank != inject_rank) return;
    executor.before_unscale = [=](int64_t iteration, std::vector<torch::Tensor>& grads) {
      if (iteration == inject_at && !grads.empty()) grads.front().view({-1})[0] = INFINITY;
    };
  };
  return options;
}

TEST_CASE("fp16: an overflow on one rank skips the step on every rank and halves the scale",
          "[executor][precision][loss_scaling]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  auto plan = MakePlan(graph, kBatch, 3, {0, 1, 2}, SmallCnnBurst());
  // The weights before any step, on every rank.
  auto initial =
      RunRanks(graph, plan, 0, Sgd(), 7, 57, FakeComms(3), AtPrecision(Precision::kFp16));
  // Rank 1 (which holds stem.conv) finds an inf in iteration 0.
  RankOptions options = Fp16WithOverflow(1, 0);
  std::vector<std::pair<int64_t, double>> scaler_state(3);
  options.after = [&](int rank, Executor& executor) -> Status {
    REQUIRE(executor.loss_scaler() != nullptr);
    scaler_state[static_cast<size_t>(rank)] = {executor.loss_scaler()->skipped_steps(),
                                               executor.loss_scaler()->scale()};
    return Status::Ok();
  };
  auto skipped = RunRanks(graph, plan, 1, Sgd(), 7, 57, FakeComms(3), options);
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank);
    REQUIRE(skipped[static_cast<size_t>(rank)].status.ok());
    CHECK(scaler_state[static_cast<size_t>(rank)].first == 1);
    CHECK(scaler_state[static_cast<size_t>(rank)].second == 512);
    // No rank stepped: every parameter is as before the iteration.
    for (const auto& [name, before] : initial[static_cast<size_t>(rank)].result.params) {
      INFO(name);
      CHECK(torch::equal(skipped[static_cast<size_t>(rank)].result.params.at(name), before));
    }
  }
}

TEST_CASE("fp16 with loss scaling: a burst plan equals one device at fp16",
          "[executor][precision][loss_scaling]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  auto plan = MakePlan(graph, kBatch, 3, {0, 1, 2}, SmallCnnBurst());
  // The reference loop runs fp16 autocast without scaling: with SGD, scaling by a power of two
  // and unscaling is exact unless a gradient underflows or overflows, which none does here.
  TrainResult reference =
      TrainAutocastReference(graph, kBatch, kIterations, Sgd(), 7, 57, at::kHalf);
  RankOptions options = Fp16WithOverflow(-1, -1);  // no overflow
  auto fp16 = RunRanks(graph, plan, kIterations, Sgd(), 7, 57, FakeComms(3), options);
  const double first = FirstLossDifference(fp16, reference.losses.front());
  INFO("fp16 plan: first loss off by " << first);
  CHECK(first <= kFirstLossRtol);
  // Measured: the conv weights differ by up to 2.1e-3 after 3 steps (res.conv.weight; bf16's
  // plan: 1.0e-3 on the same weight), 0.93 of bf16's tolerance and the same at loss scale 1, so
  // not from the scaling: CPU fp16 kernels round a split batch more differently than bf16 ones
  // here. Twice bf16's tolerance, reached to 0.47.
  const double ratio = WorstRatio(fp16, reference, 2 * kBf16Rtol, 2 * kBf16Atol);
  INFO("fp16 plan: worst ratio to the tolerance " << ratio);
  CHECK(ratio <= 1.0);
}

}  // namespace
}  // namespace deepool::worker::testing

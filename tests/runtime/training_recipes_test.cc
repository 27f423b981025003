// The optimizer's training recipes (docs/runtime.md, "Training recipes"), against torch:
//   - the learning-rate schedules equal torch.optim.lr_scheduler.LambdaLR's learning rates with
//     the documented lambda, and decay_1d false equals torch.optim.AdamW with nanoGPT's param
//     groups (values printed by training_recipes_reference.py);
//   - clipping equals libtorch's torch::nn::utils::clip_grad_norm_;
//   - under a burst plan and an uneven plan over 3 ranks, training with clipping and a cosine
//     schedule equals one device doing the same with clip_grad_norm_, every parameter: each
//     layer's gradient enters the global norm once, though several ranks hold it;
//   - a run resumed from its training state goes on with the schedule where it stopped.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/runtime/executor_test_util.h"
#include "worker/runtime/checkpoints/training_state.h"
#include "worker/runtime/layers/gradient_clipping.h"
#include "worker/runtime/layers/lr_schedule.h"

namespace deepool::worker::testing {
namespace {

struct ScheduleCase {
  protocol::LrScheduleSpec schedule;
  int64_t total = 0;
  double lr = 0;
  std::vector<double> torch_lrs;  // training_recipes_reference.py
};

ScheduleCase Case(const std::string& kind, int64_t warmup, double min_lr, int64_t total, double lr,
                  std::vector<double> torch_lrs) {
  ScheduleCase c;
  c.schedule.kind = kind;
  c.schedule.warmup_iterations = warmup;
  c.schedule.min_lr = min_lr;
  c.total = total;
  c.lr = lr;
  c.torch_lrs = std::move(torch_lrs);
  return c;
}

TEST_CASE("learning-rate schedules equal torch's LambdaLR", "[recipes]") {
  std::vector<ScheduleCase> cases;
  cases.push_back(Case("cosine", 3, 0.05, 10, 0.5,
                       {0.0, 0.16666666666666666, 0.3333333333333333, 0.5, 0.47771799527804426,
                        0.41528520541821506, 0.3250672101401707, 0.22493278985982929,
                        0.13471479458178498, 0.07228200472195573, 0.05, 0.05}));
  cases.push_back(
      Case("linear", 2, 0.0, 6, 0.1, {0.0, 0.05, 0.1, 0.07500000000000001, 0.05, 0.025, 0.0}));
  cases.push_back(
      Case("constant", 4, 0.0, 10, 0.2, {0.0, 0.05, 0.1, 0.15000000000000002, 0.2, 0.2}));
  for (const auto& c : cases) {
    OptimizerSpec spec;
    spec.lr = c.lr;
    spec.schedule = c.schedule;
    for (size_t i = 0; i < c.torch_lrs.size(); ++i) {
      INFO(c.schedule.kind << " iteration " << i);
      CHECK(ScheduledLr(spec, static_cast<int64_t>(i), c.total) ==
            Approx(c.torch_lrs[i]).epsilon(1e-12).margin(1e-15));
    }
  }
}

TEST_CASE("the default schedule keeps the lr", "[recipes]") {
  OptimizerSpec spec;
  spec.lr = 0.3;
  for (int64_t i : {0, 1, 99}) CHECK(ScheduledLr(spec, i, 100) == 0.3);
}

TEST_CASE("decay_1d false equals AdamW with no weight decay for tensors of one dimension",
          "[recipes]") {
  torch::Tensor weight =
      torch::tensor({0.5, -1.0, 2.0, 0.25}, torch::kFloat64).reshape({2, 2}).requires_grad_();
  torch::Tensor bias = torch::tensor({1.0, -2.0}, torch::kFloat64).requires_grad_();
  OptimizerSpec spec;
  spec.name = "adamw";
  spec.lr = 0.1;
  spec.weight_decay = 0.2;
  spec.decay_1d = false;
  auto made = MakeOptimizer(spec, {bias, weight});
  REQUIRE(made.ok());
  for (int t = 0; t < 3; ++t) {
    // Each step's gradients replace the last's, as after zero_grad.
    weight.mutable_grad() =
        torch::tensor({0.1 * (t + 1), -0.2, 0.3, 0.05 * t}, torch::kFloat64).reshape({2, 2});
    bias.mutable_grad() = torch::tensor({0.5, -0.1 * (t + 1)}, torch::kFloat64);
    (*made)->step();
  }
  // training_recipes_reference.py: torch.optim.AdamW with the groups
  // [{dim >= 2, weight_decay 0.2}, {dim < 2, weight_decay 0}].
  const std::vector<double> torch_weight = {0.18416805907841755, -0.647152014702,
                                            1.5883440098013337, 0.07951536187616311};
  const std::vector<double> torch_bias = {0.7000000060000007, -1.7076816955448424};
  for (size_t i = 0; i < torch_weight.size(); ++i) {
    CHECK(weight.flatten()[static_cast<int64_t>(i)].item<double>() ==
          Approx(torch_weight[i]).epsilon(1e-12));
  }
  for (size_t i = 0; i < torch_bias.size(); ++i) {
    CHECK(bias[static_cast<int64_t>(i)].item<double>() == Approx(torch_bias[i]).epsilon(1e-12));
  }
}

TEST_CASE("clipping equals torch's clip_grad_norm_", "[recipes]") {
  for (double max_norm : {0.5, 100.0}) {
    torch::manual_seed(3);
    std::vector<torch::Tensor> ours, theirs;
    for (auto shape : {std::vector<int64_t>{3, 4}, std::vector<int64_t>{4}, {2, 2, 3}}) {
      torch::Tensor param = torch::zeros(shape).requires_grad_();
      param.mutable_grad() = torch::randn(shape);
      torch::Tensor twin = torch::zeros(shape).requires_grad_();
      twin.mutable_grad() = param.grad().clone();
      ours.push_back(param.grad());
      theirs.push_back(twin);
    }
    torch::Tensor total = ClipGradients(ours, SquaredGradientNorm(ours, torch::kCPU), max_norm);
    const double torch_total = torch::nn::utils::clip_grad_norm_(theirs, max_norm);
    CHECK(total.item<double>() == Approx(torch_total).epsilon(1e-6));
    for (size_t k = 0; k < ours.size(); ++k) {
      CHECK(torch::allclose(ours[k], theirs[k].grad(), 1e-6, 1e-7));
    }
  }
}

constexpr int kIterations = 4;
constexpr int64_t kBatch = 8;
constexpr double kMaxNorm = 0.05;

OptimizerSpec ClippedCosine() {
  OptimizerSpec spec = Sgd();
  spec.clip_grad_norm = kMaxNorm;
  spec.schedule = protocol::LrScheduleSpec{"cosine", 1, 0.01};
  return spec;
}

// Single-device training as a PyTorch loop with these recipes writes it: backward, then
// clip_grad_norm_ over all the parameters, then the scheduled lr, then the step. Records the
// total norm of each iteration before clipping (torch's return value) in `norms`.
TrainResult TrainClippedReference(const planner::Graph& graph, const OptimizerSpec& optimizer,
                                  uint64_t seed, uint64_t data_seed, std::vector<double>& norms) {
  TrainResult result = TrainSingleDevice(
      graph, kBatch, kIterations, optimizer, seed,
      [&] {
        return MakeDataSource(DataSpec{"synthetic", data_seed, ""}, graph, kBatch);
      },
      [&](int i, std::vector<torch::Tensor>& params, torch::optim::Optimizer& opt) {
        norms.push_back(torch::nn::utils::clip_grad_norm_(params, optimizer.clip_grad_norm));
        SetLearningRate(opt, ScheduledLr(optimizer, i, kIterations));
      });
  result.buffers.clear();  // these plans' runs are compared by their parameters only
  return result;
}

RankOptions OverIterations() {
  RankOptions options;
  options.configure = [](int, ExecutorOptions& executor) {
    executor.total_iterations = kIterations;
  };
  return options;
}

// The plan's run with clipping and the schedule equals the reference within 1e-5 relative; the
// same run without clipping does not (so clipping acted: the norms are above kMaxNorm).
void RequireClippedPlanMatchesOneDevice(const planner::Graph& graph, const planner::Plan& plan) {
  std::vector<double> norms;
  TrainResult reference = TrainClippedReference(graph, ClippedCosine(), 7, 57, norms);
  for (double norm : norms) CHECK(norm > 2 * kMaxNorm);
  // Batch norm's buffers are not compared here (executor_batchnorm_test.cc does).
  auto runs =
      RunRanks(graph, plan, kIterations, ClippedCosine(), 7, 57, FakeComms(3), OverIterations());
  for (auto& run : runs) run.result.buffers.clear();
  RequireMatchesReference(runs, reference, 1e-5, 1e-6);
  OptimizerSpec unclipped = ClippedCosine();
  unclipped.clip_grad_norm = 0;
  auto free_runs =
      RunRanks(graph, plan, kIterations, unclipped, 7, 57, FakeComms(3), OverIterations());
  REQUIRE(free_runs[0].status.ok());
  bool differs = false;
  for (const auto& [name, want] : reference.params) {
    auto found = free_runs[0].result.params.find(name);
    if (found != free_runs[0].result.params.end() &&
        !torch::allclose(found->second, want, 1e-3, 1e-5)) {
      differs = true;
    }
  }
  CHECK(differs);
}

TEST_CASE("small_cnn burst plan over 3 ranks with clipping and a schedule equals one device",
          "[recipes][executor]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  RequireClippedPlanMatchesOneDevice(graph, MakePlan(graph, kBatch, 3, {0, 1, 2}, SmallCnnBurst()));
}

TEST_CASE("residual block uneven plan over 3 ranks with clipping equals one device",
          "[recipes][executor]") {
  torch::set_num_threads(1);
  auto graph = ResidualBlock();
  // Shares 3, 3, 2 for most layers; the second conv and its batch norm on ranks 1 and 2, the
  // head on rank 2 alone.
  RequireClippedPlanMatchesOneDevice(
      graph, MakePlan(graph, kBatch, 3, {0, 1, 2},
                      {{"block.conv2", {1, 2}}, {"block.bn2", {1, 2}}, {"fc", {2}}}));
}

// One rank training small_cnn from iteration `first` to `last` (exclusive) with the recipes,
// after loading `state` when given; returns its parameters and, in `saved`, its training state.
ParamMap TrainOneRank(const OptimizerSpec& optimizer, uint64_t seed, int first, int last,
                      const StateDict* state, StateDict* saved) {
  auto graph = Zoo("small_cnn");
  auto plan = MakePlan(graph, kBatch, 1, {0});
  auto comm = FakeComms(1)(0);
  REQUIRE(comm.ok());
  auto data = MakeDataSource(DataSpec{"synthetic", 57, ""}, graph, kBatch);
  REQUIRE(data.ok());
  ExecutorOptions options;
  options.seed = seed;
  options.optimizer = optimizer;
  options.total_iterations = 6;
  auto executor = Executor::Create(graph, plan, comm->get(), data->get(), BuildLayerModule, options,
                                   SystemClock::Get());
  REQUIRE(executor.ok());
  if (state) {
    Status loaded =
        LoadTrainingState(*state, graph, (*executor)->modules(), (*executor)->optimizer());
    INFO(loaded.ToString());
    REQUIRE(loaded.ok());
  }
  for (int i = first; i < last; ++i) REQUIRE((*executor)->Step(i).ok());
  if (saved) {
    auto collected = CollectTrainingState(
        graph, (*executor)->modules(), LayersWrittenBy(graph, plan, 0), (*executor)->optimizer());
    REQUIRE(collected.ok());
    *saved = std::move(*collected);
  }
  ParamMap params;
  for (auto& [name, tensor] : (*executor)->NamedParameters())
    params[name] = tensor.detach().clone();
  return params;
}

TEST_CASE("a run resumed from its training state goes on with the schedule where it stopped",
          "[recipes][checkpoint]") {
  torch::set_num_threads(1);
  OptimizerSpec optimizer = AdamW();
  optimizer.decay_1d = false;
  optimizer.clip_grad_norm = kMaxNorm;
  optimizer.schedule = protocol::LrScheduleSpec{"cosine", 2, 0.001};
  const ParamMap uninterrupted = TrainOneRank(optimizer, 7, 0, 6, nullptr, nullptr);
  StateDict saved;
  TrainOneRank(optimizer, 7, 0, 3, nullptr, &saved);
  // Another seed: everything the resumed run ends with comes from the state and the schedule.
  const ParamMap resumed = TrainOneRank(optimizer, 99, 3, 6, &saved, nullptr);
  REQUIRE(resumed.size() == uninterrupted.size());
  for (const auto& [name, want] : uninterrupted) {
    INFO(name);
    CHECK(torch::equal(resumed.at(name), want));
  }
}

}  // namespace
}  // namespace deepool::worker::testing

// A BG job's own precision (docs/runtime.md, "Precision"): the BG trainer runs each layer's
// forward under autocast at its BackgroundSpec's precision, the loss in fp32, so a BG job at bf16
// trains as a one-rank executor at bf16 does; fp16 (no loss scaler in the BG trainer) is refused.
#include <catch2/catch.hpp>
#include <cmath>

#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"
#include "worker/runtime/background/background_spec.h"
#include "worker/runtime/background/background_trainer.h"

namespace deepool::worker {
namespace {

using planner::Precision;

constexpr int64_t kBatch = 8;
constexpr int kIterations = 3;

BackgroundSpec Spec(const planner::Graph& graph, Precision precision) {
  BackgroundSpec spec;
  spec.job_id = "bg-precision";
  spec.graph = std::make_shared<const planner::Graph>(graph);
  spec.batch_size = kBatch;
  spec.seed = 11;
  spec.optimizer.name = "sgd";
  spec.optimizer.lr = 0.05;
  spec.optimizer.momentum = 0.9;
  spec.data = DataSpec{"synthetic", 5, ""};
  spec.precision = precision;
  return spec;
}

// The BG trainer's parameters and losses after kIterations.
testing::TrainResult TrainBackground(const BackgroundSpec& spec) {
  auto trainer = BackgroundTrainer::Create(spec, torch::kCPU);
  INFO(trainer.status().ToString());
  REQUIRE(trainer.ok());
  testing::TrainResult result;
  while (static_cast<int>(result.losses.size()) < kIterations) {
    auto unit = (*trainer)->RunUnit();
    REQUIRE(unit.ok());
    if (unit->iteration_done) result.losses.push_back(unit->loss);
  }
  for (auto& [name, tensor] : (*trainer)->NamedParameters()) {
    result.params[name] = tensor.detach().clone();
  }
  return result;
}

// The largest |a - b| / (atol + rtol |b|) over the parameters and losses.
double WorstRatio(const testing::TrainResult& a, const testing::TrainResult& b, double rtol,
                  double atol) {
  double worst = 0;
  for (const auto& [name, expected] : b.params) {
    const torch::Tensor diff = (a.params.at(name) - expected).abs();
    const torch::Tensor bound = atol + rtol * expected.abs();
    worst = std::max(worst, (diff / bound).max().item<double>());
  }
  for (size_t i = 0; i < b.losses.size(); ++i) {
    worst = std::max(worst, std::abs(a.losses[i] - b.losses[i]) / (atol + rtol * b.losses[i]));
  }
  return worst;
}

TEST_CASE("a BG job at bf16 trains as a one-rank executor at bf16", "[multiplex][precision]") {
  torch::set_num_threads(1);
  auto graph = planner::zoo::BuildModel("small_cnn", planner::zoo::ModelOptions{10});
  REQUIRE(graph.ok());
  const BackgroundSpec bf16 = Spec(*graph, Precision::kBf16);
  const testing::TrainResult background = TrainBackground(bf16);
  testing::RankOptions at_bf16;
  at_bf16.precision = Precision::kBf16;
  const auto runs =
      testing::RunRanks(*graph, testing::MakePlan(*graph, kBatch, 1, {0}), kIterations,
                        bf16.optimizer, bf16.seed, bf16.data.seed, testing::FakeComms(1), at_bf16);
  REQUIRE(runs.size() == 1);
  REQUIRE(runs[0].status.ok());
  // The same ops on the same tensors, layer by layer as the executor runs them: measured 0 (bit
  // for bit); without the BG trainer's autocast the ratio is 2,101.
  const double ratio = WorstRatio(background, runs[0].result, 1e-5, 1e-6);
  INFO("worst ratio to the tolerance " << ratio);
  CHECK(ratio <= 1.0);
  // Not vacuous: the BG trainer at fp32 misses the bf16 executor by far more.
  const testing::TrainResult fp32 = TrainBackground(Spec(*graph, Precision::kFp32));
  const double fp32_ratio = WorstRatio(fp32, runs[0].result, 1e-5, 1e-6);
  INFO("fp32's worst ratio " << fp32_ratio);
  CHECK(fp32_ratio > 100);
}

TEST_CASE("a BG job's precision is read and written and fp16 is refused",
          "[multiplex][precision]") {
  auto graph = planner::zoo::BuildModel("mlp", planner::zoo::ModelOptions{10});
  REQUIRE(graph.ok());
  const nlohmann::json written = BackgroundToJson(Spec(*graph, Precision::kBf16));
  CHECK(written["precision"] == "bf16");
  auto read = ParseBackgroundJson(written);
  REQUIRE(read.ok());
  CHECK(read->precision == Precision::kBf16);
  CHECK_FALSE(BackgroundToJson(Spec(*graph, Precision::kFp32)).contains("precision"));
  nlohmann::json fp16 = written;
  fp16["precision"] = "fp16";
  CHECK(ParseBackgroundJson(fp16).status().message() ==
        "background.precision fp16 needs loss scaling: use bf16");
  fp16["precision"] = "fp8";
  CHECK(ParseBackgroundJson(fp16).status().message() ==
        "background.precision: unknown precision \"fp8\" (known: fp32, tf32, bf16, fp16)");
}

}  // namespace
}  // namespace deepool::worker

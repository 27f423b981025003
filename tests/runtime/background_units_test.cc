// A BG job's units kept under the gate's bound: micro-batches train the same model as the whole
// batch (up to summation order), batch norm is never split, and the runner grows and shrinks the
// split from the units it timed (a fake stepper on a fake clock).
#include <catch2/catch.hpp>

#include "planner/zoo/zoo.h"
#include "worker/runtime/background/background_runner.h"
#include "worker/runtime/background/background_trainer.h"
#include "worker/runtime/profiling/micro_batch_tuner.h"
#include "worker/runtime/background/multiplex_gate.h"

namespace deepool::worker {
namespace {

BackgroundSpec Spec(const std::string& model, int64_t batch) {
  auto graph = planner::zoo::BuildModel(model, planner::zoo::ModelOptions{10});
  REQUIRE(graph.ok());
  BackgroundSpec spec;
  spec.job_id = "bg";
  spec.graph = std::make_shared<const planner::Graph>(std::move(graph).value());
  spec.batch_size = batch;
  spec.seed = 5;
  spec.optimizer.lr = 0.05;
  spec.optimizer.momentum = 0.9;
  spec.data = DataSpec{"synthetic", 11, ""};
  return spec;
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> params;
  int64_t units = 0;
};

// Trains `iterations`, switching to micro_batches[i] before iteration i (the last entry repeats).
Trained Train(const BackgroundSpec& spec, int iterations, std::vector<int64_t> micro_batches) {
  torch::set_num_threads(1);
  auto trainer = BackgroundTrainer::Create(spec, torch::kCPU);
  REQUIRE(trainer.ok());
  Trained out;
  for (int i = 0; i < iterations; ++i) {
    const int64_t count = micro_batches[std::min<size_t>(i, micro_batches.size() - 1)];
    REQUIRE((*trainer)->SetMicroBatches(count).ok());
    while (true) {
      auto unit = (*trainer)->RunUnit();
      REQUIRE(unit.ok());
      ++out.units;
      if (unit->iteration_done) {
        out.losses.push_back(unit->loss);
        break;
      }
    }
  }
  out.params = (*trainer)->NamedParameters();
  return out;
}

TEST_CASE("a BG batch split into micro-batches trains the same model", "[multiplex]") {
  BackgroundSpec spec = Spec("mlp", 12);
  Trained whole = Train(spec, 4, {1});
  // 5 micro-batches of 12 (3,3,2,2,2: unequal shares), changed between iterations as the runner
  // does.
  Trained split = Train(spec, 4, {1, 5, 5, 3});
  const int64_t layers = spec.graph->num_layers();
  REQUIRE(whole.units == 4 * (2 * layers + 1));
  REQUIRE(split.units == (2 * layers + 1) + 2 * (2 * layers * 5 + 1) + (2 * layers * 3 + 1));
  REQUIRE(whole.losses.size() == split.losses.size());
  for (size_t i = 0; i < whole.losses.size(); ++i) {
    INFO("iteration " << i);
    REQUIRE(split.losses[i] == Approx(whole.losses[i]).epsilon(1e-5));
  }
  for (const auto& [name, tensor] : whole.params) {
    INFO(name);
    REQUIRE(torch::allclose(split.params.at(name), tensor, 1e-5, 1e-6));
  }
}

TEST_CASE("a BG model with batch norm is never split", "[multiplex]") {
  auto trainer = BackgroundTrainer::Create(Spec("small_cnn", 8), torch::kCPU);
  REQUIRE(trainer.ok());
  Status split = (*trainer)->SetMicroBatches(2);
  REQUIRE(split.code() == StatusCode::kFailedPrecondition);
  REQUIRE_THAT(split.message(), Catch::Contains("batch norm"));
  REQUIRE((*trainer)->micro_batches() == 1);
  REQUIRE((*trainer)->SetMicroBatches(1).ok());
  auto mlp = BackgroundTrainer::Create(Spec("mlp", 8), torch::kCPU);
  REQUIRE(mlp.ok());
  REQUIRE((*mlp)->SetMicroBatches(0).code() == StatusCode::kInvalidArgument);
  REQUIRE((*mlp)->SetMicroBatches(9).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("micro-batch counts double over the bound and stop where splitting stops helping",
          "[multiplex]") {
  // Units that scale with the micro-batch: 8 ms whole, bound 1 ms.
  MicroBatchTuner scaling(64);
  CHECK(scaling.Next(1, 8.0, 1.0) == 2);
  CHECK(scaling.Next(2, 4.0, 1.0) == 4);
  CHECK(scaling.Next(4, 2.0, 1.0) == 8);
  CHECK(scaling.Next(8, 1.0, 1.0) == 8);  // within the bound: kept
  CHECK(scaling.Next(8, 0.3, 1.0) == 8);  // not far enough under it
  CHECK(scaling.Next(8, 0.2, 1.0) == 4);  // far under it: halved
  CHECK(scaling.ceiling() == 64);
  // Units of 2 ms + 8 ms / count: past 4 micro-batches a doubling gains less than a quarter, so
  // the count goes back and stays (the wait timeout bounds the FG rank's delay from there).
  MicroBatchTuner fixed_part(64);
  CHECK(fixed_part.Next(1, 10.0, 1.0) == 2);
  CHECK(fixed_part.Next(2, 6.0, 1.0) == 4);
  CHECK(fixed_part.Next(4, 4.0, 1.0) == 8);
  CHECK(fixed_part.Next(8, 3.0, 1.0) == 16);
  CHECK(fixed_part.Next(16, 2.5, 1.0) == 8);
  CHECK(fixed_part.ceiling() == 8);
  CHECK(fixed_part.Next(8, 3.0, 1.0) == 8);
  // Never past the batch; no bound or nothing timed: unchanged.
  MicroBatchTuner small(3);
  CHECK(small.Next(2, 8.0, 1.0) == 3);
  CHECK(small.Next(3, 4.0, 0.0) == 3);
  CHECK(small.Next(3, 0.0, 1.0) == 3);
}

// A stepper whose forward and backward units take whole_unit_ms / micro-batches on the fake
// clock; an iteration is one forward and one backward per micro-batch, then a 5 ms step.
class TimedStepper final : public BackgroundStepper {
 public:
  TimedStepper(FakeClock* clock, double whole_unit_ms, bool splits)
      : clock_(clock), whole_unit_ms_(whole_unit_ms), splits_(splits) {}
  StatusOr<BgUnitResult> RunUnit() override {
    BgUnitResult result;
    result.iteration = iteration_;
    if (cursor_ == 0) current_ = next_;  // as the trainer: a new split applies from the next start
    if (cursor_ < 2 * current_) {
      Advance(whole_unit_ms_ / static_cast<double>(current_));
      result.splittable = true;
      ++cursor_;
      return result;
    }
    Advance(5);
    cursor_ = 0;
    result.iteration_done = true;
    ++iteration_;
    return result;
  }
  int64_t batch_size() const override { return 64; }
  Status SetMicroBatches(int64_t count) override {
    ++set_calls;
    if (!splits_) return FailedPreconditionError("batch norm");
    next_ = count;
    return Status::Ok();
  }
  int64_t micro_batches() const override { return next_; }
  int set_calls = 0;

 private:
  void Advance(double ms) {
    clock_->Advance(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
  }
  FakeClock* clock_;
  const double whole_unit_ms_;
  const bool splits_;
  int64_t current_ = 1, next_ = 1, cursor_ = 0, iteration_ = 0;
};

TEST_CASE("the BG runner splits its units to the gate's bound, or says why it cannot",
          "[multiplex]") {
  FakeClock clock;
  GateLimits limits;
  limits.unit_bound_fraction = 0.25;
  DeviceGate gate(SharingMode::kIdleOnly, &clock, false, limits);
  // The FG rank's gaps: 4 ms, so units of at most 1 ms. Then it stays idle for the BG job.
  for (int i = 0; i < 3; ++i) {
    gate.FgIdleBegin();
    clock.Advance(std::chrono::milliseconds(4));
    gate.FgIdleEnd();
  }
  gate.FgIdleBegin();
  REQUIRE(gate.UnitBoundMs() == Approx(1.0));

  TimedStepper splitting(&clock, 8.0, /*splits=*/true);
  BackgroundRunner runner(&splitting, &gate, &clock, 6);
  runner.KeepUnitsUnderBound();
  runner.Start();
  runner.Join();
  BackgroundProgress progress = runner.progress();
  REQUIRE(progress.status.ok());
  REQUIRE(progress.micro_batches == 8);              // 8 ms units under a 1 ms bound
  REQUIRE(progress.longest_unit_ms == Approx(1.0));  // the last iteration's, split
  REQUIRE(progress.unit_bound_ms == Approx(1.0));
  REQUIRE(splitting.set_calls == 3);  // 1 -> 2 -> 4 -> 8, then kept

  TimedStepper whole(&clock, 8.0, /*splits=*/false);
  BackgroundRunner refused(&whole, &gate, &clock, 3);
  refused.KeepUnitsUnderBound();
  refused.Start();
  refused.Join();
  REQUIRE(refused.progress().micro_batches == 1);
  REQUIRE(refused.progress().longest_unit_ms == Approx(8.0));
  REQUIRE(whole.set_calls == 1);  // refused once, not asked again

  TimedStepper unasked(&clock, 8.0, /*splits=*/true);
  BackgroundRunner plain(&unasked, &gate, &clock, 3);  // split_units off
  plain.Start();
  plain.Join();
  REQUIRE(unasked.set_calls == 0);
  REQUIRE(plain.progress().micro_batches == 1);
}

}  // namespace
}  // namespace deepool::worker

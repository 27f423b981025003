// PolicyAdapter: a coordinator policy's grants and preemptions become the simulator's
// allocations (a BG job on a FG job's device runs inside it), and the devices it shows the
// policy carry the FG plans' idle time only when multiplexing.
#include "simulator/pool_policy_adapter.h"

#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace deepool::simulator {
namespace {

namespace cp = coordinator::policy;

// A coordinator policy whose answers the test writes; it records the snapshots it saw.
class FakePolicy : public cp::Policy {
 public:
  explicit FakePolicy(std::function<cp::Decisions(const cp::PolicySnapshot&)> decide,
                      std::vector<cp::PolicySnapshot>* seen)
      : decide_(std::move(decide)), seen_(seen) {}
  std::string_view Name() const override { return "fake"; }
  cp::Decisions Decide(const cp::PolicySnapshot& snapshot) const override {
    seen_->push_back(snapshot);
    return decide_(snapshot);
  }

 private:
  std::function<cp::Decisions(const cp::PolicySnapshot&)> decide_;
  std::vector<cp::PolicySnapshot>* seen_;
};

WorkloadJob Job(int64_t id, WorkloadRole role) {
  WorkloadJob job;
  job.id = id;
  job.user = "u";
  job.role = role;
  job.model = "m";
  job.global_batch = 8;
  job.gpus = role == WorkloadRole::kFg ? 2 : 1;
  job.iterations = 1;
  return job;
}

std::shared_ptr<const JobCurves> Curves() {
  auto curves = std::make_shared<JobCurves>();
  curves->per_type.push_back(PoolCurve{"a100", {{1, 1.0, 2.0, 1, 1}, {2, 0.6, 1.0, 0.25, 0.5}}});
  return curves;
}

PoolJobView View(const WorkloadJob& job, const JobCurves& curves, PoolAllocation allocation = {}) {
  PoolJobView view;
  view.job = &job;
  view.curves = &curves;
  view.total_iterations = 10;
  view.allocation = std::move(allocation);
  return view;
}

TEST_CASE("Grants become allocations and a BG job on a FG device runs inside it", "[pool]") {
  const WorkloadJob fg = Job(0, WorkloadRole::kFg), bg = Job(1, WorkloadRole::kBg);
  const auto curves = Curves();
  std::vector<cp::PolicySnapshot> seen;
  auto policy = std::make_unique<FakePolicy>(
      [](const cp::PolicySnapshot& snapshot) {
        cp::Decisions decisions;
        if (snapshot.jobs.front().placed()) return decisions;
        const cp::DeviceKey first = snapshot.devices[0].key, second = snapshot.devices[1].key;
        decisions.grants.push_back({"0", "a100", {first, second}, 1});
        decisions.grants.push_back({"1", "a100", {second}, 0.75});
        return decisions;
      },
      &seen);
  PolicyAdapter adapter(std::move(policy), {{"a100", 4}}, {"test", Parallelism::kBurst, true, 2});
  PoolSnapshot snapshot;
  snapshot.device_types = {{"a100", 4}};
  snapshot.jobs = {View(fg, *curves), View(bg, *curves)};
  StatusOr<PoolDecisions> decisions = adapter.Decide(snapshot);
  REQUIRE(decisions.ok());
  REQUIRE(decisions->run.size() == 2);
  for (const PoolDecision& decision : decisions->run) {
    if (decision.job_id == 0) CHECK(decision.allocation == PoolAllocation{"a100", 2, {}, -1});
    if (decision.job_id == 1) CHECK(decision.allocation == PoolAllocation{"a100", 0, {}, 0});
  }
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].devices.size() == 4);
  CHECK(seen[0].devices[2].key.first == "a100-n0001");  // two devices per node
  CHECK(seen[0].jobs[0].curves.at("a100").IterationS(2) == 0.6);

  // The next decision shows the placements and the FG plan's idle time on its devices.
  snapshot.jobs = {View(fg, *curves, PoolAllocation{"a100", 2, {}, -1}),
                   View(bg, *curves, PoolAllocation{"a100", 0, {}, 0})};
  REQUIRE(adapter.Decide(snapshot).ok());
  REQUIRE(seen.size() == 2);
  CHECK(seen[1].jobs[0].devices.size() == 2);
  CHECK(seen[1].devices[0].idle_fraction == Approx(0.75));
  CHECK(seen[1].devices[0].fg_rank_running);
  CHECK(seen[1].devices[3].idle_fraction == 1);
}

TEST_CASE("Without multiplexing FG devices look busy and a preempted job stops", "[pool]") {
  const WorkloadJob fg = Job(0, WorkloadRole::kFg);
  const auto curves = Curves();
  std::vector<cp::PolicySnapshot> seen;
  auto policy = std::make_unique<FakePolicy>(
      [](const cp::PolicySnapshot& snapshot) {
        cp::Decisions decisions;
        if (snapshot.jobs.front().placed()) {
          decisions.preemptions.push_back({"0", "", "test"});
        } else {
          decisions.grants.push_back(
              {"0", "a100", {snapshot.devices[0].key, snapshot.devices[1].key}, 1});
        }
        return decisions;
      },
      &seen);
  PolicyAdapter adapter(std::move(policy), {{"a100", 2}},
                        {"test", Parallelism::kDataParallel, false, 8});
  PoolSnapshot snapshot;
  snapshot.device_types = {{"a100", 2}};
  snapshot.jobs = {View(fg, *curves)};
  StatusOr<PoolDecisions> first = adapter.Decide(snapshot);
  REQUIRE(first.ok());
  REQUIRE(first->run.size() == 1);
  CHECK(first->run[0].allocation.parallelism == Parallelism::kDataParallel);
  CHECK(seen[0].jobs[0].curves.at("a100").IterationS(2) == 1.0);  // the data-parallel time
  snapshot.jobs = {View(fg, *curves, first->run[0].allocation)};
  StatusOr<PoolDecisions> second = adapter.Decide(snapshot);
  REQUIRE(second.ok());
  CHECK(second->run.empty());
  CHECK(seen[1].devices[0].idle_fraction == 0);
  CHECK_FALSE(seen[1].devices[0].fg_rank_running);
}

}  // namespace
}  // namespace deepool::simulator

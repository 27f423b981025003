// The pool simulator's accounting on traces small enough to check by hand: progress at the
// allocation's rate, checkpoint-restore penalties on moves and resumes, multiplexed BG progress
// and FG interference, the metrics, and the allocations it refuses.
#include "simulator/pool_simulator.h"

#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "simulator/pool_metrics.h"

namespace deepool::simulator {
namespace {

// A policy whose answers the test writes.
class ScriptedPolicy : public PoolPolicy {
 public:
  explicit ScriptedPolicy(std::function<PoolDecisions(const PoolSnapshot&)> decide)
      : decide_(std::move(decide)) {}
  std::string name() const override { return "scripted"; }
  StatusOr<PoolDecisions> Decide(const PoolSnapshot& snapshot) override {
    return decide_(snapshot);
  }

 private:
  std::function<PoolDecisions(const PoolSnapshot&)> decide_;
};

// Curves on "a100": (devices, burst iteration s, burst busy fraction); data parallelism takes
// twice as long and keeps every device busy.
std::shared_ptr<const JobCurves> Curves(const std::vector<PoolCurvePoint>& points) {
  auto curves = std::make_shared<JobCurves>();
  curves->per_type.push_back(PoolCurve{"a100", points});
  return curves;
}
PoolCurvePoint Point(int devices, double iteration_s, double busy = 1) {
  return PoolCurvePoint{devices, iteration_s, 2 * iteration_s, busy, 1};
}

WorkloadJob Job(int64_t id, double arrival_s, WorkloadRole role = WorkloadRole::kFg,
                int priority = 0) {
  WorkloadJob job;
  job.id = id;
  job.arrival_s = arrival_s;
  job.user = "u";
  job.role = role;
  job.model = "m";
  job.global_batch = 10;
  job.priority = priority;
  job.iterations = 1;
  return job;
}

PoolOptions Pool(int devices) {
  PoolOptions options;
  options.device_types = {{"a100", devices}};
  options.round_s = 1000;
  options.checkpoint_restore_s = 10;
  options.multiplex_efficiency = 0.8;
  options.fg_interference = 0.1;
  return options;
}

PoolAllocation On(int devices, Parallelism parallelism = Parallelism::kBurst) {
  return PoolAllocation{"a100", devices, parallelism, -1};
}
PoolAllocation Inside(int64_t host) { return PoolAllocation{"a100", 0, Parallelism::kBurst, host}; }

// Runs every job in the pool on one device, in arrival order, as long as devices last.
PoolDecisions OneDeviceEach(const PoolSnapshot& snapshot) {
  PoolDecisions decisions;
  int free = snapshot.device_types.front().devices;
  for (const PoolJobView& job : snapshot.jobs) {
    if (free-- > 0) decisions.run.push_back({job.job->id, On(1)});
  }
  return decisions;
}

TEST_CASE("A job alone runs at its allocation's rate and the metrics follow", "[pool]") {
  const std::vector<WorkloadJob> jobs = {Job(0, 10)};
  const std::vector<PoolJobInput> inputs = {{&jobs[0], Curves({Point(1, 1.0, 0.5)}), 100, 50}};
  ScriptedPolicy policy(OneDeviceEach);
  StatusOr<PoolRun> run = SimulatePool(inputs, Pool(1), policy);
  REQUIRE(run.ok());
  CHECK(run->jobs[0].start_s == 10);
  CHECK(run->jobs[0].finish_s == Approx(110));
  const PoolMetrics metrics = ComputePoolMetrics(*run);
  CHECK(metrics.mean_jct_s == Approx(100));
  CHECK(metrics.makespan_s == Approx(110));
  CHECK(metrics.allocated_utilisation == Approx(100.0 / 110));
  CHECK(metrics.busy_utilisation == Approx(50.0 / 110));
  CHECK(metrics.throughput_samples_per_s == Approx(100.0 * 10 / 110));
  CHECK(metrics.fg_mean_slowdown == Approx(2));  // 100 s against 50 s alone
  CHECK(metrics.moves == 0);
}

TEST_CASE("Jobs queued on one device finish one after the other", "[pool]") {
  const std::vector<WorkloadJob> jobs = {Job(0, 0), Job(1, 0)};
  const auto curves = Curves({Point(1, 1.0)});
  const std::vector<PoolJobInput> inputs = {{&jobs[0], curves, 100, 100},
                                            {&jobs[1], curves, 100, 100}};
  ScriptedPolicy policy(OneDeviceEach);
  StatusOr<PoolRun> run = SimulatePool(inputs, Pool(1), policy);
  REQUIRE(run.ok());
  CHECK(run->jobs[1].start_s == Approx(100));
  const PoolMetrics metrics = ComputePoolMetrics(*run);
  CHECK(metrics.mean_jct_s == Approx(150));
  CHECK(metrics.p99_jct_s == Approx(200));
  CHECK(metrics.mean_wait_s == Approx(50));  // the second waits 100 s for the device
  CHECK(metrics.makespan_s == Approx(200));
  CHECK(metrics.allocated_utilisation == Approx(1));
}

TEST_CASE("The window metrics count only what is trained while jobs arrive", "[pool]") {
  const std::vector<WorkloadJob> jobs = {Job(0, 0), Job(1, 50)};
  const auto curves = Curves({Point(1, 1.0, 0.5)});
  const std::vector<PoolJobInput> inputs = {{&jobs[0], curves, 100, 100},
                                            {&jobs[1], curves, 100, 100}};
  ScriptedPolicy policy(OneDeviceEach);
  StatusOr<PoolRun> run = SimulatePool(inputs, Pool(1), policy);
  REQUIRE(run.ok());
  CHECK(run->window_s == 50);
  const PoolMetrics metrics = ComputePoolMetrics(*run);
  CHECK(metrics.window_samples_per_s == Approx(10));  // 50 iterations of 10 samples in 50 s
  CHECK(metrics.window_busy_utilisation == Approx(0.5));
  CHECK(metrics.window_allocated_utilisation == Approx(1));  // held all along, busy half of it
  CHECK(metrics.makespan_s == Approx(200));
}

TEST_CASE("A move costs the checkpoint restore and then runs at the new rate", "[pool]") {
  const std::vector<WorkloadJob> jobs = {Job(0, 0)};
  const std::vector<PoolJobInput> inputs = {
      {&jobs[0], Curves({Point(1, 1.0), Point(2, 0.5)}), 100, 100}};
  PoolOptions options = Pool(2);
  options.round_s = 50;
  // One device until the first round, then two: 50 iterations by t = 50, restored at 60, the
  // other 50 at 0.5 s each by 85.
  ScriptedPolicy policy([](const PoolSnapshot& snapshot) {
    return PoolDecisions{{{0, On(snapshot.now_s < 50 ? 1 : 2)}}};
  });
  StatusOr<PoolRun> run = SimulatePool(inputs, options, policy);
  REQUIRE(run.ok());
  CHECK(run->jobs[0].finish_s == Approx(85));
  CHECK(run->jobs[0].moves == 1);
  CHECK(run->jobs[0].preemptions == 0);
  // Held: 1 x 50 + 2 x 35; computing: 1 x 50 + 2 x 25.
  CHECK(run->allocated_device_s == Approx(120));
  CHECK(run->busy_device_s == Approx(100));
}

TEST_CASE("A preempted job keeps its progress and pays the restore when it resumes", "[pool]") {
  const std::vector<WorkloadJob> jobs = {Job(0, 0), Job(1, 30, WorkloadRole::kFg, 1)};
  const auto curves = Curves({Point(1, 1.0)});
  const std::vector<PoolJobInput> inputs = {{&jobs[0], curves, 100, 100},
                                            {&jobs[1], curves, 20, 20}};
  // The prioritised job takes the device whenever it is in the pool.
  ScriptedPolicy policy([](const PoolSnapshot& snapshot) {
    const PoolJobView& first = snapshot.jobs.back();
    return PoolDecisions{{{first.job->id, On(1)}}};
  });
  StatusOr<PoolRun> run = SimulatePool(inputs, Pool(1), policy);
  REQUIRE(run.ok());
  CHECK(run->jobs[1].finish_s == Approx(50));
  // 30 iterations done by 30; resumed at 50, restored at 60, the other 70 by 130.
  CHECK(run->jobs[0].finish_s == Approx(130));
  CHECK(run->jobs[0].moves == 1);
  CHECK(run->jobs[0].preemptions == 1);
  const PoolMetrics metrics = ComputePoolMetrics(*run);
  CHECK(metrics.moves == 1);
  CHECK(metrics.preemptions == 1);
}

TEST_CASE("A BG job inside a FG job's idle time progresses at its share and slows the host",
          "[pool]") {
  const std::vector<WorkloadJob> jobs = {Job(0, 0), Job(1, 0, WorkloadRole::kBg)};
  const std::vector<PoolJobInput> inputs = {
      {&jobs[0], Curves({Point(1, 2.0), Point(2, 1.0, 0.5)}), 100, 100},
      {&jobs[1], Curves({Point(1, 1.0)}), 40, 40}};
  ScriptedPolicy policy([](const PoolSnapshot& snapshot) {
    PoolDecisions decisions;
    for (const PoolJobView& job : snapshot.jobs) {
      decisions.run.push_back({job.job->id, job.job->id == 0 ? On(2) : Inside(0)});
    }
    return decisions;
  });
  StatusOr<PoolRun> run = SimulatePool(inputs, Pool(2), policy);
  REQUIRE(run.ok());
  // BG: 0.8 x (1 - 0.5) = 0.4 iterations/s, 40 iterations in 100 s. FG: 0.9 iterations/s while
  // hosting (90 by 100 s), then 1/s alone: done at 110.
  CHECK(run->jobs[1].finish_s == Approx(100));
  CHECK(run->jobs[0].finish_s == Approx(110));
  CHECK(run->jobs[1].device_s == 0);
  // Computing: FG 2 x 0.5 x 110, BG 0.4 x 100.
  CHECK(run->busy_device_s == Approx(150));
  CHECK(ComputePoolMetrics(*run).busy_utilisation == Approx(150.0 / 220));
}

TEST_CASE("A BG job whose host finishes is checkpointed and placed again", "[pool]") {
  const std::vector<WorkloadJob> jobs = {Job(0, 0), Job(1, 0, WorkloadRole::kBg)};
  const std::vector<PoolJobInput> inputs = {{&jobs[0], Curves({Point(1, 1.0, 0.5)}), 10, 10},
                                            {&jobs[1], Curves({Point(1, 1.0)}), 14, 14}};
  ScriptedPolicy policy([](const PoolSnapshot& snapshot) {
    PoolDecisions decisions;
    const bool host_here = snapshot.jobs.front().job->id == 0;
    for (const PoolJobView& job : snapshot.jobs) {
      decisions.run.push_back(
          {job.job->id, job.job->id == 0 ? On(1) : (host_here ? Inside(0) : On(1))});
    }
    return decisions;
  });
  StatusOr<PoolRun> run = SimulatePool(inputs, Pool(1), policy);
  REQUIRE(run.ok());
  // 0.4/s inside the host for 10 s (4 done), then its own device after a 10 s restore: 10 more
  // by 30.
  CHECK(run->jobs[0].finish_s == Approx(10 / 0.9));
  const double bg_done_at_host_finish = 0.4 * 10 / 0.9;
  CHECK(run->jobs[1].finish_s == Approx(10 / 0.9 + 10 + (14 - bg_done_at_host_finish)));
  CHECK(run->jobs[1].preemptions == 1);
}

TEST_CASE("Impossible allocations are refused naming the job and the rule", "[pool]") {
  const std::vector<WorkloadJob> jobs = {Job(0, 0), Job(1, 0, WorkloadRole::kBg)};
  const std::vector<PoolJobInput> inputs = {
      {&jobs[0], Curves({Point(1, 1.0), Point(2, 1.0)}), 10, 10},
      {&jobs[1], Curves({Point(1, 1.0)}), 10, 10}};
  auto refused = [&](PoolDecisions answer) {
    ScriptedPolicy policy([answer](const PoolSnapshot&) { return answer; });
    StatusOr<PoolRun> run = SimulatePool(inputs, Pool(2), policy);
    REQUIRE_FALSE(run.ok());
    CHECK(run.status().code() == StatusCode::kFailedPrecondition);
    return run.status().message();
  };
  CHECK_THAT(refused({{{0, On(2)}, {1, On(1)}}}), Catch::Contains("take 3 a100 devices of 2"));
  CHECK_THAT(refused({{{0, On(3)}}}), Catch::Contains("no point at 3 devices"));
  CHECK_THAT(refused({{{0, PoolAllocation{"v100", 1, Parallelism::kBurst, -1}}}}),
             Catch::Contains("the pool has no v100"));
  CHECK_THAT(refused({{{1, On(2)}}}), Catch::Contains("job 1 is BG"));
  CHECK_THAT(refused({{{1, Inside(0)}}}), Catch::Contains("host job 0 is not a FG job running"));
  CHECK_THAT(refused({{{7, On(1)}}}), Catch::Contains("job 7 is not in the pool"));
  CHECK_THAT(refused({}), Catch::Contains("waiting on an idle pool"));
}

TEST_CASE("Data parallelism runs at the curve's data-parallel iteration time", "[pool]") {
  const std::vector<WorkloadJob> jobs = {Job(0, 0)};
  const std::vector<PoolJobInput> inputs = {{&jobs[0], Curves({Point(2, 1.0, 0.5)}), 10, 20}};
  ScriptedPolicy policy([](const PoolSnapshot&) {
    return PoolDecisions{{{0, On(2, Parallelism::kDataParallel)}}};
  });
  StatusOr<PoolRun> run = SimulatePool(inputs, Pool(2), policy);
  REQUIRE(run.ok());
  CHECK(run->jobs[0].finish_s == Approx(20));
  CHECK(run->busy_device_s == Approx(40));  // data parallelism keeps both devices busy
}

TEST_CASE("Jobs side by side on a node slow each other by its contention", "[pool]") {
  const std::vector<WorkloadJob> jobs = {Job(0, 0), Job(1, 0)};
  const auto curves = Curves({Point(1, 1.0)});
  // Job 1 is half as long: both run at 1 / 1.5 until it ends at 75 s; job 0, 50 iterations
  // done, runs the other 50 alone at full speed and ends at 125 s.
  const std::vector<PoolJobInput> inputs = {{&jobs[0], curves, 100, 100},
                                            {&jobs[1], curves, 50, 50}};
  PoolOptions options = Pool(2);
  options.node_contention = {NodeContention{"a100", 2, {1, 1.5}}};
  ScriptedPolicy policy(OneDeviceEach);
  StatusOr<PoolRun> run = SimulatePool(inputs, options, policy);
  REQUIRE(run.ok());
  CHECK(run->jobs[1].finish_s == Approx(75));
  CHECK(run->jobs[0].finish_s == Approx(125));
  // Without the option the devices are independent.
  ScriptedPolicy independent(OneDeviceEach);
  StatusOr<PoolRun> apart = SimulatePool(inputs, Pool(2), independent);
  REQUIRE(apart.ok());
  CHECK(apart->jobs[0].finish_s == Approx(100));
  CHECK(apart->jobs[1].finish_s == Approx(50));
}

TEST_CASE("A job that fills its node alone runs at its measured speed", "[pool]") {
  const std::vector<WorkloadJob> jobs = {Job(0, 0)};
  const std::vector<PoolJobInput> inputs = {{&jobs[0], Curves({Point(2, 1.0)}), 100, 100}};
  PoolOptions options = Pool(2);
  options.node_contention = {NodeContention{"a100", 2, {1, 1.5}}};
  ScriptedPolicy policy([](const PoolSnapshot&) { return PoolDecisions{{{0, On(2)}}}; });
  StatusOr<PoolRun> run = SimulatePool(inputs, options, policy);
  REQUIRE(run.ok());
  CHECK(run->jobs[0].finish_s == Approx(100));
}

TEST_CASE("A contention table that cannot be right is refused before the run", "[pool]") {
  const std::vector<WorkloadJob> jobs = {Job(0, 0)};
  const std::vector<PoolJobInput> inputs = {{&jobs[0], Curves({Point(1, 1.0)}), 1, 1}};
  PoolOptions options = Pool(2);
  options.node_contention = {NodeContention{"a100", 2, {1, 0.5}}};
  ScriptedPolicy policy(OneDeviceEach);
  StatusOr<PoolRun> run = SimulatePool(inputs, options, policy);
  REQUIRE_FALSE(run.ok());
  CHECK_THAT(run.status().message(), Catch::Contains("non-decreasing"));
}

}  // namespace
}  // namespace deepool::simulator

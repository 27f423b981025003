// The deepool policy's growth of running jobs, through the adapter and the configurations' policy
// options (MakePoolPolicy), in the pool simulator: a job admitted onto the one device a busy pool
// had left grows onto the devices a finished job frees, pays the checkpoint restore once, and
// finishes far sooner than on its one device.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "coordinator/policy/policy.h"
#include "simulator/pool_configurations.h"
#include "simulator/pool_metrics.h"
#include "simulator/pool_simulator.h"

namespace deepool::simulator {
namespace {

namespace cp = coordinator::policy;

WorkloadJob Fg(int64_t id, double arrival_s, int gpus) {
  WorkloadJob job;
  job.id = id;
  job.arrival_s = arrival_s;
  job.user = "u";
  job.role = WorkloadRole::kFg;
  job.model = "m";
  job.global_batch = 8;
  job.gpus = gpus;
  job.iterations = 1;
  return job;
}

// 1 s per iteration on one a100, scaling perfectly to 4.
std::shared_ptr<const JobCurves> Scaling() {
  auto curves = std::make_shared<JobCurves>();
  PoolCurve curve{"a100", {}};
  for (int g = 1; g <= 4; ++g) curve.points.push_back({g, 1.0 / g, 1.0 / g, 1, 1});
  curves->per_type.push_back(curve);
  return curves;
}

StatusOr<PoolRun> Simulate(double min_slice_s) {
  // Job 0 takes 3 of the 4 devices for 500 s; job 1 arrives at 1 s and gets the fourth.
  static const std::vector<WorkloadJob> jobs = {Fg(0, 0, 3), Fg(1, 1, 4)};
  const std::vector<PoolJobInput> inputs = {{&jobs[0], Scaling(), 1500, 500},
                                            {&jobs[1], Scaling(), 4000, 1000}};
  PoolOptions options;
  options.device_types = {{"a100", 4}};
  options.round_s = 1000;
  options.checkpoint_restore_s = 60;
  cp::PolicyOptions policy_options;
  policy_options.min_slice_s = min_slice_s;
  policy_options.min_growth_saving_s = 0;  // any growth that pays for its restart
  // deepool-dp: the curves' data-parallel times are their burst ones here; no BG jobs to multiplex.
  StatusOr<PoolConfiguration> configuration = FindPoolConfiguration("deepool-dp");
  REQUIRE(configuration.ok());
  StatusOr<std::unique_ptr<PoolPolicy>> policy =
      MakePoolPolicy(*configuration, options.device_types, policy_options);
  REQUIRE(policy.ok());
  return SimulatePool(inputs, options, **policy);
}

TEST_CASE("A job started on one device of a busy pool grows when devices free up", "[pool]") {
  StatusOr<PoolRun> run = Simulate(300);
  REQUIRE(run.ok());
  CHECK(run->jobs[0].finish_s == Approx(500));
  // At 500 s job 1 has done 499 of 4,000 iterations on one device; it grows to 4, restores for
  // 60 s and does the other 3,501 at 0.25 s each.
  CHECK(run->jobs[1].finish_s == Approx(500 + 60 + 3501 * 0.25));
  CHECK(run->jobs[1].moves == 1);
  CHECK(run->jobs[1].preemptions == 0);
  CHECK(ComputePoolMetrics(*run).moves == 1);

  // Never moved (its slice outlasts the run), it keeps its one device to the end.
  StatusOr<PoolRun> kept = Simulate(1e9);
  REQUIRE(kept.ok());
  CHECK(kept->jobs[1].finish_s == Approx(4001));
  CHECK(kept->jobs[1].moves == 0);
}

}  // namespace
}  // namespace deepool::simulator

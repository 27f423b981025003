// JobRates (a round's curves by device type id) answers exactly as the per-name functions of
// pool_state.h do, for every job and type: curves found or not, types a job may not run on, and
// the best throughput that is each job's unit of share.
#include "coordinator/policy/job_rates.h"

#include <catch2/catch.hpp>

#include "coordinator/policy/pool_state.h"
#include "tests/unit/policy/pool_harness.h"

namespace deepool::coordinator::policy::testing {
namespace {

SpeedCurve Curve(std::vector<double> iteration_s) { return SpeedCurve{std::move(iteration_s)}; }

TEST_CASE("JobRates answers as the per-name look-ups for every job and type", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 2, "v100");
  pool.AddNode("n2", 2, "a100");
  pool.AddNode("n3", 2, "h100");
  pool.Submit("1", "alice", 2);
  pool.Submit("2", "bob", 1);
  pool.Submit("3", "bob", 2);
  pool.Submit("4", "carol", 2);
  pool.Submit("5", "carol", 1);
  // Curves on some types only, one on a type the pool lacks; required types.
  PolicyJob& fast_on_h100 = pool.Job("1");
  fast_on_h100.global_batch = 64;
  fast_on_h100.curves["a100"] = Curve({2.0, 1.2});
  fast_on_h100.curves["h100"] = Curve({1.0, 0.5});
  fast_on_h100.curves["tpu"] = Curve({0.1, 0.05});
  PolicyJob& only_v100 = pool.Job("2");
  only_v100.global_batch = 32;
  only_v100.required_device_type = "v100";
  only_v100.curves["v100"] = Curve({3.0});
  const PolicyJob& no_curves = pool.Job("3");
  PolicyJob& infeasible = pool.Job("4");
  infeasible.curves["a100"] = Curve({0, 0});
  infeasible.required_device_type = "a100";
  PolicyJob& elsewhere = pool.Job("5");
  elsewhere.required_device_type = "tpu";

  const PoolState state(pool.snapshot);
  const JobRates& rates = state.Rates();
  REQUIRE(state.Types() == std::vector<std::string>{"a100", "h100", "v100"});
  for (const PolicyJob& job : pool.snapshot.jobs) {
    double best = 0;
    for (int type = 0; type < 3; ++type) {
      const std::string& name = state.Types()[static_cast<size_t>(type)];
      INFO("job " << job.id << " on " << name);
      CHECK(rates.RunsOn(job, type) == RunsOn(job, name));
      for (int g = 0; g <= 3; ++g) {
        CHECK(rates.IterationS(job, type, g) == IterationSeconds(job, name, g));
        CHECK(rates.Throughput(job, type, g) == Throughput(job, name, g));
      }
      if (RunsOn(job, name)) best = std::max(best, Throughput(job, name, job.requested_devices));
    }
    CHECK(rates.Best(job) == (best > 0 ? best : 1));
  }
  CHECK(rates.Best(fast_on_h100) == 64 / 0.5);         // h100 at its 2 devices; never the tpu
  CHECK(rates.IterationS(fast_on_h100, 2, 2) == 0.5);  // v100: no curve, perfect scaling
  CHECK(rates.Best(only_v100) == 32 / 3.0);
  CHECK(rates.Best(no_curves) == 2);  // 1 / g at g = 2, batch 1
  CHECK(rates.Best(infeasible) == 1);
  CHECK(rates.Best(elsewhere) == 1);
}

}  // namespace
}  // namespace deepool::coordinator::policy::testing

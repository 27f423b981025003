// The scheduling configurations the pool simulator compares (issue 44, point 5), by name, each a
// coordinator policy (coordinator/policy/policy.h) with the adapter's settings; the pool bench
// (bench/pool) and `deepool workload simulate` both build them here. docs/simulator.md, "Pool
// simulation":
//   fifo-dp            fifo, every job data parallel on the devices it asks for, BG jobs on free
//                      devices only: what users would run without deepool
//   static-partitions  the pool split into up to 4 fixed partitions (each type's devices split
//                      evenly, at least 8 of each type per partition), users assigned
//                      round-robin, fifo-dp inside each
//   max-min            max-min fairness across users (heterogeneity-aware), data parallel, no
//                      multiplexing (Gavel's setting)
//   deeppool-bp-bg     fifo on the devices each job asks for, burst-parallel plans, BG jobs
//                      inside FG devices' idle time: DeepPool as published
//   deepool            the deepool policy: FG jobs sized by their speed-up curves, burst
//                      parallel, BG multiplexed
// and three ablations, each one setting away from a configuration above, so that a result says
// which setting it comes from (run by name only):
//   fifo-bp            fifo-dp with burst-parallel plans (deeppool-bp-bg without multiplexing)
//   fifo-dp-bg         fifo-dp with BG jobs multiplexed in the FG plans' idle time
//   deepool-dp         the deepool policy on data-parallel curves, without multiplexing
// Threading: pure functions; each PoolPolicy built is used by one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/policy/policy.h"
#include "simulator/pool_policy.h"

namespace deepool::simulator {

struct PoolConfiguration {
  std::string name;
  std::string policy;  // coordinator/policy's MakePolicy name
  Parallelism parallelism = Parallelism::kBurst;
  bool multiplex = true;
  bool partitioned = false;
};

// The configurations above, in that order.
const std::vector<PoolConfiguration>& PoolConfigurations();

// The ablations above, in that order.
const std::vector<PoolConfiguration>& AblationConfigurations();

// The configuration or ablation named `name`; NOT_FOUND naming the choices otherwise.
StatusOr<PoolConfiguration> FindPoolConfiguration(const std::string& name);

// The static partitions of `pool`: up to 4, each with at least 8 devices of every type.
int StaticPartitions(const std::vector<PoolDeviceType>& pool);

// A fresh policy (it keeps state between decisions) for the configuration on `pool`, with the
// policy's options (the minimum slice, the deepool policy's growth threshold).
StatusOr<std::unique_ptr<PoolPolicy>> MakePoolPolicy(
    const PoolConfiguration& configuration, const std::vector<PoolDeviceType>& pool,
    const coordinator::policy::PolicyOptions& policy_options = {});

}  // namespace deepool::simulator

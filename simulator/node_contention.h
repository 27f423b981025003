// Host contention between the devices of one node (docs/simulator.md, "Node contention"): an
// optional pool-simulator model for devices that share their host's cores and memory bandwidth,
// as the CPU "devices" of a worker do (one executor thread per core), where a job runs slower
// while other jobs compute on the same node. GPUs compute on their own silicon, so the model is
// off unless a pool names a device type for it.
//
// The model: slowdown(k) is how much longer an iteration takes while k devices of a node are in
// use than while one is (slowdown(1) = 1), measured on the cluster (the validation harness runs
// a job alone and two side by side). A job's speed was measured alone on its own devices, so it
// already pays for the contention among those; running beside others it takes
//   slowdown(load) / slowdown(own)
// times as long, where own is the devices it holds per node and load the devices in use per node
// (at least own). The simulator places no job on a particular node, so it takes a type's devices
// in use as spread evenly over that type's nodes: load = max(own, in use / nodes).
// Threading: pure functions and a value type.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace deepool::simulator {

struct NodeContention {
  std::string device_type;   // the pool's type it applies to
  int devices_per_node = 1;  // that type's devices per node
  // slowdown[k - 1]: iteration time with k devices of a node in use over that with one
  // (slowdown[0] == 1; non-decreasing). Loads between points interpolate linearly; loads past
  // the last point keep the last value.
  std::vector<double> slowdown = {1};
};

// INVALID_ARGUMENT naming the rule: a type name, devices_per_node >= 1, slowdown starting at 1,
// finite and non-decreasing.
Status ValidateNodeContention(const NodeContention& contention);

// slowdown(k) for a possibly fractional load k >= 0 (1 up to one device).
double NodeSlowdown(const NodeContention& contention, double devices_in_use);

// How many times longer a job's iteration takes than measured alone when it holds
// `own_devices` (a guest inside a host: 1) of a type with `type_devices` devices of which
// `devices_in_use` are held by running jobs, itself included.
double ContentionFactor(const NodeContention& contention, int type_devices, double devices_in_use,
                        int own_devices);

}  // namespace deepool::simulator

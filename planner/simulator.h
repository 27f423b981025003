// The cluster simulator behind `deepool simulate`: predicts, for one foreground (FG) job and
// background (BG) jobs on a cluster, the FG iteration time, the BG throughput and the total
// cluster throughput of several ways to run them, side by side:
//   DP            FG only, data parallel on all G devices;
//   BP            FG only, burst parallel (PlanBurstParallel at the amplification limit);
//   BP+BG         the BP plan with a BG job collocated on every device, filling FG-idle time
//                 under the interference model of sim_engine.h;
//   static k/G-k  the cluster split into k FG devices (FG data parallel, "DP", or burst
//                 parallel, "BP", on them at the same global batch) and G-k devices that each
//                 run a BG job alone.
// Timing comes from the planner's cost model (cost_model.h) through the discrete-event engine
// (sim_engine.h); docs/simulator.md explains the model and its limits.
// Threading: pure functions; the profiles must be safe to share (they are).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "planner/cluster.h"
#include "planner/gradient_sync.h"
#include "planner/graph.h"
#include "planner/profile.h"
#include "planner/sim_engine.h"

namespace deepool::planner {

struct SimFgJob {
  const Graph* graph = nullptr;
  const Profile* profile = nullptr;
  int64_t global_batch = 0;
  int devices = 0;                 // G
  double amplification_limit = 0;  // for BP; 0: unconstrained
};

struct SimBgJob {
  const Graph* graph = nullptr;
  const Profile* profile = nullptr;
  int64_t batch = 0;  // per-device batch; the job runs the whole model on one device
};

struct SimRequest {
  Cluster cluster;  // resized to the FG job's device count (ResizeCluster)
  SimFgJob fg;
  // Device d hosts bg[d % bg.size()]; empty: no BG rows (BP+BG and the BG side of static
  // partitions produce nothing).
  std::vector<SimBgJob> bg;
  // FG device counts of the static partitions; empty: the powers of two below G, and G.
  std::vector<int> partitions;
  EngineOptions engine;
  double pareto_tolerance = 1e-3;  // PlanOptions::pareto_tolerance for the BP plans
  bool concurrent_branches = false;  // PlanOptions::concurrent_branches for the BP plans
  // PlanOptions::sync_batch_norm for the BP plans: false plans and simulates deepool with batch
  // norm statistics per device, as the DP baseline always runs.
  bool sync_batch_norm = true;
  // How every plan's and timeline's gradient all-reduces are charged (PlanOptions's, and
  // CostModelOptions's, gradient_sync).
  GradientSyncOptions gradient_sync;
};

enum class SimConfigKind { kDataParallel, kBurstParallel, kBurstParallelWithBg, kStaticPartition };

struct SimConfigResult {
  std::string name;  // "DP", "BP", "BP+BG", "static 2/6 DP", "static 2/6 BP"
  SimConfigKind kind = SimConfigKind::kDataParallel;
  std::string fg_parallelism;  // "dp" or "bp"
  int fg_devices = 0;          // devices given to the FG job
  int fg_devices_used = 0;     // devices the FG plan actually uses
  int bg_devices = 0;          // devices running a BG job
  double fg_iteration_ms = 0;
  double fg_samples_per_s = 0;
  double bg_samples_per_s = 0;
  double total_samples_per_s = 0;
  double fg_speedup = 0;             // single-device iteration time / fg_iteration_ms
  double ratio_to_dp = 0;            // total_samples_per_s / DP's
  double fg_amplification = 0;       // the FG plan's GPU-second amplification
  double fg_delay_ms = 0;            // FG iteration time lost to BG (BP+BG only)
  std::vector<DeviceUsage> devices;  // all G devices
};

struct SimBgSummary {
  std::string model;
  int64_t batch = 0;
  double iteration_ms = 0;   // alone on one device
  double samples_per_s = 0;  // alone on one device
  int kernels = 0;
};

struct SimReport {
  std::string fg_model;
  std::string profile_source;
  int64_t global_batch = 0;
  int devices = 0;
  double amplification_limit = 0;
  std::string cluster_name;
  double single_device_ms = 0;  // FG iteration on one device at the whole global batch
  std::vector<SimBgSummary> bg;
  EngineOptions engine;
  std::vector<SimConfigResult> configs;  // DP, BP, BP+BG, then the static partitions
};

StatusOr<SimReport> SimulateCluster(const SimRequest& request);

// {"format": "deepool.simulation", "version": 1, ...} (docs/simulator.md).
inline constexpr int kSimReportFormatVersion = 1;
std::string SimReportToJson(const SimReport& report, int indent = 2);

}  // namespace deepool::planner

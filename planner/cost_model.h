// The planner's cost model (formulas in docs/planner.md): what one training iteration costs when
// every layer runs on a given number of devices.
//
// - Device sets: a layer on g devices runs on ranks 0..g-1 with NearEqualShares(B, g) samples
//   (plan.h's sample assignment rule), so layers with equal counts never re-split.
// - Compute: the profile's forward/backward time at the largest share, ceil(B / g); an uneven
//   split takes as long as its largest share.
// - Re-split: when a producer on g_u devices feeds a consumer on g_v != g_u devices, every sample
//   moves from its owner under g_u to its owner under g_v. One message per (sender, receiver)
//   pair; a device's time is max(send time, receive time) (links are full duplex), each the sum
//   over its messages of bytes / bandwidth + latency over Cluster::LinkBetween; the transfer takes
//   as long as the busiest device. Backward moves the activation gradients back the same way, so
//   it costs the same again.
// - Gradient all-reduce for layers with parameters: ring over ranks 0..g-1,
//   2(g-1)/g x bytes / bandwidth + 2(g-1) x latency on the ring's slowest link; zero at g = 1.
// - Synchronised batch norm on g > 1 devices: one all-reduce of its 2C+1 float64 statistics in
//   forward and one of their gradients in backward, by the same ring formula.
// - Iteration time = sum over layers of forward + backward + comm (layers run one after another);
//   GPU-seconds = sum over layers of g x that layer's time.
// Threading: a CostModel caches lazily and is not thread-safe; use one per thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "planner/cluster.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "planner/profile.h"

namespace deepool::planner {

// ceil(B / g): the largest of NearEqualShares(B, g).
int64_t LargestShare(int64_t global_batch, int devices);

// One direction of an activation re-split from g_from to g_to devices, as a function of the
// bytes per sample: max over devices and directions of (bytes_per_sample x a + b). Only the
// lines that can be the maximum for some non-negative byte count are kept.
class ResplitCost {
 public:
  static ResplitCost Compute(const Cluster& cluster, int64_t global_batch, int from_devices,
                             int to_devices);
  double Ms(int64_t bytes_per_sample) const;
  bool free() const { return lines_.empty(); }

 private:
  struct Line {
    double ms_per_byte = 0;  // per byte of one sample's activation
    double latency_ms = 0;
  };
  std::vector<Line> lines_;
};

// Ring all-reduce of `bytes` over ranks 0..devices-1; 0 for devices <= 1.
double AllReduceMs(const Cluster& cluster, int64_t bytes, int devices);

struct LayerCost {
  double forward_ms = 0;
  double backward_ms = 0;
  // Re-splits into the layer (forward + backward) + gradient all-reduce + batch norm's
  // statistics all-reduces.
  double comm_ms = 0;
  double total_ms() const { return forward_ms + backward_ms + comm_ms; }
};

struct CostModelOptions {
  // Batch norm on several devices synchronises its statistics (what deepool's runtime does, so
  // every plan trains the one-device model). Off: per-device statistics and no all-reduces, as
  // DistributedDataParallel without SyncBatchNorm runs; only the data-parallel baseline uses it.
  bool sync_batch_norm = true;
};

class CostModel {
 public:
  // The graph, profile and cluster must outlive the model. global_batch >= 1.
  CostModel(const Graph& graph, const Profile& profile, const Cluster& cluster,
            int64_t global_batch, CostModelOptions options = {});

  const Graph& graph() const { return graph_; }
  const Cluster& cluster() const { return cluster_; }
  int64_t global_batch() const { return global_batch_; }

  // Forward and backward time of a layer on `devices` devices (1 <= devices <= B).
  StatusOr<LayerTime> Compute(int layer_id, int devices) const;
  // Forward + backward re-split of `producer_id`'s output between the two device counts.
  double ResplitMs(int producer_id, int from_devices, int to_devices) const;
  // One direction of a re-split between the two device counts, for any tensor (cached):
  // ResplitMs(p, f, t) is 2 x Resplit(f, t).Ms(bytes per sample of p's output) when f != t.
  const ResplitCost& Resplit(int from_devices, int to_devices) const;
  // Gradient all-reduce of the layer's parameters (fp32) over `devices` devices.
  double GradientSyncMs(int layer_id, int devices) const;
  // One all-reduce of synchronised batch norm's statistics over `devices` devices: 2C+1 float64
  // values (per-channel sums, sums of squares, the count), as worker/runtime/batch_norm.cc sends.
  // Forward does one and backward one more (the same size). Zero for other ops, at one device,
  // and without CostModelOptions::sync_batch_norm.
  double BatchNormSyncMs(int layer_id, int devices) const;
  // Every all-reduce a layer does over its own devices in an iteration: GradientSyncMs plus
  // 2 x BatchNormSyncMs.
  double LayerSyncMs(int layer_id, int devices) const;
  // A layer's whole cost given every layer's count (counts indexed by layer id).
  StatusOr<LayerCost> CostOf(int layer_id, const std::vector<int>& counts) const;

  // The single-device iteration time: every layer on one device with the whole batch.
  StatusOr<double> SingleDeviceMs() const;

  // A plan with predictions for the given counts (one per layer, 1 <= count <= min(G, B)).
  // Fills model, batch, devices, profile source, single_device_ms, layers and totals; the
  // caller fills amplification_limit and data_parallel.
  StatusOr<Plan> Evaluate(const std::vector<int>& counts, int num_devices) const;
  // Evaluate's totals alone (the same sums), without building the per-layer placements.
  StatusOr<PlanTotals> Totals(const std::vector<int>& counts, int num_devices) const;

 private:
  // Sums the plan's totals and, when `layers` is not null, fills the per-layer placements.
  StatusOr<PlanTotals> Sum(const std::vector<int>& counts, int num_devices,
                           std::vector<LayerPlacement>* layers) const;

  const Graph& graph_;
  const Profile& profile_;
  const Cluster& cluster_;
  int64_t global_batch_;
  CostModelOptions options_;
  mutable std::map<std::pair<int, int>, ResplitCost> resplits_;
  // Profile times by (slot of the device count, layer): the search asks for every candidate
  // count once and Evaluate asks again for the chosen ones.
  mutable std::unordered_map<int, size_t> slot_of_count_;
  mutable std::vector<std::optional<LayerTime>> times_;  // [slot x num_layers + layer]
  mutable std::optional<double> single_device_ms_;
};

}  // namespace deepool::planner

// The planner's cost model (formulas in docs/planner.md): what one training iteration costs when
// every layer runs on a given number of devices.
//
// - Device sets: a layer runs on a range of ranks, first..first+g-1 (DeviceRange), with
//   NearEqualShares(B, g) samples (plan.h's sample assignment rule). The search's counts are
//   ranges from rank 0 (nested sets, so layers with equal counts never re-split); concurrent
//   branches (branch_packing.h) move a branch's layers to ranges further up.
// - Compute: the profile's forward/backward time at the largest share, ceil(B / g); an uneven
//   split takes as long as its largest share.
// - Iteration overhead: the work of an iteration outside the layers (loss, data, autograd, the
//   optimizer step; Profile::IterationOverheadMs, measured by the profiler) is charged to the
//   last output layer's forward, at that layer's largest share, so that the search, the totals
//   and the simulator all see it (and the single-device time includes it at the whole batch).
// - Re-split: when a producer on g_u devices feeds a consumer on g_v != g_u devices, every sample
//   moves from its owner under g_u to its owner under g_v. One message per (sender, receiver)
//   pair; a device's time is max(send time, receive time) (links are full duplex), each the sum
//   over its messages of bytes / bandwidth + latency over Cluster::LinkBetween; the transfer takes
//   as long as the busiest device. Backward moves the activation gradients back the same way, so
//   it costs the same again. Activations and their gradients have the profile's precision's
//   width (Profile::precision(); 4 bytes per element where it records none, 2 for bf16 and
//   fp16). Its device time is charged on the union of the two sets (every
//   device of both takes part; for nested sets the larger one), also when the consumer's is
//   smaller.
// - Synchronised batch norm on g > 1 devices: one all-reduce of its 2C+1 float64 statistics in
//   forward and one of the sums of dy and dy * x_hat in backward (AllReduceMs, gradient_sync.h),
//   each synchronous: it holds up the layer.
// - Serial part: layers run one after another, forward in topological order (re-splits in,
//   compute, batch norm statistics), then backward in reverse (compute, batch norm statistics,
//   re-splits back).
// - Gradient all-reduces (layers with parameters on g > 1 devices) are bucketed and overlapped
//   with backward as the runtime does (gradient_sync.h): only the sync tail after backward is
//   charged, to the bucket's layers by their gradient bytes.
// - Iteration time = serial part + exposed sync tail = sum over layers of forward + backward +
//   comm (comm: re-splits, batch norm statistics, the layer's share of the tail) when every
//   range starts at rank 0 (every layer then holds rank 0, so nothing can overlap).
// - Concurrent branches (some range starts above rank 0): a list schedule instead of the sum,
//   the same as the simulator's FG timeline (sim_engine.h). Forward in topological order: each
//   re-split into a layer starts when its producer's forward has ended and both ranges are free,
//   and holds both; the layer's compute and batch norm statistics start when its inputs have
//   arrived and its range is free. Backward in reverse order: a layer starts when every
//   consumer's backward and re-split back has ended and its range is free. Iteration time = the
//   end of the last backward + the exposed sync tail. For nested ranges from rank 0 this is the
//   serial sum: every step holds rank 0.
// - GPU-seconds = sum over layers of g x that layer's time, except that re-splits count on the
//   union of the two ranges (max(g_producer, g_consumer) for nested ones). Hidden all-reduces
//   cost no device time (they run beside backward, on its devices or on devices the plan leaves
//   idle then).
// Threading: a CostModel caches lazily and keeps scratch storage for its totals (so that the
// search's hundreds of plans allocate nothing there); it is not thread-safe: use one per thread.
// Copies, and models built one from another, share their cache of profile times: build each
// thread's own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "planner/cluster.h"
#include "planner/gradient_sync.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "planner/profile.h"

namespace deepool::planner {

// ceil(B / g): the largest of NearEqualShares(B, g).
int64_t LargestShare(int64_t global_batch, int devices);

// A layer's device set: ranks first..first+count-1.
struct DeviceRange {
  // Constructors, not an aggregate: a braced list of counts must not read as a list of ranges.
  constexpr DeviceRange() = default;
  constexpr DeviceRange(int first_rank, int devices) : first(first_rank), count(devices) {}
  int first = 0;
  int count = 1;
  int end() const { return first + count; }
  bool operator==(const DeviceRange& other) const {
    return first == other.first && count == other.count;
  }
  bool operator!=(const DeviceRange& other) const { return !(*this == other); }
};
// Ranges from rank 0 with these counts: the search's device sets.
std::vector<DeviceRange> PrefixRanges(const std::vector<int>& counts);
// Each layer's ranks in the plan as a range: first device and count (the count of ranks it
// lists; a plan whose devices are not consecutive is timed as if they were).
std::vector<DeviceRange> RangesOf(const Plan& plan);
// The ranks 0..n-1 that the ranges reach into: the largest end.
int RanksSpanned(const std::vector<DeviceRange>& ranges);
// Whether every range starts at rank 0 (the search's nested sets).
bool FromRankZero(const std::vector<DeviceRange>& ranges);
// The number of ranks in either range.
int UnionSize(DeviceRange a, DeviceRange b);

// One direction of an activation re-split from g_from to g_to devices, as a function of the
// bytes per sample: max over devices and directions of (bytes_per_sample x a + b). Only the
// lines that can be the maximum for some non-negative byte count are kept.
class ResplitCost {
 public:
  static ResplitCost Compute(const Cluster& cluster, int64_t global_batch, DeviceRange from,
                             DeviceRange to);
  // Between ranges from rank 0.
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

struct LayerCost {
  double forward_ms = 0;
  double backward_ms = 0;
  // Re-splits into the layer (forward + backward) + batch norm's statistics all-reduces + (in
  // Evaluate's placements) the layer's share of the exposed gradient sync tail.
  double comm_ms = 0;
  double resplit_ms = 0;         // the re-splits' part of comm_ms
  double resplit_device_ms = 0;  // their device time: each at the larger of its two sets
  double total_ms() const { return forward_ms + backward_ms + comm_ms; }
  // Device-milliseconds of the layer on `devices` devices (re-splits at their larger set).
  double device_ms(int devices) const {
    return devices * (total_ms() - resplit_ms) + resplit_device_ms;
  }
};

struct CostModelOptions {
  // Batch norm on several devices synchronises its statistics (what deepool's runtime does, so
  // every plan trains the one-device model). Off: per-device statistics and no all-reduces, as
  // DistributedDataParallel without SyncBatchNorm runs; only the data-parallel baseline uses it.
  bool sync_batch_norm = true;
  // Bucket cap, overlap and algorithms of the gradient all-reduces (gradient_sync.h); the
  // defaults are the runtime's.
  GradientSyncOptions gradient_sync;
};

// When each part of a layer runs in the list schedule (the file comment), for drawing it.
struct ScheduledLayer {
  std::vector<std::pair<double, double>> resplits_in;  // [start, end) of each re-split into it
  double forward_start_ms = 0;   // its forward compute, then batch norm statistics
  double backward_start_ms = 0;  // its backward compute, then batch norm statistics
  std::vector<std::pair<double, double>> resplits_back;  // each re-split of gradients back
};

class CostModel {
 public:
  // The graph, profile and cluster must outlive the model. global_batch >= 1.
  CostModel(const Graph& graph, const Profile& profile, const Cluster& cluster,
            int64_t global_batch, CostModelOptions options = {});
  // A model of `same_inputs`'s graph, profile, cluster and batch with other options, sharing its
  // cache of profile times (which the options do not change): a plan and its baseline ask the
  // profile once. Both must then be used from one thread at a time. What it knows of the layers
  // (bytes, ties) is copied, not worked out again.
  CostModel(const CostModel& same_inputs, CostModelOptions options);

  const Graph& graph() const { return graph_; }
  const Cluster& cluster() const { return cluster_; }
  const Profile& profile() const { return profile_; }
  const CostModelOptions& options() const { return options_; }
  int64_t global_batch() const { return global_batch_; }

  // Forward and backward time of a layer on `devices` devices (1 <= devices <= B); the last
  // output layer's forward includes the iteration overhead.
  StatusOr<LayerTime> Compute(int layer_id, int devices) const;
  // Compute for every layer at once, indexed by layer id (the profile asked once per layer for
  // what is not cached): valid as long as the model. Where the profile cannot time a layer, the
  // first such error by layer id, which Compute answers for it; Compute then tells the layers
  // apart.
  StatusOr<const LayerTime*> ComputeAll(int devices) const;
  // Forward + backward re-split of `producer_id`'s output between the two device sets (counts:
  // ranges from rank 0).
  double ResplitMs(int producer_id, int from_devices, int to_devices) const;
  double ResplitMs(int producer_id, DeviceRange from, DeviceRange to) const;
  // One direction of a re-split between the two device sets, for any tensor (cached):
  // ResplitMs(p, f, t) is 2 x Resplit(f, t).Ms(ActivationBytes(p)) when f != t.
  const ResplitCost& Resplit(int from_devices, int to_devices) const;
  const ResplitCost& Resplit(DeviceRange from, DeviceRange to) const;
  // Bytes per sample of the layer's output, and of its gradient, at the profile's precision:
  // what a re-split moves per sample in each direction.
  int64_t ActivationBytes(int layer_id) const;
  // The layer's parameter gradients in bytes (fp32, whatever the precision; an all-reduce moves
  // AllReducedBytes of them, gradient_sync.h).
  int64_t GradientBytes(int layer_id) const;
  // The search's additive stand-in for the layer's gradient all-reduce on `devices` devices
  // (AmortisedAllReduceMs, gradient_sync.h): its share of full buckets, overlap ignored.
  double AmortisedGradientSyncMs(int layer_id, int devices) const;
  // One all-reduce of synchronised batch norm's statistics over `devices` devices: 2C+1 float64
  // values (per-channel sums, sums of squares, the count), as worker/runtime/layers/batch_norm.cc
  // sends. Forward does one and backward one more (2C values, charged as 2C+1). Zero for other ops,
  // at one device, and without CostModelOptions::sync_batch_norm.
  double BatchNormSyncMs(int layer_id, int devices) const;
  // An additive charge for a layer's all-reduces, as if none were hidden: AmortisedGradientSyncMs
  // plus 2 x BatchNormSyncMs. Exact when every bucket holds one layer and nothing overlaps
  // (bucket_bytes 0, overlap off).
  double AdditiveSyncMs(int layer_id, int devices) const;
  // A layer's cost given every layer's count (counts indexed by layer id), without its share of
  // the gradient sync, which depends on the whole plan (GradientSync).
  StatusOr<LayerCost> CostOf(int layer_id, const std::vector<int>& counts) const;
  StatusOr<LayerCost> CostOf(int layer_id, const std::vector<DeviceRange>& ranges) const;
  // The bucketed, overlapped gradient all-reduces of the plan with these counts or ranges (one
  // per layer, 1 <= count <= B), timed against its forward and backward.
  StatusOr<GradientSyncTimeline> GradientSync(const std::vector<int>& counts) const;
  StatusOr<GradientSyncTimeline> GradientSync(const std::vector<DeviceRange>& ranges) const;

  // The list schedule of the plan with these ranges (also for ranges from rank 0, where it
  // comes to the serial sum), per layer; the exposed sync tail follows the last backward.
  StatusOr<std::vector<ScheduledLayer>> Schedule(const std::vector<DeviceRange>& ranges) const;

  // The single-device iteration time: every layer on one device with the whole batch.
  StatusOr<double> SingleDeviceMs() const;
  // Amplification's denominator for plans on up to `devices` devices: the least device time one
  // device needs for the whole batch in at most that many pieces, per layer the least of
  // g x its time at ceil(B / g) samples over 1 <= g <= min(devices, B) (one device can run a
  // layer's batch in g pieces). A plan holds g devices for a layer's time at that share, so no
  // plan spends less (amplification >= 1, whatever the profile). It is SingleDeviceMs() where no
  // layer's time per sample rises with the batch (GPUs, the analytical model); where it does (a
  // CPU's caches spilling at a large batch) it is less, and one device with the whole batch then
  // has an amplification above 1.
  StatusOr<double> LeastDeviceMs(int devices) const;

  // A plan with predictions for the given counts (one per layer, 1 <= count <= min(G, B)).
  // Fills model, batch, devices, profile source, single_device_ms, layers and totals; the
  // caller fills amplification_limit and data_parallel.
  StatusOr<Plan> Evaluate(const std::vector<int>& counts, int num_devices) const;
  // The same for a layer per range (ranges within [0, num_devices), counts within [1, B]).
  StatusOr<Plan> Evaluate(const std::vector<DeviceRange>& ranges, int num_devices) const;
  // Evaluate's totals alone (the same sums), without building the per-layer placements.
  StatusOr<PlanTotals> Totals(const std::vector<int>& counts, int num_devices) const;
  StatusOr<PlanTotals> Totals(const std::vector<DeviceRange>& ranges, int num_devices) const;
  // Totals of a plan whose layer costs are known: `costs[id]` must be CostOf(id, ranges) for
  // every layer. A local move of the search changes a few layers' counts, and only those
  // layers' costs and their consumers' change: it recomputes them, copies the rest from the plan
  // it moved from, and gets exactly Totals(ranges, num_devices) for the price of the sums and
  // the gradient sync. INVALID_ARGUMENT as Totals, or when there is not one cost per layer.
  StatusOr<PlanTotals> TotalsOfCosts(const std::vector<DeviceRange>& ranges, int num_devices,
                                     const std::vector<LayerCost>& costs) const;
  // Evaluate of a plan whose layer costs are known, as TotalsOfCosts: the same plan, without
  // costing every layer again (the search keeps its plans' costs). INVALID_ARGUMENT as there.
  StatusOr<Plan> EvaluateOfCosts(const std::vector<DeviceRange>& ranges, int num_devices,
                                 const std::vector<LayerCost>& costs) const;
  // Every layer's CostOf for these ranges (valid ranges: as Totals checks them).
  StatusOr<std::vector<LayerCost>> LayerCostsOf(const std::vector<DeviceRange>& ranges,
                                                int num_devices) const;

 private:
  // Sums the plan's totals and, when `layers` is not null, fills the per-layer placements.
  template <typename RangeOf>
  StatusOr<LayerCost> CostWith(int layer_id, RangeOf range_of) const;
  // The ranges must have passed CheckRanges.
  StatusOr<PlanTotals> Sum(const std::vector<DeviceRange>& ranges, int num_devices,
                           std::vector<LayerPlacement>* layers) const;
  // Evaluate's and EvaluateOfCosts's plan around Sum's or SumCosts's totals (`costs` null: the
  // layers are costed here). The ranges (and costs) must have passed their checks.
  StatusOr<Plan> EvaluateChecked(const std::vector<DeviceRange>& ranges, int num_devices,
                                 const std::vector<LayerCost>* costs) const;
  // INVALID_ARGUMENT unless there is one cost per range.
  static Status CheckCostsFor(const std::vector<DeviceRange>& ranges,
                              const std::vector<LayerCost>& costs);
  // Sum's work once the layers' costs are known (CostOf for every layer of `ranges`).
  StatusOr<PlanTotals> SumCosts(const std::vector<DeviceRange>& ranges, int num_devices,
                                const std::vector<LayerCost>& costs,
                                std::vector<LayerPlacement>* layers) const;
  // INVALID_ARGUMENT unless there is one range per layer, each within the devices and batch.
  Status CheckRanges(const std::vector<DeviceRange>& ranges, int num_devices) const;
  // The layer's placement on its range with these predictions; `samples`:
  // NearEqualShares(B, range.count).
  LayerPlacement Placement(int layer_id, DeviceRange range, const LayerCost& cost,
                           const std::vector<int64_t>& samples) const;
  // The profile's time of the layer on `devices` devices when Compute has cached it, else null
  // (the caller then asks Compute, which reports any error): CostOf's path without a StatusOr.
  const LayerTime* KnownTime(int layer_id, int devices) const;
  // CostOf for every layer; ranges must be valid.
  StatusOr<std::vector<LayerCost>> LayerCosts(const std::vector<DeviceRange>& ranges) const;
  // The end of backward and the gradients' ready times: the serial sum when every range starts
  // at rank 0, the list schedule otherwise (file comment).
  struct Passes {
    double backward_end_ms = 0;
    std::vector<ReadyGradient> gradients;  // in the order they become ready
  };
  Passes SerialPasses(const std::vector<DeviceRange>& ranges,
                      const std::vector<LayerCost>& costs) const;
  // SerialPasses' work: gives `ready` each layer's gradients as they become ready and returns
  // the end of backward.
  template <typename OnReady>
  double SerialBackward(const std::vector<DeviceRange>& ranges, const std::vector<LayerCost>& costs,
                        OnReady ready) const;
  // `layers`, when not null, gets each layer's times.
  Passes ConcurrentPasses(const std::vector<DeviceRange>& ranges,
                          const std::vector<LayerCost>& costs,
                          std::vector<ScheduledLayer>* layers = nullptr) const;
  // The gradient sync of the plan whose layers cost `costs` (LayerCosts).
  GradientSyncTimeline ScheduleSync(const std::vector<DeviceRange>& ranges,
                                    const std::vector<LayerCost>& costs) const;
  // ScheduleSync's exposed tail, per layer and in total, into sync_tally_ (the same values, to
  // the bit, without the timeline's lists); returns the end of backward. `from_rank_zero`:
  // FromRankZero(ranges).
  double TallySync(const std::vector<DeviceRange>& ranges, const std::vector<LayerCost>& costs,
                   bool from_rank_zero) const;

  const Graph& graph_;
  const Profile& profile_;
  const Cluster& cluster_;
  int64_t global_batch_;
  CostModelOptions options_;
  int64_t activation_bytes_per_element_ = 4;  // by the profile's precision
  int overhead_layer_ = -1;                   // the output layer with the largest id
  // The tied parameters' layers and bytes (AllTies), for every ScheduleSync: the graph's ties
  // are worked out once, not per plan the search costs.
  std::vector<int> tied_layers_;
  std::vector<int64_t> tied_bytes_;
  // SumCosts' scratch for the gradient sync, reused from one plan to the next.
  mutable ExposedSyncTally sync_tally_;
  // ActivationBytes and GradientBytes by layer, worked out once: CostOf and the sync schedule
  // ask for them in every plan.
  std::vector<int64_t> activation_bytes_;
  std::vector<int64_t> gradient_bytes_;
  // The all-reduces' charges depend on a layer only through its bytes, and a model's layers
  // have few distinct sizes (Inception-v3: 324 layers, 12 widths of batch norm), so
  // they are kept by size: each layer's size class (-1: nothing to all-reduce) and each class's
  // bytes. Tables by layer would touch a page per few device counts on a plan's first call.
  struct ByteClasses {
    ByteClasses() = default;
    // Classes of these per-layer sizes (>= 0), numbered in ascending order of size; 0 bytes: -1.
    explicit ByteClasses(const std::vector<int64_t>& bytes_by_layer);
    std::vector<int> class_of_layer;
    std::vector<int64_t> bytes;  // by class, ascending
  };
  // Every batch norm layer's statistics all-reduce bytes, as if synchronised (BatchNormSyncMs
  // charges none without sync_batch_norm); none for other ops.
  ByteClasses batch_norm_stats_;
  ByteClasses gradients_;  // the parameter gradients' bytes (GradientBytes)
  // Charges in ms by (device count, size class), worked out on first use: the search asks for
  // the same ones plan after plan. Per model, not shared: they depend on the options.
  class ChargeTable {
   public:
    // The entry of (devices >= 0, size_class); negative until it is set.
    double& At(int devices, int size_class, int num_classes);

   private:
    std::vector<double> ms_;  // [devices x num_classes + class], -1 where not yet known
  };
  mutable ChargeTable batch_norm_sync_ms_;  // BatchNormSyncMs, by batch_norm_stats_'s classes
  mutable ChargeTable amortised_sync_ms_;   // AmortisedGradientSyncMs, by gradients_' classes
  // Re-split costs by (from first, from count, to first, to count). Hashed: the search's full
  // model looks one up per layer input and plan, so an ordered map's search showed up in
  // profiles. Node-based, so references into it stay valid.
  struct RangePairHash {
    size_t operator()(const std::pair<DeviceRange, DeviceRange>& key) const;
  };
  mutable std::unordered_map<std::pair<DeviceRange, DeviceRange>, ResplitCost, RangePairHash>
      resplits_;
  // What the profile says, whatever the options: shared by models built one from another.
  struct ProfileTimes {
    // Profile times by slot, one slot per distinct share ceil(B / count) asked for (counts with
    // the same share have the same times): the search asks for every candidate count once and
    // Evaluate asks again for the chosen ones. slot_of_count is indexed by the count (1..B;
    // grown on demand), -1 where that count has no slot yet. Each slot is an array of its own,
    // one entry per layer, so that adding one copies none of the others; an entry whose
    // forward_ms is NaN is not known yet (a profile answering NaN is merely asked again).
    std::vector<int> slot_of_count;
    std::vector<int64_t> share_of_slot;
    std::vector<std::vector<LayerTime>> times;  // [slot][layer]
    std::optional<double> single_device_ms;
    std::map<int, double> least_device_ms;  // by device count
  };
  // The slot of `share`'s times in `known`, added (all unknown) if it has none.
  int SlotOfShare(ProfileTimes& known, int64_t share) const;
  // Compute's work for every layer at each of `counts` (1 <= count <= B) at once: the times not
  // yet known are asked of the profile one layer at a time for all their shares
  // (Profile::Times). The first error, by layer and then count, as Compute would answer it.
  Status KnowTimes(const std::vector<int>& counts) const;
  std::shared_ptr<ProfileTimes> profile_times_;
};

}  // namespace deepool::planner

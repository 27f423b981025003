// Burst-parallel search: per layer, how many devices it runs on, minimising predicted iteration
// time subject to GPU-seconds per iteration <= amplification_limit x the least device time
// (CostModel::LeastDeviceMs: one device's iteration time, or less where a layer runs cheaper in
// pieces of the batch). See docs/planner.md for the cost model and the algorithm.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "planner/cluster.h"
#include "planner/cost_model.h"
#include "planner/gradient_sync.h"
#include "planner/graph.h"
#include "planner/memory_model.h"
#include "planner/plan.h"
#include "planner/precision.h"
#include "planner/profile.h"

namespace deepool::planner {

// The groups the additive solves of the search plan (docs/planner.md, "Blocks"):
//   kLayers: every solve layer by layer (elementwise layers with their producer);
//   kMixed:  the solve whose stand-in is nearest the full model layer by layer (gradient syncs all
//            hidden with overlap, none without), the other two block by block: as good as
//            kLayers on the zoo models (1,734 plans: mean equal, worst 0.7 % slower), a third
//            faster on the ResNets;
//   kBlocks: every solve block by block: fastest, plans up to a few per cent slower.
enum class SearchGranularity { kLayers, kMixed, kBlocks };
std::string_view SearchGranularityName(SearchGranularity granularity);
StatusOr<SearchGranularity> ParseSearchGranularity(std::string_view name);

struct PlanOptions {
  int64_t global_batch = 0;
  int devices = 0;                 // G; the cluster is resized to G devices when needed
  double amplification_limit = 0;  // 0: unconstrained; otherwise must be >= 1
  bool exhaustive_counts = false;  // every count 1..min(G,B) instead of the candidate set
  bool fuse_elementwise = true;    // plan elementwise layers together with their producer
  // Which additive solves search whole blocks (a residual block, an Inception module:
  // docs/planner.md, "Blocks") as one group; the full model's local moves may split them after.
  SearchGranularity granularity = SearchGranularity::kMixed;
  // Bounds the Pareto frontiers (docs/planner.md): the plan is at least as fast as the best plan
  // whose GPU-seconds stay within (limit - pareto_tolerance) x the least device time, and never
  // exceeds the limit itself. 0: exact (frontiers can grow large on big graphs).
  double pareto_tolerance = 1e-3;
  // The cost model's gradient all-reduces (bucket cap, overlap, algorithms), for the plan and
  // the data-parallel baseline alike; the defaults are the runtime's.
  GradientSyncOptions gradient_sync;
  // Let parallel branches run side by side on disjoint device ranges (branch_packing.h). Off by
  // default: under this cost model it rarely pays, costs planning time, and measured on CPU
  // ranks it was slower than predicted (docs/benchmarks.md, "Concurrent branches").
  bool concurrent_branches = false;
  // Batch norm statistics of a layer on several devices summed over its devices, so training
  // equals one device's (the default), or kept per device as DistributedDataParallel without
  // SyncBatchNorm does (cheaper; then data parallelism is exactly the baseline's). The runtime
  // must train the same way (run spec "batch_norm", docs/formats.md).
  bool sync_batch_norm = true;
  // The precision to plan at (precision.h). The profile times the layers at its own precision
  // and the cost model sizes the activation re-splits by it, so this only checks that they
  // agree: a profile for another precision (CheckProfilePrecision, profile.h) is refused with
  // FAILED_PRECONDITION. Unset: the profile's, unchecked.
  std::optional<Precision> precision;
  // Device memory (memory_model.h, docs/planner.md "Memory"): with a capacity, every plan the
  // search returns fits it on every device by the memory model (at the profile's precision and
  // options.gradient_sync's bucket cap), a fitting plan wins over a faster one that does not,
  // and a request nothing fits is RESOURCE_EXHAUSTED naming the layer, its bytes and its device
  // count. 0: unchecked.
  int64_t device_memory_bytes = 0;
  OptimizerMemory optimizer_memory = OptimizerMemory::kSgdMomentum;
};

// The memory model options.devices' plans are checked with: the profile's precision (or
// options.precision), the options' optimizer and gradient bucket cap.
MemoryModelOptions PlanMemoryModelOptions(const PlanOptions& options, const Profile& profile);

// The cost model the search plans with: the options' gradient sync and batch norm. --explain
// and the predicted timeline cost a plan with the same one.
CostModelOptions PlanCostModelOptions(const PlanOptions& options);

// The device counts the search considers for every layer: all of 1..min(G, B) when exhaustive;
// otherwise the powers of two, the divisors of B, and min(G, B) itself, all <= min(G, B).
std::vector<int> CandidateDeviceCounts(int64_t global_batch, int devices, bool exhaustive);

// The search minimises additive stand-ins for the cost model (each layer's gradient all-reduce
// charged as its share of full buckets, in full, at half or not at all, since what backward
// hides is not additive); the full model (CostModel::Totals: buckets overlapped with backward)
// then costs every answer, improves the best by moving runs of layers on one count to the
// neighbouring candidate counts while that is faster within the limit, and compares them with
// data parallelism and one device; with options.concurrent_branches, the best then has its
// parallel branches packed side by side where that is faster (PackConcurrentBranches). Every
// number in the plan is the full model's; the plan is
// not guaranteed optimal for it (docs/planner.md, "The search").
// Returns the burst-parallel plan, with the data-parallel baseline's totals filled in beside it,
// or INVALID_ARGUMENT / FAILED_PRECONDITION / NOT_FOUND with a clear reason. A global batch
// under which a batch-norm layer would see one value per channel is refused naming the layer
// (CheckBatchNormTraining, plan.h); a profile for another precision than options.precision is
// refused (FAILED_PRECONDITION).
StatusOr<Plan> PlanBurstParallel(const Graph& graph, const Profile& profile, const Cluster& cluster,
                                 const PlanOptions& options);

// The two cost models a plan is priced with: the plan's own (the options' batch norm and
// gradient sync) and the data-parallel baseline's (batch norm statistics per device). Their
// caches (profile times per layer and count, re-splits, least device times) depend on the
// graph, profile, links and batch, not on G, so plans of one job at several device counts share
// one pair (PlanSpeedupCurve, speedup_curve.h). The graph, profile and cluster must outlive it.
// Threading: as CostModel's, one thread at a time.
struct PlanningModels {
  PlanningModels(const Graph& graph, const Profile& profile, const Cluster& cluster,
                 const PlanOptions& options);
  CostModel plan;
  CostModel baseline;
};

// PlanBurstParallel on models built beforehand: PlanBurstParallel(graph, profile, cluster,
// options) is PlanBurstParallelWith(PlanningModels(graph, profile, cluster, options), options).
// The models may have been built with other options' devices (and another cluster of the same
// links and node shape over the first options.devices ranks); INVALID_ARGUMENT when they were
// built for another global batch, batch norm or gradient sync.
StatusOr<Plan> PlanBurstParallelWith(const PlanningModels& models, const PlanOptions& options);

// Whether a search of `graph` with `options` solves some of its additive problems block by
// block: a granularity other than kLayers, on a graph with a block to search whole (a chain
// such as VGG-16 has none, and every solve is then layer by layer whatever the granularity).
bool SearchesBlocks(const Graph& graph, const PlanOptions& options);

// Whether the totals' device time fits a budget in device-milliseconds, with a relative slack of
// 1e-12 for sums added up in another order.
bool WithinBudget(const PlanTotals& totals, double budget_gpu_ms);

// The additive budget for solving again after the search's answer, whose additive device time
// was `answer_additive_gpu_ms`, came out `excess_gpu_ms` over the limit by the full model (its
// buckets and exposed tail cost more than the additive stand-in charges). Below both the
// current budget and the answer's own additive device time by the excess: lowering only the
// budget would find the same answer again wherever it had room under the budget.
double RetryBudgetGpuMs(double budget_gpu_ms, double answer_additive_gpu_ms, double excess_gpu_ms);

// The returned plan checked once more against what it was asked for, by its own totals: at most
// `options.devices` devices and, with a limit, amplification at most the limit (relative slack
// 1e-9). INTERNAL naming the excess otherwise: a search bug must not reach a user as a plan over
// its limit. PlanBurstParallel applies it to every plan it returns.
Status CheckPlanWithinLimits(const Plan& plan, const PlanOptions& options);

// Whether some plan of `graph` on options.devices devices may fit options.device_memory_bytes,
// decided by the memory model alone (no profile): every layer alone on the most devices it may
// use, and all of them together so. OK when unchecked (capacity 0) or when they fit; otherwise
// the RESOURCE_EXHAUSTED PlanBurstParallel returns for the request, naming the layer, its bytes
// by part and its device count. Memory at options.precision (fp32 when unset). Necessary, not
// sufficient: the search may still refuse within a tight amplification limit. INVALID_ARGUMENT
// for a global batch or device count below 1.
Status CheckMemoryCanFit(const Graph& graph, const PlanOptions& options);

// The data-parallel plan (every layer on all min(G, B) devices) with predictions; refused as
// PlanBurstParallel refuses.
StatusOr<Plan> PlanDataParallel(const Graph& graph, const Profile& profile, const Cluster& cluster,
                                const PlanOptions& options);

}  // namespace deepool::planner

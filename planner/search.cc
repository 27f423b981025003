// Burst-parallel search, the driver: checks the request, has the series-parallel Pareto problem
// built (search_problem.h) and solved (pareto_search.h) with the gradient sync weighted three
// ways, checks each answer with the full cost model (its totals remembered by
// search_full_model.h) against the limit and device memory (memory_fit.h), improves the answers
// by the full model's local moves and evaluates the best.
// docs/planner.md documents the additive stand-in, the full-model check and the local moves.
#include "planner/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "planner/branch_packing.h"
#include "planner/cost_model.h"
#include "planner/memory_fit.h"
#include "planner/pareto_search.h"
#include "planner/search_full_model.h"
#include "planner/search_problem.h"
#include "planner/series_parallel_schedule.h"

namespace deepool::planner {
namespace {

using internal::DescentMemo;
using internal::FullModel;
using search_problem::AddEdges;
using search_problem::AdditiveCost;
using search_problem::CountBounds;
using search_problem::CountsOf;
using search_problem::GroupBlocks;
using search_problem::GroupLayers;
using search_problem::MostDevicesPerLayer;
using search_problem::OwnCharges;
using search_problem::SearchNodes;
using search_problem::SetNodeCosts;

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Exhaustive search tables hold K x K frontiers per edge: keep K bounded.
constexpr int64_t kMaxExhaustiveCounts = 256;

Status CheckRequest(const Cluster& cluster, const PlanOptions& options) {
  if (options.global_batch < 1) {
    return InvalidArgumentError("global batch must be >= 1, got " +
                                std::to_string(options.global_batch));
  }
  if (options.devices < 1) {
    return InvalidArgumentError("device count must be >= 1, got " +
                                std::to_string(options.devices));
  }
  const double limit = options.amplification_limit;
  if (std::isnan(limit) || limit < 0 || (limit > 0 && limit < 1)) {
    return InvalidArgumentError(
        "amplification limit must be >= 1 (GPU-seconds can never fall below the single-device "
        "time), or 0 for no limit; got " +
        std::to_string(limit));
  }
  if (options.exhaustive_counts &&
      std::min<int64_t>(options.devices, options.global_batch) > kMaxExhaustiveCounts) {
    return InvalidArgumentError(
        "exhaustive counts need min(G, B) <= " + std::to_string(kMaxExhaustiveCounts) +
        " (tables grow with the square of the counts); use the default "
        "candidate set");
  }
  if (std::isnan(options.pareto_tolerance) || options.pareto_tolerance < 0) {
    return InvalidArgumentError("pareto tolerance must be >= 0");
  }
  if (cluster.devices_per_node < 1) {
    return InvalidArgumentError("cluster: devices_per_node must be >= 1");
  }
  for (const Link* link : {&cluster.intra_node, &cluster.inter_node}) {
    if (!(link->bandwidth_gbps > 0) || link->latency_us < 0) {
      return InvalidArgumentError("cluster: link bandwidth must be > 0 and latency >= 0");
    }
  }
  return Status::Ok();
}

std::vector<int> AllOn(const Graph& graph, int devices) {
  return std::vector<int>(static_cast<size_t>(graph.num_layers()), devices);
}

// Whether every layer's count keeps within MostDevicesPerLayer.
bool WithinMostDevices(const std::vector<int>& counts, const std::vector<int>& most_per_layer) {
  for (size_t id = 0; id < counts.size(); ++id) {
    if (counts[id] > most_per_layer[id]) return false;
  }
  return true;
}

// The baseline a user would run instead, every layer on min(G, B) devices, on the baseline's
// model (PlanningModels::baseline: batch norm statistics per device).
StatusOr<PlanTotals> DataParallelBaseline(const CostModel& baseline, const PlanOptions& options) {
  const int most = static_cast<int>(std::min<int64_t>(options.global_batch, options.devices));
  return baseline.Totals(AllOn(baseline.graph(), most), options.devices);
}

// The baseline always keeps batch norm statistics per device (DistributedDataParallel without
// SyncBatchNorm), so synchronised batch norm is charged to deepool, never to the baseline.
CostModelOptions BaselineCostModelOptions(const PlanOptions& options) {
  CostModelOptions per_device_batch_norm = PlanCostModelOptions(options);
  per_device_batch_norm.sync_batch_norm = false;
  return per_device_batch_norm;
}

// Whether the models price plans as `options` asks: the same batch, batch norm and gradient
// sync (the devices may differ).
bool BuiltFor(const PlanningModels& models, const PlanOptions& options) {
  const CostModelOptions wanted = PlanCostModelOptions(options);
  const CostModelOptions& built = models.plan.options();
  const GradientSyncOptions& a = wanted.gradient_sync;
  const GradientSyncOptions& b = built.gradient_sync;
  const bool same_sync = a.bucket_bytes == b.bucket_bytes && a.overlap == b.overlap &&
                         a.tree == b.tree && a.precision == b.precision;
  return same_sync && built.sync_batch_norm == wanted.sync_batch_norm &&
         !models.baseline.options().sync_batch_norm &&
         models.plan.global_batch() == options.global_batch &&
         models.baseline.global_batch() == options.global_batch;
}

}  // namespace

CostModelOptions PlanCostModelOptions(const PlanOptions& options) {
  CostModelOptions model_options;
  model_options.sync_batch_norm = options.sync_batch_norm;
  model_options.gradient_sync = options.gradient_sync;
  return model_options;
}

PlanningModels::PlanningModels(const Graph& graph, const Profile& profile, const Cluster& cluster,
                               const PlanOptions& options)
    : plan(graph, profile, cluster, options.global_batch, PlanCostModelOptions(options)),
      baseline(plan, BaselineCostModelOptions(options)) {}

std::string_view SearchGranularityName(SearchGranularity granularity) {
  switch (granularity) {
    case SearchGranularity::kLayers:
      return "layers";
    case SearchGranularity::kMixed:
      return "mixed";
    case SearchGranularity::kBlocks:
      return "blocks";
  }
  return "mixed";
}

StatusOr<SearchGranularity> ParseSearchGranularity(std::string_view name) {
  for (SearchGranularity granularity :
       {SearchGranularity::kLayers, SearchGranularity::kMixed, SearchGranularity::kBlocks}) {
    if (name == SearchGranularityName(granularity)) return granularity;
  }
  return InvalidArgumentError("search granularity must be layers, mixed or blocks, got '" +
                              std::string(name) + "'");
}

StatusOr<Plan> PlanDataParallel(const Graph& graph, const Profile& profile, const Cluster& cluster,
                                const PlanOptions& options) {
  RETURN_IF_ERROR(CheckRequest(cluster, options));
  RETURN_IF_ERROR(CheckBatchNormTraining(graph, options.global_batch));
  if (options.precision) RETURN_IF_ERROR(CheckProfilePrecision(profile, *options.precision));
  CostModel model(graph, profile, cluster, options.global_batch, PlanCostModelOptions(options));
  const int most = static_cast<int>(std::min<int64_t>(options.global_batch, options.devices));
  ASSIGN_OR_RETURN(Plan plan, model.Evaluate(AllOn(graph, most), options.devices));
  plan.amplification_limit = options.amplification_limit;
  const CostModel baseline(model, BaselineCostModelOptions(options));
  ASSIGN_OR_RETURN(plan.data_parallel, DataParallelBaseline(baseline, options));
  return plan;
}

namespace {

// A plan by its counts, with the full model's totals.
struct Candidate {
  std::vector<int> counts;
  PlanTotals totals;
};

// Solves the additive problem and returns its answer with the full model's totals when it
// finds it within the limit, or nothing. The additive device time can fall short of the full
// model's (a bucket smaller than the cap pays a whole all-reduce latency; an exposed tail), so an
// answer over the limit is solved again below its own additive device time by its excess
// (RetryBudgetGpuMs), a few times. `problem` is solved in place (a copy would copy every cost):
// its budget is lowered for those attempts and put back before it returns.
StatusOr<std::optional<Candidate>> SolveWithinLimit(const Graph& graph, FullModel& full,
                                                    SeriesParallelProblem& problem,
                                                    const series_parallel::Schedule& schedule,
                                                    const SearchNodes& nodes,
                                                    const std::vector<int>& candidates) {
  constexpr int kAttempts = 4;
  const double budget_gpu_ms = problem.budget_gpu_ms;
  struct BudgetBack {
    SeriesParallelProblem& problem;
    double budget_gpu_ms;
    ~BudgetBack() { problem.budget_gpu_ms = budget_gpu_ms; }
  } budget_back{problem, budget_gpu_ms};
  const ScalarPassMemo memo;  // only the budget changes between attempts
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    StatusOr<SeriesParallelSolution> solution = SolveSeriesParallel(problem, schedule, memo);
    if (!solution.ok()) return solution.status().WithContext("graph '" + graph.name() + "'");
    if (!solution->found) break;
    Candidate found{CountsOf(*solution, nodes, candidates, graph.num_layers()), {}};
    ASSIGN_OR_RETURN(found.totals, full.Totals(found.counts));
    if (WithinBudget(found.totals, budget_gpu_ms)) return std::optional<Candidate>(found);
    problem.budget_gpu_ms = RetryBudgetGpuMs(problem.budget_gpu_ms, solution->cost.gpu_ms,
                                             found.totals.gpu_seconds * 1000.0 - budget_gpu_ms);
  }
  return std::optional<Candidate>();
}

// The best single move of a run of consecutive layers on one count (plan_explain's groups) to
// the neighbouring candidate count, by the full model, if one is faster within the budget.
StatusOr<std::optional<Candidate>> BestMove(FullModel& full, const Candidate& plan,
                                            const std::vector<int>& candidates,
                                            const std::vector<int>& most_per_layer,
                                            const MemoryFit& memory, double budget_gpu_ms) {
  std::optional<Candidate> best;
  const std::vector<int>& counts = plan.counts;
  for (size_t begin = 0, end = 0; begin < counts.size(); begin = end) {
    int run_most = most_per_layer[begin];
    while (end < counts.size() && counts[end] == counts[begin]) {
      run_most = std::min(run_most, most_per_layer[end]);
      ++end;
    }
    const auto at = std::lower_bound(candidates.begin(), candidates.end(), counts[begin]);
    for (const auto next : {at - 1, at + 1}) {
      if (at == candidates.end() || next < candidates.begin() || next >= candidates.end()) continue;
      if (*next > run_most) continue;
      Candidate moved{counts, {}};
      std::fill(moved.counts.begin() + static_cast<std::ptrdiff_t>(begin),
                moved.counts.begin() + static_cast<std::ptrdiff_t>(end), *next);
      if (*next < counts[begin] && !memory.Fits(moved.counts)) continue;
      const double to_beat = best ? best->totals.iteration_ms : plan.totals.iteration_ms;
      StatusOr<std::optional<PlanTotals>> totals = full.TotalsOfMoveIfBetter(
          counts, moved.counts, begin, end, to_beat * (1 - 1e-12), budget_gpu_ms * (1 + 1e-12));
      // Not better by the layers' own costs, or a count the profile cannot time.
      if (!totals.ok() || !totals->has_value()) continue;
      moved.totals = **totals;
      if (WithinBudget(moved.totals, budget_gpu_ms) &&
          moved.totals.iteration_ms < to_beat * (1 - 1e-12)) {
        best = std::move(moved);
      }
    }
  }
  return best;
}

// Steepest descent over BestMove: the full model's corrections to the additive search (buckets
// and overlap), bounded so that large graphs stay fast.
StatusOr<Candidate> Refine(FullModel& full, DescentMemo& memo, Candidate plan,
                           const std::vector<int>& candidates,
                           const std::vector<int>& most_per_layer, const MemoryFit& memory,
                           double budget_gpu_ms) {
  constexpr int kMaxMoves = 32;
  bool complete = false;
  for (int move = 0; move < kMaxMoves; ++move) {
    if (!memo.Visit(plan.counts, kMaxMoves - move)) break;
    StatusOr<std::optional<Candidate>> better =
        BestMove(full, plan, candidates, most_per_layer, memory, budget_gpu_ms);
    if (!better.ok()) {
      memo.EndDescent(/*complete=*/false);  // the memo stays usable: no descent left open
      return better.status();
    }
    if (!*better) {
      complete = true;
      break;
    }
    plan = std::move(**better);
  }
  memo.EndDescent(complete);
  return plan;
}

// The additive problem at one granularity (SearchGranularity): its groups and the re-split edges
// between them, with the budget and tolerance; node costs are set for each solve. The schedule
// is worked out at its first solve and serves every later one (only costs and budgets differ).
struct AdditiveLevel {
  SearchNodes nodes;
  SeriesParallelProblem problem;
  std::optional<series_parallel::Schedule> schedule;
};

// The additive problems a search solves: layer by layer (`layers`) and block by block (`blocks`;
// null where the graph has no block or the options never search blocks), and which of them each
// sync weight's solve uses.
struct AdditiveLevels {
  OwnCharges charges;  // every layer's at every candidate count, for SetNodeCosts
  AdditiveLevel layers;
  std::optional<AdditiveLevel> blocks;
  SearchGranularity granularity = SearchGranularity::kLayers;
  // kMixed's layer-by-layer solve: the weight whose stand-in is nearest the full model (all the
  // sync hidden when it overlaps backward, none when it runs after).
  double layer_weight = 0;

  AdditiveLevel& For(double sync_weight) {
    const bool by_blocks =
        blocks && (granularity == SearchGranularity::kBlocks ||
                   (granularity == SearchGranularity::kMixed && sync_weight != layer_weight));
    return by_blocks ? *blocks : layers;
  }
};

AdditiveLevels MakeAdditiveLevels(const Graph& graph, const CostModel& model,
                                  const std::vector<int>& candidates, const PlanOptions& options,
                                  double budget_gpu_ms, double tolerance_gpu_ms) {
  AdditiveLevels levels;
  levels.charges = OwnCharges(graph, model, candidates);
  levels.granularity = options.granularity;
  levels.layer_weight = options.gradient_sync.overlap ? 0.0 : 1.0;
  auto make = [&](std::vector<int> group_of, int num_groups) {
    AdditiveLevel level;
    level.nodes.group_of = std::move(group_of);
    level.nodes.count = static_cast<size_t>(num_groups) + 2;
    AddEdges(graph, model, candidates, level.nodes, &level.problem);
    level.problem.budget_gpu_ms = budget_gpu_ms;
    level.problem.tolerance_gpu_ms = tolerance_gpu_ms;
    return level;
  };
  int num_groups = 0;
  std::vector<int> group_of = GroupLayers(graph, options.fuse_elementwise, &num_groups);
  if (options.granularity != SearchGranularity::kLayers) {
    int num_blocks = num_groups;
    std::vector<int> block_of = GroupBlocks(graph, group_of, &num_blocks);
    if (num_blocks < num_groups) levels.blocks = make(std::move(block_of), num_blocks);
  }
  levels.layers = make(std::move(group_of), num_groups);
  return levels;
}

// The additive searches' answers that fit the limit by the full model: gradient all-reduces
// charged in full (none hidden), at half and not at all (all hidden); the full model lies
// between the extremes. Each search is bounded by single-device and data-parallel execution (when
// every layer can train on all its devices) in its own terms, and solves the problem of the
// granularity `levels` gives its weight; node costs are set here.
StatusOr<std::vector<Candidate>> AdditiveAnswers(
    const Graph& graph, FullModel& full, AdditiveLevels& levels, const std::vector<int>& candidates,
    const CountBounds& bounds, const std::vector<int>& data_parallel_counts,
    bool data_parallel_fits, double single_device_ms, bool single_device_fits) {
  const bool data_parallel_trains =
      data_parallel_fits && WithinMostDevices(data_parallel_counts, bounds.most);
  ASSIGN_OR_RETURN(const AdditiveCost data_parallel_cost,
                   AdditiveCost::Of(graph, full.model(), data_parallel_counts));
  std::vector<Candidate> answers;
  for (const double sync_weight : {1.0, 0.5, 0.0}) {
    AdditiveLevel& level = levels.For(sync_weight);
    SeriesParallelProblem& problem = level.problem;
    RETURN_IF_ERROR(
        SetNodeCosts(graph, levels.charges, bounds, level.nodes, sync_weight, &problem));
    if (!level.schedule) {
      StatusOr<series_parallel::Schedule> built = series_parallel::BuildSchedule(problem);
      if (!built.ok()) return built.status().WithContext("graph '" + graph.name() + "'");
      level.schedule = std::move(*built);
    }
    const CostPoint data_parallel = data_parallel_cost.At(sync_weight);
    // One device bounds the search only where it fits the limit: with a profile whose time per
    // sample rises with the batch it may not (CostModel::LeastDeviceMs).
    problem.incumbent_time_ms = single_device_fits ? single_device_ms : kInfinity;
    if (data_parallel_trains && data_parallel.gpu_ms <= problem.budget_gpu_ms) {
      problem.incumbent_time_ms = std::min(problem.incumbent_time_ms, data_parallel.time_ms);
    }
    ASSIGN_OR_RETURN(
        std::optional<Candidate> found,
        SolveWithinLimit(graph, full, problem, *level.schedule, level.nodes, candidates));
    if (found) answers.push_back(std::move(*found));
  }
  return answers;
}

// A layer's compute on a count times the count, for MemoryFit::Repair; infinity where the
// profile cannot time it.
MemoryFit::DeviceMs LayerDeviceMs(const CostModel& model) {
  return [&model](int layer_id, int devices) {
    StatusOr<LayerTime> time = model.Compute(layer_id, devices);
    return time.ok() ? time->total_ms() * devices : kInfinity;
  };
}

// The additive answers made to fit in device memory (MemoryFit::Repair): those that fit the
// limit by the full model, and, when a repair went over the limit, the bounds that keep the
// layers it widened at least that wide, for solving again (the search can then narrow others).
struct FittedAnswers {
  std::vector<Candidate> fitting;
  std::optional<std::vector<int>> raised_fewest;
};

StatusOr<FittedAnswers> FitAnswers(FullModel& full, std::vector<Candidate> answers,
                                   const std::vector<int>& candidates, const CountBounds& bounds,
                                   const MemoryFit& memory, double budget_gpu_ms) {
  FittedAnswers fitted;
  for (Candidate& answer : answers) {
    if (memory.Fits(answer.counts)) {
      fitted.fitting.push_back(std::move(answer));
      continue;
    }
    std::optional<std::vector<int>> repaired =
        memory.Repair(answer.counts, candidates, bounds.most, LayerDeviceMs(full.model()));
    if (!repaired) continue;
    StatusOr<PlanTotals> totals = full.Totals(*repaired);
    if (totals.ok() && WithinBudget(*totals, budget_gpu_ms)) {
      fitted.fitting.push_back(Candidate{std::move(*repaired), *totals});
    } else if (!fitted.raised_fewest) {
      std::vector<int> fewest = bounds.fewest;
      for (size_t id = 0; id < fewest.size(); ++id) {
        if ((*repaired)[id] != answer.counts[id])
          fewest[id] = std::max(fewest[id], (*repaired)[id]);
      }
      fitted.raised_fewest = std::move(fewest);
    }
  }
  return fitted;
}

// Whether every device of an evaluated plan fits (plans of packed branches are not prefixes).
bool FitsOnEveryDevice(const MemoryFit& memory, const Plan& plan) {
  for (const DeviceMemory& device : memory.model().PerDevice(plan)) {
    if (device.total() > memory.capacity_bytes()) return false;
  }
  return true;
}

}  // namespace

namespace {

MemoryModelOptions MemoryModelOptionsAt(const PlanOptions& options, Precision precision) {
  MemoryModelOptions memory;
  memory.precision = precision;
  memory.optimizer = options.optimizer_memory;
  memory.gradient_bucket_bytes = options.gradient_sync.bucket_bytes;
  return memory;
}

}  // namespace

MemoryModelOptions PlanMemoryModelOptions(const PlanOptions& options, const Profile& profile) {
  return MemoryModelOptionsAt(
      options, options.precision.value_or(profile.precision().value_or(Precision::kFp32)));
}

bool SearchesBlocks(const Graph& graph, const PlanOptions& options) {
  if (options.granularity == SearchGranularity::kLayers) return false;
  int num_groups = 0;
  std::vector<int> group_of = GroupLayers(graph, options.fuse_elementwise, &num_groups);
  int num_blocks = num_groups;
  GroupBlocks(graph, std::move(group_of), &num_blocks);
  return num_blocks < num_groups;
}

bool WithinBudget(const PlanTotals& totals, double budget_gpu_ms) {
  return totals.gpu_seconds * 1000.0 <= budget_gpu_ms * (1 + 1e-12);
}

double RetryBudgetGpuMs(double budget_gpu_ms, double answer_additive_gpu_ms, double excess_gpu_ms) {
  return std::min(budget_gpu_ms, answer_additive_gpu_ms) - excess_gpu_ms;
}

StatusOr<Plan> PlanBurstParallel(const Graph& graph, const Profile& profile, const Cluster& cluster,
                                 const PlanOptions& options) {
  // Checked before the models are built: a batch below 1 is not a model's to take.
  RETURN_IF_ERROR(CheckRequest(cluster, options));
  const PlanningModels models(graph, profile, cluster, options);
  return PlanBurstParallelWith(models, options);
}

StatusOr<Plan> PlanBurstParallelWith(const PlanningModels& models, const PlanOptions& options) {
  const CostModel& model = models.plan;
  const Graph& graph = model.graph();
  RETURN_IF_ERROR(CheckRequest(model.cluster(), options));
  if (!BuiltFor(models, options)) {
    return InvalidArgumentError(
        "the planning models were built for another global batch, batch norm or gradient sync "
        "than the options ask for");
  }
  RETURN_IF_ERROR(CheckBatchNormTraining(graph, options.global_batch));
  if (options.precision) {
    RETURN_IF_ERROR(CheckProfilePrecision(model.profile(), *options.precision));
  }
  const int most = static_cast<int>(std::min<int64_t>(options.global_batch, options.devices));
  ASSIGN_OR_RETURN(const double single_device_ms, model.SingleDeviceMs());
  // Amplification's denominator: the least device time one device needs for the batch.
  ASSIGN_OR_RETURN(const double least_device_ms, model.LeastDeviceMs(options.devices));
  ASSIGN_OR_RETURN(const PlanTotals baseline, DataParallelBaseline(models.baseline, options));

  const std::vector<int> candidates =
      CandidateDeviceCounts(options.global_batch, options.devices, options.exhaustive_counts);
  const bool limited = options.amplification_limit > 0;
  const double budget_gpu_ms = limited ? options.amplification_limit * least_device_ms : kInfinity;
  AdditiveLevels levels = MakeAdditiveLevels(graph, model, candidates, options, budget_gpu_ms,
                                             options.pareto_tolerance * least_device_ms);

  // Known feasible plans: every layer on one device (within any limit >= 1) and data
  // parallelism as deepool runs it (batch norm as the options say) when it fits the limit and
  // every layer can train on all its devices.
  const std::vector<int> most_per_layer = MostDevicesPerLayer(graph, options);
  // Device memory: each layer's fewest counts, and every plan kept only if it fits.
  const MemoryModel memory_model(graph, options.global_batch,
                                 PlanMemoryModelOptions(options, model.profile()));
  const MemoryFit memory(memory_model, options.device_memory_bytes);
  ASSIGN_OR_RETURN(std::vector<int> fewest_per_layer,
                   memory.FewestDevicesPerLayer(candidates, most_per_layer));
  CountBounds bounds{most_per_layer, std::move(fewest_per_layer)};
  FullModel full(model, options.devices);
  Candidate one_device{AllOn(graph, 1), {}};
  ASSIGN_OR_RETURN(one_device.totals, full.Totals(one_device.counts));
  Candidate data_parallel{AllOn(graph, most), {}};
  ASSIGN_OR_RETURN(data_parallel.totals, full.Totals(data_parallel.counts));
  // One device is within any limit unless its batch runs slower per sample than smaller ones.
  const bool single_device_fits =
      WithinBudget(one_device.totals, budget_gpu_ms) && memory.Fits(one_device.counts);
  std::vector<Candidate> starts;
  if (single_device_fits) starts.push_back(one_device);
  const bool data_parallel_fits = memory.Fits(data_parallel.counts);
  if (WithinBudget(data_parallel.totals, budget_gpu_ms) && data_parallel_fits &&
      WithinMostDevices(data_parallel.counts, most_per_layer)) {
    starts.push_back(data_parallel);
  }

  // The additive search does not sum memory over layers: answers over it are repaired, and
  // when the repairs go over the limit, solved again with the widened layers kept wide.
  constexpr int kMemoryRounds = 4;
  for (int round = 0; round < kMemoryRounds; ++round) {
    ASSIGN_OR_RETURN(std::vector<Candidate> answers,
                     AdditiveAnswers(graph, full, levels, candidates, bounds, data_parallel.counts,
                                     data_parallel_fits, single_device_ms, single_device_fits));
    ASSIGN_OR_RETURN(FittedAnswers fitted, FitAnswers(full, std::move(answers), candidates, bounds,
                                                      memory, budget_gpu_ms));
    for (Candidate& answer : fitted.fitting) starts.push_back(std::move(answer));
    if (!fitted.fitting.empty() || !fitted.raised_fewest) break;
    bounds.fewest = std::move(*fitted.raised_fewest);
  }
  if (starts.empty() && memory.checked()) {
    std::vector<int> widest = most_per_layer;
    if (!memory.Fits(widest)) return memory.NothingFitsError(widest);
    return ResourceExhaustedError(
        "no plan found that fits in device memory (" + GiBString(memory.capacity_bytes()) +
        " per device for a plan) within the amplification limit " +
        std::to_string(options.amplification_limit) + ": data parallelism fits (" +
        GiBString(memory.model().PeakOfCounts(data_parallel.counts).total()) +
        ") at amplification " + std::to_string(data_parallel.totals.amplification) +
        "; raise the limit or use devices with more memory");
  }
  if (starts.empty()) {
    return FailedPreconditionError(
        "no plan found within the amplification limit " +
        std::to_string(options.amplification_limit) + ": one device with the whole batch spends " +
        std::to_string(one_device.totals.amplification) +
        " times the least device time (its layers run faster per sample at smaller batches); "
        "raise the limit");
  }
  Candidate best = starts.front();
  // The full model's local moves start from every plan found: the additive answers ignore
  // how much of the sync backward hides.
  DescentMemo descents;
  for (Candidate& start : starts) {
    ASSIGN_OR_RETURN(Candidate refined, Refine(full, descents, std::move(start), candidates,
                                               most_per_layer, memory, budget_gpu_ms));
    if (refined.totals.iteration_ms < best.totals.iteration_ms) best = std::move(refined);
  }
  std::optional<std::vector<DeviceRange>> packed;
  if (options.concurrent_branches) {
    std::vector<DeviceRange> ranges =
        PackConcurrentBranches(model, PrefixRanges(best.counts), best.totals, candidates,
                               budget_gpu_ms, options.devices)
            .ranges;
    std::vector<int> packed_counts;
    for (const DeviceRange& range : ranges) packed_counts.push_back(range.count);
    if (WithinMostDevices(packed_counts, most_per_layer)) packed = std::move(ranges);
  }
  // The search's plan from the layer costs it kept; a packed one is costed anew.
  ASSIGN_OR_RETURN(Plan plan,
                   packed ? model.Evaluate(*packed, options.devices) : full.Evaluate(best.counts));
  if (packed && memory.checked() && !FitsOnEveryDevice(memory, plan)) {
    ASSIGN_OR_RETURN(plan, full.Evaluate(best.counts));
  }
  plan.amplification_limit = options.amplification_limit;
  plan.data_parallel = baseline;
  RETURN_IF_ERROR(CheckPlanWithinLimits(plan, options));
  // The search keeps to MostDevicesPerLayer; checked again, as run-spec validation will.
  if (!options.sync_batch_norm) RETURN_IF_ERROR(CheckPerDeviceBatchNormTraining(plan, graph));
  return plan;
}

Status CheckMemoryCanFit(const Graph& graph, const PlanOptions& options) {
  if (options.global_batch < 1 || options.devices < 1) {
    return InvalidArgumentError("global batch and devices must be at least 1");
  }
  if (options.device_memory_bytes <= 0) return Status::Ok();
  const MemoryModel memory_model(
      graph, options.global_batch,
      MemoryModelOptionsAt(options, options.precision.value_or(Precision::kFp32)));
  const MemoryFit memory(memory_model, options.device_memory_bytes);
  const std::vector<int> widest = MostDevicesPerLayer(graph, options);
  // The search's own refusals: a layer that fits on none of its counts, then the widest plan.
  RETURN_IF_ERROR(
      memory
          .FewestDevicesPerLayer(CandidateDeviceCounts(options.global_batch, options.devices,
                                                       options.exhaustive_counts),
                                 widest)
          .status());
  if (!memory.Fits(widest)) return memory.NothingFitsError(widest);
  return Status::Ok();
}

Status CheckPlanWithinLimits(const Plan& plan, const PlanOptions& options) {
  if (plan.totals.devices_used > options.devices) {
    return InternalError("the plan uses " + std::to_string(plan.totals.devices_used) +
                         " devices of " + std::to_string(options.devices));
  }
  if (options.amplification_limit > 0 &&
      plan.totals.amplification > options.amplification_limit * (1 + 1e-9)) {
    return InternalError("the plan's amplification " + std::to_string(plan.totals.amplification) +
                         " exceeds the limit " + std::to_string(options.amplification_limit));
  }
  return Status::Ok();
}

}  // namespace deepool::planner

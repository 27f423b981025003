// Burst-parallel search: turns (graph, profile, cluster, options) into a series-parallel Pareto
// problem (pareto_search.h), solves it and evaluates the chosen counts with the cost model.
// docs/planner.md documents the candidate counts, the fusion of elementwise layers and the
// frontier bounding.
#include "planner/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/pareto_search.h"

namespace deepool::planner {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Exhaustive search tables hold K x K frontiers per edge: keep K bounded.
constexpr int64_t kMaxExhaustiveCounts = 256;

// Layers that work sample by sample and cost little: planned on their producer's devices.
bool IsElementwise(Op op) {
  switch (op) {
    case Op::kRelu:
    case Op::kBatchNorm2d:
    case Op::kDropout:
    case Op::kGelu:
    case Op::kLayerNorm:
    case Op::kFlatten:
      return true;
    default:
      return false;
  }
}

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

// Groups of layers planned as one: an elementwise layer joins its producer's group when it is
// that producer's only consumer (so fusion never changes the graph's series-parallel shape).
std::vector<int> GroupLayers(const Graph& graph, bool fuse, int* num_groups) {
  std::vector<int> group_of(static_cast<size_t>(graph.num_layers()), -1);
  int groups = 0;
  for (int id = 0; id < graph.num_layers(); ++id) {
    const Layer& layer = graph.layer(id);
    if (fuse && IsElementwise(layer.op) && layer.input_ids.size() == 1 &&
        layer.input_ids[0] != kGraphInputId && graph.consumers(layer.input_ids[0]).size() == 1) {
      group_of[static_cast<size_t>(id)] = group_of[static_cast<size_t>(layer.input_ids[0])];
    } else {
      group_of[static_cast<size_t>(id)] = groups++;
    }
  }
  *num_groups = groups;
  return group_of;
}

std::vector<int> AllOn(const Graph& graph, int devices) {
  return std::vector<int>(static_cast<size_t>(graph.num_layers()), devices);
}

}  // namespace

std::vector<int> CandidateDeviceCounts(int64_t global_batch, int devices, bool exhaustive) {
  const int most = static_cast<int>(std::min<int64_t>(global_batch, devices));
  std::vector<int> counts;
  if (most < 1) return counts;
  if (exhaustive) {
    for (int g = 1; g <= most; ++g) counts.push_back(g);
    return counts;
  }
  std::set<int> set{most};
  for (int64_t g = 1; g <= most; g *= 2) set.insert(static_cast<int>(g));
  for (int64_t d = 1; d * d <= global_batch; ++d) {
    if (global_batch % d != 0) continue;
    if (d <= most) set.insert(static_cast<int>(d));
    if (global_batch / d <= most) set.insert(static_cast<int>(global_batch / d));
  }
  return std::vector<int>(set.begin(), set.end());
}

namespace {

// The baseline a user would run instead: every layer on min(G, B) devices with batch norm
// statistics kept per device (DistributedDataParallel without SyncBatchNorm), so deepool's
// exact batch norm is charged to deepool, never to the baseline.
StatusOr<PlanTotals> DataParallelBaseline(const Graph& graph, const Profile& profile,
                                          const Cluster& cluster, const PlanOptions& options) {
  CostModelOptions per_device_batch_norm;
  per_device_batch_norm.sync_batch_norm = false;
  CostModel model(graph, profile, cluster, options.global_batch, per_device_batch_norm);
  const int most = static_cast<int>(std::min<int64_t>(options.global_batch, options.devices));
  return model.Totals(AllOn(graph, most), options.devices);
}

}  // namespace

StatusOr<Plan> PlanDataParallel(const Graph& graph, const Profile& profile, const Cluster& cluster,
                                const PlanOptions& options) {
  RETURN_IF_ERROR(CheckRequest(cluster, options));
  RETURN_IF_ERROR(CheckBatchNormTraining(graph, options.global_batch));
  CostModel model(graph, profile, cluster, options.global_batch);
  const int most = static_cast<int>(std::min<int64_t>(options.global_batch, options.devices));
  ASSIGN_OR_RETURN(Plan plan, model.Evaluate(AllOn(graph, most), options.devices));
  plan.amplification_limit = options.amplification_limit;
  ASSIGN_OR_RETURN(plan.data_parallel, DataParallelBaseline(graph, profile, cluster, options));
  return plan;
}

namespace {

// The layer groups of the search as nodes of a series-parallel problem: node 0 is the input,
// node 1 the outputs, group g is node g + 2.
struct SearchNodes {
  std::vector<int> group_of;  // per layer
  size_t count = 2;
  int of(int layer_id) const { return group_of[static_cast<size_t>(layer_id)] + 2; }
};

// Node costs: every member's compute and all-reduces (LayerSyncMs) at each candidate count. A
// count the profile cannot time (OUT_OF_RANGE, e.g. a batch beyond the measured range) is
// excluded.
Status AddNodeCosts(const Graph& graph, const CostModel& model, const std::vector<int>& counts,
                    const SearchNodes& nodes, SeriesParallelProblem* problem) {
  problem->node_costs.assign(nodes.count, {});
  problem->node_names.assign(nodes.count, "");
  problem->node_costs[SeriesParallelProblem::kSource] = {CostPoint{}};
  problem->node_costs[SeriesParallelProblem::kSink] = {CostPoint{}};
  problem->node_names[SeriesParallelProblem::kSource] = "(input)";
  problem->node_names[SeriesParallelProblem::kSink] = "(outputs)";
  for (size_t n = 2; n < nodes.count; ++n) {
    problem->node_costs[n].assign(counts.size(), CostPoint{});
  }
  for (int id = 0; id < graph.num_layers(); ++id) {
    const auto node = static_cast<size_t>(nodes.of(id));
    std::vector<CostPoint>& costs = problem->node_costs[node];
    if (problem->node_names[node].empty()) problem->node_names[node] = graph.layer(id).name;
    for (size_t k = 0; k < counts.size(); ++k) {
      StatusOr<LayerTime> time = model.Compute(id, counts[k]);
      if (!time.ok()) {
        if (time.status().code() != StatusCode::kOutOfRange) return time.status();
        costs[k].time_ms = kInfinity;
        continue;
      }
      const double ms = time->total_ms() + model.LayerSyncMs(id, counts[k]);
      costs[k].time_ms += ms;
      costs[k].gpu_ms += ms * counts[k];
    }
  }
  return Status::Ok();
}

// An activation that crosses from one node to another.
struct CrossingTensor {
  int from = 0;  // nodes
  int to = 0;
  int producer = 0;  // layer
};

// One edge per pair of nodes that tensors cross between: the re-split of all of them, forward
// and backward (as CostModel::ResplitMs), nothing between equal counts. `tensors` is sorted by
// (from, to).
void AddResplitEdges(const Graph& graph, const CostModel& model, const std::vector<int>& counts,
                     const std::vector<CrossingTensor>& tensors, SeriesParallelProblem* problem) {
  const size_t k_count = counts.size();
  // Re-split costs for every pair of counts, looked up once rather than per tensor and pair.
  std::vector<const ResplitCost*> resplits(k_count * k_count, nullptr);
  for (size_t i = 0; i < k_count; ++i) {
    for (size_t j = 0; j < k_count; ++j) {
      if (i != j) resplits[i * k_count + j] = &model.Resplit(counts[i], counts[j]);
    }
  }
  for (size_t first = 0; first < tensors.size();) {
    size_t last = first;
    while (last < tensors.size() && tensors[last].from == tensors[first].from &&
           tensors[last].to == tensors[first].to) {
      ++last;
    }
    SeriesParallelProblem::Edge edge;
    edge.from = tensors[first].from;
    edge.to = tensors[first].to;
    edge.cells.resize(k_count * k_count);
    for (size_t i = 0; i < k_count; ++i) {
      for (size_t j = 0; j < k_count; ++j) {
        double ms = 0;
        for (size_t t = first; i != j && t < last; ++t) {
          ms += 2.0 * resplits[i * k_count + j]->Ms(graph.layer(tensors[t].producer).output_bytes);
        }
        edge.cells[i * k_count + j] = CostPoint{ms, ms * counts[j]};
      }
    }
    problem->edges.push_back(std::move(edge));
    first = last;
  }
}

// Edges: activation re-splits between groups (several tensors between the same two groups
// share one edge, in order of (from, to) nodes), zero-cost edges from the input and to the
// outputs (the graph's outputs and every node nothing reads).
void AddEdges(const Graph& graph, const CostModel& model, const std::vector<int>& counts,
              const SearchNodes& nodes, SeriesParallelProblem* problem) {
  std::vector<CrossingTensor> tensors;
  std::set<int> reads_input;
  std::vector<bool> has_consumer(nodes.count, false);
  for (int id = 0; id < graph.num_layers(); ++id) {
    for (int input : graph.layer(id).input_ids) {
      if (input == kGraphInputId) {
        reads_input.insert(nodes.of(id));
      } else if (nodes.of(input) != nodes.of(id)) {
        tensors.push_back(CrossingTensor{nodes.of(input), nodes.of(id), input});
        has_consumer[static_cast<size_t>(nodes.of(input))] = true;
      }
    }
  }
  // Stable: the producers of one edge are summed in the order the graph lists them.
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const CrossingTensor& a, const CrossingTensor& b) {
                     return a.from != b.from ? a.from < b.from : a.to < b.to;
                   });
  AddResplitEdges(graph, model, counts, tensors, problem);
  const std::vector<CostPoint> free_edge(counts.size(), CostPoint{});
  for (int node : reads_input) {
    problem->edges.push_back({SeriesParallelProblem::kSource, node, free_edge});
  }
  std::set<int> output_nodes;
  for (int id : graph.output_ids()) output_nodes.insert(nodes.of(id));
  for (size_t n = 2; n < nodes.count; ++n) {
    if (!has_consumer[n]) output_nodes.insert(static_cast<int>(n));
  }
  for (int node : output_nodes) {
    problem->edges.push_back({node, SeriesParallelProblem::kSink, free_edge});
  }
}

}  // namespace

StatusOr<Plan> PlanBurstParallel(const Graph& graph, const Profile& profile, const Cluster& cluster,
                                 const PlanOptions& options) {
  RETURN_IF_ERROR(CheckRequest(cluster, options));
  RETURN_IF_ERROR(CheckBatchNormTraining(graph, options.global_batch));
  CostModel model(graph, profile, cluster, options.global_batch);
  const int most = static_cast<int>(std::min<int64_t>(options.global_batch, options.devices));
  ASSIGN_OR_RETURN(const double single_device_ms, model.SingleDeviceMs());
  // Data parallelism as deepool runs it (synchronised batch norm) is a feasible plan; the
  // reported baseline is the one a user would run.
  ASSIGN_OR_RETURN(const PlanTotals data_parallel,
                   model.Totals(AllOn(graph, most), options.devices));
  ASSIGN_OR_RETURN(const PlanTotals baseline,
                   DataParallelBaseline(graph, profile, cluster, options));

  const std::vector<int> counts =
      CandidateDeviceCounts(options.global_batch, options.devices, options.exhaustive_counts);
  SearchNodes nodes;
  int num_groups = 0;
  nodes.group_of = GroupLayers(graph, options.fuse_elementwise, &num_groups);
  nodes.count = static_cast<size_t>(num_groups) + 2;
  SeriesParallelProblem problem;
  RETURN_IF_ERROR(AddNodeCosts(graph, model, counts, nodes, &problem));
  AddEdges(graph, model, counts, nodes, &problem);

  // Known feasible plans bound the search: every layer on one device (always within any limit
  // >= 1) and data parallelism when it fits the limit.
  const bool limited = options.amplification_limit > 0;
  problem.budget_gpu_ms = limited ? options.amplification_limit * single_device_ms : kInfinity;
  std::vector<int> best_counts = AllOn(graph, 1);
  double best_ms = single_device_ms;
  const double dp_gpu_ms = data_parallel.gpu_seconds * 1000.0;
  if (data_parallel.iteration_ms < best_ms && (!limited || dp_gpu_ms <= problem.budget_gpu_ms)) {
    best_counts = AllOn(graph, most);
    best_ms = data_parallel.iteration_ms;
  }
  problem.incumbent_time_ms = best_ms;
  problem.tolerance_gpu_ms = options.pareto_tolerance * single_device_ms;

  StatusOr<SeriesParallelSolution> solution = SolveSeriesParallel(problem);
  if (!solution.ok()) return solution.status().WithContext("graph '" + graph.name() + "'");
  if (solution->found && solution->cost.time_ms < best_ms) {
    for (int id = 0; id < graph.num_layers(); ++id) {
      best_counts[static_cast<size_t>(id)] =
          counts[static_cast<size_t>(solution->choices[static_cast<size_t>(nodes.of(id))])];
    }
  }
  ASSIGN_OR_RETURN(Plan plan, model.Evaluate(best_counts, options.devices));
  plan.amplification_limit = options.amplification_limit;
  plan.data_parallel = baseline;
  return plan;
}

}  // namespace deepool::planner

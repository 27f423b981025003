// Builds the series-parallel problem of the burst-parallel search (search_problem.h): layer
// groups, node costs, re-split edges, the counts each layer may take, and the candidate counts
// (CandidateDeviceCounts, declared in search.h). docs/planner.md documents the candidate counts,
// the fusion of elementwise layers and the problem graph.
#include "planner/search_problem.h"

#include <algorithm>
#include <limits>
#include <set>
#include <vector>

#include "planner/plan.h"

namespace deepool::planner {

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

namespace search_problem {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

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

// A layer's own charges on `devices` devices apart from the gradient sync: compute and batch
// norm's statistics.
double BaseMs(const CostModel& model, int layer_id, int devices, const LayerTime& time) {
  return time.total_ms() + 2.0 * model.BatchNormSyncMs(layer_id, devices);
}

// An activation that crosses from one node to another.
struct CrossingTensor {
  int from = 0;  // nodes
  int to = 0;
  int producer = 0;  // layer
};

// One edge per pair of nodes that tensors cross between: the re-split of all of them, forward
// and backward (as CostModel::ResplitMs), nothing between equal counts, its device time on the
// larger of the two sets. `tensors` is sorted by (from, to).
void AddResplitEdges(const CostModel& model, const std::vector<int>& counts,
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
    edge.cells.assign(k_count * k_count, CostPoint{});
    // Each cell's time: the tensors' re-splits summed in order (nothing between equal counts).
    for (size_t t = first; t < last; ++t) {
      const int64_t bytes = model.ActivationBytes(tensors[t].producer);
      for (size_t i = 0; i < k_count; ++i) {
        for (size_t j = 0; j < k_count; ++j) {
          if (i != j)
            edge.cells[i * k_count + j].time_ms += 2.0 * resplits[i * k_count + j]->Ms(bytes);
        }
      }
    }
    for (size_t i = 0; i < k_count; ++i) {
      for (size_t j = 0; j < k_count; ++j) {
        CostPoint& cell = edge.cells[i * k_count + j];
        cell.gpu_ms = cell.time_ms * std::max(counts[i], counts[j]);
      }
    }
    problem->edges.push_back(std::move(edge));
    first = last;
  }
}

}  // namespace

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

namespace {

// The number of distinct layers (or the graph input) among the layer's inputs: consumers()
// lists each reader once, so an input read twice is one edge.
size_t DistinctInputs(const Layer& layer) {
  const std::vector<int>& inputs = layer.input_ids;
  size_t distinct = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (std::find(inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(i), inputs[i]) ==
        inputs.begin() + static_cast<std::ptrdiff_t>(i)) {
      ++distinct;
    }
  }
  return distinct;
}

// The layers of the block that starts at the fork `fork` (docs: GroupBlocks), join included, in
// order, into `members`; empty when the paths from `fork` do not meet again in a block nothing
// else touches. `in_block` (one entry per layer, all false) is scratch, all false again after.
void BlockAfter(const Graph& graph, int fork, const std::vector<bool>& is_output,
                std::vector<char>& in_block, std::vector<int>& members) {
  members.clear();
  // Edges (producer, consumer) from the fork or the block to layers not yet visited.
  size_t outstanding = graph.consumers(fork).size();
  bool joined = false;
  for (int id = fork + 1; id < graph.num_layers(); ++id) {
    size_t from_block = 0;
    size_t from_outside = 0;
    for (int input : graph.layer(id).input_ids) {
      const bool inside = input == fork || (input >= 0 && in_block[static_cast<size_t>(input)]);
      (inside ? from_block : from_outside) += 1;
    }
    if (from_block == 0) continue;
    if (from_outside > 0 || is_output[static_cast<size_t>(id)]) break;
    in_block[static_cast<size_t>(id)] = 1;
    members.push_back(id);
    outstanding -= DistinctInputs(graph.layer(id));
    const size_t readers = graph.consumers(id).size();
    if (readers == 0) break;  // a dangling layer inside: an output of its own
    outstanding += readers;
    // Every edge still open leaves this layer: it is the join.
    if (outstanding == readers && members.size() > 1) {
      joined = true;
      break;
    }
  }
  for (int id : members) in_block[static_cast<size_t>(id)] = 0;
  if (!joined) members.clear();
}

}  // namespace

std::vector<int> GroupBlocks(const Graph& graph, std::vector<int> group_of, int* num_groups) {
  const auto layers = static_cast<size_t>(graph.num_layers());
  std::vector<bool> is_output(layers, false);
  for (int id : graph.output_ids()) is_output[static_cast<size_t>(id)] = true;
  // Merged groups point at the group they joined (union by the earlier group).
  std::vector<int> merged_into(static_cast<size_t>(*num_groups));
  for (size_t g = 0; g < merged_into.size(); ++g) merged_into[g] = static_cast<int>(g);
  auto root = [&merged_into](int g) {
    while (merged_into[static_cast<size_t>(g)] != g) g = merged_into[static_cast<size_t>(g)];
    return g;
  };
  std::vector<bool> in_merged_block(layers, false);
  std::vector<char> in_block_scratch(layers, 0);  // BlockAfter's
  std::vector<int> block;
  for (int fork = 0; fork < graph.num_layers(); ++fork) {
    if (graph.consumers(fork).size() < 2 || in_merged_block[static_cast<size_t>(fork)]) continue;
    BlockAfter(graph, fork, is_output, in_block_scratch, block);
    if (block.empty()) continue;
    int into = root(group_of[static_cast<size_t>(block.front())]);
    for (int id : block) {
      // The join may fork the next block; the layers before it are inside this one.
      in_merged_block[static_cast<size_t>(id)] = id != block.back();
      const int g = root(group_of[static_cast<size_t>(id)]);
      merged_into[static_cast<size_t>(std::max(g, into))] = std::min(g, into);
      into = std::min(g, into);
    }
  }
  // Renumber in order of each group's first layer.
  std::vector<int> renumbered(merged_into.size(), -1);
  int groups = 0;
  for (int& group : group_of) {
    int& number = renumbered[static_cast<size_t>(root(group))];
    if (number < 0) number = groups++;
    group = number;
  }
  *num_groups = groups;
  return group_of;
}

std::vector<int> MostDevicesPerLayer(const Graph& graph, const PlanOptions& options) {
  const int most = static_cast<int>(std::min<int64_t>(options.global_batch, options.devices));
  std::vector<int> most_per_layer(static_cast<size_t>(graph.num_layers()), most);
  if (options.sync_batch_norm) return most_per_layer;
  for (int id = 0; id < graph.num_layers(); ++id) {
    most_per_layer[static_cast<size_t>(id)] = static_cast<int>(
        std::min<int64_t>(most, options.global_batch / FewestSamplesPerDevice(graph, id)));
  }
  return most_per_layer;
}

OwnCharges::OwnCharges(const Graph& graph, const CostModel& model, const std::vector<int>& counts)
    : counts_(counts), charges_(static_cast<size_t>(graph.num_layers()) * counts.size()) {
  for (size_t k = 0; k < counts.size(); ++k) {
    // Every layer's time at the count at once; where the profile cannot time some layer there,
    // each layer's own answer.
    const StatusOr<const LayerTime*> all = model.ComputeAll(counts[k]);
    for (int id = 0; id < graph.num_layers(); ++id) {
      LayerTime time;
      if (all.ok()) {
        time = (*all)[static_cast<size_t>(id)];
      } else {
        StatusOr<LayerTime> own = model.Compute(id, counts[k]);
        if (!own.ok()) {
          errors_.emplace_back(Index(id, k), own.status());
          continue;
        }
        time = *own;
      }
      Charge& charge = charges_[Index(id, k)];
      charge.base_ms = BaseMs(model, id, counts[k], time);
      charge.sync_ms = model.AmortisedGradientSyncMs(id, counts[k]);
    }
  }
  // By index, for StatusAt (they came count by count).
  std::sort(errors_.begin(), errors_.end(),
            [](const std::pair<size_t, Status>& a, const std::pair<size_t, Status>& b) {
              return a.first < b.first;
            });
}

const Status& OwnCharges::StatusAt(int layer_id, size_t count_index) const {
  static const Status* const kOk = new Status();
  if (errors_.empty()) return *kOk;
  const size_t index = Index(layer_id, count_index);
  const auto found = std::lower_bound(
      errors_.begin(), errors_.end(), index,
      [](const std::pair<size_t, Status>& error, size_t at) { return error.first < at; });
  return found != errors_.end() && found->first == index ? found->second : *kOk;
}

Status SetNodeCosts(const Graph& graph, const OwnCharges& charges, const CountBounds& bounds,
                    const SearchNodes& nodes, double sync_weight, SeriesParallelProblem* problem) {
  const std::vector<int>& counts = charges.counts();
  problem->node_costs.assign(nodes.count, {});
  problem->node_names.assign(nodes.count, "");
  problem->node_costs[SeriesParallelProblem::kSource] = {CostPoint{}};
  problem->node_costs[SeriesParallelProblem::kSink] = {CostPoint{}};
  problem->node_names[SeriesParallelProblem::kSource] = "(input)";
  problem->node_names[SeriesParallelProblem::kSink] = "(outputs)";
  for (size_t n = 2; n < nodes.count; ++n) {
    problem->node_costs[n].assign(counts.size(), CostPoint{});
  }
  const bool any_errors = charges.any_errors();
  const Status no_error;
  for (int id = 0; id < graph.num_layers(); ++id) {
    const auto node = static_cast<size_t>(nodes.of(id));
    std::vector<CostPoint>& costs = problem->node_costs[node];
    if (problem->node_names[node].empty()) problem->node_names[node] = graph.layer(id).name;
    for (size_t k = 0; k < counts.size(); ++k) {
      if (!bounds.Allows(id, counts[k])) {
        costs[k].time_ms = kInfinity;
        continue;
      }
      if (const Status& status = any_errors ? charges.StatusAt(id, k) : no_error; !status.ok()) {
        if (status.code() != StatusCode::kOutOfRange) return status;
        costs[k].time_ms = kInfinity;
        continue;
      }
      const OwnCharges::Charge& charge = charges.At(id, k);
      const double ms = charge.base_ms + sync_weight * charge.sync_ms;
      costs[k].time_ms += ms;
      costs[k].gpu_ms += ms * counts[k];
    }
  }
  return Status::Ok();
}

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
  AddResplitEdges(model, counts, tensors, problem);
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

StatusOr<AdditiveCost> AdditiveCost::Of(const Graph& graph, const CostModel& model,
                                        const std::vector<int>& counts) {
  AdditiveCost cost;
  cost.terms_.reserve(static_cast<size_t>(graph.num_layers()));
  for (int id = 0; id < graph.num_layers(); ++id) {
    const int devices = counts[static_cast<size_t>(id)];
    ASSIGN_OR_RETURN(const LayerCost layer, model.CostOf(id, counts));
    const LayerTime time{layer.forward_ms, layer.backward_ms};
    cost.terms_.push_back(Term{devices, BaseMs(model, id, devices, time),
                               model.AmortisedGradientSyncMs(id, devices), layer.resplit_ms,
                               layer.resplit_device_ms});
  }
  return cost;
}

CostPoint AdditiveCost::At(double sync_weight) const {
  CostPoint cost;
  for (const Term& term : terms_) {
    const double own_ms = term.base_ms + sync_weight * term.sync_ms;
    cost.time_ms += own_ms + term.resplit_ms;
    cost.gpu_ms += own_ms * term.devices + term.resplit_device_ms;
  }
  return cost;
}

std::vector<int> CountsOf(const SeriesParallelSolution& solution, const SearchNodes& nodes,
                          const std::vector<int>& candidates, int num_layers) {
  std::vector<int> counts(static_cast<size_t>(num_layers), 1);
  for (int id = 0; id < num_layers; ++id) {
    counts[static_cast<size_t>(id)] =
        candidates[static_cast<size_t>(solution.choices[static_cast<size_t>(nodes.of(id))])];
  }
  return counts;
}

}  // namespace search_problem
}  // namespace deepool::planner

// Concurrent branches (branch_packing.h).
#include "planner/branch_packing.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include "planner/search.h"

namespace deepool::planner {
namespace {

// The chain that starts at `first` (which reads only the fork): while a layer has one consumer
// that reads only it, the chain goes on. Ends at the layer whose single consumer is the join;
// the join is returned with the chain, or -1 when the chain does not end that way.
std::pair<std::vector<int>, int> ChainFrom(const Graph& graph, int first) {
  std::vector<int> chain = {first};
  int at = first;
  while (true) {
    const std::vector<int>& consumers = graph.consumers(at);
    if (consumers.size() != 1) return {chain, -1};
    const int next = consumers.front();
    if (graph.layer(next).input_ids.size() != 1) return {chain, next};
    chain.push_back(next);
    at = next;
  }
}

// The layers that read `fork` (the graph input when kGraphInputId).
std::vector<int> ReadersOf(const Graph& graph, int fork) {
  if (fork != kGraphInputId) return graph.consumers(fork);
  std::vector<int> readers;
  for (int id = 0; id < graph.num_layers(); ++id) {
    const std::vector<int>& inputs = graph.layer(id).input_ids;
    if (std::find(inputs.begin(), inputs.end(), kGraphInputId) != inputs.end()) {
      readers.push_back(id);
    }
  }
  return readers;
}

double BranchSingleDeviceMs(const CostModel& model, const std::vector<int>& branch) {
  double total = 0;
  for (int id : branch) {
    StatusOr<LayerTime> time = model.Compute(id, 1);
    if (time.ok()) total += time->total_ms();
  }
  return total;
}

// One candidate layout of a block: per branch, its first rank and its layers' counts.
struct Layout {
  std::vector<int> first;                // per branch
  std::vector<std::vector<int>> counts;  // per branch, per layer
};

std::vector<DeviceRange> Apply(const BranchBlock& block, const Layout& layout,
                               std::vector<DeviceRange> ranges) {
  for (size_t b = 0; b < block.branches.size(); ++b) {
    for (size_t i = 0; i < block.branches[b].size(); ++i) {
      ranges[static_cast<size_t>(block.branches[b][i])] =
          DeviceRange{layout.first[b], layout.counts[b][i]};
    }
  }
  return ranges;
}

// The branches side by side in `order`, each where the previous ended, or at rank 0 again when
// it would pass the last device.
Layout SideBySide(const std::vector<size_t>& order, std::vector<std::vector<int>> counts,
                  int num_devices) {
  Layout layout{std::vector<int>(counts.size(), 0), std::move(counts)};
  int next_rank = 0;
  for (size_t b : order) {
    const int width = *std::max_element(layout.counts[b].begin(), layout.counts[b].end());
    if (next_rank + width > num_devices) next_rank = 0;
    layout.first[b] = next_rank;
    next_rank += width;
  }
  return layout;
}

// Every branch's layers at one count.
std::vector<std::vector<int>> Uniform(const BranchBlock& block,
                                      const std::vector<int>& per_branch) {
  std::vector<std::vector<int>> counts;
  for (size_t b = 0; b < block.branches.size(); ++b) {
    counts.emplace_back(block.branches[b].size(), per_branch[b]);
  }
  return counts;
}

// The candidate layouts (branch_packing.h). `order` lists the branches by descending work.
std::vector<Layout> CandidateLayouts(const BranchBlock& block,
                                     const std::vector<DeviceRange>& ranges,
                                     const std::vector<double>& work,
                                     const std::vector<size_t>& order,
                                     const std::vector<int>& candidate_counts, int most) {
  const size_t n = block.branches.size();
  std::vector<Layout> layouts;
  std::vector<std::vector<int>> current;
  for (const std::vector<int>& branch : block.branches) {
    current.emplace_back();
    for (int id : branch) current.back().push_back(ranges[static_cast<size_t>(id)].count);
  }
  layouts.push_back(SideBySide(order, std::move(current), most));
  for (int count : candidate_counts) {
    if (count > most) continue;
    layouts.push_back(SideBySide(order, Uniform(block, std::vector<int>(n, count)), most));
  }
  const double total_work = std::accumulate(work.begin(), work.end(), 0.0);
  if (total_work > 0) {
    std::vector<int> per_branch;
    for (double w : work) {
      per_branch.push_back(std::clamp(static_cast<int>(most * w / total_work), 1, most));
    }
    layouts.push_back(SideBySide(order, Uniform(block, per_branch), most));
  }
  return layouts;
}

}  // namespace

std::vector<BranchBlock> FindBranchBlocks(const Graph& graph) {
  std::map<std::pair<int, int>, BranchBlock> by_ends;  // (join, fork)
  std::vector<int> forks = {kGraphInputId};
  for (int id = 0; id < graph.num_layers(); ++id) {
    if (graph.consumers(id).size() > 1) forks.push_back(id);
  }
  for (int fork : forks) {
    for (int first : ReadersOf(graph, fork)) {
      if (graph.layer(first).input_ids.size() != 1) continue;  // a join, not a branch
      auto [chain, join] = ChainFrom(graph, first);
      if (join < 0) continue;
      BranchBlock& block = by_ends[{join, fork}];
      block.fork = fork;
      block.join = join;
      block.branches.push_back(std::move(chain));
    }
  }
  std::vector<BranchBlock> blocks;
  for (auto& [ends, block] : by_ends) {
    if (block.branches.size() >= 2) blocks.push_back(std::move(block));
  }
  return blocks;
}

PackedBranches PackConcurrentBranches(const CostModel& model, std::vector<DeviceRange> ranges,
                                      const PlanTotals& totals,
                                      const std::vector<int>& candidate_counts,
                                      double budget_gpu_ms, int num_devices) {
  PackedBranches best{std::move(ranges), totals};
  const int most = static_cast<int>(std::min<int64_t>(num_devices, model.global_batch()));
  if (most < 2) return best;
  for (const BranchBlock& block : FindBranchBlocks(model.graph())) {
    std::vector<double> work;
    for (const std::vector<int>& branch : block.branches) {
      work.push_back(BranchSingleDeviceMs(model, branch));
    }
    std::vector<size_t> order(block.branches.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return work[a] > work[b]; });
    std::optional<std::pair<std::vector<DeviceRange>, PlanTotals>> better;
    for (const Layout& layout :
         CandidateLayouts(block, best.ranges, work, order, candidate_counts, most)) {
      std::vector<DeviceRange> laid = Apply(block, layout, best.ranges);
      StatusOr<PlanTotals> laid_totals = model.Totals(laid, num_devices);
      if (!laid_totals.ok()) continue;  // e.g. a count the profile cannot time
      const double to_beat =
          better ? better->second.iteration_ms : best.totals.iteration_ms * (1 - 1e-9);
      if (WithinBudget(*laid_totals, budget_gpu_ms) && laid_totals->iteration_ms < to_beat) {
        better.emplace(std::move(laid), *laid_totals);
      }
    }
    if (!better) continue;
    best.ranges = std::move(better->first);
    best.totals = better->second;
  }
  return best;
}

}  // namespace deepool::planner

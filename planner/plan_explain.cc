#include "planner/plan_explain.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "planner/cost_model.h"

namespace deepool::planner {
namespace {

// Differences below this are ties (floating-point noise of sums in another order).
constexpr double kTieMs = 1e-6;

__attribute__((format(printf, 1, 2))) std::string Format(const char* format, ...) {
  char text[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  return text;
}

std::string Devices(int count) {
  return std::to_string(count) + (count == 1 ? " device" : " devices");
}

std::string FewerSentence(const GroupAlternative& fewer) {
  const std::string head = Devices(fewer.devices) + " ";
  if (fewer.delta_iteration_ms > kTieMs) {
    return head + Format("would be %.3f ms slower (saving %.3f device-ms)",
                         fewer.delta_iteration_ms, -fewer.delta_gpu_ms);
  }
  return head + Format("would be as fast (%+.3f ms) and save %.3f device-ms",
                       fewer.delta_iteration_ms, -fewer.delta_gpu_ms);
}

std::string MoreSentence(const GroupAlternative& more, double limit) {
  const std::string head = Devices(more.devices) + " ";
  if (!more.cannot_train.empty()) {
    return head + "would leave a device of batch-norm layer '" + more.cannot_train +
           "' fewer than 2 values per channel (statistics per device)";
  }
  if (more.delta_iteration_ms >= -kTieMs) {
    return head + Format(
                      "would not be faster (%+.3f ms: the re-splits and all-reduces cost more "
                      "than the compute they save)",
                      more.delta_iteration_ms);
  }
  if (!more.within_limit) {
    return head + Format(
                      "would save %.3f ms but take the amplification to %.2f, over the limit "
                      "%.2f",
                      -more.delta_iteration_ms, more.amplification, limit);
  }
  return head + Format("would save %.3f ms within the limit (amplification %.2f)",
                       -more.delta_iteration_ms, more.amplification);
}

}  // namespace

StatusOr<PlanExplanation> ExplainPlan(const Graph& graph, const Profile& profile,
                                      const Cluster& cluster, const PlanOptions& options,
                                      const Plan& plan) {
  RETURN_IF_ERROR(CheckPlanMatchesGraph(plan, graph));
  // The model the search planned with.
  CostModel model(graph, profile, cluster, plan.global_batch, PlanCostModelOptions(options));
  // Amplification's denominator, as the plan's totals have it.
  ASSIGN_OR_RETURN(const double least_device_ms, model.LeastDeviceMs(plan.num_devices));
  // The plan's layers are in the graph's order (CheckPlanMatchesGraph).
  const std::vector<DeviceRange> ranges = RangesOf(plan);
  ASSIGN_OR_RETURN(const PlanTotals base, model.Totals(ranges, plan.num_devices));
  const std::vector<int> candidates =
      CandidateDeviceCounts(plan.global_batch, plan.num_devices, options.exhaustive_counts);
  const double limit = options.amplification_limit;
  PlanExplanation explanation;
  const int most = static_cast<int>(std::min<int64_t>(plan.global_batch, plan.num_devices));
  ASSIGN_OR_RETURN(explanation.data_parallel_synced,
                   model.Totals(std::vector<int>(ranges.size(), most), plan.num_devices));
  explanation.sync_batch_norm = options.sync_batch_norm;

  std::vector<GroupExplanation>& groups = explanation.groups;
  size_t begin = 0;
  while (begin < plan.layers.size()) {
    const size_t g = plan.layers[begin].devices.size();
    size_t end = begin + 1;
    while (end < plan.layers.size() && ranges[end] == ranges[begin]) ++end;
    GroupExplanation group;
    group.first_layer = plan.layers[begin].layer;
    group.last_layer = plan.layers[end - 1].layer;
    group.layers = static_cast<int>(end - begin);
    group.devices = static_cast<int>(g);
    for (size_t i = begin; i < end; ++i) {
      const LayerPlacement& p = plan.layers[i];
      group.time_ms += p.forward_ms + p.backward_ms + p.comm_ms;
    }
    auto alternative = [&](int devices) -> StatusOr<GroupAlternative> {
      // The group keeps its first rank where the new count still fits after it.
      std::vector<DeviceRange> moved = ranges;
      const int first = std::min(ranges[begin].first, plan.num_devices - devices);
      for (size_t i = begin; i < end; ++i) moved[i] = DeviceRange{first, devices};
      ASSIGN_OR_RETURN(const PlanTotals totals, model.Totals(moved, plan.num_devices));
      GroupAlternative alt;
      alt.devices = devices;
      alt.delta_iteration_ms = totals.iteration_ms - base.iteration_ms;
      alt.delta_gpu_ms = (totals.gpu_seconds - base.gpu_seconds) * 1000.0;
      alt.amplification = totals.gpu_seconds * 1000.0 / least_device_ms;
      alt.within_limit = limit <= 0 || alt.amplification <= limit;
      for (size_t i = begin; i < end && !options.sync_batch_norm; ++i) {
        const int id = static_cast<int>(i);
        if (plan.global_batch / devices < FewestSamplesPerDevice(graph, id)) {
          alt.cannot_train = graph.layer(id).name;
          break;
        }
      }
      return alt;
    };
    auto at = std::find(candidates.begin(), candidates.end(), group.devices);
    if (at != candidates.end() && at != candidates.begin()) {
      ASSIGN_OR_RETURN(group.fewer, alternative(*(at - 1)));
    }
    if (at != candidates.end() && at + 1 != candidates.end()) {
      ASSIGN_OR_RETURN(group.more, alternative(*(at + 1)));
    }
    std::vector<std::string> reasons;
    if (group.fewer) reasons.push_back(FewerSentence(*group.fewer));
    if (group.more) reasons.push_back(MoreSentence(*group.more, limit));
    if (reasons.empty()) reasons.push_back("no other device count is a candidate");
    for (size_t i = 0; i < reasons.size(); ++i) group.why += (i ? "; " : "") + reasons[i];
    groups.push_back(std::move(group));
    begin = end;
  }
  return explanation;
}

std::string ExplanationText(const PlanExplanation& explanation, const Plan& plan) {
  const double limit = plan.amplification_limit;
  std::string out = Format(
      "why each device count (the cost model's predictions; each group moved alone to the next "
      "smaller and larger candidate count, the rest of the plan kept):\n");
  const PlanTotals& synced = explanation.data_parallel_synced;
  out += Format(
      "  data parallelism as deepool runs it (%s): %.3f ms, amplification %.2f",
      explanation.sync_batch_norm ? "synchronised batch norm" : "batch-norm statistics per device",
      synced.iteration_ms, synced.amplification);
  if (synced.iteration_ms <= plan.totals.iteration_ms) {
    out += limit > 0 && synced.amplification > limit
               ? Format(": faster, but over the limit %.2f\n", limit)
               : std::string(": the search kept it\n");
  } else {
    out +=
        Format(": %.3f ms slower than this plan\n", synced.iteration_ms - plan.totals.iteration_ms);
  }
  if (plan.data_parallel.iteration_ms > 0) {
    out += Format(
        "  the baseline (batch-norm statistics per device, as DDP without SyncBatchNorm "
        "runs): %.3f ms\n",
        plan.data_parallel.iteration_ms);
  }
  out += Format("  this plan: %.3f ms, amplification %.2f", plan.totals.iteration_ms,
                plan.totals.amplification);
  out += limit > 0 ? Format(" of limit %.2f\n", limit) : std::string(", no limit\n");
  for (const GroupExplanation& group : explanation.groups) {
    out += "  " + group.first_layer;
    if (group.layers > 1) out += " .. " + group.last_layer;
    out += " (" + std::to_string(group.layers) + (group.layers == 1 ? " layer" : " layers") +
           ") on " + Devices(group.devices) + Format(", %.3f ms\n", group.time_ms);
    out += "      " + group.why + "\n";
  }
  return out;
}

}  // namespace deepool::planner

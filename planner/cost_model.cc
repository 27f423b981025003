// Cost model implementation; the formulas are documented in cost_model.h and docs/planner.md.
#include "planner/cost_model.h"

#include <algorithm>
#include <string>

namespace deepool::planner {

int64_t LargestShare(int64_t global_batch, int devices) {
  return (global_batch + devices - 1) / devices;
}

ResplitCost ResplitCost::Compute(const Cluster& cluster, int64_t global_batch, int from_devices,
                                 int to_devices) {
  ResplitCost cost;
  if (from_devices == to_devices) return cost;
  const std::vector<int64_t> from = NearEqualShares(global_batch, from_devices);
  const std::vector<int64_t> to = NearEqualShares(global_batch, to_devices);
  const int ranks = std::max(from_devices, to_devices);
  std::vector<Line> send(static_cast<size_t>(ranks)), receive(static_cast<size_t>(ranks));
  // Walk both partitions of [0, B) together; every overlap of sender i's range with receiver
  // j's range (i != j) is one message of `overlap` samples.
  size_t i = 0, j = 0;
  int64_t position = 0, from_end = from.empty() ? 0 : from[0], to_end = to.empty() ? 0 : to[0];
  while (i < from.size() && j < to.size()) {
    const int64_t end = std::min(from_end, to_end);
    const int64_t overlap = end - position;
    if (overlap > 0 && i != j) {
      const Link& link = cluster.LinkBetween(static_cast<int>(i), static_cast<int>(j));
      const double ms_per_byte = static_cast<double>(overlap) * link.ms_per_byte();
      const double latency_ms = link.latency_us / 1000.0;
      send[i].ms_per_byte += ms_per_byte;
      send[i].latency_ms += latency_ms;
      receive[j].ms_per_byte += ms_per_byte;
      receive[j].latency_ms += latency_ms;
    }
    position = end;
    if (from_end == end && ++i < from.size()) from_end += from[i];
    if (to_end == end && ++j < to.size()) to_end += to[j];
  }
  // Keep the upper envelope's candidates: drop a line when another is at least as steep and at
  // least as high at zero bytes.
  std::vector<Line> lines;
  lines.reserve(send.size() + receive.size());
  for (const auto* side : {&send, &receive}) {
    for (const Line& line : *side) {
      if (line.ms_per_byte > 0 || line.latency_ms > 0) lines.push_back(line);
    }
  }
  std::sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) {
    return a.ms_per_byte != b.ms_per_byte ? a.ms_per_byte > b.ms_per_byte
                                          : a.latency_ms > b.latency_ms;
  });
  double highest_latency = -1;
  for (const Line& line : lines) {
    if (line.latency_ms > highest_latency) {
      cost.lines_.push_back(line);
      highest_latency = line.latency_ms;
    }
  }
  return cost;
}

double ResplitCost::Ms(int64_t bytes_per_sample) const {
  double worst = 0;
  const double bytes = static_cast<double>(bytes_per_sample);
  for (const Line& line : lines_)
    worst = std::max(worst, bytes * line.ms_per_byte + line.latency_ms);
  return worst;
}

CostModel::CostModel(const Graph& graph, const Profile& profile, const Cluster& cluster,
                     int64_t global_batch, CostModelOptions options)
    : graph_(graph),
      profile_(profile),
      cluster_(cluster),
      global_batch_(global_batch),
      options_(options) {
  for (int id : graph_.output_ids()) overhead_layer_ = std::max(overhead_layer_, id);
}

StatusOr<LayerTime> CostModel::Compute(int layer_id, int devices) const {
  if (devices < 1 || devices > global_batch_) {
    return InvalidArgumentError("layer '" + graph_.layer(layer_id).name +
                                "': " + std::to_string(devices) + " devices for a batch of " +
                                std::to_string(global_batch_));
  }
  if (layer_id < 0 || layer_id >= graph_.num_layers()) {
    return profile_.Time(graph_, layer_id, LargestShare(global_batch_, devices));  // its error
  }
  const auto [slot, added] = slot_of_count_.try_emplace(devices, slot_of_count_.size());
  const size_t layers = static_cast<size_t>(graph_.num_layers());
  if (added) times_.resize(times_.size() + layers);
  std::optional<LayerTime>& cached = times_[slot->second * layers + static_cast<size_t>(layer_id)];
  if (cached) return *cached;
  const int64_t share = LargestShare(global_batch_, devices);
  ASSIGN_OR_RETURN(LayerTime time, profile_.Time(graph_, layer_id, share));
  if (layer_id == overhead_layer_) time.forward_ms += profile_.IterationOverheadMs(share);
  cached = time;
  return time;
}

const ResplitCost& CostModel::Resplit(int from_devices, int to_devices) const {
  const auto key = std::make_pair(from_devices, to_devices);
  auto it = resplits_.find(key);
  if (it == resplits_.end()) {
    it = resplits_
             .emplace(key, ResplitCost::Compute(cluster_, global_batch_, from_devices, to_devices))
             .first;
  }
  return it->second;
}

double CostModel::ResplitMs(int producer_id, int from_devices, int to_devices) const {
  if (from_devices == to_devices) return 0;
  return 2.0 * Resplit(from_devices, to_devices).Ms(graph_.layer(producer_id).output_bytes);
}

int64_t CostModel::GradientBytes(int layer_id) const { return graph_.layer(layer_id).params * 4; }

double CostModel::AmortisedGradientSyncMs(int layer_id, int devices) const {
  return AmortisedAllReduceMs(cluster_, GradientBytes(layer_id), devices, options_.gradient_sync);
}

double CostModel::BatchNormSyncMs(int layer_id, int devices) const {
  const Layer& layer = graph_.layer(layer_id);
  if (!options_.sync_batch_norm || layer.op != Op::kBatchNorm2d || layer.output_shape.empty()) {
    return 0;
  }
  const int64_t channels = layer.output_shape.front();
  return AllReduceMs(cluster_, (2 * channels + 1) * 8, devices, options_.gradient_sync.tree);
}

double CostModel::AdditiveSyncMs(int layer_id, int devices) const {
  return AmortisedGradientSyncMs(layer_id, devices) + 2.0 * BatchNormSyncMs(layer_id, devices);
}

StatusOr<LayerCost> CostModel::CostOf(int layer_id, const std::vector<int>& counts) const {
  const int devices = counts.at(static_cast<size_t>(layer_id));
  ASSIGN_OR_RETURN(LayerTime time, Compute(layer_id, devices));
  LayerCost cost;
  cost.forward_ms = time.forward_ms;
  cost.backward_ms = time.backward_ms;
  for (int producer : graph_.layer(layer_id).input_ids) {
    if (producer == kGraphInputId) continue;  // every device loads its own samples
    const int from = counts.at(static_cast<size_t>(producer));
    const double ms = ResplitMs(producer, from, devices);
    cost.resplit_ms += ms;
    cost.resplit_device_ms += ms * std::max(from, devices);
  }
  cost.comm_ms = cost.resplit_ms + 2.0 * BatchNormSyncMs(layer_id, devices);
  return cost;
}

StatusOr<std::vector<LayerCost>> CostModel::LayerCosts(const std::vector<int>& counts) const {
  std::vector<LayerCost> costs;
  costs.reserve(counts.size());
  for (int id = 0; id < graph_.num_layers(); ++id) {
    ASSIGN_OR_RETURN(LayerCost cost, CostOf(id, counts));
    costs.push_back(cost);
  }
  return costs;
}

GradientSyncTimeline CostModel::ScheduleSync(const std::vector<int>& counts,
                                             const std::vector<LayerCost>& costs) const {
  // The serial forward, then backward in reverse: a layer's gradients are ready when its
  // backward computation ends, before its batch norm statistics and its re-splits back.
  double now_ms = 0;
  for (const LayerCost& cost : costs) now_ms += cost.forward_ms + cost.comm_ms / 2;
  std::vector<ReadyGradient> gradients;
  gradients.reserve(costs.size());
  for (int id = graph_.num_layers() - 1; id >= 0; --id) {
    const LayerCost& cost = costs[static_cast<size_t>(id)];
    now_ms += cost.backward_ms;
    gradients.push_back(
        ReadyGradient{id, counts[static_cast<size_t>(id)], GradientBytes(id), now_ms});
    now_ms += cost.comm_ms / 2;
  }
  return ScheduleGradientSync(gradients, now_ms, cluster_, options_.gradient_sync);
}

StatusOr<GradientSyncTimeline> CostModel::GradientSync(const std::vector<int>& counts) const {
  if (static_cast<int>(counts.size()) != graph_.num_layers()) {
    return InvalidArgumentError("expected " + std::to_string(graph_.num_layers()) +
                                " device counts, got " + std::to_string(counts.size()));
  }
  ASSIGN_OR_RETURN(const std::vector<LayerCost> costs, LayerCosts(counts));
  return ScheduleSync(counts, costs);
}

StatusOr<double> CostModel::SingleDeviceMs() const {
  if (single_device_ms_) return *single_device_ms_;
  double total = 0;
  for (int id = 0; id < graph_.num_layers(); ++id) {
    ASSIGN_OR_RETURN(LayerTime time, Compute(id, 1));
    total += time.total_ms();
  }
  single_device_ms_ = total;
  return total;
}

StatusOr<Plan> CostModel::Evaluate(const std::vector<int>& counts, int num_devices) const {
  if (static_cast<int>(counts.size()) != graph_.num_layers()) {
    return InvalidArgumentError("expected " + std::to_string(graph_.num_layers()) +
                                " device counts, got " + std::to_string(counts.size()));
  }
  Plan plan;
  plan.model = graph_.name();
  plan.global_batch = global_batch_;
  plan.num_devices = num_devices;
  plan.profile_source = profile_.source();
  ASSIGN_OR_RETURN(plan.single_device_ms, SingleDeviceMs());
  ASSIGN_OR_RETURN(plan.totals, Sum(counts, num_devices, &plan.layers));
  return plan;
}

StatusOr<PlanTotals> CostModel::Totals(const std::vector<int>& counts, int num_devices) const {
  if (static_cast<int>(counts.size()) != graph_.num_layers()) {
    return InvalidArgumentError("expected " + std::to_string(graph_.num_layers()) +
                                " device counts, got " + std::to_string(counts.size()));
  }
  return Sum(counts, num_devices, nullptr);
}

StatusOr<PlanTotals> CostModel::Sum(const std::vector<int>& counts, int num_devices,
                                    std::vector<LayerPlacement>* layers) const {
  const int64_t max_count = std::min<int64_t>(num_devices, global_batch_);
  for (int id = 0; id < graph_.num_layers(); ++id) {
    const int devices = counts[static_cast<size_t>(id)];
    if (devices < 1 || devices > max_count) {
      return InvalidArgumentError("layer '" + graph_.layer(id).name + "': device count " +
                                  std::to_string(devices) + " is outside [1, " +
                                  std::to_string(max_count) + "]");
    }
  }
  ASSIGN_OR_RETURN(const double single_device_ms, SingleDeviceMs());
  ASSIGN_OR_RETURN(std::vector<LayerCost> costs, LayerCosts(counts));
  const std::vector<double> exposed =
      ExposedSyncByLayer(ScheduleSync(counts, costs), graph_.num_layers());
  PlanTotals totals;
  double gpu_ms = 0;
  if (layers != nullptr) layers->reserve(counts.size());
  for (int id = 0; id < graph_.num_layers(); ++id) {
    const int devices = counts[static_cast<size_t>(id)];
    LayerCost& cost = costs[static_cast<size_t>(id)];
    cost.comm_ms += exposed[static_cast<size_t>(id)];
    if (layers != nullptr) layers->push_back(Placement(id, devices, cost));
    totals.iteration_ms += cost.total_ms();
    gpu_ms += cost.device_ms(devices);
    totals.devices_used = std::max(totals.devices_used, devices);
  }
  totals.gpu_seconds = gpu_ms / 1000.0;
  totals.amplification = single_device_ms > 0 ? gpu_ms / single_device_ms : 0;
  return totals;
}

LayerPlacement CostModel::Placement(int layer_id, int devices, const LayerCost& cost) const {
  LayerPlacement placement;
  placement.layer = graph_.layer(layer_id).name;
  placement.devices.resize(static_cast<size_t>(devices));
  for (int r = 0; r < devices; ++r) placement.devices[static_cast<size_t>(r)] = r;
  placement.samples = NearEqualShares(global_batch_, devices);
  placement.forward_ms = cost.forward_ms;
  placement.backward_ms = cost.backward_ms;
  placement.comm_ms = cost.comm_ms;
  return placement;
}

}  // namespace deepool::planner

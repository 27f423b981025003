// Cost model implementation; the formulas are documented in cost_model.h and docs/planner.md.
#include "planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "planner/tied_parameters.h"

namespace deepool::planner {

int64_t LargestShare(int64_t global_batch, int devices) {
  return (global_batch + devices - 1) / devices;
}

std::vector<DeviceRange> PrefixRanges(const std::vector<int>& counts) {
  std::vector<DeviceRange> ranges;
  ranges.reserve(counts.size());
  for (int count : counts) ranges.push_back(DeviceRange{0, count});
  return ranges;
}

std::vector<DeviceRange> RangesOf(const Plan& plan) {
  std::vector<DeviceRange> ranges;
  ranges.reserve(plan.layers.size());
  for (const LayerPlacement& placement : plan.layers) {
    ranges.emplace_back(placement.devices.empty() ? 0 : placement.devices.front(),
                        static_cast<int>(placement.devices.size()));
  }
  return ranges;
}

int RanksSpanned(const std::vector<DeviceRange>& ranges) {
  int ranks = 0;
  for (const DeviceRange& range : ranges) ranks = std::max(ranks, range.end());
  return ranks;
}

bool FromRankZero(const std::vector<DeviceRange>& ranges) {
  return std::all_of(ranges.begin(), ranges.end(),
                     [](const DeviceRange& range) { return range.first == 0; });
}

int UnionSize(DeviceRange a, DeviceRange b) {
  const int overlap = std::max(0, std::min(a.end(), b.end()) - std::max(a.first, b.first));
  return a.count + b.count - overlap;
}

ResplitCost ResplitCost::Compute(const Cluster& cluster, int64_t global_batch, int from_devices,
                                 int to_devices) {
  return Compute(cluster, global_batch, DeviceRange{0, from_devices}, DeviceRange{0, to_devices});
}

ResplitCost ResplitCost::Compute(const Cluster& cluster, int64_t global_batch,
                                 DeviceRange from_range, DeviceRange to_range) {
  ResplitCost cost;
  if (from_range == to_range) return cost;
  const std::vector<int64_t> from = NearEqualShares(global_batch, from_range.count);
  const std::vector<int64_t> to = NearEqualShares(global_batch, to_range.count);
  const int ranks = std::max(from_range.end(), to_range.end());
  std::vector<Line> send(static_cast<size_t>(ranks)), receive(static_cast<size_t>(ranks));
  // Walk both partitions of [0, B) together; every overlap of sender i's range with receiver
  // j's range (on different ranks) is one message of `overlap` samples.
  size_t i = 0, j = 0;
  int64_t position = 0, from_end = from.empty() ? 0 : from[0], to_end = to.empty() ? 0 : to[0];
  while (i < from.size() && j < to.size()) {
    const int64_t end = std::min(from_end, to_end);
    const int64_t overlap = end - position;
    const int sender = from_range.first + static_cast<int>(i);
    const int receiver = to_range.first + static_cast<int>(j);
    if (overlap > 0 && sender != receiver) {
      const Link& link = cluster.LinkBetween(sender, receiver);
      const double ms_per_byte = static_cast<double>(overlap) * link.ms_per_byte();
      const double latency_ms = link.latency_us / 1000.0;
      send[static_cast<size_t>(sender)].ms_per_byte += ms_per_byte;
      send[static_cast<size_t>(sender)].latency_ms += latency_ms;
      receive[static_cast<size_t>(receiver)].ms_per_byte += ms_per_byte;
      receive[static_cast<size_t>(receiver)].latency_ms += latency_ms;
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
      options_(options),
      activation_bytes_per_element_(
          BytesPerElement(profile.precision().value_or(Precision::kFp32))) {
  for (int id : graph_.output_ids()) overhead_layer_ = std::max(overhead_layer_, id);
  const auto layers = static_cast<size_t>(graph_.num_layers());
  activation_bytes_.reserve(layers);
  gradient_bytes_.reserve(layers);
  std::vector<int64_t> batch_norm_stats_bytes(layers, 0);
  for (int id = 0; id < graph_.num_layers(); ++id) {
    const Layer& layer = graph_.layer(id);
    activation_bytes_.push_back(NumElements(layer.output_shape) * activation_bytes_per_element_);
    gradient_bytes_.push_back(layer.params * 4);
    // 2C+1 float64 values: per-channel sums, sums of squares, the count (as if synchronised:
    // BatchNormSyncMs charges nothing without sync_batch_norm).
    if (layer.op == Op::kBatchNorm2d && !layer.output_shape.empty()) {
      batch_norm_stats_bytes[static_cast<size_t>(id)] = (2 * layer.output_shape.front() + 1) * 8;
    }
  }
  batch_norm_stats_ = ByteClasses(batch_norm_stats_bytes);
  gradients_ = ByteClasses(gradient_bytes_);
  for (const auto& [id, k] : AllTies(graph_)) {
    tied_layers_.push_back(id);
    tied_bytes_.push_back(graph_.layer(id).tied[k].elements * 4);
  }
  profile_times_ = std::make_shared<ProfileTimes>();
}

size_t CostModel::RangePairHash::operator()(const std::pair<DeviceRange, DeviceRange>& key) const {
  size_t hash = 0;
  for (int part : {key.first.first, key.first.count, key.second.first, key.second.count}) {
    hash = hash * 1099511628211ULL + static_cast<size_t>(static_cast<unsigned>(part));
  }
  return hash;
}

CostModel::ByteClasses::ByteClasses(const std::vector<int64_t>& bytes_by_layer)
    : class_of_layer(bytes_by_layer.size(), -1) {
  // The distinct sizes, sorted (O(n log n): a big graph may have many); most layers have none.
  for (int64_t layer_bytes : bytes_by_layer) {
    if (layer_bytes != 0) bytes.push_back(layer_bytes);
  }
  std::sort(bytes.begin(), bytes.end());
  bytes.erase(std::unique(bytes.begin(), bytes.end()), bytes.end());
  for (size_t id = 0; id < bytes_by_layer.size(); ++id) {
    if (bytes_by_layer[id] == 0) continue;
    class_of_layer[id] = static_cast<int>(
        std::lower_bound(bytes.begin(), bytes.end(), bytes_by_layer[id]) - bytes.begin());
  }
}

CostModel::CostModel(const CostModel& same_inputs, CostModelOptions options)
    : graph_(same_inputs.graph_),
      profile_(same_inputs.profile_),
      cluster_(same_inputs.cluster_),
      global_batch_(same_inputs.global_batch_),
      options_(options),
      // What depends on the graph and profile alone is copied, not worked out again.
      activation_bytes_per_element_(same_inputs.activation_bytes_per_element_),
      overhead_layer_(same_inputs.overhead_layer_),
      tied_layers_(same_inputs.tied_layers_),
      tied_bytes_(same_inputs.tied_bytes_),
      activation_bytes_(same_inputs.activation_bytes_),
      gradient_bytes_(same_inputs.gradient_bytes_),
      batch_norm_stats_(same_inputs.batch_norm_stats_),
      gradients_(same_inputs.gradients_),
      profile_times_(same_inputs.profile_times_) {}

const LayerTime* CostModel::KnownTime(int layer_id, int devices) const {
  // A count has a slot only once Compute has checked it (1 <= devices <= B).
  const ProfileTimes& known = *profile_times_;
  if (devices < 1 || static_cast<size_t>(devices) >= known.slot_of_count.size()) return nullptr;
  const int slot = known.slot_of_count[static_cast<size_t>(devices)];
  if (slot < 0 || layer_id < 0 || layer_id >= graph_.num_layers()) return nullptr;
  const LayerTime& cached = known.times[static_cast<size_t>(slot)][static_cast<size_t>(layer_id)];
  return std::isnan(cached.forward_ms) ? nullptr : &cached;
}

int CostModel::SlotOfShare(ProfileTimes& known, int64_t share) const {
  const auto found = std::find(known.share_of_slot.begin(), known.share_of_slot.end(), share);
  if (found != known.share_of_slot.end()) {
    return static_cast<int>(found - known.share_of_slot.begin());
  }
  known.share_of_slot.push_back(share);
  known.times.emplace_back(static_cast<size_t>(graph_.num_layers()),
                           LayerTime{std::numeric_limits<double>::quiet_NaN(), 0});
  return static_cast<int>(known.times.size() - 1);
}

Status CostModel::KnowTimes(const std::vector<int>& counts) const {
  ProfileTimes& known = *profile_times_;
  // The counts' slots, each once.
  std::vector<int> slots;
  slots.reserve(counts.size());
  for (int devices : counts) {
    const auto count = static_cast<size_t>(devices);
    if (count >= known.slot_of_count.size()) known.slot_of_count.resize(count + 1, -1);
    int& slot = known.slot_of_count[count];
    if (slot < 0) slot = SlotOfShare(known, LargestShare(global_batch_, devices));
    if (std::find(slots.begin(), slots.end(), slot) == slots.end()) slots.push_back(slot);
  }
  std::vector<int> asked_slots;
  std::vector<int64_t> shares;
  std::vector<LayerTime> times;
  for (int id = 0; id < graph_.num_layers(); ++id) {
    asked_slots.clear();
    shares.clear();
    for (int slot : slots) {
      if (!std::isnan(known.times[static_cast<size_t>(slot)][static_cast<size_t>(id)].forward_ms)) {
        continue;
      }
      asked_slots.push_back(slot);
      shares.push_back(known.share_of_slot[static_cast<size_t>(slot)]);
    }
    if (shares.empty()) continue;
    RETURN_IF_ERROR(profile_.Times(graph_, id, shares, &times));
    for (size_t i = 0; i < shares.size(); ++i) {
      LayerTime time = times[i];
      if (id == overhead_layer_) time.forward_ms += profile_.IterationOverheadMs(shares[i]);
      known.times[static_cast<size_t>(asked_slots[i])][static_cast<size_t>(id)] = time;
    }
  }
  return Status::Ok();
}

StatusOr<LayerTime> CostModel::Compute(int layer_id, int devices) const {
  if (const LayerTime* known = KnownTime(layer_id, devices)) return *known;
  if (devices < 1 || devices > global_batch_) {
    return InvalidArgumentError("layer '" + graph_.layer(layer_id).name +
                                "': " + std::to_string(devices) + " devices for a batch of " +
                                std::to_string(global_batch_));
  }
  const int64_t share = LargestShare(global_batch_, devices);
  if (layer_id < 0 || layer_id >= graph_.num_layers()) {
    return profile_.Time(graph_, layer_id, share);  // its error
  }
  ProfileTimes& known = *profile_times_;
  const auto count = static_cast<size_t>(devices);
  if (count >= known.slot_of_count.size()) known.slot_of_count.resize(count + 1, -1);
  int& slot = known.slot_of_count[count];
  if (slot < 0) slot = SlotOfShare(known, share);
  LayerTime& cached = known.times[static_cast<size_t>(slot)][static_cast<size_t>(layer_id)];
  if (!std::isnan(cached.forward_ms)) return cached;  // another count with this share asked
  ASSIGN_OR_RETURN(LayerTime time, profile_.Time(graph_, layer_id, share));
  if (layer_id == overhead_layer_) time.forward_ms += profile_.IterationOverheadMs(share);
  cached = time;
  return time;
}

StatusOr<const LayerTime*> CostModel::ComputeAll(int devices) const {
  if (devices < 1 || devices > global_batch_) {
    // Compute's error (for the first layer; every layer has it).
    if (graph_.num_layers() > 0) return Compute(0, devices).status();
    return InvalidArgumentError(std::to_string(devices) + " devices for a batch of " +
                                std::to_string(global_batch_));
  }
  RETURN_IF_ERROR(KnowTimes({devices}));
  const ProfileTimes& known = *profile_times_;
  return known.times[static_cast<size_t>(known.slot_of_count[static_cast<size_t>(devices)])].data();
}

const ResplitCost& CostModel::Resplit(int from_devices, int to_devices) const {
  return Resplit(DeviceRange{0, from_devices}, DeviceRange{0, to_devices});
}

const ResplitCost& CostModel::Resplit(DeviceRange from, DeviceRange to) const {
  const auto key = std::make_pair(from, to);
  auto it = resplits_.find(key);
  if (it == resplits_.end()) {
    it = resplits_.emplace(key, ResplitCost::Compute(cluster_, global_batch_, from, to)).first;
  }
  return it->second;
}

double CostModel::ResplitMs(int producer_id, int from_devices, int to_devices) const {
  return ResplitMs(producer_id, DeviceRange{0, from_devices}, DeviceRange{0, to_devices});
}

double CostModel::ResplitMs(int producer_id, DeviceRange from, DeviceRange to) const {
  if (from == to) return 0;
  return 2.0 * Resplit(from, to).Ms(ActivationBytes(producer_id));
}

int64_t CostModel::ActivationBytes(int layer_id) const {
  return activation_bytes_[static_cast<size_t>(layer_id)];
}

int64_t CostModel::GradientBytes(int layer_id) const {
  return gradient_bytes_[static_cast<size_t>(layer_id)];
}

double& CostModel::ChargeTable::At(int devices, int size_class, int num_classes) {
  const size_t classes = static_cast<size_t>(num_classes);
  const size_t at = static_cast<size_t>(devices) * classes + static_cast<size_t>(size_class);
  if (at >= ms_.size()) ms_.resize(at + classes, -1.0);
  return ms_[at];
}

double CostModel::AmortisedGradientSyncMs(int layer_id, int devices) const {
  const int size_class = gradients_.class_of_layer[static_cast<size_t>(layer_id)];
  // No bytes or devices < 0: AmortisedAllReduceMs' answer (for any count below 2) is 0.
  if (size_class < 0 || devices < 0) return 0;
  const int classes = static_cast<int>(gradients_.bytes.size());
  double& known = amortised_sync_ms_.At(devices, size_class, classes);
  if (known < 0) {
    known = AmortisedAllReduceMs(cluster_, gradients_.bytes[static_cast<size_t>(size_class)],
                                 devices, options_.gradient_sync);
  }
  return known;
}

double CostModel::BatchNormSyncMs(int layer_id, int devices) const {
  const int size_class = batch_norm_stats_.class_of_layer[static_cast<size_t>(layer_id)];
  // Per-device statistics (no sync_batch_norm) need no all-reduce; devices < 0: AllReduceMs'
  // answer below 2.
  if (size_class < 0 || !options_.sync_batch_norm || devices < 0) return 0;
  const int classes = static_cast<int>(batch_norm_stats_.bytes.size());
  double& known = batch_norm_sync_ms_.At(devices, size_class, classes);
  if (known < 0) {
    known = AllReduceMs(cluster_, batch_norm_stats_.bytes[static_cast<size_t>(size_class)], devices,
                        options_.gradient_sync.tree);
  }
  return known;
}

double CostModel::AdditiveSyncMs(int layer_id, int devices) const {
  return AmortisedGradientSyncMs(layer_id, devices) + 2.0 * BatchNormSyncMs(layer_id, devices);
}

// CostOf for ranges or counts alike: `range_of(id)` gives layer id's range. A template, so that
// the search's per-layer calls with counts build no vector of ranges.
template <typename RangeOf>
StatusOr<LayerCost> CostModel::CostWith(int layer_id, RangeOf range_of) const {
  const DeviceRange range = range_of(layer_id);
  const int devices = range.count;
  LayerTime time;
  if (const LayerTime* known = KnownTime(layer_id, devices)) {
    time = *known;
  } else {
    ASSIGN_OR_RETURN(time, Compute(layer_id, devices));
  }
  LayerCost cost;
  cost.forward_ms = time.forward_ms;
  cost.backward_ms = time.backward_ms;
  for (int producer : graph_.layer(layer_id).input_ids) {
    if (producer == kGraphInputId) continue;  // every device loads its own samples
    const DeviceRange from = range_of(producer);
    // On the same range nothing moves: adding its 0 would leave both sums as they are.
    if (from == range) continue;
    const double ms = ResplitMs(producer, from, range);
    cost.resplit_ms += ms;
    cost.resplit_device_ms += ms * UnionSize(from, range);
  }
  // Most layers are no batch norm: their charge is 0 without a call.
  const bool batch_norm = batch_norm_stats_.class_of_layer[static_cast<size_t>(layer_id)] >= 0;
  cost.comm_ms = cost.resplit_ms + 2.0 * (batch_norm ? BatchNormSyncMs(layer_id, devices) : 0.0);
  return cost;
}

StatusOr<LayerCost> CostModel::CostOf(int layer_id, const std::vector<int>& counts) const {
  return CostWith(layer_id, [&](int id) {
    return DeviceRange{0, counts.at(static_cast<size_t>(id))};
  });
}

StatusOr<LayerCost> CostModel::CostOf(int layer_id, const std::vector<DeviceRange>& ranges) const {
  return CostWith(layer_id, [&](int id) { return ranges.at(static_cast<size_t>(id)); });
}

StatusOr<std::vector<LayerCost>> CostModel::LayerCosts(
    const std::vector<DeviceRange>& ranges) const {
  std::vector<LayerCost> costs;
  costs.reserve(ranges.size());
  for (int id = 0; id < graph_.num_layers(); ++id) {
    ASSIGN_OR_RETURN(LayerCost cost, CostOf(id, ranges));
    costs.push_back(cost);
  }
  return costs;
}

template <typename OnReady>
double CostModel::SerialBackward(const std::vector<DeviceRange>& ranges,
                                 const std::vector<LayerCost>& costs, OnReady ready) const {
  // The serial forward, then backward in reverse: a layer's gradients are ready when its
  // backward computation ends, before its batch norm statistics and its re-splits back.
  double now_ms = 0;
  for (const LayerCost& cost : costs) now_ms += cost.forward_ms + cost.comm_ms / 2;
  for (int id = graph_.num_layers() - 1; id >= 0; --id) {
    const LayerCost& cost = costs[static_cast<size_t>(id)];
    const DeviceRange range = ranges[static_cast<size_t>(id)];
    now_ms += cost.backward_ms;
    ready(ReadyGradient{id, range.count, GradientBytes(id), now_ms, range.first});
    now_ms += cost.comm_ms / 2;
  }
  return now_ms;
}

CostModel::Passes CostModel::SerialPasses(const std::vector<DeviceRange>& ranges,
                                          const std::vector<LayerCost>& costs) const {
  Passes passes;
  passes.gradients.reserve(costs.size());
  passes.backward_end_ms = SerialBackward(
      ranges, costs, [&](const ReadyGradient& gradient) { passes.gradients.push_back(gradient); });
  return passes;
}

namespace {

// When each rank is next free, over the ranks the ranges touch: the ranges' ends cut the ranks
// into segments that every range covers whole, so a range's ranks are a run of segments.
class RankClock {
 public:
  explicit RankClock(const std::vector<DeviceRange>& ranges) {
    std::vector<bool> cut(static_cast<size_t>(RanksSpanned(ranges)) + 1, false);
    for (const DeviceRange& range : ranges) {
      cut[static_cast<size_t>(range.first)] = true;
      cut[static_cast<size_t>(range.end())] = true;
    }
    segment_of_.assign(cut.size(), 0);
    for (size_t rank = 0; rank < cut.size(); ++rank) {
      if (cut[rank]) cuts_.push_back(static_cast<int>(rank));
      segment_of_[rank] = cuts_.size() - 1;
    }
    free_ms_.assign(cuts_.size(), 0.0);
  }
  // The latest free time over the range's ranks.
  double FreeAt(DeviceRange range) const {
    double latest = 0;
    for (size_t s = Segment(range.first); cuts_[s] < range.end(); ++s) {
      latest = std::max(latest, free_ms_[s]);
    }
    return latest;
  }
  void Hold(DeviceRange range, double until_ms) {
    for (size_t s = Segment(range.first); cuts_[s] < range.end(); ++s) free_ms_[s] = until_ms;
  }

 private:
  size_t Segment(int rank) const { return segment_of_[static_cast<size_t>(rank)]; }
  std::vector<int> cuts_;           // ascending; every range starts and ends on one
  std::vector<size_t> segment_of_;  // by rank: the segment holding it
  std::vector<double> free_ms_;     // of the segment [cuts_[s], cuts_[s + 1])
};

}  // namespace

CostModel::Passes CostModel::ConcurrentPasses(const std::vector<DeviceRange>& ranges,
                                              const std::vector<LayerCost>& costs,
                                              std::vector<ScheduledLayer>* layers) const {
  const size_t n = costs.size();
  RankClock ranks(ranges);
  std::vector<ScheduledLayer> drawn(layers != nullptr ? n : 0);
  // A re-split holds both ranges from when the producer's side is done and both are free.
  auto resplit = [&](size_t producer, size_t consumer, double ready_ms,
                     std::vector<std::pair<double, double>> ScheduledLayer::*windows) {
    const DeviceRange from = ranges[producer], to = ranges[consumer];
    const double start_ms = std::max({ready_ms, ranks.FreeAt(from), ranks.FreeAt(to)});
    const double end_ms = start_ms + ResplitMs(static_cast<int>(producer), from, to) / 2;
    ranks.Hold(from, end_ms);
    ranks.Hold(to, end_ms);
    if (layers != nullptr) (drawn[consumer].*windows).emplace_back(start_ms, end_ms);
    return end_ms;
  };
  // comm_ms is the re-splits in, both ways, and the statistics all-reduce twice (CostWith).
  auto batch_norm_ms = [&](size_t id) { return (costs[id].comm_ms - costs[id].resplit_ms) / 2; };
  std::vector<double> forward_end(n, 0.0);
  for (size_t id = 0; id < n; ++id) {
    double ready_ms = 0;
    for (int input : graph_.layer(static_cast<int>(id)).input_ids) {
      if (input == kGraphInputId) continue;
      const size_t producer = static_cast<size_t>(input);
      ready_ms = std::max(ready_ms, ranges[producer] == ranges[id]
                                        ? forward_end[producer]
                                        : resplit(producer, id, forward_end[producer],
                                                  &ScheduledLayer::resplits_in));
    }
    const double start_ms = std::max(ready_ms, ranks.FreeAt(ranges[id]));
    if (layers != nullptr) drawn[id].forward_start_ms = start_ms;
    forward_end[id] = start_ms + costs[id].forward_ms + batch_norm_ms(id);
    ranks.Hold(ranges[id], forward_end[id]);
  }
  // When each layer's output gradient is complete: its consumers' backwards and re-splits back
  // have ended (a layer nothing reads starts from its own forward's end).
  std::vector<double> gradient_in = forward_end;
  Passes passes;
  passes.gradients.reserve(n);
  for (size_t id = n; id-- > 0;) {
    const double start_ms = std::max(gradient_in[id], ranks.FreeAt(ranges[id]));
    if (layers != nullptr) drawn[id].backward_start_ms = start_ms;
    const double ready_ms = start_ms + costs[id].backward_ms;
    const double end_ms = ready_ms + batch_norm_ms(id);
    ranks.Hold(ranges[id], end_ms);
    passes.backward_end_ms = std::max(passes.backward_end_ms, end_ms);
    passes.gradients.push_back(ReadyGradient{static_cast<int>(id), ranges[id].count,
                                             GradientBytes(static_cast<int>(id)), ready_ms,
                                             ranges[id].first});
    for (int input : graph_.layer(static_cast<int>(id)).input_ids) {
      if (input == kGraphInputId) continue;
      const size_t producer = static_cast<size_t>(input);
      const double back_ms = ranges[producer] == ranges[id]
                                 ? end_ms
                                 : resplit(producer, id, end_ms, &ScheduledLayer::resplits_back);
      gradient_in[producer] = std::max(gradient_in[producer], back_ms);
      passes.backward_end_ms = std::max(passes.backward_end_ms, back_ms);
    }
  }
  // Backward order by ready time; among equal times, as pushed (descending layer id).
  std::sort(passes.gradients.begin(), passes.gradients.end(),
            [](const ReadyGradient& a, const ReadyGradient& b) {
              return a.ready_ms != b.ready_ms ? a.ready_ms < b.ready_ms : a.layer_id > b.layer_id;
            });
  if (layers != nullptr) *layers = std::move(drawn);
  return passes;
}

StatusOr<std::vector<ScheduledLayer>> CostModel::Schedule(
    const std::vector<DeviceRange>& ranges) const {
  RETURN_IF_ERROR(CheckRanges(ranges, RanksSpanned(ranges)));
  ASSIGN_OR_RETURN(const std::vector<LayerCost> costs, LayerCosts(ranges));
  std::vector<ScheduledLayer> layers;
  ConcurrentPasses(ranges, costs, &layers);
  return layers;
}

GradientSyncTimeline CostModel::ScheduleSync(const std::vector<DeviceRange>& ranges,
                                             const std::vector<LayerCost>& costs) const {
  const Passes passes =
      FromRankZero(ranges) ? SerialPasses(ranges, costs) : ConcurrentPasses(ranges, costs);
  GradientSyncTimeline timeline = ScheduleGradientSync(passes.gradients, passes.backward_end_ms,
                                                       cluster_, options_.gradient_sync);
  AppendTiedParameterSync(timeline, tied_layers_, tied_bytes_, RanksSpanned(ranges), cluster_,
                          options_.gradient_sync);
  return timeline;
}

double CostModel::TallySync(const std::vector<DeviceRange>& ranges,
                            const std::vector<LayerCost>& costs, bool from_rank_zero) const {
  sync_tally_.Start(graph_.num_layers(), options_.gradient_sync);
  double backward_end_ms = 0;
  if (from_rank_zero) {
    // The search's plans: no list of gradients, each goes to its bucket as it becomes ready.
    backward_end_ms = SerialBackward(
        ranges, costs, [&](const ReadyGradient& gradient) { sync_tally_.Add(gradient); });
  } else {
    const Passes passes = ConcurrentPasses(ranges, costs);
    for (const ReadyGradient& gradient : passes.gradients) sync_tally_.Add(gradient);
    backward_end_ms = passes.backward_end_ms;
  }
  // The world only matters to tied parameters: most models have none, so skip the walk.
  const int world = tied_layers_.empty() ? 0 : RanksSpanned(ranges);
  sync_tally_.Finish(backward_end_ms, cluster_, tied_layers_, tied_bytes_, world);
  return backward_end_ms;
}

Status CostModel::CheckRanges(const std::vector<DeviceRange>& ranges, int num_devices) const {
  if (static_cast<int>(ranges.size()) != graph_.num_layers()) {
    return InvalidArgumentError("expected " + std::to_string(graph_.num_layers()) +
                                " device counts, got " + std::to_string(ranges.size()));
  }
  const int64_t max_count = std::min<int64_t>(num_devices, global_batch_);
  for (int id = 0; id < graph_.num_layers(); ++id) {
    const DeviceRange range = ranges[static_cast<size_t>(id)];
    if (range.count < 1 || range.count > max_count) {
      return InvalidArgumentError("layer '" + graph_.layer(id).name + "': device count " +
                                  std::to_string(range.count) + " is outside [1, " +
                                  std::to_string(max_count) + "]");
    }
    if (range.first < 0 || range.end() > num_devices) {
      return InvalidArgumentError(
          "layer '" + graph_.layer(id).name + "': ranks " + std::to_string(range.first) + ".." +
          std::to_string(range.end() - 1) + " are outside 0.." + std::to_string(num_devices - 1));
    }
  }
  return Status::Ok();
}

StatusOr<GradientSyncTimeline> CostModel::GradientSync(const std::vector<int>& counts) const {
  return GradientSync(PrefixRanges(counts));
}

StatusOr<GradientSyncTimeline> CostModel::GradientSync(
    const std::vector<DeviceRange>& ranges) const {
  RETURN_IF_ERROR(CheckRanges(ranges, RanksSpanned(ranges)));
  ASSIGN_OR_RETURN(const std::vector<LayerCost> costs, LayerCosts(ranges));
  return ScheduleSync(ranges, costs);
}

StatusOr<double> CostModel::SingleDeviceMs() const {
  if (profile_times_->single_device_ms) return *profile_times_->single_device_ms;
  // Every layer's time on one device at once (a NaN the profile answered stays NaN, as Compute
  // would answer it again), summed in layer order.
  RETURN_IF_ERROR(KnowTimes({1}));
  const ProfileTimes& known = *profile_times_;
  const std::vector<LayerTime>& times = known.times[static_cast<size_t>(known.slot_of_count[1])];
  double total = 0;
  for (int id = 0; id < graph_.num_layers(); ++id)
    total += times[static_cast<size_t>(id)].total_ms();
  profile_times_->single_device_ms = total;
  return total;
}

StatusOr<double> CostModel::LeastDeviceMs(int devices) const {
  const int most = static_cast<int>(std::min<int64_t>(std::max(devices, 1), global_batch_));
  std::map<int, double>& least_device_ms = profile_times_->least_device_ms;
  if (auto it = least_device_ms.find(most); it != least_device_ms.end()) return it->second;
  // Each distinct share once, through the smallest count that gives it (at most 2 sqrt(B)).
  std::vector<int> counts;
  for (int64_t count = 1; count <= most;) {
    counts.push_back(static_cast<int>(count));
    const int64_t share = LargestShare(global_batch_, static_cast<int>(count));
    count = share > 1 ? (global_batch_ + share - 2) / (share - 1) : global_batch_ + 1;
  }
  RETURN_IF_ERROR(KnowTimes(counts));
  // Per count: its share's times (all known now; a NaN the profile answered stays NaN, as
  // Compute would answer it again) and how many pieces of that share make the batch.
  const ProfileTimes& known = *profile_times_;
  std::vector<const LayerTime*> times_of;
  std::vector<double> pieces;
  times_of.reserve(counts.size());
  pieces.reserve(counts.size());
  for (int count : counts) {
    const int slot = known.slot_of_count[static_cast<size_t>(count)];
    times_of.push_back(known.times[static_cast<size_t>(slot)].data());
    pieces.push_back(static_cast<double>(global_batch_) /
                     static_cast<double>(LargestShare(global_batch_, count)));
  }
  double total = 0;
  for (int id = 0; id < graph_.num_layers(); ++id) {
    double least = std::numeric_limits<double>::infinity();
    for (size_t c = 0; c < counts.size(); ++c) {
      least = std::min(least, pieces[c] * times_of[c][id].total_ms());
    }
    total += least;
  }
  least_device_ms[most] = total;
  return total;
}

StatusOr<Plan> CostModel::Evaluate(const std::vector<int>& counts, int num_devices) const {
  return Evaluate(PrefixRanges(counts), num_devices);
}

StatusOr<Plan> CostModel::Evaluate(const std::vector<DeviceRange>& ranges, int num_devices) const {
  RETURN_IF_ERROR(CheckRanges(ranges, num_devices));
  return EvaluateChecked(ranges, num_devices, nullptr);
}

StatusOr<Plan> CostModel::EvaluateOfCosts(const std::vector<DeviceRange>& ranges, int num_devices,
                                          const std::vector<LayerCost>& costs) const {
  RETURN_IF_ERROR(CheckRanges(ranges, num_devices));
  RETURN_IF_ERROR(CheckCostsFor(ranges, costs));
  return EvaluateChecked(ranges, num_devices, &costs);
}

StatusOr<Plan> CostModel::EvaluateChecked(const std::vector<DeviceRange>& ranges, int num_devices,
                                          const std::vector<LayerCost>* costs) const {
  Plan plan;
  plan.model = graph_.name();
  plan.global_batch = global_batch_;
  plan.num_devices = num_devices;
  plan.profile_source = profile_.source();
  if (const ProfileEnvironment* environment = profile_.environment()) {
    plan.profile_environment = *environment;
  }
  ASSIGN_OR_RETURN(plan.single_device_ms, SingleDeviceMs());
  if (costs != nullptr) {
    ASSIGN_OR_RETURN(plan.totals, SumCosts(ranges, num_devices, *costs, &plan.layers));
  } else {
    ASSIGN_OR_RETURN(plan.totals, Sum(ranges, num_devices, &plan.layers));
  }
  return plan;
}

StatusOr<PlanTotals> CostModel::Totals(const std::vector<int>& counts, int num_devices) const {
  return Totals(PrefixRanges(counts), num_devices);
}

StatusOr<PlanTotals> CostModel::Totals(const std::vector<DeviceRange>& ranges,
                                       int num_devices) const {
  RETURN_IF_ERROR(CheckRanges(ranges, num_devices));
  return Sum(ranges, num_devices, nullptr);
}

StatusOr<PlanTotals> CostModel::TotalsOfCosts(const std::vector<DeviceRange>& ranges,
                                              int num_devices,
                                              const std::vector<LayerCost>& costs) const {
  RETURN_IF_ERROR(CheckRanges(ranges, num_devices));
  RETURN_IF_ERROR(CheckCostsFor(ranges, costs));
  return SumCosts(ranges, num_devices, costs, nullptr);
}

Status CostModel::CheckCostsFor(const std::vector<DeviceRange>& ranges,
                                const std::vector<LayerCost>& costs) {
  if (costs.size() != ranges.size()) {
    return InvalidArgumentError("expected " + std::to_string(ranges.size()) + " layer costs, got " +
                                std::to_string(costs.size()));
  }
  return Status::Ok();
}

StatusOr<std::vector<LayerCost>> CostModel::LayerCostsOf(const std::vector<DeviceRange>& ranges,
                                                         int num_devices) const {
  RETURN_IF_ERROR(CheckRanges(ranges, num_devices));
  return LayerCosts(ranges);
}

StatusOr<PlanTotals> CostModel::Sum(const std::vector<DeviceRange>& ranges, int num_devices,
                                    std::vector<LayerPlacement>* layers) const {
  // The least device time first, as before the costs: a profile that cannot time a count
  // reports it there first.
  RETURN_IF_ERROR(LeastDeviceMs(num_devices).status());
  ASSIGN_OR_RETURN(const std::vector<LayerCost> costs, LayerCosts(ranges));
  return SumCosts(ranges, num_devices, costs, layers);
}

StatusOr<PlanTotals> CostModel::SumCosts(const std::vector<DeviceRange>& ranges, int num_devices,
                                         const std::vector<LayerCost>& costs,
                                         std::vector<LayerPlacement>* layers) const {
  ASSIGN_OR_RETURN(const double least_device_ms, LeastDeviceMs(num_devices));
  const bool from_rank_zero = FromRankZero(ranges);
  const double backward_end_ms = TallySync(ranges, costs, from_rank_zero);
  const std::vector<double>& exposed = sync_tally_.exposed_by_layer();
  PlanTotals totals;
  double gpu_ms = 0;
  double layers_ms = 0;
  // Each layer's cost with its share of the exposed sync, into the sums (in layer order).
  auto add = [&](int id) {
    const DeviceRange range = ranges[static_cast<size_t>(id)];
    LayerCost cost = costs[static_cast<size_t>(id)];
    cost.comm_ms += exposed[static_cast<size_t>(id)];
    layers_ms += cost.total_ms();
    gpu_ms += cost.device_ms(range.count);
    totals.devices_used = std::max(totals.devices_used, range.end());
    return cost;
  };
  if (layers == nullptr) {
    // The search's totals: a loop with no calls in it.
    for (int id = 0; id < graph_.num_layers(); ++id) add(id);
  } else {
    // The placements' sample shares, worked out once per count.
    std::vector<std::vector<int64_t>> shares_by_count;
    layers->reserve(ranges.size());
    for (int id = 0; id < graph_.num_layers(); ++id) {
      const LayerCost cost = add(id);
      const DeviceRange range = ranges[static_cast<size_t>(id)];
      const auto count = static_cast<size_t>(range.count);
      if (count >= shares_by_count.size()) shares_by_count.resize(count + 1);
      if (shares_by_count[count].empty()) {
        shares_by_count[count] = NearEqualShares(global_batch_, range.count);
      }
      layers->push_back(Placement(id, range, cost, shares_by_count[count]));
    }
  }
  // Serial: the layers' sum (the same time, summed as the per-layer figures show it).
  totals.iteration_ms = from_rank_zero ? layers_ms : backward_end_ms + sync_tally_.exposed_ms();
  totals.gpu_seconds = gpu_ms / 1000.0;
  totals.amplification = least_device_ms > 0 ? gpu_ms / least_device_ms : 0;
  return totals;
}

LayerPlacement CostModel::Placement(int layer_id, DeviceRange range, const LayerCost& cost,
                                    const std::vector<int64_t>& samples) const {
  LayerPlacement placement;
  placement.layer = graph_.layer(layer_id).name;
  placement.devices.resize(static_cast<size_t>(range.count));
  for (int r = 0; r < range.count; ++r) placement.devices[static_cast<size_t>(r)] = range.first + r;
  placement.samples = samples;
  placement.forward_ms = cost.forward_ms;
  placement.backward_ms = cost.backward_ms;
  placement.comm_ms = cost.comm_ms;
  return placement;
}

}  // namespace deepool::planner

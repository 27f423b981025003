// Cost model: re-split bytes against a per-sample reference, all-reduce formula, compute at the
// largest share, and plan totals.
#include "planner/cost_model.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <vector>

#include "planner/graph.h"
#include "planner/profile_table.h"
#include "planner/search.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

// forward = fixed + per_sample x batch, backward = 2 x forward.
class FakeProfile : public Profile {
 public:
  std::string source() const override { return "fake"; }
  StatusOr<LayerTime> Time(const Graph& graph, int layer_id, int64_t batch) const override {
    const double forward = 0.5 + 0.25 * static_cast<double>(batch) * (layer_id + 1);
    (void)graph;
    return LayerTime{forward, 2 * forward};
  }
};

Cluster TwoNodeCluster(int per_node, double intra_gbps, double inter_gbps, double intra_us = 0,
                       double inter_us = 0) {
  Cluster cluster;
  cluster.nodes = 2;
  cluster.devices_per_node = per_node;
  cluster.intra_node = Link{intra_gbps, intra_us};
  cluster.inter_node = Link{inter_gbps, inter_us};
  return cluster;
}

// The re-split time computed sample by sample: owners under both counts, one message per
// (sender, receiver) pair, each device's max(send, receive), the busiest device.
double ReferenceResplitMs(const Cluster& cluster, int64_t batch, int from, int to,
                          int64_t bytes_per_sample) {
  auto owner = [batch](int devices, int64_t sample) {
    const std::vector<int64_t> shares = NearEqualShares(batch, devices);
    int64_t end = 0;
    for (int d = 0; d < devices; ++d) {
      end += shares[static_cast<size_t>(d)];
      if (sample < end) return d;
    }
    return -1;
  };
  std::map<std::pair<int, int>, int64_t> samples;
  for (int64_t s = 0; s < batch; ++s) {
    const int a = owner(from, s), b = owner(to, s);
    if (a != b) ++samples[{a, b}];
  }
  std::map<int, double> send, receive;
  for (const auto& [pair, count] : samples) {
    const Link& link = cluster.LinkBetween(pair.first, pair.second);
    const double ms = static_cast<double>(count * bytes_per_sample) / (link.bandwidth_gbps * 1e6) +
                      link.latency_us / 1000;
    send[pair.first] += ms;
    receive[pair.second] += ms;
  }
  double worst = 0;
  for (const auto& [device, ms] : send) worst = std::max(worst, ms);
  for (const auto& [device, ms] : receive) worst = std::max(worst, ms);
  return worst;
}

TEST_CASE("largest share is ceil(B / g)", "[cost]") {
  CHECK(LargestShare(32, 8) == 4);
  CHECK(LargestShare(10, 3) == 4);
  CHECK(LargestShare(7, 7) == 1);
  CHECK(LargestShare(5, 1) == 5);
}

TEST_CASE("re-split of a hand-worked example", "[cost]") {
  // B = 4 from one device to two on a 1 GB/s link: device 0 sends samples 2 and 3 to device 1.
  const Cluster cluster = TwoNodeCluster(8, 1.0, 0.1, 10, 100);
  const ResplitCost one_to_two = ResplitCost::Compute(cluster, 4, 1, 2);
  CHECK(one_to_two.Ms(1'000'000) == Approx(2.0 + 0.01));
  CHECK(ResplitCost::Compute(cluster, 4, 2, 1).Ms(1'000'000) == Approx(2.01));
  CHECK(ResplitCost::Compute(cluster, 4, 2, 2).free());
  CHECK(ResplitCost::Compute(cluster, 4, 2, 2).Ms(1'000'000) == 0);
  // Uneven: B = 5, shares {3, 2} -> {2, 2, 1}: every device moves at most one sample.
  CHECK(ResplitCost::Compute(cluster, 5, 2, 3).Ms(1'000'000) == Approx(1.0 + 0.01));
  // One device per node: the same move crosses the slow inter-node link.
  const Cluster spread = TwoNodeCluster(1, 1.0, 0.1, 10, 100);
  CHECK(ResplitCost::Compute(spread, 4, 1, 2).Ms(1'000'000) == Approx(20.0 + 0.1));
}

TEST_CASE("re-split matches a sample-by-sample reference", "[cost]") {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t batch = std::uniform_int_distribution<int64_t>(1, 70)(rng);
    const int most = static_cast<int>(std::min<int64_t>(batch, 24));
    const int from = std::uniform_int_distribution<int>(1, most)(rng);
    const int to = std::uniform_int_distribution<int>(1, most)(rng);
    const Cluster cluster = TwoNodeCluster(std::uniform_int_distribution<int>(1, 8)(rng),
                                           std::uniform_real_distribution<double>(1, 300)(rng),
                                           std::uniform_real_distribution<double>(0.5, 50)(rng),
                                           std::uniform_real_distribution<double>(0, 10)(rng),
                                           std::uniform_real_distribution<double>(0, 40)(rng));
    const ResplitCost cost = ResplitCost::Compute(cluster, batch, from, to);
    for (int64_t bytes : {int64_t{0}, int64_t{4}, int64_t{4096}, int64_t{3'000'000}}) {
      INFO("B " << batch << " " << from << " -> " << to << " bytes " << bytes);
      CHECK(
          cost.Ms(bytes) ==
          Approx(ReferenceResplitMs(cluster, batch, from, to, bytes)).epsilon(1e-9).margin(1e-12));
    }
  }
}

TEST_CASE("ring all-reduce formula and the slowest link", "[cost]") {
  const Cluster cluster = TwoNodeCluster(4, 100, 10, 2, 20);
  CHECK(RingAllReduceMs(cluster, 400'000'000, 1) == 0);
  // g = 4 inside one node: 2 * 3/4 * 4e8 B / 100 GB/s = 6 ms, plus 6 * 2 us.
  CHECK(RingAllReduceMs(cluster, 400'000'000, 4) == Approx(6.0 + 0.012));
  // g = 8 spans both nodes: the inter-node link bounds the ring.
  CHECK(RingAllReduceMs(cluster, 400'000'000, 8) == Approx(2.0 * 7 / 8 * 40.0 + 14 * 0.020));
  CHECK(RingAllReduceMs(cluster, 0, 8) == 0);
}

TEST_CASE("synchronised batch norm pays two statistics all-reduces on several devices", "[cost]") {
  Layer bn;
  bn.name = "bn";
  bn.op = Op::kBatchNorm2d;
  bn.inputs = {"input"};
  Layer fc;
  fc.name = "fc";
  fc.op = Op::kLinear;
  fc.inputs = {"bn"};
  fc.attrs.out_features = 2;
  auto graph = Graph::Create("bn", {4, 2, 2}, {bn, fc});
  REQUIRE(graph.ok());
  const Cluster cluster = TwoNodeCluster(8, 1.0, 1.0, 5.0, 5.0);
  FakeProfile profile;
  CostModel model(*graph, profile, cluster, 12);

  // 4 channels: 2 x 4 + 1 = 9 float64 values, 72 bytes, each way.
  const double stats = AllReduceMs(cluster, 72, 3);
  CHECK(stats > 0);
  CHECK(model.BatchNormSyncMs(0, 3) == Approx(stats));
  CHECK(model.BatchNormSyncMs(0, 1) == 0);
  CHECK(model.BatchNormSyncMs(1, 3) == 0);  // not batch norm
  CHECK(model.AdditiveSyncMs(0, 3) ==
        Approx(AmortisedAllReduceMs(cluster, 8 * 4, 3, GradientSyncOptions{}) + 2 * stats));
  // The gradient all-reduce depends on the whole plan (GradientSync), so CostOf leaves it out.
  CHECK(model.CostOf(0, {3, 3}).value().comm_ms == Approx(2 * stats));
  CHECK(model.CostOf(0, {1, 3}).value().comm_ms == 0);
}

// fc1 (250 outputs: 1000 bytes per sample) -> fc2 (10 outputs), on 100 inputs.
StatusOr<Graph> TwoLinears() {
  Layer fc1;
  fc1.name = "fc1";
  fc1.op = Op::kLinear;
  fc1.inputs = {"input"};
  fc1.attrs.out_features = 250;
  Layer fc2 = fc1;
  fc2.name = "fc2";
  fc2.inputs = {"fc1"};
  fc2.attrs.out_features = 10;
  return Graph::Create("two", {100}, {fc1, fc2});
}

TEST_CASE("layer costs and plan totals", "[cost]") {
  // fc1 -> fc2 on 2 and 3 devices of a batch of 10.
  auto graph = TwoLinears();
  REQUIRE(graph.ok());
  const Cluster cluster = TwoNodeCluster(8, 1.0, 1.0);
  FakeProfile profile;
  CostModel model(*graph, profile, cluster, 10);

  // Compute runs at the largest share: ceil(10 / 3) = 4 samples.
  const LayerTime fc2_time = model.Compute(1, 3).value();
  CHECK(fc2_time.forward_ms == Approx(0.5 + 0.25 * 4 * 2));
  CHECK(fc2_time.backward_ms == Approx(2 * fc2_time.forward_ms));
  CHECK_FALSE(model.Compute(1, 11).ok());

  const std::vector<int> counts{2, 3};
  const LayerCost cost = model.CostOf(1, counts).value();
  const double resplit = 2 * ResplitCost::Compute(cluster, 10, 2, 3).Ms(1000);
  CHECK(resplit > 0);
  CHECK(cost.comm_ms == Approx(resplit));  // the gradient sync is the plan's (below)
  // Both layers' gradients are under the 1 MiB first bucket of their device sets, so both
  // buckets close when backward ends and nothing hides them: fc2's (last layer first) runs,
  // then fc1's.
  const double fc2_sync = AllReduceMs(cluster, graph->layer(1).params * 4, 3);
  const double fc1_sync = AllReduceMs(cluster, graph->layer(0).params * 4, 2);

  const double single = model.SingleDeviceMs().value();
  CHECK(single == Approx(3 * (0.5 + 0.25 * 10) + 3 * (0.5 + 0.25 * 10 * 2)));

  auto plan = model.Evaluate(counts, 4);
  REQUIRE(plan.ok());
  REQUIRE(plan->Validate().ok());
  CHECK(plan->layers[0].devices == std::vector<int>{0, 1});
  CHECK(plan->layers[1].samples == std::vector<int64_t>{4, 3, 3});
  CHECK(plan->layers[0].comm_ms == Approx(fc1_sync));
  CHECK(plan->layers[1].comm_ms == Approx(resplit + fc2_sync));
  const double fc1_ms =
      plan->layers[0].forward_ms + plan->layers[0].backward_ms + plan->layers[0].comm_ms;
  const double fc2_ms = cost.total_ms() + fc2_sync;
  CHECK(plan->totals.iteration_ms == Approx(fc1_ms + fc2_ms));
  CHECK(plan->totals.gpu_seconds == Approx((2 * fc1_ms + 3 * fc2_ms) / 1000));
  CHECK(plan->totals.amplification == Approx((2 * fc1_ms + 3 * fc2_ms) / single));
  CHECK(plan->totals.devices_used == 3);
  CHECK(plan->single_device_ms == Approx(single));
  CHECK_FALSE(model.Evaluate({2, 5}, 4).ok());  // more devices than the plan has
  CHECK_FALSE(model.Evaluate(std::vector<int>{2}, 4).ok());
}

// FakeProfile with an iteration overhead of 1 ms + 0.1 ms per sample.
class OverheadProfile : public FakeProfile {
 public:
  double IterationOverheadMs(int64_t batch) const override {
    return 1 + 0.1 * static_cast<double>(batch);
  }
};

TEST_CASE("the iteration overhead is charged once, to the output layer at its share", "[cost]") {
  auto graph = TwoLinears();
  REQUIRE(graph.ok());
  const Cluster cluster = TwoNodeCluster(8, 1.0, 1.0);
  FakeProfile plain;
  OverheadProfile with_overhead;
  CostModel before(*graph, plain, cluster, 10);
  CostModel after(*graph, with_overhead, cluster, 10);
  // fc2 (the output) on 3 devices: a share of 4 samples.
  CHECK(after.Compute(1, 3)->forward_ms == Approx(before.Compute(1, 3)->forward_ms + 1.4));
  CHECK(after.Compute(1, 3)->backward_ms == Approx(before.Compute(1, 3)->backward_ms));
  CHECK(after.Compute(0, 3)->forward_ms == Approx(before.Compute(0, 3)->forward_ms));
  CHECK(*after.SingleDeviceMs() == Approx(*before.SingleDeviceMs() + 2.0));
  const std::vector<int> counts{2, 3};
  const PlanTotals old_totals = before.Totals(counts, 4).value();
  const PlanTotals new_totals = after.Totals(counts, 4).value();
  CHECK(new_totals.iteration_ms == Approx(old_totals.iteration_ms + 1.4));
  CHECK(new_totals.gpu_seconds == Approx(old_totals.gpu_seconds + 3 * 1.4 / 1000));
}

TEST_CASE("a gather onto fewer devices is charged device time on the larger set", "[cost]") {
  // fc1 on 3 devices feeds fc2 on 2: every one of fc1's 3 devices sends, so the re-split holds 3
  // devices, although it is charged to the consumer on 2.
  auto graph = TwoLinears();
  REQUIRE(graph.ok());
  const Cluster cluster = TwoNodeCluster(8, 1.0, 1.0, 3.0, 3.0);
  FakeProfile profile;
  CostModel model(*graph, profile, cluster, 12);
  for (const std::vector<int>& counts : {std::vector<int>{3, 2}, std::vector<int>{2, 3}}) {
    INFO(counts[0] << " -> " << counts[1]);
    const double resplit = model.ResplitMs(0, counts[0], counts[1]);
    REQUIRE(resplit > 0);
    auto plan = model.Evaluate(counts, 4);
    REQUIRE(plan.ok());
    const LayerPlacement& first = plan->layers[0];
    const LayerPlacement& second = plan->layers[1];
    const double others_ms =
        counts[0] * (first.forward_ms + first.backward_ms + first.comm_ms) +
        counts[1] * (second.forward_ms + second.backward_ms + second.comm_ms - resplit);
    CHECK(plan->totals.gpu_seconds * 1000 == Approx(others_ms + 3 * resplit));
  }
}

// forward = 1 ms per sample up to 8 samples, 2 ms per sample beyond (a CPU cache spilling).
class SpillingProfile : public Profile {
 public:
  std::string source() const override { return "spilling"; }
  StatusOr<LayerTime> Time(const Graph&, int, int64_t batch) const override {
    const double per_sample = batch > 8 ? 2.0 : 1.0;
    return LayerTime{per_sample * static_cast<double>(batch), 0};
  }
};

TEST_CASE("amplification counts against the least device time one device needs", "[cost]") {
  auto graph = TwoLinears();
  REQUIRE(graph.ok());
  const Cluster cluster = TwoNodeCluster(8, 1.0, 1.0);
  // Where no layer's time per sample rises with the batch it is the one-device time.
  FakeProfile falling;
  CostModel plain(*graph, falling, cluster, 10);
  CHECK(*plain.LeastDeviceMs(4) == Approx(*plain.SingleDeviceMs()));
  CHECK(plain.Totals(std::vector<int>{1, 1}, 4)->amplification == Approx(1.0));
  // Where it rises, one device is best off with pieces of 8 or fewer: 16 samples take 32 ms at
  // once but 2 x 8 = 16 ms in two pieces, per layer.
  SpillingProfile spilling;
  CostModel model(*graph, spilling, cluster, 16);
  CHECK(*model.SingleDeviceMs() == Approx(64.0));
  CHECK(*model.LeastDeviceMs(2) == Approx(32.0));
  CHECK(*model.LeastDeviceMs(1) == Approx(64.0));  // one piece: the whole batch
  // So the one-device plan spends twice the least; two devices of 8 spend it (and pay for the
  // re-splits and gradient sums).
  CHECK(model.Totals(std::vector<int>{1, 1}, 2)->amplification == Approx(2.0));
  CHECK(model.Totals(std::vector<int>{2, 2}, 2)->amplification >= 1.0);
  CHECK(model.Evaluate(std::vector<int>{1, 1}, 2)->single_device_ms == Approx(64.0));
}

TEST_CASE("a limit one device with the whole batch exceeds is met by splitting it, or refused",
          "[cost]") {
  auto graph = TwoLinears();
  REQUIRE(graph.ok());
  SpillingProfile spilling;
  PlanOptions options;
  options.global_batch = 16;
  options.devices = 2;
  options.amplification_limit = 1.5;  // one device alone spends 2x the least
  auto plan = PlanBurstParallel(*graph, spilling, TwoNodeCluster(8, 100.0, 100.0), options);
  REQUIRE(plan.ok());
  CHECK(plan->totals.amplification <= 1.5);
  CHECK(plan->totals.devices_used == 2);
  // On links so slow that splitting costs more than the limit too, there is no plan.
  auto alone = PlanBurstParallel(*graph, spilling, TwoNodeCluster(8, 1e-4, 1e-4, 1e4), options);
  REQUIRE_FALSE(alone.ok());
  CHECK(alone.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(alone.status().message(), Catch::Contains("raise the limit"));
}

TEST_CASE("no plan spends less device time than one device, however noisy the measured profile",
          "[cost]") {
  // A measured profile of small_cnn at batches 1, 2, 4, ..., 128 with times that often rise
  // faster than the batch (load spikes, as `deepool up` once measured on a busy machine: its
  // demo plan then claimed an amplification of 0.05). Counted against the least device time one
  // device needs (CostModel::LeastDeviceMs), g devices with ceil(B / g) samples each never
  // spend less than one device, whatever the profile.
  auto graph = zoo::BuildModel("small_cnn", {10, 0, true});
  REQUIRE(graph.ok());
  std::mt19937 random(2046);
  std::uniform_real_distribution<double> noise(0.0, 1.0);
  const int64_t global_batch = 128;
  for (int trial = 0; trial < 20; ++trial) {
    ProfileData data;
    data.device = "cpu";
    data.model = "small_cnn";
    auto noisy = [&](int64_t batch) {
      const double spike = noise(random) < 0.2 ? 50.0 : 1.0;
      return spike * (0.05 + 0.01 * static_cast<double>(batch)) * (0.5 + noise(random));
    };
    for (const Layer& layer : graph->layers()) {
      LayerProfileData entry{layer.name, OpName(layer.op), {}};
      for (int64_t batch = 1; batch <= global_batch; batch *= 2) {
        entry.batches.push_back({batch, noisy(batch), noisy(batch)});
      }
      data.layers.push_back(std::move(entry));
    }
    for (int64_t batch = 1; batch <= global_batch; batch *= 2) {
      data.iteration_overhead.push_back({batch, 10 * noisy(batch)});
    }
    ProfileOptions options;
    options.allow_extrapolation = true;
    auto profile = TableProfile::Create(data, *graph, options, "noisy");
    REQUIRE(profile.ok());
    Cluster cluster = TwoNodeCluster(2, 5.0, 3.0, 30, 50);
    CostModel model(*graph, **profile, cluster, global_batch);
    INFO("trial " << trial);
    for (int round = 0; round < 50; ++round) {
      std::vector<int> counts;
      for (int id = 0; id < graph->num_layers(); ++id) counts.push_back(1 + random() % 4);
      auto totals = model.Totals(counts, 4);
      REQUIRE(totals.ok());
      CHECK(totals->amplification >= 1 - 1e-9);
    }
    PlanOptions plan_options;
    plan_options.global_batch = global_batch;
    plan_options.devices = 4;
    auto plan = PlanBurstParallel(*graph, **profile, cluster, plan_options);
    REQUIRE(plan.ok());
    CHECK(plan->totals.amplification >= 1 - 1e-9);
    CHECK(plan->data_parallel.amplification >= 1 - 1e-9);
  }
}

}  // namespace
}  // namespace deepool::planner

// Gradient synchronisation (planner/gradient_sync.h) and its use in the cost model: ring against
// tree, buckets formed as the runtime forms them, all-reduces overlapped with backward, and the
// data-parallel baseline never predicted slower than the old serial per-layer ring model.
#include "planner/gradient_sync.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/device_model.h"
#include "planner/graph.h"
#include "planner/search.h"
#include "planner/zoo/zoo.h"
#include "tests/unit/test_layers.h"

namespace deepool::planner {
namespace {

// 1 GB/s (1e-6 ms per byte) and 10 us inside a node of 8, slower between nodes.
Cluster SlowCluster() {
  Cluster cluster;
  cluster.nodes = 8;
  cluster.devices_per_node = 8;
  cluster.intra_node = Link{1.0, 10.0};
  cluster.inter_node = Link{0.5, 20.0};
  return cluster;
}

// forward = 0.5 + 0.25 x batch x (layer id + 1), backward = 2 x forward.
class FakeProfile : public Profile {
 public:
  std::string source() const override { return "fake"; }
  StatusOr<LayerTime> Time(const Graph& graph, int layer_id, int64_t batch) const override {
    (void)graph;
    const double forward = 0.5 + 0.25 * static_cast<double>(batch) * (layer_id + 1);
    return LayerTime{forward, 2 * forward};
  }
};

Layer Linear(const std::string& name, const std::string& input, int64_t out) {
  return deepool::testing::LinearLayer(name, input, out);
}

// Gradients (fp32): fc0 1000x125+125 -> 500,500 B; fc1 125x2000+2000 -> 1,008,000 B (under
// 1 MiB); fc2 2000x250+250 -> 2,001,000 B (over 1 MiB).
Graph ThreeLayers() {
  auto graph = Graph::Create(
      "three", {1000},
      {Linear("fc0", "input", 125), Linear("fc1", "fc0", 2000), Linear("fc2", "fc1", 250)});
  REQUIRE(graph.ok());
  return *std::move(graph);
}

TEST_CASE("the tree wins at many devices and small messages, the ring at few and large",
          "[gradient_sync]") {
  const Cluster cluster = SlowCluster();
  // 64 devices over 8 nodes, 1 MB: ring 2 x 63/64 x 2 ms + 126 x 20 us = 3.9375 + 2.52 ms;
  // tree 2 x 2 ms + 2 x 6 x 20 us = 4.24 ms.
  CHECK(RingAllReduceMs(cluster, 1'000'000, 64) == Approx(3.9375 + 2.52));
  CHECK(TreeAllReduceMs(cluster, 1'000'000, 64) == Approx(4.0 + 0.24));
  CHECK(AllReduceMs(cluster, 1'000'000, 64) == Approx(4.24));
  CHECK(AllReduceMs(cluster, 1'000'000, 64, /*allow_tree=*/false) == Approx(6.4575));
  // 2 devices: the ring sends each byte once each way (1 x bytes), the tree twice; the ring
  // always wins, at any size.
  for (int64_t bytes : {int64_t{8}, int64_t{1'000'000}}) {
    CHECK(AllReduceMs(cluster, bytes, 2) == Approx(RingAllReduceMs(cluster, bytes, 2)));
    CHECK(RingAllReduceMs(cluster, bytes, 2) < TreeAllReduceMs(cluster, bytes, 2));
  }
  // 8 devices in one node, 25 MiB: the ring's 1.75 x bytes beats the tree's 2 x bytes.
  const int64_t bucket = int64_t{25} << 20;
  CHECK(AllReduceMs(cluster, bucket, 8) == Approx(RingAllReduceMs(cluster, bucket, 8)));
  CHECK(RingAllReduceMs(cluster, bucket, 8) < TreeAllReduceMs(cluster, bucket, 8));
  // Tree depth is ceil(log2 g): 5 devices are as deep as 8.
  CHECK(TreeAllReduceMs(cluster, 8, 5) == Approx(TreeAllReduceMs(cluster, 8, 8)));
  CHECK(TreeAllReduceMs(cluster, 8, 4) < TreeAllReduceMs(cluster, 8, 5));
  CHECK(AllReduceMs(cluster, 1'000'000, 1) == 0);
}

TEST_CASE("buckets form per device set in backward order with a 1 MiB first bucket",
          "[gradient_sync]") {
  // Backward order: layer 5 on 4 devices, 4 on 2, 3 on 4, 2 on 1 (nothing to sync), 1 and 0 on 4.
  const std::vector<ReadyGradient> gradients = {{5, 4, 600'000, 1.0}, {4, 2, 300'000, 2.0},
                                                {3, 4, 600'000, 3.0}, {2, 1, 900'000, 4.0},
                                                {1, 4, 100'000, 5.0}, {0, 4, 100'000, 6.0}};
  const auto buckets =
      FormGradientBuckets(gradients, GradientBucketBytes(kDefaultGradientBucketMb), 7);
  // 4 devices: 5 and 3 reach 1.2 MB >= 1 MiB at 3.0 ms; 1 and 0 stay under 25 MiB until the end.
  // 2 devices: layer 4 alone, until the end. Flushed by first layer, last layers first.
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0].devices == 4);
  CHECK(buckets[0].layers == std::vector<int>{5, 3});
  CHECK(buckets[0].bytes == 1'200'000);
  CHECK(buckets[0].ready_ms == 3.0);
  CHECK(buckets[1].devices == 2);
  CHECK(buckets[1].layers == std::vector<int>{4});
  CHECK(buckets[1].ready_ms == 7.0);
  CHECK(buckets[2].devices == 4);
  CHECK(buckets[2].layers == std::vector<int>{1, 0});
  CHECK(buckets[2].ready_ms == 7.0);
  // Cap 0: one bucket per layer, each as soon as it is ready.
  const auto per_layer = FormGradientBuckets(gradients, 0, 7);
  REQUIRE(per_layer.size() == 5);
  CHECK(per_layer[2].layers == std::vector<int>{3});
  CHECK(per_layer[2].ready_ms == 3.0);
  // A cap under 1 MiB caps the first bucket too.
  const auto small = FormGradientBuckets(gradients, 500'000, 7);
  REQUIRE(small.size() == 4);
  CHECK(small[0].layers == std::vector<int>{5});
}

TEST_CASE("three layers on 4 devices: the first bucket hides behind backward, the rest is exposed",
          "[gradient_sync]") {
  const Graph graph = ThreeLayers();
  const Cluster cluster = SlowCluster();
  FakeProfile profile;
  CostModel model(graph, profile, cluster, 8);
  const std::vector<int> counts{4, 4, 4};
  // 2 samples per device: forward 1.0, 1.5, 2.0 ms (4.5 ms), backward 2, 3, 4 ms. Backward
  // starts at 4.5: fc2 done at 8.5, fc1 at 11.5, fc0 at 13.5 (the end).
  // Buckets: fc2's 2,001,000 B fill the first (1 MiB) at 8.5; fc1 + fc0 = 1,508,500 B wait for
  // the end. Ring on 4 (better than the tree above 40 kB here): 1.5 x bytes x 1e-6 + 6 x 0.01.
  const double first_ms = 1.5 * 2'001'000 * 1e-6 + 0.06;   // 3.0615: 8.5 .. 11.5615, hidden
  const double second_ms = 1.5 * 1'508'500 * 1e-6 + 0.06;  // 2.32275: 13.5 .. 15.82275
  const GradientSyncTimeline sync = model.GradientSync(counts).value();
  REQUIRE(sync.buckets.size() == 2);
  CHECK(sync.buckets[0].layers == std::vector<int>{2});
  CHECK(sync.buckets[0].start_ms == Approx(8.5));
  CHECK(sync.buckets[0].end_ms == Approx(8.5 + first_ms));
  CHECK(sync.buckets[0].exposed_ms == 0);
  CHECK(sync.buckets[1].layers == std::vector<int>{1, 0});
  CHECK(sync.buckets[1].start_ms == Approx(13.5));
  CHECK(sync.backward_end_ms == Approx(13.5));
  CHECK(sync.exposed_ms == Approx(second_ms));

  const Plan plan = model.Evaluate(counts, 4).value();
  CHECK(plan.totals.iteration_ms == Approx(13.5 + second_ms));
  // The exposed time is charged to the bucket's layers by their bytes.
  CHECK(plan.layers[2].comm_ms == 0);
  CHECK(plan.layers[1].comm_ms == Approx(second_ms * 1'008'000 / 1'508'500));
  CHECK(plan.layers[0].comm_ms == Approx(second_ms * 500'500 / 1'508'500));
  CHECK(plan.totals.gpu_seconds * 1000 == Approx(4 * (13.5 + second_ms)));

  SECTION("overlap off: every bucket waits for the end of backward") {
    CostModelOptions serial;
    serial.gradient_sync.overlap = false;
    CostModel serial_model(graph, profile, cluster, 8, serial);
    CHECK(serial_model.Totals(counts, 4).value().iteration_ms ==
          Approx(13.5 + first_ms + second_ms));
  }
  SECTION("a short backward leaves the first bucket partly exposed and delays the second") {
    // The same gradients ready at 1.0, 2.0 and 3.0 ms of a backward that ends at 3.0: the
    // first bucket (1.0 .. 4.0615) runs past the end, and the second waits for it.
    const std::vector<ReadyGradient> gradients = {
        {2, 4, 2'001'000, 1.0}, {1, 4, 1'008'000, 2.0}, {0, 4, 500'500, 3.0}};
    const GradientSyncTimeline tight =
        ScheduleGradientSync(gradients, 3.0, cluster, GradientSyncOptions{});
    REQUIRE(tight.buckets.size() == 2);
    CHECK(tight.buckets[0].exposed_ms == Approx(1.0 + first_ms - 3.0));
    CHECK(tight.buckets[1].start_ms == Approx(1.0 + first_ms));  // the communicator was busy
    CHECK(tight.exposed_ms == Approx(1.0 + first_ms + second_ms - 3.0));
  }
}

TEST_CASE("a long backward hides every bucket closed during it", "[gradient_sync]") {
  const Cluster cluster = SlowCluster();
  // Ten 2 MB gradients on 8 devices, each ready 100 ms after the last: every bucket but the
  // last closes during backward and ends long before the next is ready.
  std::vector<ReadyGradient> gradients;
  for (int i = 0; i < 10; ++i) gradients.push_back({9 - i, 8, 20'000'000, 100.0 * (i + 1)});
  GradientSyncOptions options;
  options.bucket_bytes = 20'000'000;
  const GradientSyncTimeline sync = ScheduleGradientSync(gradients, 1000, cluster, options);
  REQUIRE(sync.buckets.size() == 10);
  const double each_ms = AllReduceMs(cluster, 20'000'000, 8);
  CHECK(each_ms < 100);
  // The last gradient is ready when backward ends: only its all-reduce is exposed.
  CHECK(sync.exposed_ms == Approx(each_ms));
  CHECK(sync.all_reduce_ms == Approx(10 * each_ms));
  options.overlap = false;
  CHECK(ScheduleGradientSync(gradients, 1000, cluster, options).exposed_ms == Approx(10 * each_ms));
}

// The old model: every layer's gradients in their own ring all-reduce and batch norm's
// statistics by the ring, all serial.
double OldSerialDataParallelMs(const Graph& graph, const Profile& profile, const Cluster& cluster,
                               int64_t batch, int devices, bool sync_batch_norm) {
  double total = 0;
  const int64_t share = (batch + devices - 1) / devices;
  for (int id = 0; id < graph.num_layers(); ++id) {
    const Layer& layer = graph.layer(id);
    total += profile.Time(graph, id, share).value().total_ms();
    total += RingAllReduceMs(cluster, layer.params * 4, devices);
    if (sync_batch_norm && layer.op == Op::kBatchNorm2d) {
      total += 2 * RingAllReduceMs(cluster, (2 * layer.output_shape.front() + 1) * 8, devices);
    }
  }
  return total;
}

TEST_CASE("data parallelism is never predicted slower than by the old serial model",
          "[gradient_sync]") {
  const auto profile = MakeAnalyticalProfile(DevicePreset("a100").value());
  for (const char* name : {"resnet50", "vgg16", "inception_v3", "mlp"}) {
    auto graph = zoo::BuildModel(name);
    REQUIRE(graph.ok());
    for (const char* preset : {"dgx-a100", "dgx-a100x8"}) {
      for (int devices : {2, 8, 64}) {
        INFO(name << " on " << devices << " devices of " << preset);
        const Cluster cluster = ResizeCluster(ClusterPreset(preset).value(), devices);
        PlanOptions options;
        options.global_batch = 128;
        options.devices = devices;
        auto plan = PlanDataParallel(*graph, *profile, cluster, options);
        REQUIRE(plan.ok());
        const double old_synced = OldSerialDataParallelMs(*graph, *profile, cluster, 128, devices,
                                                          /*sync_batch_norm=*/true);
        const double old_baseline = OldSerialDataParallelMs(*graph, *profile, cluster, 128, devices,
                                                            /*sync_batch_norm=*/false);
        CHECK(plan->totals.iteration_ms <= old_synced * (1 + 1e-12));
        CHECK(plan->data_parallel.iteration_ms <= old_baseline * (1 + 1e-12));
        // The old model is still there: ring only, one bucket per layer, no overlap.
        options.gradient_sync.bucket_bytes = 0;
        options.gradient_sync.overlap = false;
        options.gradient_sync.tree = false;
        auto old = PlanDataParallel(*graph, *profile, cluster, options);
        REQUIRE(old.ok());
        CHECK(old->totals.iteration_ms == Approx(old_synced).epsilon(1e-9));
        CHECK(old->data_parallel.iteration_ms == Approx(old_baseline).epsilon(1e-9));
      }
    }
  }
}

}  // namespace
}  // namespace deepool::planner

// Executor correctness: after K steps, burst-parallel and data-parallel plans give the same
// parameters and losses as single-device training on the whole batch (fp32 tolerance). Ranks
// run as threads, over the FakeNetwork with NCCL's matching rules or over Gloo on loopback.
// Plans with branches on different device sets are in executor_branches_test.cc.
#include <catch2/catch.hpp>

#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"

namespace deepool::worker::testing {
namespace {

TEST_CASE("mlp data parallel over 3 ranks with batch 8 equals single-device training",
          "[executor]") {
  torch::set_num_threads(1);
  auto graph = Zoo("mlp");
  auto plan = MakePlan(graph, 8, 3, {0, 1, 2});
  auto reference = TrainSingleDevice(graph, 8, 4, Sgd(), 7, 11);
  auto runs = RunRanks(graph, plan, 4, Sgd(), 7, 11, FakeComms(3));
  RequireMatchesReference(runs, reference);
}

// Records the size of every all-reduce a rank starts in *sizes (which outlives it), forwarding
// them to `inner`.
class CountingCommunicator final : public Communicator {
 public:
  CountingCommunicator(std::unique_ptr<Communicator> inner, std::vector<int64_t>* sizes)
      : inner_(std::move(inner)), sizes_(sizes) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  Status CreateGroups(const std::vector<RankGroup>& groups) override {
    return inner_->CreateGroups(groups);
  }
  StatusOr<std::unique_ptr<CommWork>> Exchange(std::vector<P2POp> ops) override {
    return inner_->Exchange(std::move(ops));
  }
  StatusOr<std::unique_ptr<CommWork>> AllReduceSum(torch::Tensor tensor,
                                                   const RankGroup& group) override {
    sizes_->push_back(tensor.numel());
    return inner_->AllReduceSum(std::move(tensor), group);
  }

 private:
  std::unique_ptr<Communicator> inner_;
  std::vector<int64_t>* sizes_;
};

// Every rank reports the global batch's loss of each iteration, as one device computes it.
void RequireGlobalLossesMatch(const std::vector<RankRun>& runs, const TrainResult& reference) {
  for (const auto& run : runs) {
    REQUIRE(run.result.losses.size() == reference.losses.size());
    for (size_t i = 0; i < reference.losses.size(); ++i) {
      CHECK(run.result.losses[i] == Approx(reference.losses[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("gradient sums go in DDP-style buckets and give the same parameters", "[executor]") {
  torch::set_num_threads(1);
  // Four 128x128 layers (64 KiB of weights each, and a bias) on two ranks.
  planner::zoo::LayerListBuilder b;
  std::string x = "input";
  for (int i = 1; i <= 4; ++i) x = b.Linear("fc" + std::to_string(i), x, 128, 128);
  auto graph = BuildGraph("four_linear", {128}, std::move(b), x);
  auto plan = MakePlan(graph, 8, 2, {0, 1});
  const int64_t layer_values = 128 * 128 + 128;

  struct Case {
    int64_t bucket_bytes;
    // Rank 0's all-reduces in one iteration. The loss rides as one more element of the first
    // bucket over the world: no all-reduce of its own.
    std::vector<int64_t> sums;
  };
  const Case per_layer{0, {layer_values + 1, layer_values, layer_values, layer_values}};
  // A bucket starts once it holds 160 KiB: fc4, fc3 and fc2 (3 x 64.5 KiB), then fc1 at the end.
  const Case small{160 << 10, {3 * layer_values + 1, layer_values}};
  // The default (25 MiB, the first bucket 1 MiB): everything at the end of backward.
  const Case standard{planner::GradientBucketBytes(planner::kDefaultGradientBucketMb),
                      {4 * layer_values + 1}};

  auto reference = TrainSingleDevice(graph, 8, 3, Sgd(), 5, 9);
  std::optional<ParamMap> first;
  for (const Case& c : {per_layer, small, standard}) {
    INFO("gradient_bucket_bytes " << c.bucket_bytes);
    auto net = std::make_shared<FakeNetwork>(2, FakeSemantics::kNccl);
    std::vector<std::vector<int64_t>> sizes(2);
    RankOptions options;
    options.gradient_bucket_bytes = c.bucket_bytes;
    auto runs = RunRanks(
        graph, plan, 3, Sgd(), 5, 9,
        [&](int rank) -> StatusOr<std::unique_ptr<Communicator>> {
          auto inner = net->Join(rank, std::chrono::seconds(30));
          return std::unique_ptr<Communicator>(std::make_unique<CountingCommunicator>(
              std::move(inner), &sizes[static_cast<size_t>(rank)]));
        },
        options);
    RequireMatchesReference(runs, reference);
    RequireGlobalLossesMatch(runs, reference);  // summed in the bucket
    // Three iterations of the same sums.
    std::vector<int64_t> want;
    for (int i = 0; i < 3; ++i) want.insert(want.end(), c.sums.begin(), c.sums.end());
    CHECK(sizes[0] == want);
    CHECK(sizes[1] == want);
    // Bucketing only groups the same sums: the parameters are bit-identical.
    if (!first) {
      first = runs[0].result.params;
    } else {
      for (const auto& [name, tensor] : runs[0].result.params) {
        INFO(name);
        CHECK(torch::equal(tensor, first->at(name)));
      }
    }
  }
}

TEST_CASE("with no gradient bucket over the world the loss has its own sum", "[executor]") {
  torch::set_num_threads(1);
  planner::zoo::LayerListBuilder b;
  std::string x = "input";
  for (int i = 1; i <= 4; ++i) x = b.Linear("fc" + std::to_string(i), x, 16, 16);
  auto graph = BuildGraph("four_linear", {16}, std::move(b), x);
  // Every layer on one rank: no gradient sums at all.
  auto plan =
      MakePlan(graph, 8, 2, {0, 1}, {{"fc1", {0}}, {"fc2", {1}}, {"fc3", {0}}, {"fc4", {1}}});
  auto reference = TrainSingleDevice(graph, 8, 3, Sgd(), 5, 9);
  auto net = std::make_shared<FakeNetwork>(2, FakeSemantics::kNccl);
  std::vector<std::vector<int64_t>> sizes(2);
  auto runs = RunRanks(
      graph, plan, 3, Sgd(), 5, 9, [&](int rank) -> StatusOr<std::unique_ptr<Communicator>> {
        auto inner = net->Join(rank, std::chrono::seconds(30));
        return std::unique_ptr<Communicator>(std::make_unique<CountingCommunicator>(
            std::move(inner), &sizes[static_cast<size_t>(rank)]));
      });
  RequireMatchesReference(runs, reference);
  RequireGlobalLossesMatch(runs, reference);
  CHECK(sizes[0] == std::vector<int64_t>{1, 1, 1});
  CHECK(sizes[1] == std::vector<int64_t>{1, 1, 1});
}

TEST_CASE("mlp burst plan on different device sets equals single-device training", "[executor]") {
  torch::set_num_threads(1);
  auto graph = Zoo("mlp");
  auto plan = MakePlan(
      graph, 8, 3, {0, 1, 2},
      {{"fc1", {0, 1, 2}}, {"relu1", {0, 1}}, {"fc2", {1}}, {"relu2", {0, 2}}, {"fc3", {2}}});
  auto reference = TrainSingleDevice(graph, 8, 4, Sgd(), 3, 5);
  auto runs = RunRanks(graph, plan, 4, Sgd(), 3, 5, FakeComms(3));
  RequireMatchesReference(runs, reference);
}

TEST_CASE("small_cnn burst plan with branches on different sets equals single device (Gloo)",
          "[executor][gloo]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  auto plan = MakePlan(graph, 8, 3, {0, 1, 2}, SmallCnnBurst());
  auto reference = TrainSingleDevice(graph, 8, 3, Sgd(), 1, 2);
  auto runs = RunRanks(graph, plan, 3, Sgd(), 1, 2, GlooComms(3));
  RequireMatchesReference(runs, reference);
}

TEST_CASE("small_cnn data parallel (batch norm on one rank) with Adam equals single device",
          "[executor]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  auto plan = MakePlan(graph, 8, 3, {0, 1, 2}, {{"stem.bn", {1}}, {"res.bn", {2}}});
  auto reference = TrainSingleDevice(graph, 8, 3, Adam(), 9, 4);
  auto runs = RunRanks(graph, plan, 3, Adam(), 9, 4, FakeComms(3));
  RequireMatchesReference(runs, reference);
}

TEST_CASE("mlp burst plan over 4 Gloo ranks with Adam equals single device", "[executor][gloo]") {
  torch::set_num_threads(1);
  auto graph = Zoo("mlp");
  auto plan =
      MakePlan(graph, 10, 4, {0, 1, 2, 3}, {{"fc2", {1, 3}}, {"relu2", {3}}, {"fc3", {0, 2}}});
  auto reference = TrainSingleDevice(graph, 10, 3, Adam(), 21, 22);
  auto runs = RunRanks(graph, plan, 3, Adam(), 21, 22, GlooComms(4));
  RequireMatchesReference(runs, reference);
}

TEST_CASE("mlp burst plan over 4 Gloo ranks with AdamW equals single device", "[executor][gloo]") {
  torch::set_num_threads(1);
  auto graph = Zoo("mlp");
  auto plan =
      MakePlan(graph, 10, 4, {0, 1, 2, 3}, {{"fc2", {1, 3}}, {"relu2", {3}}, {"fc3", {0, 2}}});
  auto reference = TrainSingleDevice(graph, 10, 3, AdamW(), 21, 22);
  auto runs = RunRanks(graph, plan, 3, AdamW(), 21, 22, GlooComms(4));
  RequireMatchesReference(runs, reference);
}

TEST_CASE("two weighted outputs on different device sets equal single device", "[executor]") {
  torch::set_num_threads(1);
  std::vector<planner::Layer> layers(4);
  layers[0].name = "trunk";
  layers[0].op = planner::Op::kLinear;
  layers[0].inputs = {"input"};
  layers[0].attrs.out_features = 12;
  layers[1].name = "act";
  layers[1].op = planner::Op::kRelu;
  layers[1].inputs = {"trunk"};
  layers[2].name = "head";
  layers[2].op = planner::Op::kLinear;
  layers[2].inputs = {"act"};
  layers[2].attrs.out_features = 4;
  layers[3].name = "aux";
  layers[3].op = planner::Op::kLinear;
  layers[3].inputs = {"trunk"};
  layers[3].attrs.out_features = 4;
  auto graph =
      planner::Graph::Create("two_heads", {6}, layers,
                             {planner::GraphOutput{"head", 1.0}, planner::GraphOutput{"aux", 0.4}});
  REQUIRE(graph.ok());
  auto plan = MakePlan(*graph, 7, 3, {0, 1, 2}, {{"act", {1, 2}}, {"head", {2}}, {"aux", {0, 1}}});
  auto reference = TrainSingleDevice(*graph, 7, 4, Sgd(), 5, 6);
  auto runs = RunRanks(*graph, plan, 4, Sgd(), 5, 6, FakeComms(3));
  RequireMatchesReference(runs, reference);
}

TEST_CASE("loss falls on the synthetic task", "[executor]") {
  torch::set_num_threads(1);
  auto graph = Zoo("mlp");
  auto plan = MakePlan(graph, 32, 2, {0, 1}, {{"fc3", {1}}});
  OptimizerSpec optimizer = Sgd();
  optimizer.lr = 0.05;
  auto runs = RunRanks(graph, plan, 60, optimizer, 1, 1, FakeComms(2));
  REQUIRE(runs[0].status.ok());
  const auto& losses = runs[0].result.losses;
  double first = (losses[0] + losses[1] + losses[2]) / 3;
  double last = (losses[57] + losses[58] + losses[59]) / 3;
  INFO("first " << first << " last " << last);
  REQUIRE(last < 0.6 * first);
}

TEST_CASE("a failed rank makes the others fail with an error instead of hanging", "[executor]") {
  torch::set_num_threads(1);
  auto graph = Zoo("mlp");
  auto plan = MakePlan(graph, 8, 3, {0, 1, 2}, {{"fc2", {1}}});
  auto net = std::make_shared<FakeNetwork>(3, FakeSemantics::kNccl);
  CommMaker make_comm = [net](int rank) -> StatusOr<std::unique_ptr<Communicator>> {
    if (rank == 1) {
      net->Fail(1);
      return UnavailableError("rank 1 died");
    }
    return net->Join(rank, std::chrono::seconds(30));
  };
  auto runs = RunRanks(graph, plan, 2, Sgd(), 1, 1, make_comm);
  for (int rank : {0, 2}) {
    INFO(runs[static_cast<size_t>(rank)].status.ToString());
    REQUIRE(runs[static_cast<size_t>(rank)].status.code() == StatusCode::kUnavailable);
    REQUIRE_THAT(runs[static_cast<size_t>(rank)].status.message(),
                 Catch::Contains("rank 1 failed"));
  }
}

TEST_CASE("a stalled peer becomes DEADLINE_EXCEEDED within the timeout", "[executor]") {
  torch::set_num_threads(1);
  auto graph = Zoo("mlp");
  auto plan = MakePlan(graph, 8, 2, {0, 1});
  auto net = std::make_shared<FakeNetwork>(2, FakeSemantics::kNccl);
  CommMaker make_comm = [net](int rank) -> StatusOr<std::unique_ptr<Communicator>> {
    // Rank 1 never joins: rank 0 waits for its loss sum and gives up after 200 ms.
    if (rank == 1) return UnavailableError("rank 1 never started");
    return net->Join(rank, std::chrono::milliseconds(200));
  };
  auto runs = RunRanks(graph, plan, 1, Sgd(), 1, 1, make_comm);
  INFO(runs[0].status.ToString());
  REQUIRE(runs[0].status.code() == StatusCode::kDeadlineExceeded);
}

TEST_CASE("a plan for another world size is refused", "[executor]") {
  auto graph = Zoo("mlp");
  auto plan = MakePlan(graph, 8, 3, {0, 1, 2});
  auto net = std::make_shared<FakeNetwork>(2, FakeSemantics::kNccl);
  auto comm = net->Join(0, std::chrono::seconds(1));
  auto data = MakeSyntheticData(graph.input_shape(), 5, 8, 1);
  auto executor = Executor::Create(graph, plan, comm.get(), data.get(), BuildLayerModule, {},
                                   SystemClock::Get());
  REQUIRE(executor.status().code() == StatusCode::kInvalidArgument);
  REQUIRE_THAT(executor.status().message(), Catch::Contains("3 devices"));
}

}  // namespace
}  // namespace deepool::worker::testing

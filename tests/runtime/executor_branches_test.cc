// Executor correctness on graphs whose branches sit on different device sets, so that transfers
// run both ways between the same ranks and several edges join the same pair: the cases that
// NCCL's first-in first-out matching (tags ignored) and its blocking sends punish. Every test
// runs over the fake network with NCCL's rules (a wrong order gives swapped data, a size
// mismatch or a reported deadlock) and must equal single-device training.
#include <catch2/catch.hpp>

#include "planner/zoo/layer_list_builder.h"
#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"

namespace deepool::worker::testing {
namespace {

using planner::zoo::ConvSpec;
using planner::zoo::LayerListBuilder;
using planner::zoo::Sq;

// Batch norm on one device each (single-device statistics); the shortcut and the block's
// layers alternate between ranks 0 and 1, so both directions carry several edges.
std::map<std::string, std::vector<int>> ResidualBurst() {
  return {{"stem.conv", {0, 1}},
          {"stem.bn", {0}},
          {"stem.relu", {1}},
          {"block.conv1", {0}},
          {"block.bn1", {0}},
          {"block.relu1", {1}},
          {"block.conv2", {0, 1}},
          {"block.bn2", {1}},
          {"block.add", {0}},
          {"block.relu", {0, 1}},
          {"pool", {1}},
          {"flatten", {0, 1}},
          {"fc", {0}}};
}

// Each tower on its own sets, crossing between all three ranks; the concat takes its inputs in
// another order than they were computed.
std::map<std::string, std::vector<int>> InceptionBurst() {
  return {{"stem.conv", {0, 1, 2}},
          {"stem.relu", {0, 1}},
          {"t1.conv", {2}},
          {"t1.relu", {0, 1}},
          {"t2.reduce", {1}},
          {"t2.relu1", {0}},
          {"t2.conv", {1, 2}},
          {"t2.relu2", {0}},
          {"t3.pool", {2}},
          {"t3.conv", {0}},
          {"t3.relu", {1, 2}},
          {"concat", {0, 1, 2}},
          {"pool", {1}},
          {"flatten", {0, 2}},
          {"fc", {1}}};
}

// The same towers on two ranks: tower 1 on rank 0, tower 3 on rank 1, each consumed on the
// other rank, so that each rank has a send for the other before its own receive.
std::map<std::string, std::vector<int>> InceptionCrossing() {
  return {{"t1.conv", {0}}, {"t1.relu", {1}},  {"t2.reduce", {1}}, {"t2.relu1", {1}},
          {"t2.conv", {0}}, {"t2.relu2", {0}}, {"t3.pool", {1}},   {"t3.conv", {1}},
          {"t3.relu", {0}}, {"concat", {1}},   {"pool", {0, 1}},   {"fc", {0}}};
}

// Every tower on rank 0 and the concat on rank 1: three edges from 0 to 1, produced in one
// order (t1, t2, t3) and consumed in another (t3, t1, t2), all of the same shape.
std::map<std::string, std::vector<int>> InceptionFunnel() {
  return {{"concat", {1}}, {"pool", {1}}, {"flatten", {1}}, {"fc", {1}}};
}

void RequireEquivalent(const planner::Graph& graph, const planner::Plan& plan, int64_t batch,
                       int iterations, uint64_t seed, uint64_t data_seed, const CommMaker& comms) {
  auto reference = TrainSingleDevice(graph, batch, iterations, Sgd(), seed, data_seed);
  auto runs = RunRanks(graph, plan, iterations, Sgd(), seed, data_seed, comms);
  RequireMatchesReference(runs, reference);
}

TEST_CASE("small_cnn burst plan with branches on different sets equals single device",
          "[executor][branches]") {
  torch::set_num_threads(1);
  planner::zoo::ModelOptions options;
  options.num_classes = 5;
  auto graph = planner::zoo::BuildModel("small_cnn", options);
  REQUIRE(graph.ok());
  auto plan = MakePlan(*graph, 8, 3, {0, 1, 2}, SmallCnnBurst());
  RequireEquivalent(*graph, plan, 8, 3, 1, 2, FakeComms(3));
}

TEST_CASE(
    "residual block with the shortcut and the block on alternating ranks equals single "
    "device",
    "[executor][branches]") {
  torch::set_num_threads(1);
  auto graph = ResidualBlock();
  auto plan = MakePlan(graph, 7, 2, {0, 1}, ResidualBurst());
  RequireEquivalent(graph, plan, 7, 3, 4, 5, FakeComms(2));
}

TEST_CASE("inception block with towers on different sets over 3 ranks equals single device",
          "[executor][branches]") {
  torch::set_num_threads(1);
  auto graph = InceptionBlock(/*batch_norm=*/false);
  auto plan = MakePlan(graph, 9, 3, {0, 1, 2}, InceptionBurst());
  RequireEquivalent(graph, plan, 9, 3, 6, 7, FakeComms(3));
}

TEST_CASE("inception block with towers crossing between 2 ranks equals single device",
          "[executor][branches]") {
  torch::set_num_threads(1);
  auto graph = InceptionBlock(/*batch_norm=*/false);
  auto plan = MakePlan(graph, 6, 2, {0, 1}, InceptionCrossing());
  RequireEquivalent(graph, plan, 6, 3, 8, 9, FakeComms(2));
}

TEST_CASE("inception block whose towers feed a concat on another rank equals single device",
          "[executor][branches]") {
  torch::set_num_threads(1);
  auto graph = InceptionBlock(/*batch_norm=*/false);
  auto plan = MakePlan(graph, 6, 2, {0}, InceptionFunnel());
  RequireEquivalent(graph, plan, 6, 3, 10, 11, FakeComms(2));
}

TEST_CASE("inception block with towers on different sets equals single device (Gloo)",
          "[executor][branches][gloo]") {
  torch::set_num_threads(1);
  auto graph = InceptionBlock(/*batch_norm=*/false);
  auto plan = MakePlan(graph, 9, 3, {0, 1, 2}, InceptionBurst());
  RequireEquivalent(graph, plan, 9, 2, 6, 7, GlooComms(3));
}

}  // namespace
}  // namespace deepool::worker::testing

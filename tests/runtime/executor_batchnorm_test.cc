// Synchronised batch norm (batch_norm.h): batch norm layers split over several ranks with uneven
// shares train exactly like one device on the whole batch — parameters, running statistics and
// counters, losses — over the NCCL-rules fake and over Gloo. Every equivalence test also trains
// with synchronisation off (ExecutorOptions::sync_batch_norm = false) and requires a mismatch, so
// it can fail. Setting DEEPOOL_TEST_BN_SYNC_OFF=1 runs the equivalence checks themselves without
// synchronisation, to see how they fail.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"
#include "tests/temp_dir.h"
#include "worker/runtime/checkpoints/checkpoint.h"
#include "worker/runtime/layers/batch_norm.h"

namespace deepool::worker::testing {
namespace {

using deepool::testing::TempDir;

// fp32 training compared in float64. Synchronised statistics come from per-rank two-pass moments
// combined in float64 and the backward from autograd through those ops, where torch's kernel
// reduces the whole batch at once: the same values up to fp32 rounding. Measured after five
// steps: at most 2.4e-7 absolute (two ulps of values near 1), 12 % of this tolerance; a purely
// relative 1e-5 would fail on entries near zero (5e-5 relative at |want| ~ 1e-3), hence atol
// 1e-6. Per-rank statistics miss by 6e-3 to 9e-2 absolute, four orders above the tolerance.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

void RequireRanksOk(const std::vector<RankRun>& runs) {
  for (size_t r = 0; r < runs.size(); ++r) {
    INFO("rank " << r << ": " << runs[r].status.ToString());
    REQUIRE(runs[r].status.ok());
  }
}

// "" when every parameter, buffer and loss of the reference is matched within
// |got - want| <= kAtol + kRtol |want| (float64) by the lowest rank holding it, and the other
// replicas agree with that one exactly; else what differs first and by how much.
std::string Mismatch(const std::vector<RankRun>& runs, const TrainResult& reference) {
  std::ostringstream out;
  ParamMap merged;
  for (size_t r = 0; r < runs.size(); ++r) {
    for (const ParamMap* tensors : {&runs[r].result.params, &runs[r].result.buffers}) {
      for (const auto& [name, tensor] : *tensors) merged.emplace(name, tensor.to(torch::kFloat64));
    }
  }
  for (const ParamMap* tensors : {&reference.params, &reference.buffers}) {
    for (const auto& [name, expected] : *tensors) {
      auto found = merged.find(name);
      if (found == merged.end()) return "no rank holds " + name;
      torch::Tensor want = expected.to(torch::kFloat64);
      torch::Tensor diff = (found->second - want).abs();
      if ((diff - (kAtol + kRtol * want.abs())).max().item<double>() > 0) {
        out << name << ": max |diff| " << diff.max().item<double>() << " (max |want| "
            << want.abs().max().item<double>() << ") over a tolerance of " << kAtol << " + "
            << kRtol << " |want|";
        return out.str();
      }
    }
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    for (const ParamMap* tensors : {&runs[r].result.params, &runs[r].result.buffers}) {
      for (const auto& [name, tensor] : *tensors) {
        if (!torch::equal(merged.at(name), tensor.to(torch::kFloat64))) {
          out << "replicas of " << name << " differ (rank " << r << ")";
          return out.str();
        }
      }
    }
  }
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    double got = runs[0].result.losses.at(i), want = reference.losses[i];
    if (std::abs(got - want) > kAtol + kRtol * std::abs(want)) {
      out << "loss of iteration " << i << ": " << got << " vs " << want;
      return out.str();
    }
  }
  return "";
}

struct Case {
  const planner::Graph* graph;
  planner::Plan plan;
  int iterations = 5;
  OptimizerSpec optimizer;
  uint64_t seed = 0, data_seed = 0;
};

// Synchronised: equal to single-device training. Unsynchronised: not (the test can fail).
void RequireSyncedEquivalence(const Case& c, const std::function<CommMaker()>& comms) {
  auto reference = TrainSingleDevice(*c.graph, c.plan.global_batch, c.iterations, c.optimizer,
                                     c.seed, c.data_seed);
  RankOptions synced;
  synced.sync_batch_norm = SyncInEquivalenceRuns();
  auto runs =
      RunRanks(*c.graph, c.plan, c.iterations, c.optimizer, c.seed, c.data_seed, comms(), synced);
  RequireRanksOk(runs);
  std::string mismatch = Mismatch(runs, reference);
  INFO(mismatch);
  REQUIRE(mismatch.empty());

  RankOptions unsynced;
  unsynced.sync_batch_norm = false;
  auto local =
      RunRanks(*c.graph, c.plan, c.iterations, c.optimizer, c.seed, c.data_seed, comms(), unsynced);
  RequireRanksOk(local);
  REQUIRE_FALSE(Mismatch(local, reference).empty());
}

// The residual block's batch norm layers on 2 and 3 ranks, each on another set, sharing no
// segment boundaries with their neighbours except the stem's (conv and bn together).
std::map<std::string, std::vector<int>> ResidualBnSpread() {
  return {{"stem.conv", {0, 1, 2}},
          {"stem.bn", {0, 1, 2}},
          {"stem.relu", {1, 2}},
          {"block.conv1", {0}},
          {"block.bn1", {1, 2}},
          {"block.relu1", {0, 1, 2}},
          {"block.conv2", {0, 1}},
          {"block.bn2", {0, 2}},
          {"block.add", {0, 1, 2}},
          {"block.relu", {1}},
          {"pool", {0, 1}},
          {"flatten", {2}},
          {"fc", {0, 2}}};
}

TEST_CASE("small_cnn data parallel over 3 uneven ranks with SGD equals one device, buffers too",
          "[executor][batchnorm]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  // Batch 8 over 3 ranks: shares 3, 3, 2.
  Case c{&graph, MakePlan(graph, 8, 3, {0, 1, 2}), 5, Sgd(), 7, 11};
  RequireSyncedEquivalence(c, [] { return FakeComms(3); });
}

TEST_CASE("small_cnn data parallel over 3 uneven ranks with Adam equals one device, buffers too",
          "[executor][batchnorm]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  Case c{&graph, MakePlan(graph, 8, 3, {0, 1, 2}), 5, Adam(), 9, 4};
  RequireSyncedEquivalence(c, [] { return FakeComms(3); });
}

TEST_CASE("residual block with batch norm on 2 and 3 ranks with SGD equals one device",
          "[executor][batchnorm]") {
  torch::set_num_threads(1);
  auto graph = ResidualBlock();
  // Batch 7: 3/2/2 on three ranks, 4/3 on two.
  Case c{&graph, MakePlan(graph, 7, 3, {0, 1, 2}, ResidualBnSpread()), 5, Sgd(), 4, 5};
  RequireSyncedEquivalence(c, [] { return FakeComms(3); });
}

TEST_CASE("residual block with batch norm on 2 and 3 ranks with Adam equals one device",
          "[executor][batchnorm]") {
  torch::set_num_threads(1);
  auto graph = ResidualBlock();
  Case c{&graph, MakePlan(graph, 7, 3, {0, 1, 2}, ResidualBnSpread()), 5, Adam(), 2, 3};
  RequireSyncedEquivalence(c, [] { return FakeComms(3); });
}

TEST_CASE("residual block with batch norm on 2 and 3 ranks equals one device (Gloo)",
          "[executor][batchnorm][gloo]") {
  torch::set_num_threads(1);
  auto graph = ResidualBlock();
  Case c{&graph, MakePlan(graph, 7, 3, {0, 1, 2}, ResidualBnSpread()), 5, Sgd(), 6, 8};
  RequireSyncedEquivalence(c, [] { return GlooComms(3); });
}

TEST_CASE("per-rank checkpoints carry the global running statistics", "[executor][batchnorm]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  // The burst plan with both batch norm layers over all three ranks (3/3/2).
  auto devices = SmallCnnBurst();
  devices["stem.bn"] = devices["res.bn"] = {0, 1, 2};
  auto plan = MakePlan(graph, 8, 3, {0, 1, 2}, devices);
  auto reference = TrainSingleDevice(graph, 8, 5, Sgd(), 3, 1);

  TempDir dir;
  RankOptions options;
  options.sync_batch_norm = SyncInEquivalenceRuns();
  options.after = [&](int rank, Executor& executor) -> Status {
    std::vector<std::shared_ptr<LayerModule>> modules(static_cast<size_t>(graph.num_layers()));
    for (const auto& [id, module] : executor.modules()) modules[static_cast<size_t>(id)] = module;
    ASSIGN_OR_RETURN(auto state, CollectStateDict(graph, modules));
    return SaveCheckpoint(dir.File("model.pt.rank" + std::to_string(rank)), state);
  };
  RequireRanksOk(RunRanks(graph, plan, 5, Sgd(), 3, 1, FakeComms(3), options));

  for (int rank = 0; rank < 3; ++rank) {
    auto state = LoadCheckpoint(dir.File("model.pt.rank" + std::to_string(rank)));
    REQUIRE(state.ok());
    for (const std::string key :
         {"stem.bn.running_mean", "stem.bn.running_var", "stem.bn.num_batches_tracked",
          "res.bn.running_mean", "res.bn.running_var", "res.bn.num_batches_tracked"}) {
      torch::Tensor got;
      for (const auto& [name, tensor] : *state) {
        if (name == key) got = tensor;
      }
      REQUIRE(got.defined());
      torch::Tensor want = reference.buffers.at(key).to(torch::kFloat64);
      INFO("rank " << rank << " " << key << " max |diff| "
                   << (got.to(torch::kFloat64) - want).abs().max().item<double>());
      REQUIRE(torch::allclose(got.to(torch::kFloat64), want, kRtol, kAtol));
    }
  }
}

TEST_CASE("a failed peer in batch norm's statistics names the layer and stays UNAVAILABLE",
          "[executor][batchnorm]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  auto plan = MakePlan(graph, 8, 3, {0, 1, 2});
  auto net = std::make_shared<FakeNetwork>(3, FakeSemantics::kNccl);
  CommMaker make_comm = [net](int rank) -> StatusOr<std::unique_ptr<Communicator>> {
    if (rank == 2) {
      net->Fail(2);
      return UnavailableError("rank 2 died");
    }
    return net->Join(rank, std::chrono::seconds(30));
  };
  auto runs = RunRanks(graph, plan, 1, Sgd(), 1, 1, make_comm);
  for (int rank : {0, 1}) {
    const Status& status = runs[static_cast<size_t>(rank)].status;
    INFO(status.ToString());
    REQUIRE(status.code() == StatusCode::kUnavailable);
    REQUIRE_THAT(status.message(), Catch::Contains("batch norm statistics of stem.bn"));
    REQUIRE_THAT(status.message(), Catch::Contains("rank 2 failed"));
  }
}

// One rank's share of a batch norm call: its output and gradients.
struct ShareResult {
  std::string error;
  torch::Tensor out, dx, dweight, dbias, running_mean, running_var;
};

// SyncBatchNormTrain on the rows [bounds[r], bounds[r+1]) of x, one thread per rank over the
// NCCL-rules fake, then backward from the same rows of dy.
std::vector<ShareResult> RunShares(const torch::Tensor& x, const torch::Tensor& dy,
                                   const torch::Tensor& weight, const torch::Tensor& bias,
                                   const std::vector<int64_t>& bounds) {
  const int world = static_cast<int>(bounds.size()) - 1;
  auto net = std::make_shared<FakeNetwork>(world, FakeSemantics::kNccl);
  std::vector<ShareResult> results(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      ShareResult& result = results[static_cast<size_t>(rank)];
      auto comm = net->Join(rank, std::chrono::seconds(30));
      RankGroup all(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r) all[static_cast<size_t>(r)] = r;
      GroupSum sum = [&](torch::Tensor& tensor) -> Status {
        ASSIGN_OR_RETURN(auto work, comm->AllReduceSum(tensor, all));
        return work->Wait(comm->timeout());
      };
      const int64_t first = bounds[static_cast<size_t>(rank)];
      const int64_t rows = bounds[static_cast<size_t>(rank) + 1] - first;
      torch::Tensor xs = x.narrow(0, first, rows).clone().requires_grad_(true);
      torch::Tensor w = weight.defined() ? weight.clone().requires_grad_(true) : torch::Tensor();
      torch::Tensor b = bias.defined() ? bias.clone().requires_grad_(true) : torch::Tensor();
      result.running_mean = torch::zeros({x.size(1)});
      result.running_var = torch::ones({x.size(1)});
      try {
        torch::Tensor out = SyncBatchNormTrain(
            xs, BatchNormArgs{w, b, result.running_mean, result.running_var, 0.1, 1e-5}, sum);
        out.backward(dy.narrow(0, first, rows));
        result.out = out.detach();
        result.dx = xs.grad();
        if (w.defined()) result.dweight = w.grad();
        if (b.defined()) result.dbias = b.grad();
      } catch (const std::exception& e) {
        result.error = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

TEST_CASE("synchronised batch norm on uneven shares equals torch's batch_norm on the whole batch",
          "[batchnorm]") {
  torch::set_num_threads(1);
  torch::manual_seed(5);
  const int64_t channels = 4;
  torch::Tensor x = torch::randn({8, channels, 3, 3}) * 2 + 0.5;
  torch::Tensor dy = torch::randn({8, channels, 3, 3});
  torch::Tensor weight = torch::rand({channels}) + 0.5, bias = torch::randn({channels});

  torch::Tensor xr = x.clone().requires_grad_(true);
  torch::Tensor wr = weight.clone().requires_grad_(true), br = bias.clone().requires_grad_(true);
  torch::Tensor running_mean = torch::zeros({channels}), running_var = torch::ones({channels});
  torch::Tensor expected = torch::batch_norm(xr, wr, br, running_mean, running_var, true, 0.1, 1e-5,
                                             /*cudnn_enabled=*/false);
  expected.backward(dy);

  for (const std::vector<int64_t>& bounds :
       {std::vector<int64_t>{0, 8}, std::vector<int64_t>{0, 3, 6, 8},
        std::vector<int64_t>{0, 5, 8}}) {
    auto results = RunShares(x, dy, weight, bias, bounds);
    std::vector<torch::Tensor> outs, dxs;
    torch::Tensor dweight = torch::zeros_like(weight), dbias = torch::zeros_like(bias);
    for (const ShareResult& result : results) {
      INFO(result.error);
      REQUIRE(result.error.empty());
      outs.push_back(result.out);
      dxs.push_back(result.dx);
      dweight += result.dweight;  // the executor sums parameter gradients over the set
      dbias += result.dbias;
      REQUIRE(torch::allclose(result.running_mean, running_mean, kRtol, kAtol));
      REQUIRE(torch::allclose(result.running_var, running_var, kRtol, kAtol));
    }
    INFO(bounds.size() - 1 << " ranks");
    REQUIRE(torch::allclose(torch::cat(outs), expected.detach(), kRtol, kAtol));
    REQUIRE(torch::allclose(torch::cat(dxs), xr.grad(), kRtol, kAtol));
    REQUIRE(torch::allclose(dweight, wr.grad(), kRtol, kAtol));
    REQUIRE(torch::allclose(dbias, br.grad(), kRtol, kAtol));
  }
}

}  // namespace
}  // namespace deepool::worker::testing

namespace deepool::worker::testing {
namespace {

TEST_CASE("synchronised batch norm without affine parameters equals torch's on the whole batch",
          "[batchnorm]") {
  torch::set_num_threads(1);
  torch::manual_seed(6);
  const int64_t channels = 3;
  torch::Tensor x = torch::randn({7, channels, 2, 5}) * 3 - 1;
  torch::Tensor dy = torch::randn({7, channels, 2, 5});
  torch::Tensor xr = x.clone().requires_grad_(true);
  torch::Tensor running_mean = torch::zeros({channels}), running_var = torch::ones({channels});
  torch::Tensor expected = torch::batch_norm(xr, {}, {}, running_mean, running_var, true, 0.1, 1e-5,
                                             /*cudnn_enabled=*/false);
  expected.backward(dy);

  auto results = RunShares(x, dy, torch::Tensor(), torch::Tensor(), {0, 4, 7});
  std::vector<torch::Tensor> outs, dxs;
  for (const ShareResult& result : results) {
    INFO(result.error);
    REQUIRE(result.error.empty());
    REQUIRE_FALSE(result.dweight.defined());
    REQUIRE(torch::allclose(result.running_var, running_var, kRtol, kAtol));
    outs.push_back(result.out);
    dxs.push_back(result.dx);
  }
  REQUIRE(torch::allclose(torch::cat(outs), expected.detach(), kRtol, kAtol));
  REQUIRE(torch::allclose(torch::cat(dxs), xr.grad(), kRtol, kAtol));
}

}  // namespace
}  // namespace deepool::worker::testing

// A BG job sharing rank 1's device with a burst-parallel FG executor over the fake network:
// BG never runs while the FG rank has work ready (event log), FG results are bit-identical with
// and without BG, and BG progresses in the FG rank's idle time.
#include <catch2/catch.hpp>

#include <atomic>
#include <optional>
#include <thread>

#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"
#include "worker/runtime/background_runner.h"
#include "worker/runtime/background_trainer.h"
#include "worker/runtime/multiplex_attach.h"
#include "worker/runtime/multiplex_communicator.h"
#include "worker/runtime/multiplex_gate.h"

namespace deepool::worker {
namespace {

using testing::RankRun;

planner::Graph Model(const std::string& name) {
  auto graph = planner::zoo::BuildModel(name, planner::zoo::ModelOptions{10});
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

BackgroundSpec BgSpec() {
  BackgroundSpec spec;
  spec.job_id = "bg";
  spec.graph = std::make_shared<const planner::Graph>(Model("mlp"));
  spec.batch_size = 16;
  spec.seed = 3;
  spec.optimizer.lr = 0.05;
  spec.data = DataSpec{"synthetic", 9, ""};
  return spec;
}

// small_cnn at global batch 8: the residual block and the head run on rank 0 alone, so rank 1
// waits through them (its idle time) every iteration, forward and backward.
planner::Plan BurstPlan(const planner::Graph& graph) {
  std::map<std::string, std::vector<int>> narrow;
  for (const char* name : {"res.conv", "res.bn", "res.add", "res.relu", "maxpool", "avgpool",
                           "flatten", "fc"}) {
    narrow[name] = {0};
  }
  return testing::MakePlan(graph, 8, 2, {0, 1}, narrow);
}

struct SharedRun {
  std::vector<RankRun> ranks;
  std::vector<GateEventKind> events;
  GateCounters counters;
  BackgroundProgress bg;
  std::string line;  // an iteration line decorated after the run
};

// Trains the FG plan for `iterations`; with a BG job on rank 1's device when `mode` is given.
SharedRun Run(const planner::Graph& graph, const planner::Plan& plan, int iterations,
              std::optional<SharingMode> mode) {
  OptimizerSpec optimizer;
  optimizer.lr = 0.05;
  optimizer.momentum = 0.9;
  SharedRun run;
  auto comms = testing::FakeComms(2);
  if (!mode) {
    run.ranks = testing::RunRanks(graph, plan, iterations, optimizer, 21, 4, comms);
    return run;
  }
  BackgroundSpec bg = BgSpec();
  bg.sharing.mode = *mode;
  std::unique_ptr<DeviceSharing> sharing;
  auto shared_comms = [&](int rank) -> StatusOr<std::unique_ptr<Communicator>> {
    ASSIGN_OR_RETURN(auto comm, comms(rank));
    if (rank != 1) return comm;
    ASSIGN_OR_RETURN(sharing, DeviceSharing::Attach(bg, torch::kCPU, &comm, SystemClock::Get(),
                                                    /*record_events=*/true));
    sharing->Start();
    return comm;
  };
  run.ranks = testing::RunRanks(graph, plan, iterations, optimizer, 21, 4, shared_comms);
  REQUIRE(sharing);
  // Finish (the BG thread stopped) before decorating: once the FG rank is done the BG job runs
  // on freely, and a line decorated before Finish could miss its last iteration.
  run.bg = sharing->Finish();
  run.line = sharing->Decorate(R"({"event":"iteration","rank":1})");
  run.events = sharing->gate().events();
  run.counters = sharing->gate().counters();
  return run;
}

TEST_CASE("idle-only sharing: BG never runs while the FG rank has work, FG is bit-identical",
          "[multiplex]") {
  planner::Graph graph = Model("small_cnn");
  planner::Plan plan = BurstPlan(graph);
  const int iterations = 4;
  SharedRun alone = Run(graph, plan, iterations, std::nullopt);
  SharedRun shared = Run(graph, plan, iterations, SharingMode::kIdleOnly);
  for (size_t r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << alone.ranks[r].status.ToString() << " / "
                 << shared.ranks[r].status.ToString());
    REQUIRE(alone.ranks[r].status.ok());
    REQUIRE(shared.ranks[r].status.ok());
    REQUIRE(alone.ranks[r].result.losses == shared.ranks[r].result.losses);
    REQUIRE(alone.ranks[r].result.params.size() == shared.ranks[r].result.params.size());
    for (const auto& [name, tensor] : alone.ranks[r].result.params) {
      INFO(name);
      REQUIRE(torch::equal(tensor, shared.ranks[r].result.params.at(name)));
    }
  }
  // Rank 1 waited for rank 0's narrow layers in every iteration, forward and backward.
  REQUIRE(shared.counters.fg_idle_periods >= 2 * iterations);
  Status check = CheckIdleOnlyLog(shared.events);
  INFO(check.ToString());
  REQUIRE(check.ok());
  REQUIRE(shared.counters.bg_units == shared.counters.bg_units_in_fg_idle);
  REQUIRE(shared.bg.status.ok());
  auto line = nlohmann::json::parse(shared.line);
  for (const char* field : {"fg_busy_ms", "bg_busy_ms", "idle_ms", "bg_samples_per_s"}) {
    INFO(field);
    REQUIRE(line[field].is_number());
  }
  REQUIRE(line["bg_iterations"] == shared.bg.iterations);
}

TEST_CASE("BG makes progress in the FG rank's idle time and its loss falls", "[multiplex]") {
  FakeClock clock;
  DeviceGate gate(SharingMode::kIdleOnly, &clock, true);
  auto trainer = BackgroundTrainer::Create(BgSpec(), torch::kCPU);
  REQUIRE(trainer.ok());
  // Exactly 100 iterations (the runner stops by itself), so the loss compared below does not
  // depend on how fast this thread notices the progress.
  BackgroundRunner runner(trainer->get(), &gate, &clock, 100);
  runner.Start();
  // The FG rank is idle (a long wait on a transfer) until the BG job finished 100 iterations.
  gate.FgIdleBegin();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (runner.progress().iterations < 100 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  gate.FgIdleEnd();
  BackgroundProgress during = runner.progress();
  REQUIRE(during.iterations == 100);
  // FG computes now: nothing more is logged, and every BG unit ran inside the idle period.
  auto events_when_busy = gate.events().size();
  runner.Stop();
  auto events = gate.events();
  REQUIRE(events.size() == events_when_busy);
  REQUIRE(CheckIdleOnlyLog(events).ok());
  BackgroundProgress done = runner.progress();
  REQUIRE(done.finished);
  REQUIRE(done.status.ok());
  REQUIRE(done.samples == done.iterations * 16);
  INFO("first loss " << done.first_loss << ", last " << done.last_loss);
  REQUIRE(done.last_loss < done.first_loss);
}

TEST_CASE("the sharing communicator makes every wait an FG idle period", "[multiplex]") {
  FakeClock clock;
  DeviceGate gate(SharingMode::kIdleOnly, &clock, true);
  auto net = std::make_shared<testing::FakeNetwork>(2);
  auto peer = net->Join(0, std::chrono::seconds(10));
  SharingCommunicator comm(net->Join(1, std::chrono::seconds(10)), &gate);
  REQUIRE(comm.rank() == 1);
  REQUIRE(comm.world_size() == 2);
  REQUIRE(comm.CreateGroups({{0, 1}}).ok());
  REQUIRE(peer->CreateGroups({{0, 1}}).ok());
  auto sent = peer->Send(torch::full({3}, 2.0f), 1, 7);
  REQUIRE(sent.ok());
  torch::Tensor buffer = torch::zeros({3});
  auto recv = comm.Recv(buffer, 0, 7);
  REQUIRE(recv.ok());
  REQUIRE(gate.counters().fg_idle_periods == 1);  // only CreateGroups so far: posting is not a wait
  REQUIRE((*recv)->Wait(std::chrono::seconds(10)).ok());
  REQUIRE(torch::equal(buffer, torch::full({3}, 2.0f)));
  auto reduce = comm.AllReduceSum(torch::ones({2}), {0, 1});
  auto peer_reduce = peer->AllReduceSum(torch::ones({2}), {0, 1});
  REQUIRE((*reduce)->Wait(std::chrono::seconds(10)).ok());
  auto send = comm.Send(torch::ones({1}), 0, 8);
  REQUIRE((*send)->Wait(std::chrono::seconds(10)).ok());
  using K = GateEventKind;
  std::vector<K> period{K::kFgIdle, K::kFgReady, K::kFgResume};
  std::vector<K> expected;
  for (int i = 0; i < 4; ++i) expected.insert(expected.end(), period.begin(), period.end());
  REQUIRE((gate.events() == expected));
  REQUIRE(gate.counters().fg_idle_periods == 4);
  // A failed wait still ends the idle period.
  net->Fail(0);
  auto lost = comm.Recv(torch::zeros({3}), 0, 9);
  REQUIRE_FALSE((*lost)->Wait(std::chrono::seconds(10)).ok());
  REQUIRE(gate.events().back() == K::kFgResume);
}

TEST_CASE("a BG runner stops by itself after its iteration count", "[multiplex]") {
  FakeClock clock;
  DeviceGate gate(SharingMode::kIdleOnly, &clock);
  gate.FgDetach();
  auto trainer = BackgroundTrainer::Create(BgSpec(), torch::kCPU);
  REQUIRE(trainer.ok());
  BackgroundRunner runner(trainer->get(), &gate, &clock, 5);
  runner.Start();
  runner.Join();
  BackgroundProgress progress = runner.progress();
  REQUIRE(progress.finished);
  REQUIRE(progress.iterations == 5);
  REQUIRE(progress.units == 5 * (*trainer)->units_per_iteration());
}

}  // namespace
}  // namespace deepool::worker

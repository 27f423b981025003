// A BG job sharing rank 1's device with a burst-parallel FG executor over the fake network:
// BG never runs while the FG rank has work ready (by the gate's event log, and by the executor's
// own timestamps of its waits), FG results are bit-identical with and without BG, and BG
// progresses in the FG rank's idle time.
#include <catch2/catch.hpp>

#include <atomic>
#include <optional>
#include <thread>

#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"
#include "worker/runtime/background/background_runner.h"
#include "worker/runtime/background/background_trainer.h"
#include "worker/runtime/background/multiplex_attach.h"
#include "worker/runtime/background/multiplex_communicator.h"
#include "worker/runtime/background/multiplex_gate.h"

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
  // These tests check strict exclusion: no timeout lets the FG rank compute beside a unit.
  spec.sharing.max_fg_wait_ms = 60'000;
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
  std::vector<TimelineSpan> rank1_spans;  // with record_spans: the executor's and BG's on rank 1
  std::vector<GateEventKind> events;
  GateCounters counters;
  BackgroundProgress bg;
  std::string line;  // an iteration line decorated after the run
};

// Trains the FG plan for `iterations`; with a BG job on rank 1's device when `mode` is given.
SharedRun Run(const planner::Graph& graph, const planner::Plan& plan, int iterations,
              std::optional<SharingMode> mode, bool record_spans = false,
              BackgroundSpec bg = BgSpec()) {
  OptimizerSpec optimizer;
  optimizer.lr = 0.05;
  optimizer.momentum = 0.9;
  SharedRun run;
  auto comms = testing::FakeComms(2);
  if (!mode) {
    run.ranks = testing::RunRanks(graph, plan, iterations, optimizer, 21, 4, comms);
    return run;
  }
  bg.sharing.mode = *mode;
  std::unique_ptr<DeviceSharing> sharing;
  // Rank 1's recorder, on for every iteration; origin 0 keeps microsecond timestamps exact.
  SpanRecorder spans(SystemClock::Get(), 0);
  testing::RankOptions rank_options;
  if (record_spans) {
    protocol::TraceCommand all;
    all.request_id = 1;
    all.first_iteration = 0;
    all.iterations = iterations;
    spans.Request(all);
    rank_options.spans = {nullptr, &spans};
  }
  auto shared_comms = [&](int rank) -> StatusOr<std::unique_ptr<Communicator>> {
    ASSIGN_OR_RETURN(auto comm, comms(rank));
    if (rank != 1) return comm;
    ASSIGN_OR_RETURN(sharing, DeviceSharing::Attach(bg, torch::kCPU, &comm, SystemClock::Get(),
                                                    /*record_events=*/true));
    if (record_spans) sharing->TraceUnits(&spans);
    sharing->Start();
    return comm;
  };
  run.ranks =
      testing::RunRanks(graph, plan, iterations, optimizer, 21, 4, shared_comms, rank_options);
  for (const auto& event : run.ranks[1].traces) {
    run.rank1_spans.insert(run.rank1_spans.end(), event.spans.begin(), event.spans.end());
  }
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

// The first BG unit that does not lie within one of the executor's wait spans, by the executor's
// clock: it started while the FG rank was computing or had work ready, or the FG rank went on
// computing before it ended. Empty when there is none. (Work spans may enclose waits, e.g. a batch
// norm all-reduce and its wait, so only the waits say when the FG rank was idle.)
std::string FirstBgUnitOutsideFgIdle(const std::vector<TimelineSpan>& spans) {
  std::vector<const TimelineSpan*> waits;
  for (const TimelineSpan& span : spans) {
    if (span.kind == SpanKind::kWait) waits.push_back(&span);
  }
  const auto end = [](const TimelineSpan& s) { return s.start_us + s.duration_us; };
  for (const TimelineSpan& unit : spans) {
    if (unit.kind != SpanKind::kBackground) continue;
    const bool within = std::any_of(waits.begin(), waits.end(), [&](const TimelineSpan* w) {
      return w->start_us <= unit.start_us && end(unit) <= end(*w);
    });
    if (!within) {
      return "a BG unit [" + std::to_string(unit.start_us) + ", " + std::to_string(end(unit)) +
             "] us lies outside every wait of the FG rank";
    }
  }
  return "";
}

TEST_CASE("idle-only sharing: by the executor's own timestamps, BG runs only while FG waits",
          "[multiplex]") {
  planner::Graph graph = Model("small_cnn");
  // A BG thread at normal priority, so that it runs whenever the gate lets it even on a loaded
  // machine (under SCHED_IDLE, other tests' threads can starve it of every unit).
  BackgroundSpec bg = BgSpec();
  bg.sharing.idle_thread_priority = false;
  SharedRun shared = Run(graph, BurstPlan(graph), 4, SharingMode::kIdleOnly, true, bg);
  REQUIRE(shared.ranks[1].status.ok());
  int units = 0, waits = 0, work = 0;
  for (const TimelineSpan& span : shared.rank1_spans) {
    units += span.kind == SpanKind::kBackground;
    waits += span.kind == SpanKind::kWait;
    work += span.kind == SpanKind::kForward || span.kind == SpanKind::kBackward;
  }
  INFO(units << " BG units, " << waits << " FG waits, " << work << " FG forward/backward spans");
  REQUIRE(units >= 3);
  REQUIRE(waits >= 8);
  REQUIRE(work >= 8);
  REQUIRE(shared.counters.fg_wait_timeouts == 0);
  const std::string violation = FirstBgUnitOutsideFgIdle(shared.rank1_spans);
  INFO(violation);
  REQUIRE(violation.empty());

  // The check can fail: the same kind of trace from a concurrent gate breaks it.
  SharedRun free = Run(graph, BurstPlan(graph), 4, SharingMode::kConcurrent, true, bg);
  REQUIRE(free.ranks[1].status.ok());
  REQUIRE_FALSE(FirstBgUnitOutsideFgIdle(free.rank1_spans).empty());
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

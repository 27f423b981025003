// Device sharing over the DeviceStreams interface, on CPU with FakeDeviceStreams: dedicated FG
// and BG streams at their priorities, the graph stepper's states (warm-up, one capture, replays
// into static tensors, eager fallback when a capture fails, with the capture ended), eager jobs
// gated on a concurrent gate, and teardown that synchronises before it frees.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"
#include "tests/runtime/fake_device_streams.h"
#include "worker/runtime/background/background_graph_stepper.h"
#include "worker/runtime/background/background_runner.h"
#include "worker/runtime/background/multiplex_attach.h"
#include "worker/runtime/background/multiplex_device.h"

namespace deepool::worker {
namespace {

using testing::FakeDeviceStreams;
using Mode = GraphStepper::Mode;

BackgroundSpec Spec(const std::string& model, int64_t batch) {
  auto graph = planner::zoo::BuildModel(model, planner::zoo::ModelOptions{10});
  REQUIRE(graph.ok());
  BackgroundSpec spec;
  spec.job_id = "bg-streams";
  spec.graph = std::make_shared<const planner::Graph>(std::move(graph).value());
  spec.batch_size = batch;
  spec.seed = 7;
  spec.optimizer.name = "sgd";
  spec.optimizer.lr = 0.05;
  spec.optimizer.momentum = 0.9;
  spec.data = DataSpec{"synthetic", 4, ""};
  return spec;
}

// A GraphStepper over a fake; its BG stream is the fake's stream 1.
struct Built {
  std::shared_ptr<FakeDeviceStreams> fake = std::make_shared<FakeDeviceStreams>();
  std::unique_ptr<BackgroundStepper> stepper;
  GraphStepper* graph = nullptr;
};

Built Build(const BackgroundSpec& spec) {
  Built built;
  auto stepper = MakeBackgroundStepper(spec, torch::kCPU, built.fake, SystemClock::Get());
  REQUIRE(stepper.ok());
  built.stepper = std::move(stepper).value();
  built.graph = dynamic_cast<GraphStepper*>(built.stepper.get());
  REQUIRE(built.graph != nullptr);
  return built;
}

BgUnitResult Unit(GraphStepper& stepper) {
  auto result = stepper.RunUnit();
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  return *result;
}

// Runs whole iterations in units; returns the losses of those that finished.
std::vector<double> Iterations(GraphStepper& stepper, int count) {
  std::vector<double> losses;
  while (static_cast<int>(losses.size()) < count) {
    BgUnitResult result = Unit(stepper);
    if (result.iteration_done) losses.push_back(result.loss);
  }
  return losses;
}

template <typename Fn>
bool AwaitCondition(Fn done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST_CASE("FG and BG compute on dedicated streams: FG high, BG low, or both default",
          "[multiplex]") {
  const bool priorities = GENERATE(true, false);
  BackgroundSpec spec = Spec("mlp", 8);
  spec.sharing.priority_streams = priorities;
  auto fake = std::make_shared<FakeDeviceStreams>();
  auto fg = EnterForegroundStream(fake, spec.sharing);
  REQUIRE(fg.ok());
  REQUIRE(*fg != nullptr);
  REQUIRE(fake->CurrentOnThisThread() == FakeDeviceStreams::IdOf((*fg)->stream()));
  auto stepper = MakeBackgroundStepper(spec, torch::kCPU, fake, SystemClock::Get());
  REQUIRE(stepper.ok());

  // Every stream was made for its job (never a shared pool stream), one each, at its priority.
  auto streams = fake->streams();
  REQUIRE(streams.size() == 2);
  REQUIRE(streams[0].id != streams[1].id);
  REQUIRE(streams[0].priority == (priorities ? StreamPriority::kHigh : StreamPriority::kDefault));
  REQUIRE(streams[1].priority == (priorities ? StreamPriority::kLow : StreamPriority::kDefault));
  // The BG model was built on the BG stream, and the FG stream is current again afterwards.
  const std::string fg_name = StreamPriorityName(streams[0].priority);
  const std::string bg_name = StreamPriorityName(streams[1].priority);
  REQUIRE(fake->log() == std::vector<std::string>{"create 1 " + fg_name, "enter 1",
                                                  "create 2 " + bg_name, "enter 2", "leave 2"});
  REQUIRE(fake->CurrentOnThisThread() == 1);

  // The BG thread computes on the BG stream.
  int current_on_bg_thread = -1;
  std::thread bg([&] {
    auto hold = (*stepper)->EnterThread();
    current_on_bg_thread = fake->CurrentOnThisThread();
  });
  bg.join();
  REQUIRE(current_on_bg_thread == 2);

  fg->reset();
  stepper->reset();
  REQUIRE(fake->streams()[0].destroyed);
  REQUIRE(fake->streams()[1].destroyed);
  REQUIRE(fake->violations().empty());
}

TEST_CASE("graph stepper: eager warm-ups, one capture, then replays into the static tensors",
          "[multiplex]") {
  BackgroundSpec spec = Spec("mlp", 8);
  Built built = Build(spec);
  GraphStepper& stepper = *built.graph;
  FakeDeviceStreams& fake = *built.fake;
  auto hold = stepper.EnterThread();
  REQUIRE(hold != nullptr);

  const int units = 2 * spec.graph->num_layers() + 1;
  for (int it = 0; it < 3; ++it) {
    for (int u = 0; u < units; ++u) {
      REQUIRE(stepper.mode() == Mode::kWarmup);
      REQUIRE_FALSE(stepper.NextUnitNeedsFgIdle());  // a bounded start-up: runs concurrently
      BgUnitResult result = Unit(stepper);
      REQUIRE(result.iteration == it);
      REQUIRE(result.iteration_done == (u == units - 1));
    }
  }
  REQUIRE(stepper.warmups_done() == 3);
  REQUIRE(stepper.mode() == Mode::kCapture);
  REQUIRE_FALSE(stepper.NextUnitNeedsFgIdle());
  REQUIRE(fake.Count("begin 1") == 0);

  // At every replay the static tensors hold that iteration's batch.
  auto data = MakeDataSource(spec.data, *spec.graph, spec.batch_size);
  REQUIRE(data.ok());
  int64_t replaying = 3;
  int mismatches = 0;
  fake.on_replay = [&] {
    auto batch = (*data)->GlobalBatch(replaying++);
    if (!batch.ok() || !torch::equal(stepper.static_inputs(), batch->inputs) ||
        !torch::equal(stepper.static_labels(), batch->labels)) {
      ++mismatches;
    }
  };

  BgUnitResult captured = Unit(stepper);  // capture, then the replay that computes iteration 3
  REQUIRE(captured.iteration == 3);
  REQUIRE(captured.iteration_done);
  REQUIRE(stepper.mode() == Mode::kReplay);
  REQUIRE_FALSE(stepper.NextUnitNeedsFgIdle());
  // The warm-ups' work finished before the capture began, on the BG stream.
  const int begin = fake.Find("begin 1");
  REQUIRE(begin > 0);
  REQUIRE(fake.log()[static_cast<size_t>(begin - 1)] == "sync 1");
  REQUIRE(fake.Count("end 1 ok") == 1);

  const void* inputs = stepper.static_inputs().data_ptr();
  const void* labels = stepper.static_labels().data_ptr();
  for (int k = 0; k < 5; ++k) {
    BgUnitResult result = Unit(stepper);
    REQUIRE(result.iteration == 4 + k);
    REQUIRE(result.iteration_done);
    REQUIRE(std::isfinite(result.loss));
    REQUIRE(stepper.static_inputs().data_ptr() == inputs);
    REQUIRE(stepper.static_labels().data_ptr() == labels);
  }
  REQUIRE(fake.Count("begin 1") == 1);
  REQUIRE(fake.Count("replay 1") == 6);
  REQUIRE(mismatches == 0);

  hold.reset();  // the BG thread's exit: wait for the stream, then leave it
  auto log = fake.log();
  REQUIRE(log[log.size() - 2] == "sync 1");
  REQUIRE(log.back() == "leave 1");
  REQUIRE(fake.violations().empty());
}

TEST_CASE("a capture that fails is ended and the job runs eagerly from then on", "[multiplex]") {
  const auto where = GENERATE(FakeDeviceStreams::CaptureFailure::kAtBegin,
                              FakeDeviceStreams::CaptureFailure::kAtEnd);
  BackgroundSpec spec = Spec("mlp", 8);
  Built built = Build(spec);
  GraphStepper& stepper = *built.graph;
  built.fake->FailNextCapture(where);
  auto hold = stepper.EnterThread();
  Iterations(stepper, 3);
  REQUIRE(stepper.mode() == Mode::kCapture);

  BgUnitResult failed = Unit(stepper);  // the job goes on: no error
  REQUIRE_FALSE(failed.iteration_done);
  REQUIRE(failed.iteration == 3);
  REQUIRE(stepper.mode() == Mode::kEager);
  REQUIRE_THAT(stepper.fallback_reason().message(), Catch::Contains("fake: capture"));
  REQUIRE(built.fake->Count("end 1 failed") == 1);
  REQUIRE_FALSE(stepper.static_inputs().defined());

  // Eager from iteration 3 on, for good: no second capture, no replay, units wait for FG idle
  // (autograd's device thread is shared with the FG rank).
  REQUIRE(stepper.NextUnitNeedsFgIdle());
  const int units = 2 * spec.graph->num_layers() + 1;
  for (int it = 3; it < 5; ++it) {
    for (int u = 0; u < units; ++u) {
      BgUnitResult result = Unit(stepper);
      REQUIRE(result.iteration == it);
      REQUIRE(result.iteration_done == (u == units - 1));
      if (result.iteration_done) REQUIRE(std::isfinite(result.loss));
    }
  }
  REQUIRE(built.fake->Count("begin 1") == 1);
  REQUIRE(built.fake->Count("replay 1") == 0);
  hold.reset();
  built.stepper.reset();
  REQUIRE(built.fake->violations().empty());  // e.g. no stream destroyed while capturing
}

TEST_CASE("an exception inside the capture: the capture is still ended, then eager",
          "[multiplex]") {
  BackgroundSpec spec = Spec("mlp", 8);
  Built built = Build(spec);
  GraphStepper& stepper = *built.graph;
  FakeDeviceStreams& fake = *built.fake;
  auto hold = stepper.EnterThread();
  Iterations(stepper, 3);

  // A weight of the wrong shape during the capture makes the captured forward throw.
  torch::Tensor weight;
  for (auto& module : stepper.trainer().modules()) {
    if (!module->parameters().empty()) {
      weight = module->parameters()[0];
      break;
    }
  }
  REQUIRE(weight.defined());
  torch::Tensor saved = weight.data();
  bool ended_while_capturing = false;
  fake.on_capture_begin = [&] { weight.set_data(torch::zeros({1})); };
  fake.on_capture_end = [&] {
    ended_while_capturing = fake.Count("begin 1") == 1;
    weight.set_data(saved);
  };

  BgUnitResult failed = Unit(stepper);
  REQUIRE_FALSE(failed.iteration_done);
  REQUIRE(ended_while_capturing);
  REQUIRE(stepper.mode() == Mode::kEager);
  REQUIRE_THAT(stepper.fallback_reason().message(), Catch::Contains("captured iteration failed"));
  // Ended normally (the stream itself was fine), then discarded unreplayed.
  const int end = fake.Find("end 1 ok");
  REQUIRE(end > 0);
  REQUIRE(fake.Find("drop 1", end) > end);
  REQUIRE(fake.Count("replay 1") == 0);

  for (double loss : Iterations(stepper, 2)) REQUIRE(std::isfinite(loss));
  REQUIRE(fake.Count("begin 1") == 1);
  hold.reset();
  REQUIRE(fake.violations().empty());
}

TEST_CASE("graph stepper is eager from the start where capture is refused", "[multiplex]") {
  BackgroundSpec adam = Spec("mlp", 8);
  adam.optimizer.name = "adam";
  BackgroundSpec off = Spec("mlp", 8);
  off.sharing.cuda_graphs = false;
  for (const BackgroundSpec& spec : {adam, off}) {
    Built built = Build(spec);
    REQUIRE(built.graph->mode() == Mode::kEager);
    REQUIRE(built.graph->NextUnitNeedsFgIdle());
    auto hold = built.graph->EnterThread();
    Iterations(*built.graph, 5);
    REQUIRE(built.fake->Count("begin 1") == 0);
  }
  // The naive collocation baseline (concurrent set explicitly): no unit waits for FG.
  BackgroundSpec naive = Spec("mlp", 8);
  naive.sharing.mode = SharingMode::kConcurrent;
  Built built = Build(naive);
  REQUIRE_FALSE(built.graph->NextUnitNeedsFgIdle());
}

TEST_CASE("graph stepper refuses units on a thread that has not entered the BG stream",
          "[multiplex]") {
  Built built = Build(Spec("mlp", 8));
  auto result = built.graph->RunUnit();
  REQUIRE(result.status().code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("teardown waits for the BG stream before it frees the model, then destroys the stream",
          "[multiplex]") {
  Built built = Build(Spec("mlp", 8));
  GraphStepper& stepper = *built.graph;
  FakeDeviceStreams& fake = *built.fake;
  {
    auto hold = stepper.EnterThread();
    Iterations(stepper, 5);  // warm-ups, capture, a replay
  }
  REQUIRE(stepper.mode() == Mode::kReplay);
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> param(
      stepper.trainer().modules().back()->parameters().front().getIntrusivePtr());
  std::vector<bool> alive_at_sync;
  fake.on_synchronize = [&](int stream) {
    if (stream == 1) alive_at_sync.push_back(!param.expired());
  };
  const int from = static_cast<int>(fake.log().size());
  built.stepper.reset();
  REQUIRE(alive_at_sync == std::vector<bool>{true});
  REQUIRE(param.expired());
  const int sync = fake.Find("sync 1", from);
  const int drop = fake.Find("drop 1", from);
  const int destroy = fake.Find("destroy 1", from);
  REQUIRE(sync >= from);
  REQUIRE(drop > sync);  // the graph (and its pool) after the stream's work finished
  REQUIRE(destroy > drop);
  REQUIRE(fake.violations().empty());
}

TEST_CASE("on a concurrent gate an eager BG job runs only in FG idle periods", "[multiplex]") {
  BackgroundSpec spec = Spec("mlp", 8);
  spec.optimizer.name = "adam";  // not capturable: eager throughout
  Built built = Build(spec);
  DeviceGate gate(SharingMode::kConcurrent, SystemClock::Get(), /*record_events=*/true);
  BackgroundRunner runner(built.stepper.get(), &gate, SystemClock::Get(), /*max_iterations=*/0);
  runner.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(runner.progress().units == 0);  // FG busy: no unit starts

  gate.FgIdleBegin();
  REQUIRE(AwaitCondition([&] { return runner.progress().units >= 5; }));
  gate.FgIdleEnd();  // waits for the unit in progress
  const int64_t units = gate.counters().bg_units;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(gate.counters().bg_units == units);  // FG busy again: BG waits
  runner.Stop();
  REQUIRE(runner.progress().status.ok());
  REQUIRE(CheckIdleOnlyLog(gate.events()).ok());  // as if the gate were idle-only
}

TEST_CASE("on a concurrent gate a capturable BG job warms up, captures and replays beside FG work",
          "[multiplex]") {
  Built built = Build(Spec("mlp", 8));
  DeviceGate gate(SharingMode::kConcurrent, SystemClock::Get());
  BackgroundRunner runner(built.stepper.get(), &gate, SystemClock::Get(), /*max_iterations=*/6);
  runner.Start();  // the FG rank stays busy throughout
  runner.Join();
  BackgroundProgress progress = runner.progress();
  REQUIRE(progress.status.ok());
  REQUIRE(progress.iterations == 6);
  REQUIRE(gate.counters().bg_units_in_fg_idle == 0);
  REQUIRE(built.fake->Count("begin 1") == 1);
  REQUIRE(built.fake->Count("replay 1") == 3);
  REQUIRE(built.fake->violations().empty());
}

TEST_CASE("DeviceSharing over device streams: FG stream on the FG thread, BG on its own",
          "[multiplex]") {
  BackgroundSpec spec = Spec("mlp", 8);
  spec.iterations = 6;
  auto fake = std::make_shared<FakeDeviceStreams>();
  auto comm = testing::FakeComms(1)(0);
  REQUIRE(comm.ok());
  std::unique_ptr<Communicator> wrapped = std::move(comm).value();
  auto sharing = DeviceSharing::Attach(spec, torch::kCPU, &wrapped, SystemClock::Get(),
                                       /*record_events=*/false, fake);
  REQUIRE(sharing.ok());
  REQUIRE(fake->CurrentOnThisThread() == 1);
  REQUIRE(fake->streams()[0].priority == StreamPriority::kHigh);
  REQUIRE(fake->streams()[1].priority == StreamPriority::kLow);

  (*sharing)->gate().FgDetach();  // no FG work in this test: BG may run throughout
  (*sharing)->Start();
  REQUIRE(AwaitCondition([&] {
    auto line = nlohmann::json::parse((*sharing)->Decorate(R"({"event":"iteration"})"));
    return line["bg_iterations"].get<int64_t>() >= 6;
  }));
  BackgroundProgress progress = (*sharing)->Finish();
  REQUIRE(progress.status.ok());
  REQUIRE(progress.iterations == 6);
  REQUIRE(fake->Count("begin 2") == 1);
  REQUIRE(fake->Count("replay 2") == 3);
  REQUIRE(fake->Count("enter 2") == 2);  // building the model here, then the BG thread
  REQUIRE(fake->CurrentOnThisThread() == 1);

  sharing->reset();
  const int destroy_bg = fake->Find("destroy 2");
  const int leave_fg = fake->Find("leave 1");
  REQUIRE(destroy_bg > 0);
  REQUIRE(leave_fg > destroy_bg);  // the BG job goes first, then the FG stream
  REQUIRE(fake->Find("destroy 1") > leave_fg);
  REQUIRE(fake->violations().empty());
}

}  // namespace
}  // namespace deepool::worker

// Timelines for `deepool trace`: the executor's spans (worker/runtime/profiling/span_recorder.h) in a
// requested window, matching the plan, and training unchanged by recording them.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "tests/runtime/executor_test_util.h"
#include "worker/runtime/profiling/span_recorder.h"

using namespace deepool;
using namespace deepool::worker;
using namespace deepool::worker::testing;

namespace {

protocol::TraceCommand Window(int64_t first, int iterations, int64_t id = 1) {
  protocol::TraceCommand command;
  command.request_id = id;
  command.first_iteration = first;
  command.iterations = iterations;
  return command;
}

std::vector<TimelineSpan> SpansOf(const std::vector<protocol::TraceEvent>& events) {
  std::vector<TimelineSpan> spans;
  for (const auto& e : events) spans.insert(spans.end(), e.spans.begin(), e.spans.end());
  return spans;
}

}  // namespace

TEST_CASE("recorded spans follow the burst plan and training is unchanged", "[executor][trace]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  auto plan = MakePlan(graph, 8, 3, {0, 1, 2}, SmallCnnBurst());
  auto reference = TrainSingleDevice(graph, 8, 4, Sgd(), 1, 2);
  std::vector<std::unique_ptr<SpanRecorder>> recorders;
  RankOptions options;
  for (int r = 0; r < 3; ++r) {
    recorders.push_back(std::make_unique<SpanRecorder>(SystemClock::Get(), 1e15));
    recorders.back()->Request(Window(1, 2));
    options.spans.push_back(recorders.back().get());
  }
  auto runs = RunRanks(graph, plan, 4, Sgd(), 1, 2, FakeComms(3), options);
  RequireMatchesReference(runs, reference);  // recording changes nothing the ranks compute

  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank);
    const auto& events = runs[static_cast<size_t>(rank)].traces;
    REQUIRE(!events.empty());
    for (size_t k = 0; k < events.size(); ++k) {
      CHECK(events[k].rank == rank);
      CHECK(events[k].request_id == 1);
      CHECK(events[k].first_iteration == 1);
      CHECK(events[k].iterations == 2);
      CHECK(events[k].last == (k + 1 == events.size()));
    }
    std::map<int64_t, std::multiset<std::string>> forwards;
    std::map<int64_t, std::map<SpanKind, int>> kinds;
    for (const TimelineSpan& span : SpansOf(events)) {
      REQUIRE((span.iteration == 1 || span.iteration == 2));
      CHECK(span.start_us >= 1e15);
      CHECK(span.duration_us >= 0);
      kinds[span.iteration][span.kind]++;
      if (span.kind == SpanKind::kForward) forwards[span.iteration].insert(span.name);
    }
    std::multiset<std::string> planned;
    for (const auto& layer : plan.layers) {
      if (layer.Runs(rank)) planned.insert(layer.layer);
    }
    for (int64_t i : {1, 2}) {
      INFO("iteration " << i);
      CHECK(forwards[i] == planned);  // each layer it runs, once
      CHECK(kinds[i][SpanKind::kBackward] > 0);
      CHECK(kinds[i][SpanKind::kTransfer] > 0);  // every rank sends or receives a re-split
      CHECK(kinds[i][SpanKind::kOptimizer] == 1);
      CHECK(kinds[i][SpanKind::kData] == 1);
      CHECK(kinds[i][SpanKind::kWait] > 0);
    }
  }
  // stem.conv runs on all three ranks: its gradients are summed over them, on each.
  for (int rank = 0; rank < 3; ++rank) {
    bool summed = false;
    for (const TimelineSpan& span : SpansOf(runs[static_cast<size_t>(rank)].traces)) {
      summed |=
          span.kind == SpanKind::kAllReduce && span.name.find("stem.conv") != std::string::npos;
    }
    CHECK(summed);
  }
}

TEST_CASE("a trace window that has passed starts at once, and one never reached still answers",
          "[trace]") {
  FakeClock clock;
  SpanRecorder spans(&clock, 0);
  spans.BeginIteration(5);
  spans.Request(Window(2, 2, 7));  // iteration 2 has passed: the next two are recorded
  CHECK(!spans.on());
  CHECK(spans.TakeFinished(0).empty());  // iteration 5 was not recorded
  spans.BeginIteration(6);
  REQUIRE(spans.on());
  auto start = spans.Now();
  clock.Advance(std::chrono::microseconds(250));
  spans.Add(SpanKind::kForward, "fc1", start);
  CHECK(spans.TakeFinished(0).empty());
  spans.BeginIteration(7);
  spans.Add(SpanKind::kBackward, "fc1", spans.Now());
  auto events = spans.TakeFinished(3);
  REQUIRE(events.size() == 1);
  CHECK(events[0].rank == 3);
  CHECK(events[0].request_id == 7);
  CHECK(events[0].first_iteration == 6);
  CHECK(events[0].iterations == 2);
  CHECK(events[0].last);
  REQUIRE(events[0].spans.size() == 2);
  CHECK(events[0].spans[0].iteration == 6);
  CHECK(events[0].spans[0].duration_us == Approx(250));
  CHECK(events[0].spans[1].iteration == 7);
  CHECK(!spans.on());
  spans.BeginIteration(8);
  spans.Add(SpanKind::kForward, "fc1", spans.Now());  // outside any window: dropped
  CHECK(spans.TakeFinished(3).empty());

  // Training ends before a window starts: an empty last part, so nobody waits for it.
  spans.Request(Window(100, 3, 8));
  spans.BeginIteration(9);
  events = spans.Finish(0);
  REQUIRE(events.size() == 1);
  CHECK(events[0].request_id == 8);
  CHECK(events[0].iterations == 0);
  CHECK(events[0].spans.empty());
  CHECK(events[0].last);
}

TEST_CASE("a long window's spans come in parts below the line limit, the last one marked",
          "[trace]") {
  FakeClock clock;
  SpanRecorder spans(&clock, 0);
  spans.Request(Window(0, 1));
  spans.BeginIteration(0);
  const size_t count = 2 * protocol::TraceEvent::kMaxTraceSpansPerEvent + 5;
  for (size_t i = 0; i < count; ++i) {
    spans.Add(SpanKind::kForward, std::string(300, 'x'), spans.Now());
  }
  auto events = spans.TakeFinished(0);
  REQUIRE(events.size() == 3);
  size_t total = 0;
  for (size_t k = 0; k < events.size(); ++k) {
    CHECK(events[k].last == (k == 2));
    total += events[k].spans.size();
    const std::string line = protocol::ExecutorEventToJson(events[k]);
    CHECK(line.size() < 64 * 1024);  // the worker splits longer lines (common/subprocess.h)
    auto parsed = protocol::ParseExecutorEvent(line);
    REQUIRE(parsed.ok());
  }
  CHECK(total == count);
}

// `deepool trace`'s view of the coordinator's answer (cli/services/trace_view.h): tracks, times
// and the summary, over a hand-made TraceJobResponse. Lives with the e2e tests because it needs
// the gRPC client library.
#include <catch2/catch.hpp>

#include "cli/services/trace_view.h"

using namespace deepool;
using namespace deepool::cli;

namespace {

void AddSpan(v1::RankTimeline* rank, const std::string& kind, const std::string& name,
             double start_us, double duration_us, int64_t iteration = 40) {
  v1::TraceSpan* span = rank->add_spans();
  span->set_kind(kind);
  span->set_name(name);
  span->set_start_us(start_us);
  span->set_duration_us(duration_us);
  span->set_iteration(iteration);
}

v1::TraceJobResponse TwoRanks() {
  v1::TraceJobResponse trace;
  trace.set_job_id("job-7");
  trace.set_first_iteration(40);
  trace.set_iterations(1);
  trace.set_world_size(3);
  v1::RankTimeline* r0 = trace.add_ranks();
  r0->set_rank(0);
  r0->set_node_name("node-a");
  r0->set_device("cpu:0");
  r0->set_first_iteration(40);
  r0->set_iterations(1);
  r0->set_complete(true);
  // 1000 us: forward 400 (a batch norm all-reduce of 100 inside it), wait 500, 100 in no span.
  AddSpan(r0, "forward", "bn", 1e15, 400);
  AddSpan(r0, "all-reduce", "batch norm statistics of bn", 1e15 + 100, 100);
  AddSpan(r0, "wait", "loss sum", 1e15 + 500, 500);
  AddSpan(r0, "background", "unit of bg-1", 1e15 + 500, 250);
  v1::RankTimeline* r1 = trace.add_ranks();
  r1->set_rank(1);
  r1->set_first_iteration(40);
  r1->set_iterations(1);
  AddSpan(r1, "backward", "fc", 1e15 - 200, 300);
  return trace;
}

}  // namespace

TEST_CASE("trace view: a track per rank, BG units apart, times from the earliest span", "[cli]") {
  StatusOr<Timeline> timeline = TimelineOfTrace(TwoRanks());
  REQUIRE(timeline.ok());
  CHECK(timeline->title == "job job-7 iterations 40-40 (measured)");
  REQUIRE(timeline->tracks ==
          std::vector<std::string>{"rank 0 (node-a cpu:0)", "rank 0 BG", "rank 1"});
  REQUIRE(timeline->spans.size() == 5);
  CHECK(timeline->spans[0].track == 0);
  CHECK(timeline->spans[0].start_us == Approx(200));  // rank 1's span starts 200 us earlier
  CHECK(timeline->spans[3].kind == SpanKind::kBackground);
  CHECK(timeline->spans[3].track == 1);
  CHECK(timeline->spans[4].track == 2);
  CHECK(timeline->spans[4].start_us == Approx(0));

  v1::TraceJobResponse bad = TwoRanks();
  bad.mutable_ranks(1)->mutable_spans(0)->set_kind("napping");
  CHECK_THAT(TimelineOfTrace(bad).status().message(), Catch::Contains("rank 1"));
}

TEST_CASE("trace summary: shares of outermost spans, BG units beside them, missing ranks named",
          "[cli]") {
  const std::string text = TraceSummary(TwoRanks());
  INFO(text);
  CHECK(text.find("rank 0: iterations 40-40, 1.00 ms each\n"
                  "  forward 40%, wait 50%, other 10%; BG units 25% beside them\n") !=
        std::string::npos);
  CHECK(text.find("rank 1: iterations 40-40, 0.30 ms each (incomplete: its last part did not "
                  "arrive)\n  backward 100%, other 0%\n") != std::string::npos);
  CHECK(text.find("warning: 1 of 3 ranks sent nothing before the timeout") != std::string::npos);
}

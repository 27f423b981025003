// The coordinator's side of `deepool trace`: the window it asks for and the collection of the
// ranks' parts (coordinator/trace_collector.h), without processes.
#include "coordinator/trace_collector.h"

#include <catch2/catch.hpp>
#include <thread>

namespace deepool::coordinator {
namespace {

using google::protobuf::RepeatedPtrField;
using namespace std::chrono_literals;

JobRecord Running(int64_t iteration, int64_t iterations, double iteration_ms, int ranks = 2) {
  JobRecord job;
  job.id = "job-1";
  job.state = JobState::kRunning;
  job.progress.iteration = iteration;
  job.progress.iterations = iterations;
  job.progress.iteration_ms = iteration_ms;
  for (int r = 0; r < ranks; ++r) {
    job.devices.push_back({r, "n" + std::to_string(r), "node-" + std::to_string(r), "cpu:0"});
  }
  return job;
}

RepeatedPtrField<v1::TraceChunk> Parts(int64_t request, int rank, int spans, bool last) {
  RepeatedPtrField<v1::TraceChunk> parts;
  v1::TraceChunk* part = parts.Add();
  part->set_request_id(request);
  part->set_rank(rank);
  part->set_first_iteration(40);
  part->set_iterations(3);
  part->set_last(last);
  for (int i = 0; i < spans; ++i) {
    v1::TraceSpan* span = part->add_spans();
    span->set_kind("forward");
    span->set_name("fc" + std::to_string(i));
  }
  return parts;
}

TEST_CASE("a trace window starts about a second ahead and ends before the job does", "[trace]") {
  // 10 ms iterations: 100 iterations ahead.
  StatusOr<TraceWindow> window = ChooseTraceWindow(Running(50, 10'000, 10), 3);
  REQUIRE(window.ok());
  CHECK(window->first_iteration == 150);
  CHECK(window->iterations == 3);
  CHECK(window->world_size == 2);
  CHECK(window->rank_nodes == std::vector<std::string>{"n0", "n1"});
  // Slow iterations: at least two ahead.
  CHECK(ChooseTraceWindow(Running(50, 10'000, 5'000), 3)->first_iteration == 52);
  // Near the end: moved back while still ahead of the job, refused when it cannot be.
  CHECK(ChooseTraceWindow(Running(50, 120, 10), 5)->first_iteration == 115);
  StatusOr<TraceWindow> late = ChooseTraceWindow(Running(50, 53, 10), 3);
  CHECK(late.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(late.status().message(), Catch::Contains("3 iterations left"));
}

TEST_CASE("only running FG jobs that have started iterating are traced", "[trace]") {
  JobRecord pending = Running(5, 100, 10);
  pending.state = JobState::kPending;
  CHECK_THAT(ChooseTraceWindow(pending, 3).status().message(),
             Catch::Contains("only a running FG job"));
  JobRecord background = Running(5, 100, 10);
  background.spec.role = JobRole::kBg;
  CHECK_THAT(ChooseTraceWindow(background, 3).status().message(), Catch::Contains("BG job"));
  CHECK_THAT(ChooseTraceWindow(Running(0, 100, 0), 3).status().message(),
             Catch::Contains("not reported an iteration"));
  CHECK(ChooseTraceWindow(Running(5, 1000, 10), 0).status().code() == StatusCode::kInvalidArgument);
  CHECK(ChooseTraceWindow(Running(5, 1000, 10), 101).status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("each task is told once, parts are merged by rank, and collect ends when all are in",
          "[trace]") {
  TraceCollector traces;
  const JobRecord job = Running(10, 1000, 10);
  StatusOr<int64_t> id = traces.Open(job.id, *ChooseTraceWindow(job, 3));
  REQUIRE(id.ok());
  CHECK(traces.Open(job.id, *ChooseTraceWindow(job, 3)).status().code() ==
        StatusCode::kAlreadyExists);
  const RepeatedPtrField<v1::TraceChunk> none;
  std::optional<v1::TraceRequest> told = traces.OnReport(job.id, "n0", "task-a", none);
  REQUIRE(told);
  CHECK(told->request_id() == *id);
  CHECK(told->first_iteration() == 110);
  CHECK(told->iterations() == 3);
  CHECK(!traces.OnReport(job.id, "n0", "task-a", none));  // once per task
  CHECK(traces.OnReport(job.id, "n1", "task-b", none));
  CHECK(!traces.OnReport("other-job", "n2", "task-c", none));

  // Catch's assertions are not thread-safe: the reporting thread only counts the requests it was
  // told again, checked once it has joined.
  int told_again = 0;
  std::thread ranks([&] {
    told_again += traces.OnReport(job.id, "n0", "task-a", Parts(*id, 0, 2, false)).has_value();
    told_again += traces.OnReport(job.id, "n0", "task-a", Parts(*id, 0, 1, true)).has_value();
    // Another request, a rank the job does not have, rank 1 from rank 0's node, then the real
    // one.
    told_again += traces.OnReport(job.id, "n1", "task-b", Parts(*id + 99, 1, 4, true)).has_value();
    told_again += traces.OnReport(job.id, "n1", "task-b", Parts(*id, 7, 4, true)).has_value();
    told_again += traces.OnReport(job.id, "n0", "task-a", Parts(*id, 1, 9, true)).has_value();
    told_again += traces.OnReport(job.id, "n1", "task-b", Parts(*id, 1, 4, true)).has_value();
  });
  // Returns when both ranks' last parts are in, long before the timeout.
  const auto start = std::chrono::steady_clock::now();
  CollectedTrace trace = traces.Collect(*id, 60s);
  CHECK(std::chrono::steady_clock::now() - start < 30s);
  ranks.join();
  CHECK(told_again == 0);
  REQUIRE(trace.ranks.size() == 2);
  CHECK(trace.ranks[0].spans_size() == 3);
  CHECK(trace.ranks[1].spans_size() == 4);
  CHECK(trace.complete == std::set<int>{0, 1});

  v1::TraceJobResponse response = TraceResponse(job, trace);
  REQUIRE(response.ranks_size() == 2);
  CHECK(response.ranks(1).node_name() == "node-1");
  CHECK(response.ranks(1).device() == "cpu:0");
  CHECK(response.ranks(1).complete());
  CHECK(response.first_iteration() == 110);
  CHECK(response.world_size() == 2);

  // Closed: a new request may open, and late parts of the old one are dropped.
  CHECK(traces.Open(job.id, *ChooseTraceWindow(job, 3)).ok());
}

TEST_CASE(
    "collect returns what arrived within its bounds at the timeout, and at once after shutdown",
    "[trace]") {
  TraceCollector traces(/*max_spans_per_request=*/5);
  const JobRecord job = Running(10, 1000, 10);
  const int64_t id = *traces.Open(job.id, *ChooseTraceWindow(job, 3));
  traces.OnReport(job.id, "n0", "task-a", Parts(id, 0, 3, true));
  traces.OnReport(job.id, "n1", "task-b", Parts(id, 1, 3, true));  // over the span bound: dropped
  CollectedTrace trace = traces.Collect(id, 50ms);
  REQUIRE(trace.ranks.size() == 1);
  CHECK(trace.complete == std::set<int>{0});

  // Few spans, each with a name of a megabyte: over the byte bound, dropped.
  TraceCollector small(/*max_spans_per_request=*/100, /*max_bytes_per_request=*/1 << 20);
  const int64_t named = *small.Open(job.id, *ChooseTraceWindow(job, 3));
  RepeatedPtrField<v1::TraceChunk> huge = Parts(named, 0, 2, true);
  huge[0].mutable_spans(0)->set_name(std::string(1 << 20, 'x'));
  small.OnReport(job.id, "n0", "task-a", huge);
  small.OnReport(job.id, "n1", "task-b", Parts(named, 1, 3, true));
  trace = small.Collect(named, 50ms);
  REQUIRE(trace.ranks.size() == 1);
  CHECK(trace.complete == std::set<int>{1});

  const int64_t second = *traces.Open(job.id, *ChooseTraceWindow(job, 3));
  traces.Shutdown();
  const auto start = std::chrono::steady_clock::now();
  trace = traces.Collect(second, 60s);
  CHECK(std::chrono::steady_clock::now() - start < 30s);
  CHECK(trace.ranks.empty());
}

}  // namespace
}  // namespace deepool::coordinator

// FirstCauseWindow alone, on a FakeClock: an echo waits for the first cause, a cause of its own
// wins, the window's end and the last report settle a wait, and a wait of an earlier attempt
// counts for nothing. Also what a failed task's exit report reads as.
#include "coordinator/first_cause_window.h"

#include <catch2/catch.hpp>

namespace deepool::coordinator {
namespace {

using std::chrono::seconds;

const Reason kEcho{ReasonCode::kTaskFailed, "rank 1 lost its peers"};
const Reason kCause{ReasonCode::kTaskFailed, "rank 0 ran out of memory"};

TEST_CASE("an echo waits while other tasks run and a cause of its own then wins",
          "[first_cause_window]") {
  FakeClock clock;
  FirstCauseWindow window(&clock, seconds(10));
  CHECK_FALSE(window.OnFailure("j", 1, kEcho, /*echo=*/true, /*others_live=*/true).has_value());
  CHECK(window.Waiting("j"));
  std::optional<Reason> failed = window.OnFailure("j", 1, kCause, false, true);
  REQUIRE(failed.has_value());
  CHECK(failed->message == kCause.message);
  CHECK_FALSE(window.Waiting("j"));
}

TEST_CASE("of two echoes the first stands", "[first_cause_window]") {
  FakeClock clock;
  FirstCauseWindow window(&clock, seconds(10));
  CHECK_FALSE(window.OnFailure("j", 1, kEcho, true, true).has_value());
  // The last task to report, an echo too: nothing runs any more.
  std::optional<Reason> failed =
      window.OnFailure("j", 1, {ReasonCode::kTaskFailed, "rank 2 lost its peers"}, true, false);
  REQUIRE(failed.has_value());
  CHECK(failed->message == kEcho.message);
}

TEST_CASE("a failure with nothing else running fails at once", "[first_cause_window]") {
  FakeClock clock;
  FirstCauseWindow window(&clock, seconds(10));
  std::optional<Reason> echo_alone = window.OnFailure("j", 1, kEcho, true, false);
  REQUIRE(echo_alone.has_value());
  CHECK(echo_alone->message == kEcho.message);
  CHECK(window.OnFailure("k", 1, kCause, false, true).has_value());
  CHECK(window.WaitingJobs().empty());
}

TEST_CASE("the wait ends with the window", "[first_cause_window]") {
  FakeClock clock;
  FirstCauseWindow window(&clock, seconds(10));
  REQUIRE_FALSE(window.OnFailure("j", 3, kEcho, true, true).has_value());
  clock.Advance(seconds(9));
  CHECK_FALSE(window.EndIfDue("j", 3).has_value());
  CHECK(window.WaitingJobs() == std::vector<std::string>{"j"});
  clock.Advance(seconds(1));
  std::optional<Reason> failed = window.EndIfDue("j", 3);
  REQUIRE(failed.has_value());
  CHECK(failed->message == kEcho.message);
  CHECK_FALSE(window.Waiting("j"));
}

TEST_CASE("a wait of an earlier attempt or an ended job counts for nothing",
          "[first_cause_window]") {
  FakeClock clock;
  FirstCauseWindow window(&clock, seconds(10));
  REQUIRE_FALSE(window.OnFailure("j", 1, kEcho, true, true).has_value());
  // Requeued meanwhile: attempt 2's echo opens a wait of its own.
  CHECK_FALSE(window.OnFailure("j", 2, {ReasonCode::kTaskFailed, "attempt 2"}, true, true));
  std::optional<Reason> second = window.EndNow("j", 2);
  REQUIRE(second.has_value());
  CHECK(second->message == "attempt 2");
  // Before the deadline, a wait for another attempt is dropped without a reason.
  REQUIRE_FALSE(window.OnFailure("k", 1, kEcho, true, true).has_value());
  CHECK_FALSE(window.EndIfDue("k", 2).has_value());
  CHECK_FALSE(window.Waiting("k"));
  REQUIRE_FALSE(window.OnFailure("m", 1, kEcho, true, true).has_value());
  CHECK_FALSE(window.EndNow("m", std::nullopt).has_value());  // the job ended
  CHECK_FALSE(window.Waiting("m"));
}

TEST_CASE("a task's exit reads as its error and as an echo by its code", "[first_cause_window]") {
  Task task;
  task.id = "j.a1.n1";
  task.node_id = "n1";
  v1::ReportTaskExitRequest report;
  report.set_outcome(v1::TASK_OUTCOME_FAILED);
  report.add_last_log_lines("first");
  report.add_last_log_lines("last");
  CHECK(TaskExitReason(task, report) == "task j.a1.n1 on n1 failed: last log line: last");
  v1::RankExit* rank = report.add_ranks();
  rank->set_rank(2);
  rank->set_error("boom");
  CHECK(TaskExitReason(task, report) == "task j.a1.n1 on n1 failed: rank 2: boom");
  report.set_error("the task's own");
  CHECK(TaskExitReason(task, report) == "task j.a1.n1 on n1 failed: the task's own");
  report.set_outcome(v1::TASK_OUTCOME_CANCELLED);
  CHECK(TaskExitReason(task, report) ==
        "task j.a1.n1 on n1 was stopped by its worker: the task's own");

  CHECK_FALSE(ReportsPeerFailure(report));  // no code
  report.set_error_code(static_cast<int32_t>(StatusCode::kResourceExhausted));
  CHECK_FALSE(ReportsPeerFailure(report));
  report.set_error_code(static_cast<int32_t>(StatusCode::kUnavailable));
  CHECK(ReportsPeerFailure(report));
}

}  // namespace
}  // namespace deepool::coordinator

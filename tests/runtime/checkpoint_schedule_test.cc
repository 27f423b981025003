// When periodic checkpoints are written: by iteration count, by time through agreement points
// planned from iteration counts alone (so every rank plans the same iteration), and always
// after the last iteration.
#include "worker/runtime/checkpoints/checkpoint_schedule.h"

#include <catch2/catch.hpp>

namespace deepool::worker {
namespace {

using Step = CheckpointSchedule::Step;

TEST_CASE("checkpoints by iteration count, and after the last iteration", "[checkpoint]") {
  CheckpointSchedule schedule(/*every_iterations=*/10, /*every_seconds=*/0, 0, 25, 0.0);
  CHECK(schedule.After(9) == Step::kNothing);
  CHECK(schedule.After(10) == Step::kWrite);
  CHECK(schedule.After(20) == Step::kWrite);
  CHECK(schedule.After(21) == Step::kNothing);
  CHECK(schedule.After(25) == Step::kWrite);  // the end
  CheckpointSchedule none(0, 0, 0, 25, 0.0);
  for (int64_t done = 1; done < 25; ++done) CHECK(none.After(done) == Step::kNothing);
  CHECK(none.After(25) == Step::kWrite);
}

// Simulates ranks at `seconds_per_iteration`: returns the iterations at which checkpoints were
// written and counts the agreements.
std::vector<int64_t> RunTimed(double every_seconds, double seconds_per_iteration, int64_t first,
                              int64_t total, int* agreements) {
  CheckpointSchedule schedule(0, every_seconds, first, total, 0.0);
  std::vector<int64_t> written;
  for (int64_t done = first + 1; done <= total; ++done) {
    const double now = static_cast<double>(done - first) * seconds_per_iteration;
    const Step step = schedule.After(done);
    bool write = step == Step::kWrite;
    if (step == Step::kAgree) {
      ++*agreements;
      write = schedule.Agreed(done, schedule.SecondsSinceLast(now));
    }
    if (!write) continue;
    written.push_back(done);
    schedule.Written(done, now);
  }
  return written;
}

TEST_CASE("checkpoints by time: about every T seconds, one agreement each when steady",
          "[checkpoint]") {
  int agreements = 0;
  // 0.5 s per iteration, a checkpoint every 10 s: every 20 iterations.
  const std::vector<int64_t> written = RunTimed(10.0, 0.5, 0, 200, &agreements);
  REQUIRE(written.size() == 10);
  CHECK(written.front() == 20);
  for (size_t i = 1; i + 1 < written.size(); ++i) CHECK(written[i] - written[i - 1] == 20);
  CHECK(written.back() == 200);
  // The first interval needs a calibration agreement; each later one meets once.
  CHECK(agreements == 10);
}

TEST_CASE("checkpoints by time resume from a checkpoint's iteration", "[checkpoint]") {
  int agreements = 0;
  const std::vector<int64_t> written = RunTimed(3.0, 1.0, 40, 52, &agreements);
  CHECK(written == std::vector<int64_t>{43, 46, 49, 52});
}

TEST_CASE("a slower pace moves the next agreement later, a faster one writes at once",
          "[checkpoint]") {
  CheckpointSchedule schedule(0, 10.0, 0, 1000, 0.0);
  REQUIRE(schedule.next_agreement() == CheckpointSchedule::kFirstAgreementAfter);
  CHECK(schedule.After(3) == Step::kAgree);
  CHECK_FALSE(schedule.Agreed(3, 1.5));  // 0.5 s per iteration: 17 more to go
  CHECK(schedule.next_agreement() == 20);
  CHECK(schedule.After(19) == Step::kNothing);
  CHECK(schedule.After(20) == Step::kAgree);
  CHECK(schedule.Agreed(20, 10.2));
  schedule.Written(20, 10.2);
  CHECK(schedule.next_agreement() == 40);  // as many iterations as the last interval
  CHECK_FALSE(schedule.Agreed(40, 5.0));   // faster now: twice as far
  CHECK(schedule.next_agreement() == 60);
  CHECK(schedule.Agreed(60, 30.0));  // slower: late, written at once
}

}  // namespace
}  // namespace deepool::worker

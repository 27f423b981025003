// JobFollower's loops, driven directly: what WatchJob and GetJobLogs stream, and that a waiting
// loop wakes on a change, not on a timer.
#include "coordinator/job_follower.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "common/clock.h"
#include "tests/service/service_test_util.h"

namespace deepool::coordinator {
namespace {

using namespace std::chrono_literals;
using testing::SlowProbe;

struct Fixture {
  FakeClock clock;
  InMemoryJobStore store;
  JobManager jobs{&store, &clock};
  std::string id;
  Fixture() {
    REQUIRE(jobs.Load().ok());
    JobSpec spec;
    spec.name = "tiny";
    spec.model = "tiny";
    spec.global_batch = 8;
    spec.iterations = 4;
    id = jobs.Submit(spec)->id;
  }
  void Log(const std::string& line) {
    LogRecord record;
    record.line = line;
    REQUIRE(jobs.AppendLogs(id, {record}).ok());
  }
  void Run() {
    REQUIRE(jobs.Transition(id, JobState::kPlanning, "planning").ok());
    REQUIRE(jobs.Transition(id, JobState::kRunning, "running").ok());
  }
};

TEST_CASE("Logs sends the tail, or everything, and stops when not following", "[job_follower]") {
  Fixture f;
  for (const char* line : {"a", "b", "c"}) f.Log(line);
  JobFollower follower(&f.jobs);
  std::vector<std::string> got;
  auto collect = [&](const LogRecord& r) {
    got.push_back(r.line);
    return true;
  };
  REQUIRE(follower.Logs(f.id, {2, false}, collect).ok());
  CHECK(got == std::vector<std::string>{"b", "c"});
  got.clear();
  REQUIRE(follower.Logs(f.id, {0, false}, collect).ok());
  CHECK(got == std::vector<std::string>{"a", "b", "c"});

  CHECK(follower.Logs(f.id, {-1, false}, collect).code() == StatusCode::kInvalidArgument);
  CHECK(follower.Logs("job-999", {0, true}, collect).code() == StatusCode::kNotFound);
}

// The in-memory store, counting the most log lines one read returned.
class LogPageStore final : public JobStore {
 public:
  size_t largest_read = 0;
  Status SaveJob(const JobRecord& job) override { return store_.SaveJob(job); }
  StatusOr<std::vector<JobRecord>> LoadJobs() override { return store_.LoadJobs(); }
  StatusOr<JobRecord> LoadJob(const std::string& id) override { return store_.LoadJob(id); }
  Status DeleteJobs(const std::vector<std::string>& ids) override { return store_.DeleteJobs(ids); }
  Status AppendLogs(const std::string& id, std::vector<LogRecord>* lines) override {
    return store_.AppendLogs(id, lines);
  }
  StatusOr<std::vector<LogRecord>> ReadLogs(const std::string& id, int64_t after,
                                            int limit) override {
    return Counted(store_.ReadLogs(id, after, limit));
  }
  StatusOr<std::vector<LogRecord>> TailLogs(const std::string& id, int count) override {
    return Counted(store_.TailLogs(id, count));
  }
  Status SaveProfile(const std::string& key, const std::string& type,
                     const std::string& json) override {
    return store_.SaveProfile(key, type, json);
  }
  StatusOr<std::optional<std::string>> LoadProfile(const std::string& key,
                                                   const std::string& type) override {
    return store_.LoadProfile(key, type);
  }
  Status ReserveSeqs(int64_t bound) override { return store_.ReserveSeqs(bound); }
  StatusOr<int64_t> LoadSeqReservation() override { return store_.LoadSeqReservation(); }

 private:
  StatusOr<std::vector<LogRecord>> Counted(StatusOr<std::vector<LogRecord>> lines) {
    if (lines.ok()) largest_read = std::max(largest_read, lines->size());
    return lines;
  }
  InMemoryJobStore store_;
};

TEST_CASE("a long log is sent a page at a time, whole or its tail", "[job_follower]") {
  FakeClock clock;
  LogPageStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  JobSpec spec;
  spec.model = "tiny";
  spec.global_batch = 8;
  spec.iterations = 4;
  const std::string id = jobs.Submit(spec)->id;
  std::vector<LogRecord> lines(2500);
  for (size_t i = 0; i < lines.size(); ++i) lines[i].line = std::to_string(i);
  REQUIRE(jobs.AppendLogs(id, lines).ok());
  JobFollower follower(&jobs);
  std::vector<std::string> got;
  auto collect = [&](const LogRecord& r) {
    got.push_back(r.line);
    return true;
  };
  REQUIRE(follower.Logs(id, {0, false}, collect).ok());
  REQUIRE(got.size() == 2500);
  CHECK(got.front() == "0");
  CHECK(got.back() == "2499");
  got.clear();
  REQUIRE(follower.Logs(id, {2200, false}, collect).ok());
  REQUIRE(got.size() == 2200);
  CHECK(got.front() == "300");
  CHECK(got.back() == "2499");
  got.clear();
  REQUIRE(follower.Logs(id, {5000, false}, collect).ok());  // more than there are: all
  CHECK(got.size() == 2500);
  CHECK(store.largest_read <= 1000);
}

TEST_CASE("following wakes on each new line and ends with the job", "[job_follower]") {
  Fixture f;
  f.Run();
  f.Log("first");
  JobFollower follower(&f.jobs);
  std::mutex mu;
  std::vector<std::string> got;
  auto done = std::async(std::launch::async, [&] {
    return follower.Logs(
        f.id, {0, true},
        [&](const LogRecord& r) {
          std::lock_guard<std::mutex> lock(mu);
          got.push_back(r.line);
          return true;
        },
        SlowProbe());
  });
  auto count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return got.size();
  };
  auto wait_for = [&](size_t n) {
    for (int i = 0; i < 3000 && count() < n; ++i) std::this_thread::sleep_for(10ms);
    return count() >= n;
  };
  REQUIRE(wait_for(1));
  f.Log("second");
  CHECK(wait_for(2));  // well before the 60 s probe
  // Lines stored just before the job ends are still sent.
  f.Log("last words");
  REQUIRE(f.jobs.Transition(f.id, JobState::kFailed, "boom").ok());
  REQUIRE(done.wait_for(10s) == std::future_status::ready);
  CHECK(done.get().ok());
  CHECK(got == std::vector<std::string>{"first", "second", "last words"});
}

TEST_CASE("a follow loop ends on cancel, shutdown, or a closed stream", "[job_follower]") {
  Fixture f;
  f.Run();
  JobFollower follower(&f.jobs);
  auto keep = [](const LogRecord&) { return true; };

  std::atomic<bool> cancelled{false};
  FollowStop stop;
  stop.cancelled = [&] { return cancelled.load(); };
  stop.cancel_probe = 10ms;
  auto cancel = std::async(std::launch::async, [&] {
    return follower.Logs(f.id, {0, true}, keep, stop);
  });
  CHECK(cancel.wait_for(100ms) == std::future_status::timeout);
  cancelled = true;
  REQUIRE(cancel.wait_for(10s) == std::future_status::ready);
  CHECK(cancel.get().code() == StatusCode::kCancelled);

  f.Log("x");
  int sent = 0;
  CHECK(follower.Logs(f.id, {0, true}, [&](const LogRecord&) { return ++sent < 0; }).ok());
  CHECK(sent == 1);

  auto watch = std::async(std::launch::async, [&] {
    return follower.Watch(
        f.id, [](const JobRecord&) { return true; }, SlowProbe());
  });
  CHECK(watch.wait_for(100ms) == std::future_status::timeout);
  f.jobs.Shutdown();
  REQUIRE(watch.wait_for(10s) == std::future_status::ready);
  CHECK(watch.get().code() == StatusCode::kUnavailable);
}

TEST_CASE("Watch sends the job after each change until it is terminal", "[job_follower]") {
  Fixture f;
  JobFollower follower(&f.jobs);
  std::mutex mu;
  std::vector<JobState> states;
  auto done = std::async(std::launch::async, [&] {
    return follower.Watch(
        f.id,
        [&](const JobRecord& job) {
          std::lock_guard<std::mutex> lock(mu);
          if (states.empty() || states.back() != job.state) states.push_back(job.state);
          return true;
        },
        SlowProbe());
  });
  auto last = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return states.empty() ? JobState::kCancelled : states.back();
  };
  auto wait_until = [&](JobState state) {
    for (int i = 0; i < 3000 && last() != state; ++i) std::this_thread::sleep_for(10ms);
    return last() == state;
  };
  REQUIRE(wait_until(JobState::kPending));
  REQUIRE(f.jobs.Transition(f.id, JobState::kPlanning, "planning").ok());
  CHECK(wait_until(JobState::kPlanning));
  REQUIRE(f.jobs.Transition(f.id, JobState::kCancelled, "by user").ok());
  REQUIRE(done.wait_for(10s) == std::future_status::ready);
  CHECK(done.get().ok());
  CHECK(states ==
        std::vector<JobState>{JobState::kPending, JobState::kPlanning, JobState::kCancelled});
  CHECK(follower.Watch("job-999", [](const JobRecord&) { return true; }).code() ==
        StatusCode::kNotFound);
}

}  // namespace
}  // namespace deepool::coordinator

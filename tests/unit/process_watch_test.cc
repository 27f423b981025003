// ProcessWatch against a real process (/bin/sleep): stopped too long, gone, and the state reader.
#include "common/process_watch.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/subprocess.h"

namespace deepool {
namespace {

using namespace std::chrono_literals;

// What the watch reported, and a wait for it.
struct Lost {
  std::mutex mu;
  std::condition_variable cv;
  std::string why;
  std::function<void(const std::string&)> Callback() {
    return [this](const std::string& w) {
      std::lock_guard<std::mutex> lock(mu);
      why = w;
      cv.notify_all();
    };
  }
  std::string WaitFor(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, timeout, [&] { return !why.empty(); });
    return why;
  }
};

std::unique_ptr<ChildProcess> Sleeper() {
  ProcessSpec spec;
  spec.executable = "/bin/sleep";
  spec.args = {"60"};
  auto child = ChildProcess::Start(spec, {});
  REQUIRE(child.ok());
  return std::move(*child);
}

TEST_CASE("the run state of a process comes from /proc", "[process_watch]") {
  CHECK(ReadProcessRunState(getpid()) == ProcessRunState::kRunning);
  CHECK(ReadProcessRunState(999'999'999) == ProcessRunState::kGone);
  auto sleeper = Sleeper();
  REQUIRE(kill(sleeper->pid(), SIGSTOP) == 0);
  // The state changes once the kernel has stopped it; a stopped process stays stopped.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (ReadProcessRunState(sleeper->pid()) != ProcessRunState::kStopped &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  CHECK(ReadProcessRunState(sleeper->pid()) == ProcessRunState::kStopped);
  REQUIRE(kill(sleeper->pid(), SIGCONT) == 0);
}

TEST_CASE("a watched process stopped past the limit, or gone, is reported once",
          "[process_watch]") {
  auto sleeper = Sleeper();
  Lost lost;
  ProcessWatch::Options options;
  options.pid = sleeper->pid();
  options.stopped_limit = 300ms;
  options.poll = 20ms;
  ProcessWatch watch(options, lost.Callback());

  SECTION("running: nothing to report") { CHECK(lost.WaitFor(500ms).empty()); }
  SECTION("stopped past the limit") {
    const auto stopped_at = std::chrono::steady_clock::now();
    REQUIRE(kill(sleeper->pid(), SIGSTOP) == 0);
    const std::string why = lost.WaitFor(10s);
    CHECK_THAT(why, Catch::Contains("stopped for over 300 ms"));
    CHECK(std::chrono::steady_clock::now() - stopped_at >= 300ms);
    REQUIRE(kill(sleeper->pid(), SIGCONT) == 0);
  }
  SECTION("killed") {
    sleeper->SignalGroup(SIGKILL);
    REQUIRE(sleeper->Wait(10s).has_value());
    CHECK_THAT(lost.WaitFor(10s), Catch::EndsWith("exited"));
  }
}

TEST_CASE("a parent that ended before the watch began is lost, though another adopted us",
          "[process_watch]") {
  // This test process adopts orphans (as init or a service manager would): the executor's
  // parent then looks alive to a watch that takes whoever its parent is now.
  REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  int pids[2];
  REQUIRE(pipe(pids) == 0);
  const pid_t worker = fork();
  REQUIRE(worker >= 0);
  if (worker == 0) {  // the worker: starts an executor, then ends before it watches
    const pid_t self = getpid();
    const pid_t executor = fork();
    if (executor == 0) {
      close(pids[0]);
      close(pids[1]);
      while (getppid() == self) usleep(1000);  // loading: the worker ends meanwhile
      ProcessWatch::Options options;
      options.started_by = self;
      options.poll = 10ms;
      std::mutex mu;
      std::condition_variable cv;
      bool lost = false;
      ProcessWatch watch(options, [&](const std::string&) {
        std::lock_guard<std::mutex> lock(mu);
        lost = true;
        cv.notify_all();
      });
      std::unique_lock<std::mutex> lock(mu);
      _exit(cv.wait_for(lock, 5s, [&] { return lost; }) ? 0 : 1);
    }
    (void)!write(pids[1], &executor, sizeof(executor));
    _exit(0);
  }
  close(pids[1]);
  pid_t executor = 0;
  REQUIRE(read(pids[0], &executor, sizeof(executor)) == sizeof(executor));
  close(pids[0]);
  int status = 0;
  REQUIRE(waitpid(worker, &status, 0) == worker);
  REQUIRE(waitpid(executor, &status, 0) == executor);  // adopted by this process
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // its watch saw the worker gone
}

}  // namespace
}  // namespace deepool

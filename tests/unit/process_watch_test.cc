// ProcessWatch against a real process (/bin/sleep): stopped too long, gone, and the state reader.
#include "common/process_watch.h"

#include <signal.h>
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

TEST_CASE("a watched process stopped past the limit, or gone, is reported once", "[process_watch]") {
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

}  // namespace
}  // namespace deepool

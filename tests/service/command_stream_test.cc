// StreamNodeCommands, driven with the scheduler harness: commands reach the stream as they are
// queued (not on a timer), and the loop ends on cancel, a closed stream, shutdown, or an
// unknown node.
#include "coordinator/command_stream.h"

#include <atomic>
#include <future>

#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator::testing {
namespace {

using namespace std::chrono_literals;

TEST_CASE("a queued command reaches the stream at once", "[command_stream]") {
  Harness h;
  h.AddNode("a", 2);
  std::promise<v1::TaskCommand> first;
  auto stream = std::async(std::launch::async, [&] {
    return StreamNodeCommands(
        &h.scheduler, &h.jobs, "node-a",
        [&](const v1::TaskCommand& command) {
          first.set_value(command);
          return false;  // the stream closes after one command
        },
        SlowProbe());
  });
  h.Submit(Fg(2));
  h.scheduler.Tick();
  auto command = first.get_future();
  REQUIRE(command.wait_for(10s) == std::future_status::ready);  // well before the 60 s probe
  CHECK(command.get().has_assign());
  REQUIRE(stream.wait_for(10s) == std::future_status::ready);
  CHECK(stream.get().ok());
}

TEST_CASE("the command stream ends on cancel, shutdown and for unknown nodes", "[command_stream]") {
  Harness h;
  h.AddNode("a", 1);
  auto keep = [](const v1::TaskCommand&) { return true; };
  CHECK(StreamNodeCommands(&h.scheduler, &h.jobs, "node-zz", keep).code() == StatusCode::kNotFound);

  std::atomic<bool> cancelled{false};
  FollowStop stop;
  stop.cancelled = [&] { return cancelled.load(); };
  stop.cancel_probe = 10ms;
  auto cancel = std::async(std::launch::async, [&] {
    return StreamNodeCommands(&h.scheduler, &h.jobs, "node-a", keep, stop);
  });
  CHECK(cancel.wait_for(100ms) == std::future_status::timeout);
  cancelled = true;
  REQUIRE(cancel.wait_for(10s) == std::future_status::ready);
  CHECK(cancel.get().code() == StatusCode::kCancelled);

  auto shutdown = std::async(std::launch::async, [&] {
    return StreamNodeCommands(&h.scheduler, &h.jobs, "node-a", keep, SlowProbe());
  });
  CHECK(shutdown.wait_for(100ms) == std::future_status::timeout);
  h.jobs.Shutdown();
  h.scheduler.Shutdown();
  REQUIRE(shutdown.wait_for(10s) == std::future_status::ready);
  CHECK(shutdown.get().code() == StatusCode::kUnavailable);
}

}  // namespace
}  // namespace deepool::coordinator::testing

// The device gate: FG/BG exclusion on the idle-only path, accounting with a fake clock, the
// limits on the FG rank's wait (timeout, unit bound from its idle gaps), and the event-log checker
// (which must reject logs of a concurrent gate).
#include "worker/runtime/background/multiplex_gate.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "common/clock.h"

namespace deepool::worker {
namespace {

using K = GateEventKind;

// Waits (bounded, yielding) until `done` holds; the bound only guards against a hung test.
template <typename Fn>
bool AwaitCondition(Fn done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST_CASE("idle-only gate: a returning FG rank waits for the BG unit in progress, then BG waits",
          "[multiplex]") {
  FakeClock clock;
  DeviceGate gate(SharingMode::kIdleOnly, &clock, /*record_events=*/true);
  gate.FgIdleBegin();
  REQUIRE(gate.BgBegin());  // FG idle: BG may start at once
  std::atomic<bool> resumed{false};
  std::thread fg([&] {
    gate.FgIdleEnd();
    resumed = true;
  });
  REQUIRE(AwaitCondition([&] { return gate.counters().fg_resumes_delayed == 1; }));
  REQUIRE_FALSE(resumed.load());
  clock.Advance(std::chrono::milliseconds(4));
  gate.BgEnd();
  fg.join();
  REQUIRE(resumed.load());
  REQUIRE((gate.events() ==
           std::vector<K>{K::kFgIdle, K::kBgStart, K::kFgReady, K::kBgEnd, K::kFgResume}));
  REQUIRE(CheckIdleOnlyLog(gate.events()).ok());
  SharingWindow window = gate.TakeWindow();
  REQUIRE(window.bg_overrun_ms == Approx(4.0));
  REQUIRE(window.fg_wait_ms == Approx(4.0));
  REQUIRE(window.bg_busy_ms == Approx(4.0));
  REQUIRE(window.bg_units == 1);

  // FG busy again: a BG thread blocks until FG idles, and its unit starts after fg_idle.
  std::thread bg([&] {
    if (gate.BgBegin()) gate.BgEnd();
  });
  gate.FgIdleBegin();
  bg.join();
  gate.FgIdleEnd();
  auto events = gate.events();
  REQUIRE(events.size() == 10);
  REQUIRE((std::vector<K>(events.begin() + 5, events.end()) ==
           std::vector<K>{K::kFgIdle, K::kBgStart, K::kBgEnd, K::kFgReady, K::kFgResume}));
  REQUIRE(CheckIdleOnlyLog(events).ok());
  REQUIRE(gate.counters().bg_units_in_fg_idle == 2);
}

TEST_CASE("idle-only gate: the FG rank stops waiting for a BG unit at the timeout", "[multiplex]") {
  FakeClock clock;
  GateLimits limits;
  limits.max_fg_wait_ms = 20;
  DeviceGate gate(SharingMode::kIdleOnly, &clock, true, limits);
  gate.FgIdleBegin();
  REQUIRE(gate.BgBegin());
  // The unit never ends while the FG rank waits: only the timeout lets it go (bounded here so
  // that a gate without one fails the test instead of hanging it).
  auto resumed = std::async(std::launch::async, [&] { gate.FgIdleEnd(); });
  const bool timed_out = resumed.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  if (!timed_out) gate.BgEnd();  // releases the FG thread, so that the failure is reported
  REQUIRE(timed_out);
  GateCounters counters = gate.counters();
  REQUIRE(counters.fg_resumes_delayed == 1);
  REQUIRE(counters.fg_wait_timeouts == 1);
  REQUIRE(gate.TakeWindow().fg_wait_timeouts == 1);
  // The FG rank computes beside the unit; the next unit waits for its next idle period.
  gate.BgEnd();
  std::atomic<bool> started{false};
  std::thread bg([&] {
    if (gate.BgBegin()) {
      started = true;
      gate.BgEnd();
    }
  });
  gate.FgIdleBegin();
  bg.join();
  REQUIRE(started.load());
  gate.FgIdleEnd();
  const std::vector<K> expected{K::kFgIdle, K::kBgStart, K::kFgReady, K::kFgTimeout, K::kBgEnd,
                                K::kFgIdle, K::kBgStart, K::kBgEnd,   K::kFgReady,   K::kFgResume};
  REQUIRE(gate.events() == expected);
  REQUIRE(CheckIdleOnlyLog(gate.events()).ok());
  // A timeout is only legitimate while a unit runs.
  REQUIRE_FALSE(CheckIdleOnlyLog({K::kFgIdle, K::kFgReady, K::kFgTimeout}).ok());
}

TEST_CASE("idle-only gate: a returning FG rank whose unit ends in time is not timed out",
          "[multiplex]") {
  FakeClock clock;
  GateLimits limits;
  limits.max_fg_wait_ms = 60'000;
  DeviceGate gate(SharingMode::kIdleOnly, &clock, true, limits);
  gate.FgIdleBegin();
  REQUIRE(gate.BgBegin());
  std::thread fg([&] { gate.FgIdleEnd(); });
  REQUIRE(AwaitCondition([&] { return gate.counters().fg_resumes_delayed == 1; }));
  gate.BgEnd();
  fg.join();
  REQUIRE(gate.counters().fg_wait_timeouts == 0);
  REQUIRE(gate.events().back() == K::kFgResume);
}

// Idle periods of the given lengths on the gate's fake clock, no BG unit running.
void Gaps(DeviceGate& gate, FakeClock& clock, const std::vector<double>& gaps_ms) {
  for (double gap : gaps_ms) {
    gate.FgIdleBegin();
    clock.Advance(std::chrono::microseconds(static_cast<int64_t>(gap * 1000)));
    gate.FgIdleEnd();
  }
}

TEST_CASE("the unit bound is a share of the FG rank's typical idle gap, weighted by length",
          "[multiplex]") {
  FakeClock clock;
  GateLimits limits;
  limits.unit_bound_fraction = 0.25;
  DeviceGate gate(SharingMode::kIdleOnly, &clock, false, limits);
  REQUIRE(gate.UnitBoundMs() == 0);  // no gap seen yet
  // Ten 1 ms waits and two 10 ms gaps: 20 of the 30 ms idle lie in the long gaps, so those are
  // typical; a plain median (1 ms) would cut the BG job's units to a tenth for nothing.
  Gaps(gate, clock, {1, 1, 1, 1, 1, 10, 1, 1, 1, 1, 1, 10});
  REQUIRE(gate.UnitBoundMs() == Approx(2.5));
  // Only the last kGapHistory gaps count: after that many 2 ms gaps, the 10 ms ones are gone.
  Gaps(gate, clock, std::vector<double>(DeviceGate::kGapHistory, 2.0));
  REQUIRE(gate.UnitBoundMs() == Approx(0.5));

  // The gap is the communication wait, not the FG rank's wait for a BG unit after it.
  FakeClock other;
  DeviceGate waited(SharingMode::kIdleOnly, &other, false, limits);
  Gaps(waited, other, {2});
  waited.FgIdleBegin();
  REQUIRE(waited.BgBegin());
  other.Advance(std::chrono::milliseconds(2));
  std::thread fg([&] { waited.FgIdleEnd(); });
  REQUIRE(AwaitCondition([&] { return waited.counters().fg_resumes_delayed == 1; }));
  other.Advance(std::chrono::milliseconds(100));
  waited.BgEnd();
  fg.join();
  REQUIRE(waited.UnitBoundMs() == Approx(0.5));  // gaps {2, 2}; counting the wait: 25.5

  DeviceGate concurrent(SharingMode::kConcurrent, &other, false, limits);
  Gaps(concurrent, other, {4, 4});
  REQUIRE(concurrent.UnitBoundMs() == 0);  // the FG rank never waits for BG there
  DeviceGate unbounded(SharingMode::kIdleOnly, &other, false, GateLimits{});
  Gaps(unbounded, other, {4, 4});
  REQUIRE(unbounded.UnitBoundMs() == 0);
}

TEST_CASE("idle-only gate: Stop releases a BG thread blocked behind a busy FG rank",
          "[multiplex]") {
  FakeClock clock;
  DeviceGate gate(SharingMode::kIdleOnly, &clock, true);
  std::atomic<int> result{-1};
  std::thread bg([&] { result = gate.BgBegin() ? 1 : 0; });
  gate.Stop();
  bg.join();
  REQUIRE(result.load() == 0);
  REQUIRE(gate.events().empty());
}

TEST_CASE("idle-only gate: after FgDetach BG runs without waiting", "[multiplex]") {
  FakeClock clock;
  DeviceGate gate(SharingMode::kIdleOnly, &clock, true);
  gate.FgDetach();
  for (int i = 0; i < 3; ++i) {
    REQUIRE(gate.BgBegin());
    gate.BgEnd();
  }
  gate.FgIdleBegin();  // ignored once detached
  gate.FgIdleEnd();
  REQUIRE(gate.counters().bg_units == 3);
  REQUIRE(gate.events().size() == 7);
  REQUIRE(CheckIdleOnlyLog(gate.events()).ok());
}

TEST_CASE("gate accounting with a fake clock", "[multiplex]") {
  FakeClock clock;
  DeviceGate gate(SharingMode::kIdleOnly, &clock);
  clock.Advance(std::chrono::milliseconds(2));  // FG computes
  gate.FgIdleBegin();
  clock.Advance(std::chrono::milliseconds(10));  // nobody computes
  REQUIRE(gate.BgBegin());
  clock.Advance(std::chrono::milliseconds(5));
  gate.BgEnd();
  clock.Advance(std::chrono::milliseconds(3));
  gate.FgIdleEnd();
  clock.Advance(std::chrono::milliseconds(1));
  SharingWindow window = gate.TakeWindow();
  CHECK(window.window_ms == Approx(21.0));
  CHECK(window.fg_wait_ms == Approx(18.0));
  CHECK(window.bg_busy_ms == Approx(5.0));
  CHECK(window.bg_overrun_ms == 0.0);
  CHECK(window.bg_units == 1);
  CHECK(gate.events().empty());  // not recorded unless asked

  // Periods in progress are split at the window boundary.
  gate.FgIdleBegin();
  REQUIRE(gate.BgBegin());
  clock.Advance(std::chrono::milliseconds(6));
  window = gate.TakeWindow();
  CHECK(window.window_ms == Approx(6.0));
  CHECK(window.fg_wait_ms == Approx(6.0));
  CHECK(window.bg_busy_ms == Approx(6.0));
  clock.Advance(std::chrono::milliseconds(1));
  gate.BgEnd();
  gate.FgIdleEnd();
  window = gate.TakeWindow();
  CHECK(window.window_ms == Approx(1.0));
  CHECK(window.bg_busy_ms == Approx(1.0));
  CHECK(window.fg_wait_ms == Approx(1.0));
}

TEST_CASE("concurrent gate never blocks, and its log fails the idle-only check", "[multiplex]") {
  FakeClock clock;
  DeviceGate gate(SharingMode::kConcurrent, &clock, true);
  REQUIRE(gate.BgBegin());  // FG busy, BG starts anyway
  gate.FgIdleBegin();
  gate.FgIdleEnd();  // does not wait for the BG unit
  gate.BgEnd();
  REQUIRE(gate.counters().fg_resumes_delayed == 0);
  Status check = CheckIdleOnlyLog(gate.events());
  REQUIRE(check.code() == StatusCode::kFailedPrecondition);
  REQUIRE_THAT(check.message(), Catch::Contains("event 0 (bg_start)") &&
                                    Catch::Contains("while the FG rank was computing"));
}

TEST_CASE("concurrent gate: a unit that needs FG idle is gated like on the idle-only path",
          "[multiplex]") {
  FakeClock clock;
  DeviceGate gate(SharingMode::kConcurrent, &clock, true);
  // FG busy: the unit waits for an idle period.
  std::atomic<bool> started{false};
  std::thread bg([&] {
    if (gate.BgBegin(/*needs_fg_idle=*/true)) started = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE_FALSE(started.load());
  gate.FgIdleBegin();
  bg.join();
  REQUIRE(started.load());
  // The FG rank's wait ends while the unit runs: it waits for the unit.
  std::atomic<bool> resumed{false};
  std::thread fg([&] {
    gate.FgIdleEnd();
    resumed = true;
  });
  REQUIRE(AwaitCondition([&] { return gate.counters().fg_resumes_delayed == 1; }));
  REQUIRE_FALSE(resumed.load());
  gate.BgEnd();
  fg.join();
  REQUIRE(CheckIdleOnlyLog(gate.events()).ok());
  // Units that do not ask still run beside a busy FG rank, and FG does not wait for them.
  REQUIRE(gate.BgBegin(/*needs_fg_idle=*/false));
  gate.FgIdleBegin();
  gate.FgIdleEnd();
  gate.BgEnd();
  REQUIRE(gate.counters().fg_resumes_delayed == 1);
}

TEST_CASE("idle-only log checker names each kind of violation", "[multiplex]") {
  REQUIRE(CheckIdleOnlyLog({}).ok());
  REQUIRE(CheckIdleOnlyLog({K::kFgIdle, K::kBgStart, K::kBgEnd, K::kFgReady, K::kFgResume,
                            K::kFgDetach, K::kBgStart, K::kBgEnd})
              .ok());
  auto message = [](std::vector<K> events) { return CheckIdleOnlyLog(events).message(); };
  REQUIRE_THAT(message({K::kFgIdle, K::kFgReady, K::kBgStart}),
               Catch::Contains("event 2") && Catch::Contains("had work ready"));
  REQUIRE_THAT(message({K::kFgIdle, K::kBgStart, K::kFgReady, K::kFgResume}),
               Catch::Contains("event 3") && Catch::Contains("resumed while a BG unit"));
  REQUIRE_THAT(message({K::kFgIdle, K::kBgStart, K::kBgStart}), Catch::Contains("already running"));
  REQUIRE_THAT(message({K::kBgEnd}), Catch::Contains("no BG unit"));
  REQUIRE_THAT(message({K::kFgReady}), Catch::Contains("not idle"));
  REQUIRE_THAT(message({K::kFgIdle, K::kFgIdle}), Catch::Contains("not computing"));
}

TEST_CASE("sharing modes parse by name", "[multiplex]") {
  REQUIRE(*ParseSharingMode("idle_only") == SharingMode::kIdleOnly);
  REQUIRE(*ParseSharingMode("concurrent") == SharingMode::kConcurrent);
  REQUIRE_FALSE(ParseSharingMode("fifo").ok());
  REQUIRE(SharingModeName(SharingMode::kConcurrent) == "concurrent");
}

}  // namespace
}  // namespace deepool::worker

// The device gate: FG/BG exclusion on the idle-only path, accounting with a fake clock, and the
// event-log checker (which must reject logs of a concurrent gate).
#include "worker/runtime/multiplex_gate.h"

#include <atomic>
#include <catch2/catch.hpp>
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

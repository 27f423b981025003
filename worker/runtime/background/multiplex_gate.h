// Sharing one device between a foreground (FG) executor rank and one background (BG) job.
//
// The FG rank declares when it is idle (it waits on a transfer or a collective; the layers it is
// not part of show up as such waits, since it skips them and waits for its next input). The BG
// job runs in units (one layer's forward, one layer's backward, or an optimizer step; a whole
// replayed iteration on CUDA graphs) and asks the gate before each unit.
//
//   kIdleOnly (CPU devices): a BG unit starts only while the FG rank is idle or gone. When the FG
//     rank's wait ends it takes the device back as soon as the BG unit in progress ends, so FG
//     waits for at most one BG unit and never finds BG starting while it has work ready. Two
//     limits bound that wait (GateLimits): a timeout, after which the FG rank computes beside
//     the unit, and a unit bound derived from the FG rank's idle gaps, which the BG runner keeps
//     its units under (background_runner.h).
//   kConcurrent (CUDA, where stream priorities arbitrate; or the naive CPU baseline): BG never
//     waits for the FG rank and the FG rank never waits for BG; only accounting. Except for a
//     unit begun with needs_fg_idle (a unit of an eagerly run BG job on CUDA, which shares
//     libtorch's autograd device thread with the FG rank; background_graph_stepper.h): that one
//     unit is gated as in kIdleOnly, and an FG rank whose wait ends while it runs waits for it.
//
// Instrumentation: every transition can be appended to an event log (no timestamps, only order),
// and CheckIdleOnlyLog() replays such a log and names the first moment BG ran while the FG rank
// had work ready. Per-window accounting (FG waiting, BG busy) uses the injected clock.
//
// Threading: one FG thread calls the Fg* methods, one BG thread calls the Bg* methods; any thread
// may call Stop(), TakeWindow(), events() and counters(). All state is guarded by one mutex.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "protocol/background_spec.h"

namespace deepool::worker {

// The modes, as the run spec names them (protocol/background_spec.h).
using protocol::ParseSharingMode;
using protocol::SharingMode;
using protocol::SharingModeName;

enum class GateEventKind {
  kFgIdle,     // the FG rank starts waiting on communication
  kFgReady,    // its wait ended: it has work ready and asks for the device
  kFgResume,   // it got the device and computes
  kFgDetach,   // the FG rank is gone (finished): BG may run freely
  kBgStart,    // a BG unit starts
  kBgEnd,      // a BG unit ended
  kFgTimeout,  // the FG rank stopped waiting for a BG unit (GateLimits::max_fg_wait_ms) and
               // computes
};
std::string GateEventName(GateEventKind kind);
// Streams GateEventName, so logs and test failures print event names.
inline std::ostream& operator<<(std::ostream& os, GateEventKind kind) {
  return os << GateEventName(kind);
}

// Time accumulated since the previous TakeWindow() (or since the gate was made).
struct SharingWindow {
  double window_ms = 0;
  double fg_wait_ms = 0;     // the FG rank waiting: on communication, then on a BG unit
  double bg_busy_ms = 0;     // BG units running
  double bg_overrun_ms = 0;  // part of fg_wait_ms spent waiting for a BG unit to end
  int64_t bg_units = 0;      // BG units ended in the window
  int64_t fg_wait_timeouts = 0;  // FG waits for a BG unit that ended at the timeout
};

struct GateCounters {
  int64_t fg_idle_periods = 0;
  int64_t bg_units = 0;
  int64_t bg_units_in_fg_idle = 0;  // units that started while the FG rank was idle
  int64_t fg_resumes_delayed = 0;   // FG resumes that had to wait for a BG unit
  int64_t fg_wait_timeouts = 0;     // of those, the ones that stopped waiting at the timeout
};

// Bounds on the FG rank's wait for a BG unit (kIdleOnly). 0 switches a limit off.
struct GateLimits {
  // The run spec's (protocol::SharingOptions).
  static GateLimits From(const protocol::SharingOptions& options) {
    return {options.max_fg_wait_ms, options.unit_bound_fraction};
  }
  // The longest the FG rank waits for the BG unit in progress (real time: the condition
  // variable's clock, whatever the gate's accounting clock).
  double max_fg_wait_ms = 0;
  // UnitBoundMs() is this share of the FG rank's typical idle gap.
  double unit_bound_fraction = 0;
};

class DeviceGate {
 public:
  // record_events: keep the event log (tests and benchmarks; it grows with every transition).
  DeviceGate(SharingMode mode, const Clock* clock, bool record_events = false,
             GateLimits limits = {});

  SharingMode mode() const { return mode_; }
  const GateLimits& limits() const { return limits_; }

  // FG thread. The FG rank starts busy.
  void FgIdleBegin();
  // Blocks (kIdleOnly) until the BG unit in progress, if any, has ended, or for at most
  // limits().max_fg_wait_ms when that is set.
  void FgIdleEnd();
  // The FG rank will not compute again: BG runs without waiting from now on.
  void FgDetach();

  // BG thread. Blocks until BG may run one unit; false once Stop() was called. needs_fg_idle:
  // this unit runs only while the FG rank is idle (or gone), whatever the mode.
  bool BgBegin(bool needs_fg_idle = false);
  void BgEnd();

  // Wakes the BG thread; every later BgBegin() returns false.
  void Stop();
  // Undoes Stop() for the next BG job on the same FG rank (BackgroundHost). Call only when no BG
  // thread runs.
  void Reopen();

  // The longest a BG unit should run (kIdleOnly): unit_bound_fraction x the FG rank's typical idle
  // gap, the length-weighted median of its last kGapHistory communication waits (the gap length
  // that half of its idle time lies in gaps at least as long as; many short waits do not pull it
  // down). A BG unit no longer than this delays the FG rank, per gap, by at most that share of a
  // typical gap. 0 while no gap has been seen, in kConcurrent, or without a fraction.
  double UnitBoundMs() const;
  static constexpr size_t kGapHistory = 64;

  SharingWindow TakeWindow();
  GateCounters counters() const;
  std::vector<GateEventKind> events() const;

 private:
  enum class FgState { kBusy, kIdle, kReady, kDetached };
  void Record(GateEventKind kind);          // mu_ held
  bool BgMayRun(bool needs_fg_idle) const;  // mu_ held
  bool FgWaitsForBg() const;                // mu_ held: a running BG unit keeps the FG waiting
  void RecordGap(double gap_ms);            // mu_ held

  const SharingMode mode_;
  const Clock* clock_;
  const bool record_events_;
  const GateLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  FgState fg_ = FgState::kBusy;
  bool bg_running_ = false;
  bool bg_needs_fg_idle_ = false;  // the running unit's
  bool stopped_ = false;
  Clock::TimePoint fg_idle_since_{};  // or the window's start, if later (TakeWindow)
  Clock::TimePoint gap_start_{};      // the current idle period's start
  Clock::TimePoint bg_since_{};  // start of the running unit, or of the window if later
  Clock::TimePoint window_start_{};
  SharingWindow window_;
  GateCounters counters_;
  std::vector<GateEventKind> events_;
  std::vector<double> gaps_ms_;  // ring of the last kGapHistory idle gaps
  size_t next_gap_ = 0;
};

// Replays an event log of a kIdleOnly gate and returns FAILED_PRECONDITION naming the first
// violation: a BG unit starting while the FG rank was busy or ready, the FG rank resuming while a
// BG unit ran (other than at a timeout, kFgTimeout), or events out of protocol order.
Status CheckIdleOnlyLog(const std::vector<GateEventKind>& events);

}  // namespace deepool::worker

// Sharing one device between a foreground (FG) executor rank and one background (BG) job.
//
// The FG rank declares when it is idle (it waits on a transfer or a collective; the layers it is
// not part of show up as such waits, since it skips them and waits for its next input). The BG
// job runs in units (one layer's forward, one layer's backward, or an optimizer step; a whole
// replayed iteration on CUDA graphs) and asks the gate before each unit.
//
//   kIdleOnly (CPU devices): a BG unit starts only while the FG rank is idle or gone. When the FG
//     rank's wait ends it takes the device back as soon as the BG unit in progress ends, so FG
//     waits for at most one BG unit and never finds BG starting while it has work ready.
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
  kFgIdle,    // the FG rank starts waiting on communication
  kFgReady,   // its wait ended: it has work ready and asks for the device
  kFgResume,  // it got the device and computes
  kFgDetach,  // the FG rank is gone (finished): BG may run freely
  kBgStart,   // a BG unit starts
  kBgEnd,     // a BG unit ended
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
};

struct GateCounters {
  int64_t fg_idle_periods = 0;
  int64_t bg_units = 0;
  int64_t bg_units_in_fg_idle = 0;  // units that started while the FG rank was idle
  int64_t fg_resumes_delayed = 0;   // FG resumes that had to wait for a BG unit
};

class DeviceGate {
 public:
  // record_events: keep the event log (tests and benchmarks; it grows with every transition).
  DeviceGate(SharingMode mode, const Clock* clock, bool record_events = false);

  SharingMode mode() const { return mode_; }

  // FG thread. The FG rank starts busy.
  void FgIdleBegin();
  // Blocks (kIdleOnly) until the BG unit in progress, if any, has ended.
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

  SharingWindow TakeWindow();
  GateCounters counters() const;
  std::vector<GateEventKind> events() const;

 private:
  enum class FgState { kBusy, kIdle, kReady, kDetached };
  void Record(GateEventKind kind);          // mu_ held
  bool BgMayRun(bool needs_fg_idle) const;  // mu_ held
  bool FgWaitsForBg() const;                // mu_ held: a running BG unit keeps the FG waiting

  const SharingMode mode_;
  const Clock* clock_;
  const bool record_events_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  FgState fg_ = FgState::kBusy;
  bool bg_running_ = false;
  bool bg_needs_fg_idle_ = false;  // the running unit's
  bool stopped_ = false;
  Clock::TimePoint fg_idle_since_{};
  Clock::TimePoint bg_since_{};  // start of the running unit, or of the window if later
  Clock::TimePoint window_start_{};
  SharingWindow window_;
  GateCounters counters_;
  std::vector<GateEventKind> events_;
};

// Replays an event log of a kIdleOnly gate and returns FAILED_PRECONDITION naming the first
// violation: a BG unit starting while the FG rank was busy or ready, the FG rank resuming while a
// BG unit ran, or events out of protocol order.
Status CheckIdleOnlyLog(const std::vector<GateEventKind>& events);

}  // namespace deepool::worker

#include "worker/runtime/background/multiplex_gate.h"

#include <algorithm>
#include <functional>

namespace deepool::worker {
namespace {

double Millis(Clock::Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

std::string GateEventName(GateEventKind kind) {
  switch (kind) {
    case GateEventKind::kFgIdle:
      return "fg_idle";
    case GateEventKind::kFgReady:
      return "fg_ready";
    case GateEventKind::kFgResume:
      return "fg_resume";
    case GateEventKind::kFgDetach:
      return "fg_detach";
    case GateEventKind::kBgStart:
      return "bg_start";
    case GateEventKind::kBgEnd:
      return "bg_end";
    case GateEventKind::kFgTimeout:
      return "fg_timeout";
  }
  return "unknown";
}

DeviceGate::DeviceGate(SharingMode mode, const Clock* clock, bool record_events, GateLimits limits)
    : mode_(mode),
      clock_(clock),
      record_events_(record_events),
      limits_(limits),
      window_start_(clock->Now()) {}

void DeviceGate::Record(GateEventKind kind) {
  if (record_events_) events_.push_back(kind);
}

bool DeviceGate::BgMayRun(bool needs_fg_idle) const {
  if (mode_ == SharingMode::kConcurrent && !needs_fg_idle) return true;
  return fg_ == FgState::kIdle || fg_ == FgState::kDetached;
}

bool DeviceGate::FgWaitsForBg() const {
  return bg_running_ && (mode_ == SharingMode::kIdleOnly || bg_needs_fg_idle_);
}

void DeviceGate::FgIdleBegin() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fg_ == FgState::kDetached) return;
  fg_ = FgState::kIdle;
  fg_idle_since_ = clock_->Now();
  gap_start_ = fg_idle_since_;
  ++counters_.fg_idle_periods;
  Record(GateEventKind::kFgIdle);
  cv_.notify_all();
}

void DeviceGate::FgIdleEnd() {
  std::unique_lock<std::mutex> lock(mu_);
  if (fg_ != FgState::kIdle) return;
  fg_ = FgState::kReady;
  Record(GateEventKind::kFgReady);
  const auto ready_at = clock_->Now();
  RecordGap(Millis(ready_at - gap_start_));
  bool timed_out = false;
  if (FgWaitsForBg()) {
    ++counters_.fg_resumes_delayed;
    const auto bg_done = [&] { return !FgWaitsForBg(); };
    // Only in kIdleOnly: a needs_fg_idle unit holds autograd's device thread, which the FG rank
    // would queue behind anyway.
    if (limits_.max_fg_wait_ms > 0 && mode_ == SharingMode::kIdleOnly) {
      timed_out = !cv_.wait_for(
          lock, std::chrono::duration<double, std::milli>(limits_.max_fg_wait_ms), bg_done);
    } else {
      cv_.wait(lock, bg_done);
    }
    window_.bg_overrun_ms += Millis(clock_->Now() - std::max(ready_at, window_start_));
  }
  fg_ = FgState::kBusy;
  window_.fg_wait_ms += Millis(clock_->Now() - fg_idle_since_);
  if (timed_out) {
    ++counters_.fg_wait_timeouts;
    ++window_.fg_wait_timeouts;
  }
  Record(timed_out ? GateEventKind::kFgTimeout : GateEventKind::kFgResume);
}

void DeviceGate::RecordGap(double gap_ms) {
  if (gaps_ms_.size() < kGapHistory) {
    gaps_ms_.push_back(gap_ms);
  } else {
    gaps_ms_[next_gap_] = gap_ms;
    next_gap_ = (next_gap_ + 1) % kGapHistory;
  }
}

double DeviceGate::UnitBoundMs() const {
  if (mode_ != SharingMode::kIdleOnly || limits_.unit_bound_fraction <= 0) return 0;
  std::vector<double> gaps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gaps = gaps_ms_;
  }
  double total = 0;
  for (double gap : gaps) total += gap;
  if (total <= 0) return 0;
  std::sort(gaps.begin(), gaps.end(), std::greater<>());
  double covered = 0;
  for (double gap : gaps) {
    covered += gap;
    if (2 * covered >= total) return limits_.unit_bound_fraction * gap;
  }
  return 0;  // not reached: the loop covers the total
}

void DeviceGate::FgDetach() {
  std::lock_guard<std::mutex> lock(mu_);
  fg_ = FgState::kDetached;
  Record(GateEventKind::kFgDetach);
  cv_.notify_all();
}

bool DeviceGate::BgBegin(bool needs_fg_idle) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stopped_ || BgMayRun(needs_fg_idle); });
  if (stopped_) return false;
  bg_running_ = true;
  bg_needs_fg_idle_ = needs_fg_idle;
  bg_since_ = clock_->Now();
  if (fg_ == FgState::kIdle) ++counters_.bg_units_in_fg_idle;
  Record(GateEventKind::kBgStart);
  return true;
}

void DeviceGate::BgEnd() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!bg_running_) return;
  bg_running_ = false;
  window_.bg_busy_ms += Millis(clock_->Now() - bg_since_);
  ++window_.bg_units;
  ++counters_.bg_units;
  Record(GateEventKind::kBgEnd);
  cv_.notify_all();
}

void DeviceGate::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  cv_.notify_all();
}

void DeviceGate::Reopen() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = false;
  bg_running_ = false;
}

SharingWindow DeviceGate::TakeWindow() {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = clock_->Now();
  // Split the periods in progress at the window boundary.
  if (bg_running_) {
    window_.bg_busy_ms += Millis(now - bg_since_);
    bg_since_ = now;
  }
  if (fg_ == FgState::kIdle || fg_ == FgState::kReady) {
    window_.fg_wait_ms += Millis(now - fg_idle_since_);
    fg_idle_since_ = now;
  }
  SharingWindow out = window_;
  out.window_ms = Millis(now - window_start_);
  window_ = SharingWindow{};
  window_start_ = now;
  return out;
}

GateCounters DeviceGate::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

std::vector<GateEventKind> DeviceGate::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

Status CheckIdleOnlyLog(const std::vector<GateEventKind>& events) {
  enum class Fg { kBusy, kIdle, kReady, kDetached } fg = Fg::kBusy;
  bool bg_running = false;
  for (size_t i = 0; i < events.size(); ++i) {
    auto fail = [&](const std::string& what) {
      return FailedPreconditionError("event " + std::to_string(i) + " (" +
                                     GateEventName(events[i]) + "): " + what);
    };
    switch (events[i]) {
      case GateEventKind::kFgIdle:
        if (fg != Fg::kBusy) return fail("the FG rank was not computing");
        fg = Fg::kIdle;
        break;
      case GateEventKind::kFgReady:
        if (fg != Fg::kIdle) return fail("the FG rank was not idle");
        fg = Fg::kReady;
        break;
      case GateEventKind::kFgResume:
        if (fg != Fg::kReady) return fail("the FG rank did not ask for the device");
        if (bg_running) return fail("the FG rank resumed while a BG unit was running");
        fg = Fg::kBusy;
        break;
      case GateEventKind::kFgTimeout:
        if (fg != Fg::kReady) return fail("the FG rank did not ask for the device");
        if (!bg_running) return fail("the FG rank timed out with no BG unit running");
        fg = Fg::kBusy;
        break;
      case GateEventKind::kFgDetach:
        fg = Fg::kDetached;
        break;
      case GateEventKind::kBgStart:
        if (bg_running) return fail("a BG unit was already running");
        if (fg == Fg::kBusy) return fail("BG started while the FG rank was computing");
        if (fg == Fg::kReady) return fail("BG started while the FG rank had work ready");
        bg_running = true;
        break;
      case GateEventKind::kBgEnd:
        if (!bg_running) return fail("no BG unit was running");
        bg_running = false;
        break;
    }
  }
  return Status::Ok();
}

}  // namespace deepool::worker

// A rank's timeline for `deepool trace`: the executor marks spans of its work (each layer's
// forward, each segment's backward, transfers posted, all-reduces, waits, the optimizer step)
// while a requested window of iterations runs, and nothing outside it.
//
// Cost: outside a window each mark is one relaxed atomic load; inside, two clock reads and a
// vector append under an uncontended mutex per span (docs/benchmarks.md, "Tracing overhead").
//
// Threading: Request may be called from any thread (the command reader); the iteration calls
// (BeginIteration, TakeFinished, Finish) from the training thread; Add from the training thread
// or autograd's device threads (gradient hooks on CUDA) - it locks.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/clock.h"
#include "common/timeline.h"
#include "protocol/executor_commands.h"
#include "protocol/executor_events.h"

namespace deepool::worker {

class SpanRecorder {
 public:
  // Spans' start times are wall_origin_us plus the clock's time since construction: the caller
  // reads the wall clock (microseconds since the epoch) once, so that ranks line up.
  SpanRecorder(const Clock* clock, double wall_origin_us);

  // Arms a request: iterations [first, first + n), or the next n once `first` has passed. A new
  // request replaces one that has not started; one being recorded is finished first.
  void Request(const protocol::TraceCommand& command);

  // Before iteration `iteration` runs: starts recording if an armed window begins here.
  void BeginIteration(int64_t iteration);
  // After it: the trace events of a window that ended with it (empty otherwise).
  std::vector<protocol::TraceEvent> TakeFinished(int rank);
  // When training ends: the events of a window still being recorded or still armed (what was
  // recorded, marked last), so the requester is never left waiting.
  std::vector<protocol::TraceEvent> Finish(int rank);

  bool on() const { return on_.load(std::memory_order_relaxed); }
  Clock::TimePoint Now() const { return clock_->Now(); }
  // A span from `start` to now in the current iteration. Ignored when not recording.
  void Add(SpanKind kind, std::string name, Clock::TimePoint start);

 private:
  struct Window {
    protocol::TraceCommand command;
    int64_t first = -1;  // the first iteration recorded; -1 while armed
    int64_t recorded = 0;
  };
  std::vector<protocol::TraceEvent> EventsOf(const Window& window, int rank);

  const Clock* clock_;
  const Clock::TimePoint origin_;
  const double wall_origin_us_;
  std::atomic<bool> on_{false};
  std::mutex mu_;
  std::optional<Window> armed_;      // guarded by mu_
  std::optional<Window> recording_;  // guarded by mu_
  std::optional<Window> finished_;   // guarded by mu_
  std::vector<TimelineSpan> spans_;  // guarded by mu_
  int64_t iteration_ = -1;           // guarded by mu_
};

// Marks one span from construction to destruction when the recorder is on. `name` is a string
// or a callable returning one, called only when recording (names cost nothing otherwise).
template <typename Name>
class SpanScope {
 public:
  SpanScope(SpanRecorder* recorder, SpanKind kind, Name name)
      : recorder_(recorder && recorder->on() ? recorder : nullptr),
        kind_(kind),
        name_(std::move(name)) {
    if (recorder_) start_ = recorder_->Now();
  }
  ~SpanScope() {
    if (!recorder_) return;
    if constexpr (std::is_invocable_v<Name>) {
      recorder_->Add(kind_, std::string(name_()), start_);
    } else {
      recorder_->Add(kind_, std::string(name_), start_);
    }
  }
  SpanScope(const SpanScope&) = delete;
  SpanScope& operator=(const SpanScope&) = delete;

 private:
  SpanRecorder* recorder_;
  SpanKind kind_;
  Name name_;
  Clock::TimePoint start_{};
};

}  // namespace deepool::worker

// Lets a burst of log lines about one kind of event through per window and counts the rest, so
// a flood (a scanner knocking on the coordinator's port, a client retrying without credentials)
// cannot fill the log, while the first lines of each window still name who it was.
// Threading: thread-safe (one mutex); the clock is injected.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

#include "common/clock.h"

namespace deepool {

class LogLimiter {
 public:
  // At most `burst` lines per `window`.
  LogLimiter(const Clock* clock, int burst, std::chrono::milliseconds window)
      : clock_(clock), burst_(burst), window_(window) {}

  // Whether to log this event now. When it is, *held_back is how many were not logged since the
  // last one that was (say so in the line); otherwise the event is counted.
  bool Allow(int64_t* held_back);

 private:
  const Clock* clock_;
  const int burst_;
  const std::chrono::milliseconds window_;
  std::mutex mu_;
  bool started_ = false;
  Clock::TimePoint window_start_{};
  int allowed_in_window_ = 0;
  int64_t held_back_ = 0;
};

}  // namespace deepool

#include "common/log_limiter.h"

namespace deepool {

bool LogLimiter::Allow(int64_t* held_back) {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::TimePoint now = clock_->Now();
  if (!started_ || now - window_start_ >= window_) {
    started_ = true;
    window_start_ = now;
    allowed_in_window_ = 0;
  }
  if (allowed_in_window_ >= burst_) {
    ++held_back_;
    return false;
  }
  ++allowed_in_window_;
  *held_back = held_back_;
  held_back_ = 0;
  return true;
}

}  // namespace deepool

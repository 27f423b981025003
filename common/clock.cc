#include "common/clock.h"

#include <time.h>

namespace deepool {

Clock::TimePoint SystemClock::Now() const {
  return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
}

int64_t SystemClock::WallMillis() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

SystemClock* SystemClock::Get() {
  static SystemClock clock;
  return &clock;
}

Clock::TimePoint ThreadCpuClock::Now() const {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return TimePoint(std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec));
}

int64_t ThreadCpuClock::WallMillis() const { return SystemClock::Get()->WallMillis(); }

ThreadCpuClock* ThreadCpuClock::Get() {
  static ThreadCpuClock clock;
  return &clock;
}

Clock::TimePoint FakeClock::Now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return now_;
}

int64_t FakeClock::WallMillis() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wall_;
}

void FakeClock::Advance(Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  now_ += d;
  wall_ += std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace deepool

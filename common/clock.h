// Time as an injected dependency, so timeouts and rates are tested without sleeping.
// Threading: SystemClock is stateless; FakeClock is guarded by its own mutex.
#pragma once

#include <chrono>
#include <mutex>

namespace deepool {

class Clock {
 public:
  using Duration = std::chrono::nanoseconds;
  using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

  virtual ~Clock() = default;
  // Monotonic time, for deadlines and intervals.
  virtual TimePoint Now() const = 0;
  // Wall time in milliseconds since the Unix epoch, for records users read.
  virtual int64_t WallMillis() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimePoint Now() const override;
  int64_t WallMillis() const override;
  // A process-wide instance for production wiring.
  static SystemClock* Get();
};

// The calling thread's CPU time (Linux CLOCK_THREAD_CPUTIME_ID): how long it computed, not how
// long it was runnable or held back. Readings are per thread: compare only those taken on the
// same thread. WallMillis is the system's.
class ThreadCpuClock final : public Clock {
 public:
  TimePoint Now() const override;
  int64_t WallMillis() const override;
  static ThreadCpuClock* Get();
};

// A clock that moves only when told to. Safe to share between threads.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_wall_millis = 1'700'000'000'000) : wall_(start_wall_millis) {}
  TimePoint Now() const override;
  int64_t WallMillis() const override;
  void Advance(Duration d);

 private:
  mutable std::mutex mu_;
  TimePoint now_{};
  int64_t wall_;
};

}  // namespace deepool

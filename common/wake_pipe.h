// A pipe that wakes a thread blocked in poll(2): the thread polls read_fd() beside its sockets,
// and another thread calls Wake() to make that poll return (a serving loop's stop signal).
// Both ends are closed with the object; it is move-only.
// Threading: Wake() may be called from any thread, any number of times (the first byte is
// enough: nobody reads it, so read_fd() stays readable from then on); read_fd() is fixed.
#pragma once

#include "common/status.h"

namespace deepool {

class WakePipe {
 public:
  // Both ends close-on-exec.
  static StatusOr<WakePipe> Open();

  WakePipe() = default;
  WakePipe(WakePipe&& other) noexcept;
  WakePipe& operator=(WakePipe&& other) noexcept;
  WakePipe(const WakePipe&) = delete;
  WakePipe& operator=(const WakePipe&) = delete;
  ~WakePipe();

  // -1 for a default-constructed pipe (poll ignores it).
  int read_fd() const { return fds_[0]; }
  // Makes read_fd() readable; does nothing on a default-constructed pipe.
  void Wake();

 private:
  void Close();

  int fds_[2] = {-1, -1};
};

}  // namespace deepool

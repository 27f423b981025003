// StreamSlots: a bound on the long-lived client streams (WatchJob, GetJobLogs) the coordinator
// serves at once. The synchronous gRPC server spends one thread per open call, so without a bound
// a client opening thousands of streams makes thousands of threads; past the bound a new stream
// is refused with RESOURCE_EXHAUSTED and the threads stay free for workers and short calls.
// Threading: safe from any thread; a Slot is released by its destructor.
#pragma once

#include <atomic>
#include <optional>

#include "common/status.h"

namespace deepool::coordinator {

class StreamSlots {
 public:
  explicit StreamSlots(int capacity) : capacity_(capacity) {}

  class Slot {
   public:
    explicit Slot(std::atomic<int>* open) : open_(open) {}
    Slot(Slot&& other) noexcept : open_(other.open_) { other.open_ = nullptr; }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot& operator=(Slot&&) = delete;
    ~Slot() {
      if (open_) open_->fetch_sub(1);
    }

   private:
    std::atomic<int>* open_;
  };

  // A slot while fewer than `capacity` are held; otherwise RESOURCE_EXHAUSTED saying so.
  StatusOr<Slot> Acquire();
  int open() const { return open_.load(); }
  int capacity() const { return capacity_; }

 private:
  const int capacity_;
  std::atomic<int> open_{0};
};

}  // namespace deepool::coordinator

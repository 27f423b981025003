// CallSlots: a bound on the client calls of one kind the coordinator serves at once, in all and
// per user. The synchronous gRPC server spends one of its threads on every call in progress, for
// workers and clients alike; without a bound a client opening thousands of watch streams (or
// slow calls) made thousands of threads and held up the heartbeats of every worker. Past a bound
// a call is refused at once with RESOURCE_EXHAUSTED naming the bound (its flag) and, for the
// per-user one, the user; the per-user bound keeps one user from taking every slot (another
// user's `deepool status --watch` still gets one). Worker calls take no slot.
// The anonymous user of an open coordinator (--insecure: everyone is "") has only the
// bound in all: a per-user bound would be the same bound, smaller.
// Threading: safe from any thread; a Slot is given back by its destructor, on any thread, and
// must not outlive its CallSlots.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "common/status.h"

namespace deepool::coordinator {

struct CallLimits {
  int total = 0;     // calls at once, in all; 0: no bound
  int per_user = 0;  // calls at once, per named user; 0: no bound
};

class CallSlots {
 public:
  // `what` names the calls in refusals ("watch and log streams"); `total_flag` and
  // `per_user_flag` are the options that set the two bounds ("--max-client-streams").
  CallSlots(CallLimits limits, std::string what, std::string total_flag, std::string per_user_flag)
      : limits_(limits),
        what_(std::move(what)),
        total_flag_(std::move(total_flag)),
        per_user_flag_(std::move(per_user_flag)) {}
  CallSlots(const CallSlots&) = delete;
  CallSlots& operator=(const CallSlots&) = delete;

  class Slot {
   public:
    Slot(Slot&& other) noexcept : slots_(other.slots_), user_(std::move(other.user_)) {
      other.slots_ = nullptr;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot& operator=(Slot&&) = delete;
    ~Slot() {
      if (slots_) slots_->Release(user_);
    }

   private:
    friend class CallSlots;
    Slot(CallSlots* slots, std::string user) : slots_(slots), user_(std::move(user)) {}
    CallSlots* slots_;
    std::string user_;
  };

  // A slot for a call of `user` while both bounds leave room; otherwise RESOURCE_EXHAUSTED.
  StatusOr<Slot> Acquire(const std::string& user);
  int open() const;
  int open(const std::string& user) const;
  const CallLimits& limits() const { return limits_; }

 private:
  void Release(const std::string& user);

  const CallLimits limits_;
  const std::string what_;
  const std::string total_flag_;
  const std::string per_user_flag_;
  mutable std::mutex mu_;
  int open_ = 0;
  std::map<std::string, int> open_by_user_;  // named users with a call open
};

}  // namespace deepool::coordinator

// Which of the coordinators sharing one database leads: a lease in the database with a fencing
// token. Only the leader serves; the others wait as standbys and take the lease once it runs
// out. Every write of a store that holds the lease checks its token in the same transaction, so
// a former leader that was paused or cut off past its lease cannot write after another took
// over: its write is refused FAILED_PRECONDITION and it stops. The database's clock times the
// lease, so the coordinators' clocks need not agree.
// Leadership drives a LeaderLease: waiting to lead, then renewing until the lease is lost.
// Threading: a LeaderLease is safe to call from several threads. Leadership's WaitToLead runs on
// the caller's thread; KeepLeading renews on its own ("dp-coord-lease") until Stop, and watches
// that renewals return on another ("dp-coord-lwatch").
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/status.h"

namespace deepool::coordinator {

// Who holds the lease, as the database saw it.
struct LeaseHolder {
  std::string holder;                 // "" when nobody ever held it
  int64_t token = 0;                  // grows by one at every change of leader
  std::chrono::milliseconds left{0};  // until it runs out (<= 0: it has)
};

class LeaderLease {
 public:
  virtual ~LeaderLease() = default;
  // Takes the lease for `holder` for `duration` when it is free or has run out (a new token), or
  // extends it when `holder` holds it already. From then on every write is fenced by the token.
  // Returns the holder after the call: `holder` itself when taken.
  virtual StatusOr<LeaseHolder> TryAcquire(const std::string& holder,
                                           std::chrono::milliseconds duration) = 0;
  // Extends the lease this store took. FAILED_PRECONDITION when another holds it now (this
  // coordinator was deposed); UNAVAILABLE when the database cannot be reached.
  virtual Status Renew(std::chrono::milliseconds duration) = 0;
  // Ends the lease this store took, if it still holds it, so a standby takes over at once (a
  // clean stop). The store's writes stay fenced by the token.
  virtual Status Release() = 0;
};

struct LeadershipOptions {
  std::string holder;                       // this coordinator, unique per process
  std::chrono::milliseconds lease{10'000};  // renewed every third of it
};

class Leadership {
 public:
  Leadership(LeaderLease* lease, const Clock* clock, LeadershipOptions options);
  ~Leadership();
  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  // One try to lead: true when this coordinator holds the lease now. `leader` (optional): who
  // holds it otherwise. Errors are the database's.
  StatusOr<bool> TryToLead(LeaseHolder* leader = nullptr);
  // Tries every third of the lease until this coordinator leads (true), or Stop is called or
  // `stop_requested` says so (false), logging the leader it waits for once per change.
  bool WaitToLead(const std::function<bool()>& stop_requested = [] { return false; });

  // One renewal: the reason leadership is lost ("" while it is not): deposed, or no renewal
  // succeeded for a whole lease (the others may take over now, so this one must stop serving).
  std::string RenewOnce();
  // Renews at once and then every third of the lease on a thread of its own; calls `on_lost`
  // once, with the reason, when leadership is lost. That includes a renewal that has not
  // returned a whole lease after the last one succeeded (a database gone silent answers no
  // error): a watching thread checks every sixth of the lease, so on_lost may come from either
  // (after a pause of the process it skips one look, so that a renewal's own answer comes first).
  void KeepLeading(std::function<void(const std::string& reason)> on_lost);
  // Stops renewing (and waiting). Waits for a renewal under way to return.
  void Stop();
  // After Stop, at a clean exit: hands the lease over at once instead of letting it run out.
  void Release();

 private:
  bool SleepFor(std::chrono::milliseconds wait);  // false when stopped
  bool SleepThird() { return SleepFor(options_.lease / 3); }
  // The reason a renewal still under way has lost leadership ("" while it has not).
  std::string StuckRenewal();
  void ReportLost(const std::string& reason);  // to on_lost_, once

  LeaderLease* lease_;
  const Clock* clock_;
  const LeadershipOptions options_;
  std::function<void(const std::string&)> on_lost_;  // set before the threads start
  std::atomic<bool> lost_reported_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  Clock::TimePoint last_renewed_{};  // guarded by mu_
  bool renewing_ = false;            // guarded by mu_: a Renew is under way
  bool stopped_ = false;             // guarded by mu_
  std::thread renewer_;
  std::thread watchdog_;
};

// A holder name unique to this process: host, pid and a random suffix.
std::string LeaseHolderName();

// Running jobs outlive a takeover only when a standby leads before the workers give up on the
// coordinator (their lease, common/worker_lease.h, counted from their last answer). A standby
// leads at most a lease and a third after the leader's last renewal (the rest of the lease, then
// its next try); that must be at most half the workers' lease, the other half left for the
// answer before the leader stopped, reconnecting and the next heartbeat. The same holds for a
// lone coordinator restarted on PostgreSQL, which waits for its own former lease.

// The leader lease by default: a third of the workers' lease (3 s with the coordinator's default
// node timeout of 10 s and heartbeat of 1 s).
std::chrono::milliseconds DefaultLeaderLease(std::chrono::milliseconds node_timeout,
                                             std::chrono::milliseconds heartbeat);

// INVALID_ARGUMENT, saying how long a lease would do, when a takeover under `lease` may outlast
// what the workers allow (above).
Status CheckLeaderLease(std::chrono::milliseconds lease, std::chrono::milliseconds node_timeout,
                        std::chrono::milliseconds heartbeat);

}  // namespace deepool::coordinator

#include "coordinator/leader_lease.h"

#include <unistd.h>

#include <random>

#include "common/logging.h"
#include "common/thread_name.h"
#include "common/worker_lease.h"

namespace deepool::coordinator {

Leadership::Leadership(LeaderLease* lease, const Clock* clock, LeadershipOptions options)
    : lease_(lease), clock_(clock), options_(std::move(options)) {}

Leadership::~Leadership() { Stop(); }

StatusOr<bool> Leadership::TryToLead(LeaseHolder* leader) {
  ASSIGN_OR_RETURN(LeaseHolder holder, lease_->TryAcquire(options_.holder, options_.lease));
  if (leader) *leader = holder;
  if (holder.holder != options_.holder) return false;
  std::lock_guard<std::mutex> lock(mu_);
  last_renewed_ = clock_->Now();
  return true;
}

bool Leadership::WaitToLead(const std::function<bool()>& stop_requested) {
  std::string waiting_for;
  while (!stop_requested()) {
    LeaseHolder leader;
    StatusOr<bool> leads = TryToLead(&leader);
    if (leads.ok() && *leads) return true;
    if (!leads.ok()) {
      DP_LOG_WARN("standby: cannot read the leader lease: {}", leads.status().ToString());
    } else if (leader.holder != waiting_for) {
      waiting_for = leader.holder;
      DP_LOG_INFO("standby: {} leads (its lease runs {} ms more); taking over when it runs out",
                  leader.holder, leader.left.count());
    }
    if (!SleepThird()) return false;
  }
  return false;
}

std::string Leadership::RenewOnce() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    renewing_ = true;
  }
  const Status renewed = lease_->Renew(options_.lease);
  std::unique_lock<std::mutex> lock(mu_);
  renewing_ = false;
  if (renewed.ok()) {
    last_renewed_ = clock_->Now();
    return "";
  }
  if (renewed.code() == StatusCode::kFailedPrecondition) return renewed.message();
  const auto since =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_->Now() - last_renewed_);
  lock.unlock();
  if (since < options_.lease) {
    DP_LOG_WARN("leader lease: renewal failed ({}); {} ms left", renewed.ToString(),
                (options_.lease - since).count());
    return "";
  }
  return "the leader lease was not renewed for " + std::to_string(since.count()) +
         " ms (last error: " + renewed.message() + "), so a standby may lead by now";
}

std::string Leadership::StuckRenewal() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto since =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_->Now() - last_renewed_);
  if (!renewing_ || since < options_.lease) return "";
  return "the leader lease was not renewed for " + std::to_string(since.count()) +
         " ms (a renewal is still waiting for the database), so a standby may lead by now";
}

void Leadership::ReportLost(const std::string& reason) {
  if (!lost_reported_.exchange(true)) on_lost_(reason);
}

void Leadership::KeepLeading(std::function<void(const std::string&)> on_lost) {
  on_lost_ = std::move(on_lost);
  renewer_ = std::thread([this] {
    SetCurrentThreadName("dp-coord-lease");
    // At once first: the lease may have been taken a while ago (before the store loaded).
    do {
      const std::string lost = RenewOnce();
      if (!lost.empty()) {
        ReportLost(lost);
        return;
      }
    } while (SleepThird());
  });
  // A renewal that does not return says nothing: without this watch a leader whose database
  // went silent would serve on past its lease, beside the standby that took over.
  watchdog_ = std::thread([this] {
    SetCurrentThreadName("dp-coord-lwatch");
    Clock::TimePoint looked = clock_->Now();
    while (SleepFor(options_.lease / 6)) {
      // Asleep far longer than asked: this process was paused (SIGSTOP, a frozen VM) with a
      // renewal under way, whose answer may be arriving now (deposed, say). Look next time.
      const Clock::TimePoint now = clock_->Now();
      const bool paused = now - looked > options_.lease / 3;
      looked = now;
      if (paused) continue;
      const std::string lost = StuckRenewal();
      if (!lost.empty()) {
        ReportLost(lost);
        return;
      }
    }
  });
}

void Leadership::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  for (std::thread* thread : {&renewer_, &watchdog_}) {
    if (thread->joinable() && thread->get_id() != std::this_thread::get_id()) thread->join();
  }
}

void Leadership::Release() {
  const Status released = lease_->Release();
  if (!released.ok()) {
    DP_LOG_WARN("leader lease: not released ({}); a standby takes over once it runs out",
                released.ToString());
  }
}

bool Leadership::SleepFor(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, wait, [this] { return stopped_; });
}

std::string LeaseHolderName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::random_device random;
  char suffix[9];
  std::snprintf(suffix, sizeof(suffix), "%08x", static_cast<unsigned>(random()));
  return std::string(host[0] ? host : "unknown-host") + "/" + std::to_string(::getpid()) + "/" +
         suffix;
}

std::chrono::milliseconds DefaultLeaderLease(std::chrono::milliseconds node_timeout,
                                             std::chrono::milliseconds heartbeat) {
  return DefaultWorkerLease(node_timeout, heartbeat) / 3;
}

Status CheckLeaderLease(std::chrono::milliseconds lease, std::chrono::milliseconds node_timeout,
                        std::chrono::milliseconds heartbeat) {
  const std::chrono::milliseconds workers = DefaultWorkerLease(node_timeout, heartbeat);
  // lease x 4/3 <= workers / 2, in whole milliseconds.
  if (lease.count() * 8 <= workers.count() * 3) return Status::Ok();
  const std::chrono::milliseconds longest(workers.count() * 3 / 8);
  auto seconds = [](std::chrono::milliseconds duration) {
    return static_cast<double>(duration.count()) / 1000;
  };
  return InvalidArgumentError(fmt::format(
      "--lease-s {:g} is too long for the workers: a standby may lead {:g} s (the lease and a "
      "third) after the leader's last renewal, more than half the {:g} s workers keep their "
      "tasks without an answer (--node-timeout-s {:g} less a heartbeat of {:g} s), so a takeover "
      "could stop every running job; give --lease-s {:g} or less, or a longer --node-timeout-s",
      seconds(lease), seconds(lease * 4 / 3), seconds(workers), seconds(node_timeout),
      seconds(heartbeat), seconds(longest)));
}

}  // namespace deepool::coordinator

// Leadership over a fake lease and a FakeClock: when a coordinator leads, and when it must stop.
// The PostgreSQL lease itself (its token fencing the writes) is tested in job_store_test.cc.
#include "coordinator/leader_lease.h"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace deepool::coordinator {
namespace {

using std::chrono::milliseconds;

// Answers what the test queued; with nothing queued, TryAcquire grants and Renew succeeds.
class FakeLease final : public LeaderLease {
 public:
  std::deque<StatusOr<LeaseHolder>> acquires;
  std::deque<Status> renewals;
  int acquire_calls = 0;
  bool released = false;
  std::function<void()> during_renew;  // runs inside Renew (may block, as a silent database)

  StatusOr<LeaseHolder> TryAcquire(const std::string& holder, milliseconds duration) override {
    ++acquire_calls;
    if (acquires.empty()) return LeaseHolder{holder, 1, duration};
    StatusOr<LeaseHolder> next = acquires.front();
    acquires.pop_front();
    return next;
  }
  Status Renew(milliseconds) override {
    if (during_renew) during_renew();
    if (renewals.empty()) return Status::Ok();
    Status next = renewals.front();
    renewals.pop_front();
    return next;
  }
  Status Release() override {
    released = true;
    return Status::Ok();
  }
};

TEST_CASE("a coordinator leads once the lease is its own, and waits while another's runs",
          "[leader]") {
  FakeLease lease;
  FakeClock clock;
  Leadership leadership(&lease, &clock, {"me", milliseconds(30)});
  lease.acquires.push_back(LeaseHolder{"other", 4, milliseconds(20)});
  LeaseHolder leader;
  StatusOr<bool> first = leadership.TryToLead(&leader);
  REQUIRE(first.ok());
  CHECK_FALSE(*first);
  CHECK(leader.holder == "other");

  lease.acquires.push_back(LeaseHolder{"other", 4, milliseconds(10)});
  lease.acquires.push_back(UnavailableError("database restarting"));
  CHECK(leadership.WaitToLead());  // the third try is granted
  CHECK(lease.acquire_calls == 4);

  bool asked = false;
  Leadership stopped(&lease, &clock, {"me", milliseconds(30)});
  lease.acquires.push_back(LeaseHolder{"other", 4, milliseconds(10)});
  CHECK_FALSE(stopped.WaitToLead([&] { return std::exchange(asked, true); }));
}

TEST_CASE("a leader that cannot renew for a whole lease, or was deposed, stops leading",
          "[leader]") {
  FakeLease lease;
  FakeClock clock;
  Leadership leadership(&lease, &clock, {"me", milliseconds(9000)});
  REQUIRE(*leadership.TryToLead());
  CHECK(leadership.RenewOnce().empty());

  SECTION("the database unreachable: it leads on until the lease has run out") {
    lease.renewals = {UnavailableError("down"), UnavailableError("down"), UnavailableError("down")};
    clock.Advance(milliseconds(3000));
    CHECK(leadership.RenewOnce().empty());
    clock.Advance(milliseconds(5000));
    CHECK(leadership.RenewOnce().empty());
    clock.Advance(milliseconds(1000));  // 9 s since the last renewal
    CHECK_THAT(leadership.RenewOnce(), Catch::Contains("not renewed for 9000 ms"));
  }
  SECTION("a renewal between failures starts the lease again") {
    lease.renewals = {UnavailableError("down"), Status::Ok(), UnavailableError("down")};
    clock.Advance(milliseconds(6000));
    CHECK(leadership.RenewOnce().empty());
    clock.Advance(milliseconds(2000));
    CHECK(leadership.RenewOnce().empty());
    clock.Advance(milliseconds(8000));
    CHECK(leadership.RenewOnce().empty());  // 8 s since the renewal
  }
  SECTION("deposed: at once") {
    lease.renewals = {FailedPreconditionError("b took the leader lease")};
    CHECK_THAT(leadership.RenewOnce(), Catch::Contains("b took the leader lease"));
  }
  SECTION("the renewing thread says so once, and a clean stop releases the lease") {
    Leadership quick(&lease, &clock, {"me", milliseconds(30)});
    REQUIRE(*quick.TryToLead());
    lease.renewals = {FailedPreconditionError("deposed")};
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> lost;
    quick.KeepLeading([&](const std::string& reason) {
      std::lock_guard<std::mutex> lock(mu);
      lost.push_back(reason);
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return !lost.empty(); }));
    lock.unlock();
    quick.Stop();
    CHECK(lost == std::vector<std::string>{"deposed"});
    quick.Release();
    CHECK(lease.released);
  }
}

TEST_CASE("a leader whose renewal does not return for a whole lease stops leading", "[leader]") {
  FakeLease lease;
  FakeClock clock;
  // A short lease in real time: the watch looks every 10 ms.
  Leadership leadership(&lease, &clock, {"me", milliseconds(60)});
  REQUIRE(*leadership.TryToLead());
  std::mutex mu;
  std::condition_variable cv;
  bool renewing = false;
  bool answer = false;  // the database answers again
  std::vector<std::string> lost;
  lease.during_renew = [&] {  // the database silent: no error, no answer
    std::unique_lock<std::mutex> lock(mu);
    renewing = true;
    cv.notify_all();
    cv.wait(lock, [&] { return answer; });
  };
  leadership.KeepLeading([&](const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu);
    lost.push_back(reason);
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return renewing; }));
  clock.Advance(milliseconds(59));
  // Twenty looks of the watch: the lease has not run out yet, so it leads on.
  CHECK_FALSE(cv.wait_for(lock, milliseconds(200), [&] { return !lost.empty(); }));
  clock.Advance(milliseconds(1));
  REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return !lost.empty(); }));
  CHECK_THAT(lost.front(), Catch::Contains("not renewed for 60 ms") &&
                               Catch::Contains("still waiting for the database"));
  answer = true;
  cv.notify_all();
  lock.unlock();
  leadership.Stop();
  CHECK(lost.size() == 1);
}

TEST_CASE("the leader lease leaves running jobs time to outlive a takeover",
          "[coordinator][lease]") {
  using std::chrono::seconds;
  // The coordinator's defaults (node timeout 10 s, heartbeat 1 s): the workers keep their tasks
  // 9 s without an answer, so a standby must lead within 4.5 s of the last renewal.
  CHECK(DefaultLeaderLease(seconds(10), seconds(1)) == milliseconds(3000));
  CHECK(CheckLeaderLease(milliseconds(3000), seconds(10), seconds(1)).ok());
  CHECK(CheckLeaderLease(milliseconds(3375), seconds(10), seconds(1)).ok());  // leads by 4.5 s
  const Status too_long = CheckLeaderLease(milliseconds(3376), seconds(10), seconds(1));
  CHECK(too_long.code() == StatusCode::kInvalidArgument);
  const Status ten = CheckLeaderLease(seconds(10), seconds(10), seconds(1));
  CHECK(ten.message() ==
        "--lease-s 10 is too long for the workers: a standby may lead 13.333 s (the lease and a "
        "third) after the leader's last renewal, more than half the 9 s workers keep their tasks "
        "without an answer (--node-timeout-s 10 less a heartbeat of 1 s), so a takeover could "
        "stop every running job; give --lease-s 3.375 or less, or a longer --node-timeout-s");
  // deploy/coordinator.env.example's 30 s and 2 s: 28 s for the workers.
  CHECK(DefaultLeaderLease(seconds(30), seconds(2)) == milliseconds(9333));
  CHECK(CheckLeaderLease(seconds(10), seconds(30), seconds(2)).ok());
  // The default fits wherever a heartbeat is a small part of the node timeout.
  for (int timeout_s : {2, 5, 10, 20, 30, 60, 300}) {
    for (milliseconds heartbeat : {milliseconds(100), milliseconds(200), milliseconds(1000)}) {
      const milliseconds node_timeout = seconds(timeout_s);
      if (heartbeat * 5 > node_timeout) continue;
      INFO(timeout_s << " s timeout, " << heartbeat.count() << " ms heartbeat");
      CHECK(CheckLeaderLease(DefaultLeaderLease(node_timeout, heartbeat), node_timeout, heartbeat)
                .ok());
    }
  }
}

}  // namespace
}  // namespace deepool::coordinator

#include "common/keyed_condition.h"

#include <catch2/catch.hpp>
#include <future>
#include <thread>

namespace deepool {
namespace {

using std::chrono::milliseconds;

// A waiter on `key` until its flag is set; counts how often its predicate was asked.
struct Waiter {
  bool ready = false;
  int asked = 0;
};

TEST_CASE("a notification wakes the waiters of its key, and NotifyAll wakes every key",
          "[keyed_condition]") {
  std::mutex mu;
  KeyedCondition condition;
  Waiter a, b;
  auto wait = [&](const std::string& key, Waiter* w, milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    return condition.WaitFor(lock, key, timeout, [&] {
      ++w->asked;
      return w->ready;
    });
  };
  auto woken_a = std::async(std::launch::async, wait, "a", &a, milliseconds(60'000));
  auto woken_b = std::async(std::launch::async, wait, "b", &b, milliseconds(60'000));
  // Both asleep: each asked its predicate once on entry.
  while (true) {
    std::lock_guard<std::mutex> lock(mu);
    if (a.asked == 1 && b.asked == 1) break;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    a.ready = true;
    b.ready = true;  // true for b too, but only a's key is notified
    condition.Notify("a");
  }
  CHECK(woken_a.get());
  CHECK(woken_b.wait_for(milliseconds(200)) == std::future_status::timeout);
  {
    std::lock_guard<std::mutex> lock(mu);
    condition.NotifyAll();
  }
  CHECK(woken_b.get());
}

TEST_CASE("a wait ends at its timeout with the predicate's value, and a key is reusable",
          "[keyed_condition]") {
  std::mutex mu;
  KeyedCondition condition;
  std::unique_lock<std::mutex> lock(mu);
  CHECK_FALSE(condition.WaitFor(lock, "k", milliseconds(5), [] { return false; }));
  CHECK(condition.WaitFor(lock, "k", milliseconds(5), [] { return true; }));
  condition.Notify("k");  // nobody waits: nothing happens
  condition.Notify("other");
}

}  // namespace
}  // namespace deepool

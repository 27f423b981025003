// StoppingHolds alone on a DeviceLedger: a released job's devices stay held while its tasks run,
// except those another FG job holds; a node's free devices are held for the tasks it was told to
// cancel; holds go once their tasks have ended.
#include "coordinator/stopping_holds.h"

#include <catch2/catch.hpp>
#include <set>

namespace deepool::coordinator {
namespace {

// Tasks still running, as the Dispatcher's table would say.
struct Running {
  std::set<std::string> ids;
  StoppingHolds::NoneLive none_live() const {
    return [this](const std::vector<std::string>& tasks) {
      for (const std::string& task : tasks) {
        if (ids.count(task)) return false;
      }
      return true;
    };
  }
};

TEST_CASE("a released job's devices are held until its tasks end", "[stopping_holds]") {
  DeviceLedger ledger;
  StoppingHolds holds(&ledger);
  Running running{{"j.a1.n1", "j.a1.n2"}};
  const DeviceKey mine{"n1", "cuda:0"};
  const DeviceKey hosts{"n2", "cuda:0"};  // a hosted BG job's: its FG host keeps it
  ledger.HoldForeground(hosts, "fg");
  holds.HoldForJob("j", {mine, hosts}, {"j.a1.n1", "j.a1.n2"});
  CHECK(ledger.ForegroundOf(mine) == std::optional<std::string>("j (stopping)"));
  CHECK(ledger.ForegroundOf(hosts) == std::optional<std::string>("fg"));

  running.ids.erase("j.a1.n1");
  CHECK_FALSE(holds.ReleaseEnded(running.none_live()));  // one still runs
  CHECK(ledger.ForegroundOf(mine).has_value());
  running.ids.clear();
  CHECK(holds.ReleaseEnded(running.none_live()));
  CHECK_FALSE(ledger.ForegroundOf(mine).has_value());
  CHECK(ledger.ForegroundOf(hosts) == std::optional<std::string>("fg"));
  CHECK_FALSE(holds.ReleaseEnded(running.none_live()));  // nothing left to free
}

TEST_CASE("a node's free devices are held for the tasks it was told to cancel",
          "[stopping_holds]") {
  DeviceLedger ledger;
  StoppingHolds holds(&ledger);
  NodeRecord node;
  node.id = "n1";
  node.name = "gpu1";
  node.devices = {{"cuda:0", "a100", 0}, {"cuda:1", "a100", 0}};
  ledger.HoldForeground({"n1", "cuda:1"}, "fg");
  holds.HoldForNode(node, {});  // nothing to wait for: nothing held
  CHECK_FALSE(ledger.ForegroundOf({"n1", "cuda:0"}).has_value());

  Running running{{"old.a1.n1", "older.a2.n1"}};
  holds.HoldForNode(node, {"old.a1.n1"});
  holds.HoldForNode(node, {"older.a2.n1"});  // a second registration adds to the wait
  const std::string holder = "node gpu1 (stopping tasks it was told to cancel)";
  CHECK(ledger.ForegroundOf({"n1", "cuda:0"}) == std::optional<std::string>(holder));
  CHECK(ledger.ForegroundOf({"n1", "cuda:1"}) == std::optional<std::string>("fg"));
  running.ids.erase("old.a1.n1");
  CHECK_FALSE(holds.ReleaseEnded(running.none_live()));
  running.ids.clear();
  CHECK(holds.ReleaseEnded(running.none_live()));
  CHECK_FALSE(ledger.ForegroundOf({"n1", "cuda:0"}).has_value());
}

TEST_CASE("a node that lists the same task again is waited for once", "[stopping_holds]") {
  DeviceLedger ledger;
  StoppingHolds holds(&ledger);
  NodeRecord node;
  node.id = "n1";
  node.name = "gpu1";
  node.devices = {{"cuda:0", "a100", 0}};
  for (int i = 0; i < 100; ++i) holds.HoldForNode(node, {"old.a1.n1", "old.a1.n1"});
  std::vector<std::string> waited_for;
  holds.ReleaseEnded([&](const std::vector<std::string>& tasks) {
    waited_for = tasks;
    return false;
  });
  CHECK(waited_for == std::vector<std::string>{"old.a1.n1"});
}

}  // namespace
}  // namespace deepool::coordinator

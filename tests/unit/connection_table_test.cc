// ConnectionTable with a fake notion of which descriptors are still open and a FakeClock: the
// bounds per peer and in total, and how closed connections are found again.
#include "common/connection_table.h"

#include <catch2/catch.hpp>
#include <map>

namespace deepool {
namespace {

using Verdict = ConnectionTable::Verdict;
using std::chrono::milliseconds;

// Descriptors that name a socket now, as the kernel would say.
struct FakeDescriptors {
  std::map<int, SocketIdentity> open;
  int checks = 0;
  ConnectionTable::StillOpen Probe() {
    return [this](int fd, const SocketIdentity& identity) {
      ++checks;
      auto it = open.find(fd);
      return it != open.end() && it->second == identity;
    };
  }
};

struct Fixture {
  explicit Fixture(ConnectionLimits limits)
      : table(limits, fds.Probe(), &clock, milliseconds(50)) {}
  // A connection accepted as `fd` from `peer`, with a new socket identity.
  Verdict Connect(int fd, const std::string& peer) {
    const Verdict verdict = table.Check(peer);
    if (verdict == Verdict::kKeep) {
      const SocketIdentity identity{1, ++next_inode};
      fds.open[fd] = identity;
      table.Add(fd, identity, peer);
    }
    return verdict;
  }
  FakeDescriptors fds;
  FakeClock clock;
  ConnectionTable table;
  uint64_t next_inode = 0;
};

TEST_CASE("one peer is held to its own bound while others still get in", "[connection_table]") {
  Fixture f({10, 3});
  for (int fd = 10; fd < 13; ++fd) CHECK(f.Connect(fd, "10.0.0.9") == Verdict::kKeep);
  CHECK(f.Connect(13, "10.0.0.9") == Verdict::kRefusePeer);
  CHECK(f.Connect(14, "10.0.0.7") == Verdict::kKeep);
  CHECK(f.table.open() == 4);
  CHECK(f.table.open_from("10.0.0.9") == 3);
  CHECK(f.table.peers() == 2);
}

TEST_CASE("past the total bound everyone is refused", "[connection_table]") {
  Fixture f({4, 2});
  CHECK(f.Connect(10, "a") == Verdict::kKeep);
  CHECK(f.Connect(11, "a") == Verdict::kKeep);
  CHECK(f.Connect(12, "b") == Verdict::kKeep);
  CHECK(f.Connect(13, "c") == Verdict::kKeep);
  CHECK(f.Connect(14, "d") == Verdict::kRefuseTotal);
  CHECK(f.Connect(15, "a") == Verdict::kRefuseTotal);  // the total is told first
}

TEST_CASE("a connection its owner closed frees its place at the next sweep", "[connection_table]") {
  Fixture f({2, 2});
  CHECK(f.Connect(10, "a") == Verdict::kKeep);
  CHECK(f.Connect(11, "a") == Verdict::kKeep);
  f.fds.open.erase(10);  // gRPC closed it, told nobody
  // At the bound, Check sweeps first: the place is free.
  CHECK(f.Connect(12, "a") == Verdict::kKeep);
  CHECK(f.table.open() == 2);
}

TEST_CASE("a reused descriptor number is not taken for the connection it once was",
          "[connection_table]") {
  Fixture f({2, 2});
  CHECK(f.Connect(10, "a") == Verdict::kKeep);
  CHECK(f.Connect(11, "b") == Verdict::kKeep);
  // 10 closed and its number went to another socket (a store file, another connection...).
  f.fds.open[10] = SocketIdentity{1, 999};
  f.table.Sweep();
  CHECK(f.table.open() == 1);
  CHECK(f.table.open_from("a") == 0);
  // Add under a number already in the table replaces that entry (it closed, since the number
  // was given out again) and moves the count to the new peer.
  CHECK(f.Connect(11, "c") == Verdict::kKeep);
  CHECK(f.table.open() == 1);
  CHECK(f.table.open_from("b") == 0);
  CHECK(f.table.open_from("c") == 1);
}

TEST_CASE("at a bound, sweeps run at most once per interval", "[connection_table]") {
  Fixture f({2, 100});
  CHECK(f.Connect(10, "a") == Verdict::kKeep);
  CHECK(f.Connect(11, "b") == Verdict::kKeep);
  f.fds.checks = 0;
  CHECK(f.Connect(12, "c") == Verdict::kRefuseTotal);  // sweeps: both still open
  CHECK(f.fds.checks == 2);
  f.fds.open.erase(10);
  CHECK(f.Connect(13, "c") == Verdict::kRefuseTotal);  // no sweep yet: refused, never over
  CHECK(f.fds.checks == 2);
  f.clock.Advance(milliseconds(50));
  CHECK(f.Connect(14, "c") == Verdict::kKeep);  // swept again: the place is free
  CHECK(f.fds.checks == 4);
  // Below the bounds, no sweep at all.
  f.clock.Advance(milliseconds(50));
  f.fds.checks = 0;
  Fixture g({100, 100});
  for (int fd = 0; fd < 50; ++fd) CHECK(g.Connect(fd, "a") == Verdict::kKeep);
  CHECK(g.fds.checks == 0);
}

}  // namespace
}  // namespace deepool

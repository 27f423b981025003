#include "coordinator/node_registry.h"

#include <catch2/catch.hpp>

#include "common/clock.h"

namespace deepool::coordinator {
namespace {

using std::chrono::seconds;

std::vector<DeviceInfo> TwoCpus() { return {{"cpu:0", "cpu", 0}, {"cpu:1", "cpu", 0}}; }

TEST_CASE("a node silent past the timeout is marked down, once", "[node_registry]") {
  FakeClock clock;
  NodeRegistry nodes(&clock, seconds(10));
  StatusOr<NodeRecord> a = nodes.Register("a", "127.0.0.1:9000", TwoCpus());
  REQUIRE(a.ok());
  CHECK(a->id == "node-a");
  CHECK(a->host() == "127.0.0.1");
  REQUIRE(nodes.Register("b", "127.0.0.1:9001", TwoCpus()).ok());

  clock.Advance(seconds(6));
  REQUIRE(nodes.Heartbeat("node-a").ok());
  clock.Advance(seconds(6));  // b silent for 12 s, a for 6 s
  std::vector<NodeRecord> expired = nodes.ExpireSilent();
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].id == "node-b");
  CHECK(nodes.ExpireSilent().empty());
  CHECK(nodes.Get("node-b")->state == NodeState::kDown);
  CHECK(nodes.Get("node-a")->state == NodeState::kUp);
  // A down node must register again; heartbeats are refused with NOT_FOUND.
  CHECK(nodes.Heartbeat("node-b").code() == StatusCode::kNotFound);
  CHECK(nodes.Heartbeat("node-zzz").code() == StatusCode::kNotFound);
  StatusOr<NodeRecord> back = nodes.Register("b", "127.0.0.1:9001", TwoCpus());
  REQUIRE(back.ok());
  CHECK(back->id == "node-b");
  CHECK(back->state == NodeState::kUp);
}

TEST_CASE("drain and undrain by name or id survive re-registration", "[node_registry]") {
  FakeClock clock;
  NodeRegistry nodes(&clock, seconds(10));
  REQUIRE(nodes.Register("a", "h:1", TwoCpus()).ok());
  StatusOr<NodeRecord> drained = nodes.Drain("a");
  REQUIRE(drained.ok());
  CHECK(drained->state == NodeState::kDraining);
  CHECK_FALSE(drained->schedulable());
  CHECK(nodes.Register("a", "h:1", TwoCpus())->state == NodeState::kDraining);
  CHECK(nodes.Undrain("node-a")->state == NodeState::kUp);
  CHECK(nodes.Drain("nope").status().code() == StatusCode::kNotFound);
}

TEST_CASE("registration refuses malformed nodes naming the field", "[node_registry]") {
  FakeClock clock;
  NodeRegistry nodes(&clock, seconds(10));
  CHECK(nodes.Register("", "h:1", TwoCpus()).status().message().rfind("name", 0) == 0);
  CHECK(nodes.Register("a", "h:1", {}).status().message().rfind("devices", 0) == 0);
  std::vector<DeviceInfo> dup = {{"cpu:0", "cpu", 0}, {"cpu:0", "cpu", 0}};
  CHECK(nodes.Register("a", "h:1", dup).status().message().rfind("devices[1].device", 0) == 0);
  std::vector<DeviceInfo> untyped = {{"cpu:0", "", 0}};
  CHECK(nodes.Register("a", "h:1", untyped).status().message().rfind("devices[0].type", 0) == 0);
  // Names land in every table: no spaces, no escape sequences, not too long.
  CHECK(nodes.Register("gpu 1", "h:1", TwoCpus()).status().message() ==
        "name: only letters, digits and . _ - : are allowed");
  CHECK_FALSE(nodes.Register("a\x1b[2J", "h:1", TwoCpus()).ok());
  CHECK_FALSE(nodes.Register(std::string(65, 'a'), "h:1", TwoCpus()).ok());
  std::vector<DeviceInfo> painted = {{"cpu:0\r", "cpu", 0}};
  CHECK(nodes.Register("a", "h:1", painted).status().message().rfind("devices[0].device", 0) ==
        0);
  CHECK(nodes.Register("gpu-01.rack_2", "h:1", TwoCpus()).ok());
}

using protocol::ProtocolRange;

// This coordinator's range in the tests below, written out: the rule, not the constants.
constexpr ProtocolRange kCoordinator{1, 2};

TEST_CASE("negotiation: overlapping ranges use the newest version both speak",
          "[node_registry][version]") {
  CHECK(*NegotiateWorkerProtocol(2, 1, kCoordinator) == ProtocolRange{1, 2});
  CHECK(NegotiateWorkerProtocol(2, 1, kCoordinator)->newest == 2);
  // A worker one version ahead (it reads 2 and 3): version 2, and it reads nothing older.
  CHECK(*NegotiateWorkerProtocol(3, 2, kCoordinator) == ProtocolRange{2, 2});
  // A worker that speaks only 1, sending its range.
  CHECK(*NegotiateWorkerProtocol(1, 1, kCoordinator) == ProtocolRange{1, 1});
  // This build's own worker and coordinator.
  CHECK(*NegotiateWorkerProtocol(protocol::kProtocolVersion, protocol::kOldestProtocolVersion,
                                 ProtocolRange{}) == ProtocolRange{});
}

TEST_CASE("negotiation: a worker from before version ranges sends oldest 0 and speaks only one",
          "[node_registry][version]") {
  StatusOr<ProtocolRange> old = NegotiateWorkerProtocol(1, 0, kCoordinator);
  REQUIRE(old.ok());
  CHECK(*old == ProtocolRange{1, 1});
  CHECK_FALSE(old->Contains(2));
  CHECK(NegotiateWorkerProtocol(2, 0, kCoordinator)->oldest == 2);
}

TEST_CASE("negotiation: a worker too old is refused saying to upgrade it",
          "[node_registry][version]") {
  StatusOr<ProtocolRange> refused = NegotiateWorkerProtocol(1, 1, ProtocolRange{2, 3});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
  CHECK(refused.status().message() ==
        "the worker speaks executor protocol 1 and this coordinator speaks 2 to 3; the worker is "
        "older: upgrade it to a deepool release that speaks protocol 2 or newer (a worker from "
        "before protocol versioning sends 0)");
  // From before versioning: nothing at all.
  refused = NegotiateWorkerProtocol(0, 0, kCoordinator);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(refused.status().message(), Catch::Contains("the worker is older"));
}

TEST_CASE("negotiation: a worker too new is refused saying to upgrade the coordinator",
          "[node_registry][version]") {
  StatusOr<ProtocolRange> refused = NegotiateWorkerProtocol(4, 3, kCoordinator);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
  CHECK(refused.status().message() ==
        "the worker speaks executor protocol 3 to 4 and this coordinator speaks 1 to 2; the "
        "coordinator is older: upgrade it to a deepool release that speaks protocol 3 or newer");
  // Only protocol 3, sent as a worker from before ranges would.
  CHECK(NegotiateWorkerProtocol(3, 0, kCoordinator).status().code() ==
        StatusCode::kFailedPrecondition);
  // A range upside down is a malformed request.
  CHECK(NegotiateWorkerProtocol(1, 2, kCoordinator).status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("a node keeps the protocol it registered with, and a new one when it re-registers",
          "[node_registry][version]") {
  FakeClock clock;
  NodeRegistry nodes(&clock, seconds(10));
  REQUIRE(nodes.Register("a", "h:1", TwoCpus(), ProtocolRange{1, 1}).ok());
  CHECK(nodes.Get("node-a")->protocol == ProtocolRange{1, 1});
  // Upgraded in place.
  REQUIRE(nodes.Register("a", "h:1", TwoCpus(), ProtocolRange{1, 2}).ok());
  CHECK(nodes.Get("node-a")->protocol == ProtocolRange{1, 2});
  CHECK(nodes.List()[0].protocol.newest == 2);
}

}  // namespace
}  // namespace deepool::coordinator

// The node contention model (simulator/node_contention.h): the slowdown table, a job's factor
// against its own measurement, the even spread over a type's nodes, and the tables refused.
#include "simulator/node_contention.h"

#include <catch2/catch.hpp>
#include <limits>

namespace deepool::simulator {
namespace {

NodeContention FourPerNode() { return NodeContention{"cpu", 4, {1, 1.5, 2.5, 3}}; }

TEST_CASE("The slowdown interpolates between loads and holds past the table", "[pool]") {
  const NodeContention contention = FourPerNode();
  CHECK(NodeSlowdown(contention, 0) == 1);
  CHECK(NodeSlowdown(contention, 1) == 1);
  CHECK(NodeSlowdown(contention, 1.5) == Approx(1.25));
  CHECK(NodeSlowdown(contention, 2) == Approx(1.5));
  CHECK(NodeSlowdown(contention, 2.5) == Approx(2));
  CHECK(NodeSlowdown(contention, 4) == Approx(3));
  CHECK(NodeSlowdown(contention, 9) == Approx(3));
}

TEST_CASE("A job is slowed only by the load beyond what its own measurement holds", "[pool]") {
  const NodeContention contention = FourPerNode();
  // Alone on its one device of one node: as measured.
  CHECK(ContentionFactor(contention, 4, 1, 1) == Approx(1));
  // Beside a second one-device job on the node.
  CHECK(ContentionFactor(contention, 4, 2, 1) == Approx(1.5));
  // A four-device job alone fills its node: its own measurement already paid for that.
  CHECK(ContentionFactor(contention, 4, 4, 4) == Approx(1));
  // A two-device job beside two others: load 4 against its own 2.
  CHECK(ContentionFactor(contention, 4, 4, 2) == Approx(3 / 1.5));
}

TEST_CASE("Devices in use count as spread evenly over the type's nodes", "[pool]") {
  const NodeContention contention = FourPerNode();
  // 4 of 8 devices in use over 2 nodes: load 2 on each.
  CHECK(ContentionFactor(contention, 8, 4, 1) == Approx(1.5));
  // A job wider than a node holds a whole node per node it spans.
  CHECK(ContentionFactor(contention, 8, 8, 8) == Approx(1));
  CHECK(ContentionFactor(contention, 8, 8, 4) == Approx(1));
}

TEST_CASE("Contention tables that cannot be right are refused naming the rule", "[pool]") {
  CHECK(ValidateNodeContention(FourPerNode()).ok());
  NodeContention no_type = FourPerNode();
  no_type.device_type.clear();
  CHECK(ValidateNodeContention(no_type).code() == StatusCode::kInvalidArgument);
  NodeContention no_devices = FourPerNode();
  no_devices.devices_per_node = 0;
  CHECK(ValidateNodeContention(no_devices).message().find("devices_per_node") != std::string::npos);
  NodeContention not_one = FourPerNode();
  not_one.slowdown = {1.2, 1.5};
  CHECK(ValidateNodeContention(not_one).message().find("start at 1") != std::string::npos);
  NodeContention faster = FourPerNode();
  faster.slowdown = {1, 0.8};
  CHECK(ValidateNodeContention(faster).message().find("non-decreasing (at 2") != std::string::npos);
  NodeContention infinite = FourPerNode();
  infinite.slowdown = {1, std::numeric_limits<double>::infinity()};
  CHECK_FALSE(ValidateNodeContention(infinite).ok());
}

}  // namespace
}  // namespace deepool::simulator

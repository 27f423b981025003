// `deepool nodes`: the table shows each node's executor protocol version, so an operator
// upgrading a pool sees which nodes still run the older release.
#include <algorithm>
#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/services/client.h"

namespace deepool::cli {
namespace {

v1::Node Node(const std::string& name, int protocol_version) {
  v1::Node node;
  node.set_name(name);
  node.set_node_id("node-" + name);
  node.set_state(v1::NODE_STATE_UP);
  node.set_address("10.0.0.1:7000");
  v1::Device* device = node.add_devices();
  device->set_device("cuda:0");
  device->set_type("a100");
  node.add_device_uses()->set_device("cuda:0");
  node.set_protocol_version(protocol_version);
  return node;
}

std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// The cell of `column` in the row that starts with `name` (no cell of these rows has a space).
std::string Cell(const std::string& table, const std::string& name, const std::string& column) {
  std::istringstream lines(table);
  std::string header;
  std::getline(lines, header);
  const std::vector<std::string> columns = Words(header);
  const auto at = std::find(columns.begin(), columns.end(), column);
  REQUIRE(at != columns.end());
  for (std::string line; std::getline(lines, line);) {
    const std::vector<std::string> cells = Words(line);
    if (cells.empty() || cells[0] != name) continue;
    REQUIRE(cells.size() == columns.size());
    return cells[static_cast<size_t>(at - columns.begin())];
  }
  FAIL("no row for " << name);
  return "";
}

TEST_CASE("deepool nodes shows the protocol each node speaks with the coordinator",
          "[cli][version]") {
  const std::string table = NodesTable({Node("new", 2), Node("old", 1), Node("unsaid", 0)}, 0);
  INFO(table);
  CHECK(Cell(table, "new", "PROTOCOL") == "2");
  CHECK(Cell(table, "old", "PROTOCOL") == "1");
  // 0: a coordinator from before versions were shown.
  CHECK(Cell(table, "unsaid", "PROTOCOL") == "-");
}

}  // namespace
}  // namespace deepool::cli

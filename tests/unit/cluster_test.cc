#include "planner/cluster.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace deepool::planner {
namespace {

using nlohmann::json;

json ValidClusterDoc() {
  return json{{"format", "deepool.cluster"},
              {"version", 1},
              {"name", "lab"},
              {"device_type", "v100"},
              {"nodes", 2},
              {"devices_per_node", 4},
              {"intra_node", {{"bandwidth_gbps", 150.0}, {"latency_us", 4.0}}},
              {"inter_node", {{"bandwidth_gbps", 12.5}, {"latency_us", 12.0}}}};
}

// Parses `doc` and returns the error message (empty when it parsed).
std::string ParseError(const json& doc) {
  auto parsed = ParseClusterJson(doc.dump());
  return parsed.ok() ? "" : parsed.status().message();
}

TEST_CASE("dgx-a100 preset is one NVSwitch node of 8 A100s") {
  auto cluster = ClusterPreset("dgx-a100");
  REQUIRE(cluster.ok());
  CHECK(cluster->device_type == "a100");
  CHECK(cluster->nodes == 1);
  CHECK(cluster->total_devices() == 8);
  CHECK(cluster->intra_node.bandwidth_gbps == Approx(300));
  CHECK(cluster->intra_node.latency_us == Approx(5));
  CHECK(cluster->Validate().ok());
}

TEST_CASE("dgx-a100xN preset joins N nodes over InfiniBand") {
  auto cluster = ClusterPreset("dgx-a100x4");
  REQUIRE(cluster.ok());
  CHECK(cluster->nodes == 4);
  CHECK(cluster->total_devices() == 32);
  CHECK(cluster->inter_node.bandwidth_gbps == Approx(25));
  CHECK(cluster->inter_node.latency_us == Approx(10));
  // Ranks 7 and 8 sit on different nodes, 8 and 15 on the same one.
  CHECK(&cluster->LinkBetween(7, 8) == &cluster->inter_node);
  CHECK(&cluster->LinkBetween(8, 15) == &cluster->intra_node);
}

TEST_CASE("dgx-h100 and cpu presets") {
  auto h100 = ClusterPreset("dgx-h100x2");
  REQUIRE(h100.ok());
  CHECK(h100->device_type == "h100");
  CHECK(h100->total_devices() == 16);
  CHECK(h100->intra_node.bandwidth_gbps > ClusterPreset("dgx-a100")->intra_node.bandwidth_gbps);
  auto h200 = ClusterPreset("dgx-h200x3");
  REQUIRE(h200.ok());
  CHECK(h200->device_type == "h200");
  CHECK(h200->total_devices() == 24);
  CHECK(h200->intra_node.bandwidth_gbps == h100->intra_node.bandwidth_gbps);  // NVLink 4
  CHECK(h200->inter_node.bandwidth_gbps == h100->inter_node.bandwidth_gbps);  // NDR
  auto single = ClusterPreset("dgx-h100");
  REQUIRE(single.ok());
  CHECK(single->total_devices() == 8);
  auto cpu = ClusterPreset("cpu-3");
  REQUIRE(cpu.ok());
  CHECK(cpu->device_type == "cpu");
  CHECK(cpu->nodes == 1);
  CHECK(cpu->devices_per_node == 3);
}

TEST_CASE("each device type plans on its own links when no cluster is named") {
  CHECK(DefaultClusterPresetFor("h100", 8) == "dgx-h100");
  CHECK(DefaultClusterPresetFor("h200", 8) == "dgx-h200");
  CHECK(DefaultClusterPresetFor("cpu", 3) == "cpu-3");
  CHECK(DefaultClusterPresetFor("cpu", 0) == "cpu-1");
  CHECK(DefaultClusterPresetFor("a100", 8) == "dgx-a100");
  CHECK(DefaultClusterPresetFor("t4", 8) == "dgx-a100");
  for (const char* device : {"a100", "h100", "h200", "cpu"}) {
    auto cluster = ClusterPreset(DefaultClusterPresetFor(device, 4));
    REQUIRE(cluster.ok());
    CHECK(cluster->device_type == device);
  }
}

TEST_CASE("unknown or malformed preset names are NOT_FOUND") {
  for (const char* name :
       {"dgx-b200", "dgx-a100x0", "dgx-a100x", "cpu-", "cpu-two", "cpu-4x", "dgx-a100x-2", ""}) {
    auto cluster = ClusterPreset(name);
    INFO(name);
    REQUIRE_FALSE(cluster.ok());
    CHECK(cluster.status().code() == StatusCode::kNotFound);
  }
  CHECK_THAT(ClusterPreset("nope").status().message(), Catch::Contains("dgx-a100xN"));
}

TEST_CASE("cluster JSON round trips for every preset and a custom cluster") {
  for (const char* name :
       {"dgx-a100", "dgx-a100x3", "dgx-h100", "dgx-h100x2", "dgx-h200", "dgx-h200x2", "cpu-5"}) {
    auto preset = ClusterPreset(name);
    REQUIRE(preset.ok());
    auto parsed = ParseClusterJson(ClusterToJson(*preset));
    INFO(name);
    REQUIRE(parsed.ok());
    CHECK(parsed->name == preset->name);
    CHECK(parsed->device_type == preset->device_type);
    CHECK(parsed->nodes == preset->nodes);
    CHECK(parsed->devices_per_node == preset->devices_per_node);
    CHECK(parsed->intra_node.bandwidth_gbps == preset->intra_node.bandwidth_gbps);
    CHECK(parsed->intra_node.latency_us == preset->intra_node.latency_us);
    CHECK(parsed->inter_node.bandwidth_gbps == preset->inter_node.bandwidth_gbps);
    CHECK(parsed->inter_node.latency_us == preset->inter_node.latency_us);
  }
  auto custom = ParseClusterJson(ValidClusterDoc().dump());
  REQUIRE(custom.ok());
  CHECK(custom->name == "lab");
  CHECK(custom->device_type == "v100");
  CHECK(custom->total_devices() == 8);
  CHECK(custom->inter_node.bandwidth_gbps == Approx(12.5));
  CHECK(json::parse(ClusterToJson(*custom)) == ValidClusterDoc());
  CHECK_FALSE(custom->intra_node.collective_bandwidth_gbps.has_value());

  // A calibrated link's separate all-reduce figures round trip too.
  json calibrated = ValidClusterDoc();
  calibrated["intra_node"]["collective_bandwidth_gbps"] = 1.25;
  calibrated["intra_node"]["collective_latency_us"] = 400.0;
  auto with_collectives = ParseClusterJson(calibrated.dump());
  REQUIRE(with_collectives.ok());
  CHECK(with_collectives->intra_node.ForCollectives().bandwidth_gbps == Approx(1.25));
  CHECK(with_collectives->intra_node.ForCollectives().latency_us == Approx(400.0));
  CHECK(with_collectives->intra_node.bandwidth_gbps == Approx(150.0));
  CHECK(json::parse(ClusterToJson(*with_collectives)) == calibrated);
}

TEST_CASE("cluster JSON errors name the field") {
  CHECK_THAT(ParseClusterJson("{not json").status().message(), Catch::Contains("not valid JSON"));
  CHECK(ParseClusterJson("[]").status().code() == StatusCode::kInvalidArgument);

  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"format", [](json& d) { d["format"] = "deepool.plan"; }, "format"},
      {"version", [](json& d) { d["version"] = 2; }, "version"},
      {"no version", [](json& d) { d.erase("version"); }, "version"},
      {"device_type", [](json& d) { d.erase("device_type"); }, "device_type"},
      {"nodes missing", [](json& d) { d.erase("nodes"); }, "nodes"},
      {"nodes zero", [](json& d) { d["nodes"] = 0; }, "nodes"},
      {"nodes fractional", [](json& d) { d["nodes"] = 1.5; }, "nodes"},
      {"devices_per_node", [](json& d) { d["devices_per_node"] = -1; }, "devices_per_node"},
      {"intra missing", [](json& d) { d.erase("intra_node"); }, "intra_node"},
      {"intra bandwidth", [](json& d) { d["intra_node"]["bandwidth_gbps"] = 0; },
       "intra_node.bandwidth_gbps"},
      {"intra latency", [](json& d) { d["intra_node"]["latency_us"] = -3; },
       "intra_node.latency_us"},
      {"inter bandwidth type", [](json& d) { d["inter_node"]["bandwidth_gbps"] = "fast"; },
       "inter_node.bandwidth_gbps"},
      {"inter missing with 2 nodes", [](json& d) { d.erase("inter_node"); }, "inter_node"},
      {"collective bandwidth", [](json& d) { d["intra_node"]["collective_bandwidth_gbps"] = 0; },
       "intra_node.collective_bandwidth_gbps"},
      {"collective latency", [](json& d) { d["inter_node"]["collective_latency_us"] = "slow"; },
       "inter_node.collective_latency_us"},
      {"name type", [](json& d) { d["name"] = 3; }, "name"},
      {"unknown top-level field", [](json& d) { d["gpus"] = 8; }, "unknown field gpus"},
      {"unknown link field", [](json& d) { d["intra_node"]["bandwith_gbps"] = 1; },
       "unknown field intra_node.bandwith_gbps"},
  };
  for (const Case& c : cases) {
    json doc = ValidClusterDoc();
    c.edit(doc);
    INFO(c.what);
    const std::string error = ParseError(doc);
    CHECK_THAT(error, Catch::Contains(c.expected));
  }
}

TEST_CASE("a single-node cluster may leave out inter_node") {
  json doc = ValidClusterDoc();
  doc["nodes"] = 1;
  doc.erase("inter_node");
  auto cluster = ParseClusterJson(doc.dump());
  REQUIRE(cluster.ok());
  CHECK(cluster->inter_node.bandwidth_gbps == Approx(150));
  CHECK(cluster->Validate().ok());
}

TEST_CASE("Validate rejects hand-built clusters with bad fields") {
  Cluster cluster = *ClusterPreset("dgx-a100");
  cluster.devices_per_node = 0;
  CHECK_THAT(cluster.Validate().message(), Catch::Contains("devices_per_node"));
  cluster = *ClusterPreset("dgx-a100");
  cluster.inter_node.latency_us = -1;
  CHECK_THAT(cluster.Validate().message(), Catch::Contains("inter_node.latency_us"));
}

TEST_CASE("ResizeCluster keeps the node shape and links") {
  const Cluster dgx = *ClusterPreset("dgx-a100x2");
  Cluster small = ResizeCluster(dgx, 4);
  CHECK(small.nodes == 1);
  CHECK(small.devices_per_node == 4);
  CHECK(small.total_devices() == 4);
  CHECK(small.intra_node.bandwidth_gbps == dgx.intra_node.bandwidth_gbps);

  Cluster big = ResizeCluster(dgx, 64);
  CHECK(big.nodes == 8);
  CHECK(big.devices_per_node == 8);
  CHECK(big.inter_node.bandwidth_gbps == dgx.inter_node.bandwidth_gbps);
  CHECK(big.device_type == "a100");

  // Not a multiple of the node size: whole nodes, extra ranks unused.
  Cluster odd = ResizeCluster(dgx, 12);
  CHECK(odd.nodes == 2);
  CHECK(odd.total_devices() >= 12);

  Cluster same = ResizeCluster(dgx, 16);
  CHECK(same.name == dgx.name);
  CHECK(same.total_devices() == 16);
  CHECK(ResizeCluster(dgx, 1).total_devices() == 1);
}

TEST_CASE("the links a profile measured replace a preset's within a node and bound it across") {
  // As `deepool up`'s cluster: two one-device "nodes" on one host, planned on cpu-1's links.
  Cluster cluster = *ClusterPreset("cpu-1");
  cluster.nodes = 2;
  Link measured{2.6, 1300};
  measured.collective_bandwidth_gbps = 0.8;
  measured.collective_latency_us = 1700;
  const Cluster planned = WithMeasuredLink(cluster, measured);
  CHECK(planned.intra_node == measured);
  // Across nodes: the slower figure of the preset's Ethernet (3.125 GB/s, 50 us) and loopback's.
  CHECK(planned.inter_node.bandwidth_gbps == 2.6);
  CHECK(planned.inter_node.latency_us == 1300);
  CHECK(planned.inter_node.ForCollectives().bandwidth_gbps == 0.8);
  CHECK(planned.inter_node.ForCollectives().latency_us == 1700);
  // A fast host's link does not make the Ethernet faster.
  const Cluster fast = WithMeasuredLink(cluster, Link{20, 10});
  CHECK(fast.inter_node.bandwidth_gbps == 3.125);
  CHECK(fast.inter_node.latency_us == 50);
  REQUIRE(planned.Validate().ok());
  auto parsed = LinkFromJson(LinkToJson(measured), "links");
  REQUIRE(parsed.ok());
  CHECK(*parsed == measured);
}

}  // namespace
}  // namespace deepool::planner

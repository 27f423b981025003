// Cluster description: nodes x devices per node and the links between devices.
// JSON: {"format": "deepool.cluster", "version": 1, ...} (docs/formats.md), or a preset name.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace deepool::planner {

struct Link {
  Link() = default;
  constexpr Link(double bandwidth, double latency)
      : bandwidth_gbps(bandwidth), latency_us(latency) {}

  double bandwidth_gbps = 0;  // GB/s (10^9 bytes per second) per device, each direction
  double latency_us = 0;      // per message

  // All-reduces, where they do not run at the messages' speed (a CPU library reducing on the
  // cores the ranks share, say): deepool-calibrate measures them. Unset: the message figures.
  std::optional<double> collective_bandwidth_gbps;
  std::optional<double> collective_latency_us;

  // The figures all-reduces are charged at.
  Link ForCollectives() const {
    return Link{collective_bandwidth_gbps.value_or(bandwidth_gbps),
                collective_latency_us.value_or(latency_us)};
  }
  bool operator==(const Link& o) const {
    return bandwidth_gbps == o.bandwidth_gbps && latency_us == o.latency_us &&
           collective_bandwidth_gbps == o.collective_bandwidth_gbps &&
           collective_latency_us == o.collective_latency_us;
  }
  // Milliseconds per byte at this bandwidth (0 without one).
  double ms_per_byte() const { return bandwidth_gbps > 0 ? 1.0 / (bandwidth_gbps * 1e6) : 0.0; }
  // One message of `bytes`: the latency plus the bytes at the bandwidth.
  double MessageMs(double bytes) const { return latency_us / 1000.0 + bytes * ms_per_byte(); }
};

struct Cluster {
  std::string name;
  std::string device_type = "a100";  // names the device preset / profile to use
  int nodes = 1;
  int devices_per_node = 8;
  Link intra_node;  // e.g. NVSwitch
  Link inter_node;  // e.g. InfiniBand
  // Memory of one device in GiB, for the planner's memory check (memory_model.h); 0: the
  // device preset's memory_gb. JSON "device_memory_gb", optional.
  double device_memory_gb = 0;

  int total_devices() const { return nodes * devices_per_node; }
  int NodeOf(int rank) const { return rank / devices_per_node; }
  // The link between two ranks: intra-node when they share a node.
  const Link& LinkBetween(int rank_a, int rank_b) const {
    return NodeOf(rank_a) == NodeOf(rank_b) ? intra_node : inter_node;
  }
  Status Validate() const;
};

// A link as clusters write it ({"bandwidth_gbps": ..., "latency_us": ...,
// "collective_bandwidth_gbps": ..., "collective_latency_us": ...}, the last two optional);
// errors name `path` and the field. Profiles carry one too (profile_table.h).
StatusOr<Link> LinkFromJson(const nlohmann::json& object, const std::string& path);
nlohmann::json LinkToJson(const Link& link);

// `cluster` with the links a profile measured between two ranks of one host (a CPU profile's
// "links"): the intra-node link becomes the measured one, and the inter-node link the slower of
// its own and the measured one in each figure, since ranks on two hosts talk no faster than two
// on one (and `deepool up` runs its "nodes" on one host).
Cluster WithMeasuredLink(Cluster cluster, const Link& measured);

inline constexpr int kClusterFormatVersion = 1;
StatusOr<Cluster> ParseClusterJson(std::string_view text);
std::string ClusterToJson(const Cluster& cluster, int indent = 2);
// Presets: "dgx-a100" (one node, 8 GPUs on NVSwitch), "dgx-a100xN" (N such nodes over
// InfiniBand), "dgx-h100", "dgx-h100xN", "dgx-h200", "dgx-h200xN" (the H100's NVLink 4 and NDR
// links), and "cpu-N" (one host with N CPU devices).
StatusOr<Cluster> ClusterPreset(std::string_view name);
// The preset whose links a cluster of `device_type` devices is planned on when none is named:
// "h100" -> dgx-h100, "h200" -> dgx-h200, "cpu" -> cpu-<devices>, anything else -> dgx-a100.
std::string DefaultClusterPresetFor(const std::string& device_type, int devices);
std::vector<std::string> ClusterPresetNames();
// A cluster of `devices` devices in nodes shaped like `shape`'s (used when --gpus is given).
// Up to one node's worth it is one node of exactly `devices`; beyond that, whole nodes:
// ceil(devices / devices_per_node) of them, so total_devices() may exceed `devices` (the extra
// ranks are simply not used). Links and device type are kept.
Cluster ResizeCluster(const Cluster& shape, int devices);

}  // namespace deepool::planner

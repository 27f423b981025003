// Cluster description: JSON parse/write with validation, presets, resizing.
#include "planner/cluster.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/json_fields.h"

namespace deepool::planner {
namespace {

using nlohmann::json;

constexpr std::string_view kClusterFormatName = "deepool.cluster";

// Public spec-sheet numbers (per GPU, per direction), rounded.
// NVSwitch on DGX A100: 600 GB/s bidirectional NVLink per GPU -> 300 GB/s each way.
// DGX H100: 900 GB/s bidirectional NVLink 4 per GPU -> 450 GB/s each way.
// InfiniBand: one 200 Gb/s HDR NIC per GPU on DGX A100 (25 GB/s), one 400 Gb/s NDR NIC per GPU
// on DGX H100 (50 GB/s).
constexpr Link kNvswitchA100{300.0, 5.0};
constexpr Link kNvswitchH100{450.0, 5.0};
constexpr Link kInfinibandHdr{25.0, 10.0};
constexpr Link kInfinibandNdr{50.0, 10.0};
// CPU devices on one host talk over loopback TCP (Gloo); several GB/s, tens of microseconds.
constexpr Link kCpuLoopback{5.0, 30.0};
// Between CPU hosts: a 25 Gb/s Ethernet NIC.
constexpr Link kCpuEthernet{3.125, 50.0};

Status CheckLink(const Link& link, const std::string& field) {
  if (!std::isfinite(link.bandwidth_gbps) || link.bandwidth_gbps <= 0) {
    return InvalidArgumentError(field + ".bandwidth_gbps must be a positive number");
  }
  if (!std::isfinite(link.latency_us) || link.latency_us < 0) {
    return InvalidArgumentError(field + ".latency_us must be a non-negative number");
  }
  if (link.collective_bandwidth_gbps &&
      (!std::isfinite(*link.collective_bandwidth_gbps) || *link.collective_bandwidth_gbps <= 0)) {
    return InvalidArgumentError(field + ".collective_bandwidth_gbps must be a positive number");
  }
  if (link.collective_latency_us &&
      (!std::isfinite(*link.collective_latency_us) || *link.collective_latency_us < 0)) {
    return InvalidArgumentError(field + ".collective_latency_us must be a non-negative number");
  }
  return Status::Ok();
}

StatusOr<int> IntField(const json& object, const std::string& key) {
  ASSIGN_OR_RETURN(const int64_t value, ReadRequiredField<int64_t>(object, key, ""));
  if (value < 1 || value > (1 << 24)) {
    return InvalidArgumentError("field " + key + " must be between 1 and 16777216");
  }
  return static_cast<int>(value);
}

StatusOr<Link> LinkField(const json& object, const std::string& key) {
  ASSIGN_OR_RETURN(const json* it, ReadRequiredObject(object, key, ""));
  return LinkFromJson(*it, key);
}

// Parses the N of "<prefix>N" (N >= 1), or nullopt if `name` does not have that form.
std::optional<int> SuffixCount(std::string_view name, std::string_view prefix) {
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::string_view digits = name.substr(prefix.size());
  int value = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || value < 1) {
    return std::nullopt;
  }
  return value;
}

Cluster MakeCluster(std::string name, std::string device_type, int nodes, int devices_per_node,
                    Link intra, Link inter) {
  Cluster cluster;
  cluster.name = std::move(name);
  cluster.device_type = std::move(device_type);
  cluster.nodes = nodes;
  cluster.devices_per_node = devices_per_node;
  cluster.intra_node = intra;
  cluster.inter_node = inter;
  return cluster;
}

}  // namespace

StatusOr<Link> LinkFromJson(const json& object, const std::string& path) {
  if (!object.is_object()) return InvalidArgumentError("field " + path + " must be an object");
  RETURN_IF_ERROR(CheckKnownFields(
      object,
      {"bandwidth_gbps", "latency_us", "collective_bandwidth_gbps", "collective_latency_us"},
      path + "."));
  Link link;
  ASSIGN_OR_RETURN(link.bandwidth_gbps,
                   ReadRequiredField<double>(object, "bandwidth_gbps", path + "."));
  ASSIGN_OR_RETURN(link.latency_us, ReadRequiredField<double>(object, "latency_us", path + "."));
  for (auto [name, field] :
       {std::pair{"collective_bandwidth_gbps", &link.collective_bandwidth_gbps},
        std::pair{"collective_latency_us", &link.collective_latency_us}}) {
    auto found = object.find(name);
    if (found == object.end() || found->is_null()) continue;
    ASSIGN_OR_RETURN(*field, ReadRequiredField<double>(object, name, path + "."));
  }
  RETURN_IF_ERROR(CheckLink(link, path));
  return link;
}

json LinkToJson(const Link& link) {
  json doc{{"bandwidth_gbps", link.bandwidth_gbps}, {"latency_us", link.latency_us}};
  if (link.collective_bandwidth_gbps) {
    doc["collective_bandwidth_gbps"] = *link.collective_bandwidth_gbps;
  }
  if (link.collective_latency_us) doc["collective_latency_us"] = *link.collective_latency_us;
  return doc;
}

Cluster WithMeasuredLink(Cluster cluster, const Link& measured) {
  cluster.intra_node = measured;
  const Link own = cluster.inter_node;
  const Link own_collectives = own.ForCollectives();
  const Link measured_collectives = measured.ForCollectives();
  Link slower{std::min(own.bandwidth_gbps, measured.bandwidth_gbps),
              std::max(own.latency_us, measured.latency_us)};
  slower.collective_bandwidth_gbps =
      std::min(own_collectives.bandwidth_gbps, measured_collectives.bandwidth_gbps);
  slower.collective_latency_us =
      std::max(own_collectives.latency_us, measured_collectives.latency_us);
  cluster.inter_node = slower;
  return cluster;
}

Status Cluster::Validate() const {
  if (name.empty()) return InvalidArgumentError("name must not be empty");
  if (device_type.empty()) return InvalidArgumentError("device_type must not be empty");
  if (nodes < 1) return InvalidArgumentError("nodes must be >= 1");
  if (devices_per_node < 1) return InvalidArgumentError("devices_per_node must be >= 1");
  if (std::isnan(device_memory_gb) || device_memory_gb < 0) {
    return InvalidArgumentError("device_memory_gb must be >= 0 (0: the device preset's)");
  }
  if (static_cast<int64_t>(nodes) * devices_per_node > (int64_t{1} << 24)) {
    return InvalidArgumentError("nodes x devices_per_node must be at most 16777216");
  }
  RETURN_IF_ERROR(CheckLink(intra_node, "intra_node"));
  RETURN_IF_ERROR(CheckLink(inter_node, "inter_node"));
  return Status::Ok();
}

StatusOr<Cluster> ParseClusterJson(std::string_view text) {
  ASSIGN_OR_RETURN(const json doc, ParseJson(text, "cluster"));
  if (!doc.is_object()) return InvalidArgumentError("cluster: the document must be an object");
  auto fail = [](const Status& status) { return status.WithContext("cluster"); };

  if (Status header = CheckFormatAndVersion(doc, kClusterFormatName, kClusterFormatVersion);
      !header.ok()) {
    return fail(header);
  }

  Status known =
      CheckKnownFields(doc,
                       {"format", "version", "name", "device_type", "nodes", "devices_per_node",
                        "intra_node", "inter_node", "device_memory_gb"},
                       "");
  if (!known.ok()) return fail(known);

  Cluster cluster;
  cluster.name = "cluster";
  if (Status name = ReadOptionalField(doc, "name", "", &cluster.name); !name.ok()) {
    return fail(name);
  }
  auto device_type = ReadRequiredField<std::string>(doc, "device_type", "");
  if (!device_type.ok()) return fail(device_type.status());
  cluster.device_type = *device_type;

  auto nodes = IntField(doc, "nodes");
  if (!nodes.ok()) return fail(nodes.status());
  cluster.nodes = *nodes;
  auto per_node = IntField(doc, "devices_per_node");
  if (!per_node.ok()) return fail(per_node.status());
  cluster.devices_per_node = *per_node;
  if (Status memory = ReadOptionalField(doc, "device_memory_gb", "", &cluster.device_memory_gb);
      !memory.ok()) {
    return fail(memory);
  }

  auto intra = LinkField(doc, "intra_node");
  if (!intra.ok()) return fail(intra.status());
  cluster.intra_node = *intra;
  // A single-node cluster may leave out inter_node; it then only matters after a resize, where
  // the intra-node link is the best guess there is.
  if (doc.contains("inter_node") || cluster.nodes > 1) {
    auto inter = LinkField(doc, "inter_node");
    if (!inter.ok()) return fail(inter.status());
    cluster.inter_node = *inter;
  } else {
    cluster.inter_node = cluster.intra_node;
  }
  Status valid = cluster.Validate();
  if (!valid.ok()) return fail(valid);
  return cluster;
}

std::string ClusterToJson(const Cluster& cluster, int indent) {
  json doc = {{"format", kClusterFormatName},
              {"version", kClusterFormatVersion},
              {"name", cluster.name},
              {"device_type", cluster.device_type},
              {"nodes", cluster.nodes},
              {"devices_per_node", cluster.devices_per_node},
              {"intra_node", LinkToJson(cluster.intra_node)},
              {"inter_node", LinkToJson(cluster.inter_node)}};
  if (cluster.device_memory_gb > 0) doc["device_memory_gb"] = cluster.device_memory_gb;
  return doc.dump(indent);
}

StatusOr<Cluster> ClusterPreset(std::string_view name) {
  const std::string key(name);
  if (key == "dgx-a100") {
    return MakeCluster(key, "a100", 1, 8, kNvswitchA100, kInfinibandHdr);
  }
  if (key == "dgx-h100") {
    return MakeCluster(key, "h100", 1, 8, kNvswitchH100, kInfinibandNdr);
  }
  if (key == "dgx-h200") {
    return MakeCluster(key, "h200", 1, 8, kNvswitchH100, kInfinibandNdr);
  }
  if (auto n = SuffixCount(name, "dgx-a100x")) {
    return MakeCluster(key, "a100", *n, 8, kNvswitchA100, kInfinibandHdr);
  }
  if (auto n = SuffixCount(name, "dgx-h100x")) {
    return MakeCluster(key, "h100", *n, 8, kNvswitchH100, kInfinibandNdr);
  }
  if (auto n = SuffixCount(name, "dgx-h200x")) {
    return MakeCluster(key, "h200", *n, 8, kNvswitchH100, kInfinibandNdr);
  }
  if (auto n = SuffixCount(name, "cpu-")) {
    return MakeCluster(key, "cpu", 1, *n, kCpuLoopback, kCpuEthernet);
  }
  std::string known;
  for (const std::string& preset : ClusterPresetNames())
    known += (known.empty() ? "" : ", ") + preset;
  return NotFoundError("unknown cluster preset \"" + key + "\" (known: " + known + ")");
}

std::vector<std::string> ClusterPresetNames() {
  return {"dgx-a100", "dgx-a100xN", "dgx-h100", "dgx-h100xN", "dgx-h200", "dgx-h200xN", "cpu-N"};
}

std::string DefaultClusterPresetFor(const std::string& device_type, int devices) {
  if (device_type == "h100") return "dgx-h100";
  if (device_type == "h200") return "dgx-h200";
  if (device_type == "cpu") return "cpu-" + std::to_string(std::max(1, devices));
  return "dgx-a100";
}

Cluster ResizeCluster(const Cluster& shape, int devices) {
  Cluster resized = shape;
  devices = std::max(devices, 1);
  if (devices <= shape.devices_per_node) {
    resized.nodes = 1;
    resized.devices_per_node = devices;
  } else {
    resized.nodes = (devices + shape.devices_per_node - 1) / shape.devices_per_node;
  }
  if (resized.nodes != shape.nodes || resized.devices_per_node != shape.devices_per_node) {
    resized.name = shape.name + "@" + std::to_string(devices);
  }
  return resized;
}

}  // namespace deepool::planner

#include "cli/command_support.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command_registry.h"
#include "common/durable_file.h"
#include "planner/profile.h"

namespace deepool::cli {

StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    // /dev/stdout, a pipe: written as it is (nothing to replace).
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    if (!out) return InvalidArgumentError("cannot write " + path);
    return Status::Ok();
  }
  // A file is replaced whole: a command killed half-way leaves the old one, not a cut one.
  Status written = ReplaceFileDurably(path, text);
  if (!written.ok()) return InvalidArgumentError("cannot write " + path + ": " + written.message());
  return Status::Ok();
}

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kNotFound:
      return kExitNotFound;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
      return kExitInvalidInput;
    default:
      return kExitFailure;
  }
}

int Fail(const Status& status, int code) {
  std::cerr << "error: " << status.message() << '\n';
  return code;
}

std::string Fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

void PrintTable(const std::vector<std::vector<std::string>>& rows,
                const std::vector<bool>& right_aligned, std::ostream& out) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool last = c + 1 == row.size();
      const std::string pad(widths[c] - row[c].size(), ' ');
      const bool right = c < right_aligned.size() && right_aligned[c];
      line += right ? pad + row[c] : (last ? row[c] : row[c] + pad);
      if (!last) line += "  ";
    }
    out << line << '\n';
  }
}

void PrintTable(const std::vector<std::vector<std::string>>& rows, std::ostream& out) {
  size_t columns = 0;
  for (const auto& row : rows) columns = std::max(columns, row.size());
  std::vector<bool> right_aligned(columns, true);
  if (columns > 0) right_aligned[0] = false;
  PrintTable(rows, right_aligned, out);
}

StatusOr<planner::Cluster> LoadCluster(const std::string& cluster_flag, const std::string& device,
                                       int devices) {
  if (!cluster_flag.empty() && std::ifstream(cluster_flag).good()) {
    ASSIGN_OR_RETURN(std::string text, ReadTextFile(cluster_flag));
    StatusOr<planner::Cluster> parsed = planner::ParseClusterJson(text);
    if (!parsed.ok()) return parsed.status().WithContext(cluster_flag);
    return parsed;
  }
  std::string name = cluster_flag;
  if (name.empty()) name = planner::DefaultClusterPresetFor(device, devices);
  StatusOr<planner::Cluster> preset = planner::ClusterPreset(name);
  if (!preset.ok()) return preset.status().WithContext("--cluster");
  return preset;
}

void WarnOnProfileClusterMismatch(const std::string& profile_device,
                                  const planner::Cluster& cluster, std::ostream& err) {
  if (profile_device.empty() || profile_device == cluster.device_type) return;
  err << "warning: the profile was measured on " << profile_device << " devices but cluster "
      << cluster.name << " has " << cluster.device_type
      << " devices: compute times and link speeds come from different machines (give a --cluster "
         "of "
      << profile_device << " devices)\n";
}

planner::GradientSyncOptions SearchFlags::GradientSync() const {
  planner::GradientSyncOptions sync;
  sync.bucket_bytes = planner::GradientBucketBytes(bucket_mb);
  sync.overlap = !no_overlap;
  sync.tree = !ring_only;
  // AddSearchFlags admits only names ParsePrecision knows; anything else keeps the default.
  if (const auto precision = planner::ParsePrecision(gradient_precision); precision.ok()) {
    sync.precision = *precision;
  }
  return sync;
}

std::string SearchFlags::Describe() const {
  std::ostringstream line;
  line << "gradient all-reduces ";
  if (gradient_precision != "fp32") line << "in " << gradient_precision << ", ";
  if (bucket_mb > 0) {
    line << "in buckets of " << bucket_mb << " MiB";
  } else {
    line << "one per layer";
  }
  line << (no_overlap ? " after backward" : " overlapped with backward")
       << (ring_only ? ", ring only" : ", ring or tree") << "; branches "
       << (concurrent_branches ? "side by side where faster" : "one after another")
       << "; batch norm statistics "
       << (SyncBatchNorm() ? "synchronised over each layer's devices" : "per device");
  return line.str();
}

void AddSearchFlags(CLI::App* command, SearchFlags* flags) {
  command
      ->add_option("--gradient-bucket-mb", flags->bucket_mb,
                   "Gradient bucket cap in MiB, as a run spec's gradient_bucket_mb (0: one "
                   "all-reduce per layer)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, planner::kMaxGradientBucketMb));
  command
      ->add_option("--gradient-precision", flags->gradient_precision,
                   "Width of the all-reduced gradients: fp32 (as DDP, whatever --precision) or "
                   "bf16 / fp16 (as a compression hook such as DDP's bf16_compress_hook sends "
                   "them; buckets still by their fp32 bytes)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  command->add_flag("--no-overlap", flags->no_overlap,
                    "Charge every gradient all-reduce after backward, none hidden behind it");
  command->add_flag("--ring-only", flags->ring_only,
                    "Charge all-reduces as rings only, not the faster of ring and tree");
  command
      ->add_option("--pareto-tolerance", flags->pareto_tolerance,
                   "Epsilon of the Pareto search, times the least device time (0: exact "
                   "frontiers, slower on big graphs)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  command->add_flag("--concurrent-branches", flags->concurrent_branches,
                    "Let parallel branches (Inception's towers, residual shortcuts) run side by "
                    "side on disjoint devices where the cost model finds that faster");
  command
      ->add_option("--batch-norm", flags->batch_norm,
                   "How the job trains batch norm on several devices: synchronized (statistics "
                   "summed over a layer's devices, training equals one device's) or per_device "
                   "(each device's own batch, as DDP without SyncBatchNorm: cheaper, and then "
                   "data parallelism is the baseline's own)")
      ->check(CLI::IsMember({"synchronized", "per_device"}))
      ->capture_default_str();
}

StatusOr<std::optional<planner::Precision>> PrecisionFlag::Parse() const {
  if (name.empty()) return std::optional<planner::Precision>();
  ASSIGN_OR_RETURN(const planner::Precision precision, planner::ParsePrecision(name));
  return std::optional<planner::Precision>(precision);
}

void AddPrecisionFlag(CLI::App* command, PrecisionFlag* flag) {
  command->add_option(
      "--precision", flag->name,
      "Precision to plan at: fp32, tf32, bf16 or fp16 (math and activation width; gradient "
      "all-reduces stay fp32). Default: the profile file's, else the device's (tf32 on a100, "
      "h100, h200; fp32 on v100, cpu). A profile file of another precision is refused");
}

StatusOr<planner::DeviceModel> AnalyticalDeviceAt(const std::string& device,
                                                  std::optional<planner::Precision> requested,
                                                  bool fallback,
                                                  std::optional<planner::Precision> recorded) {
  if (fallback && recorded) return planner::DevicePreset(device, *recorded);
  if (requested && (!fallback || planner::MayBeUnrecordedPrecision(*requested))) {
    return planner::DevicePreset(device, *requested);
  }
  return planner::DevicePreset(device);
}

std::string DescribePrecision(std::optional<planner::Precision> precision) {
  if (!precision) {
    return "precision: not recorded by the profile (measured as deepool's runtime trains: fp32 "
           "activations, fp32 or tf32 math)";
  }
  const int bytes = planner::BytesPerElement(*precision);
  return std::string("precision: ") + planner::PrecisionName(*precision) +
         " (activations and their gradients " + std::to_string(bytes) +
         " bytes per element; weights, gradient all-reduces and the optimizer fp32)";
}

}  // namespace deepool::cli

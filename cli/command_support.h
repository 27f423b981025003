// Helpers shared by the planner-side commands (plan, simulate): reading files, exit codes for
// errors, number formatting, plain-text tables, cluster loading and the search's flags.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "planner/cluster.h"
#include "planner/device_model.h"
#include "planner/gradient_sync.h"
#include "planner/precision.h"

namespace CLI {
class App;
}  // namespace CLI

namespace deepool::cli {

// The whole file, or INVALID_ARGUMENT naming the path.
StatusOr<std::string> ReadTextFile(const std::string& path);
// Writes `text` to `path`: a file is replaced whole (common/durable_file.h), a device or pipe
// (/dev/stdout) written as it is; INVALID_ARGUMENT naming the path when it cannot.
Status WriteTextFile(const std::string& path, const std::string& text);

// The deepool exit code for an error: NOT_FOUND → kExitNotFound; refused input
// (INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION) → kExitInvalidInput; else kExitFailure.
int ExitCodeFor(const Status& status);

// Prints "error: <message>" on stderr and returns `code`.
int Fail(const Status& status, int code);
inline int Fail(const Status& status) { return Fail(status, ExitCodeFor(status)); }

// `value` with `decimals` digits after the point.
std::string Fixed(double value, int decimals);

// Rows as columns two spaces apart: the first column left-aligned (names), the rest
// right-aligned (numbers); no trailing spaces.
void PrintTable(const std::vector<std::vector<std::string>>& rows, std::ostream& out);

// Rows as columns two spaces apart; columns marked in right_aligned are right-aligned (numbers),
// the others left-aligned; no trailing spaces.
void PrintTable(const std::vector<std::vector<std::string>>& rows,
                const std::vector<bool>& right_aligned, std::ostream& out);

// --cluster: a cluster JSON file when one exists at that path, otherwise a preset name; when
// empty, the preset matching the device (planner::DefaultClusterPresetFor).
StatusOr<planner::Cluster> LoadCluster(const std::string& cluster_flag, const std::string& device,
                                       int devices);

// A profile measured on one kind of device planned on a cluster of another mixes the two (the
// profile's compute times with the cluster's link speeds): a warning on `err` naming both and
// the way out, when `profile_device` (a profile file's "device") is not the cluster's
// device_type. Nothing for an empty profile_device (analytical timing).
void WarnOnProfileClusterMismatch(const std::string& profile_device,
                                  const planner::Cluster& cluster, std::ostream& err);

// How the cost model charges the runtime's gradient all-reduces (gradient_sync.h) and how close
// the search goes to the optimum: the same flags in `deepool plan` and `deepool simulate`.
struct SearchFlags {
  double bucket_mb = planner::kDefaultGradientBucketMb;
  bool no_overlap = false;
  bool ring_only = false;
  double pareto_tolerance = 1e-3;           // PlanOptions::pareto_tolerance; 0: exact frontiers
  bool concurrent_branches = false;         // PlanOptions::concurrent_branches
  std::string batch_norm = "synchronized";  // or "per_device": PlanOptions::sync_batch_norm
  std::string gradient_precision = "fp32";  // or "bf16", "fp16": GradientSyncOptions::precision

  planner::GradientSyncOptions GradientSync() const;
  bool SyncBatchNorm() const { return batch_norm == "synchronized"; }
  // One line for a report: how the gradient all-reduces are charged and whether branches may
  // run side by side, e.g. "gradient all-reduces in buckets of 25 MiB overlapped with backward,
  // ring or tree; branches one after another".
  std::string Describe() const;
};

// --precision: the precision to plan at, as deepool plan and deepool simulate take it.
struct PrecisionFlag {
  std::string name;  // empty: not given
  // The parsed flag; nullopt when not given. INVALID_ARGUMENT for an unknown name.
  StatusOr<std::optional<planner::Precision>> Parse() const;
};
// Adds --precision to the command.
void AddPrecisionFlag(CLI::App* command, PrecisionFlag* flag);

// The analytical device for `device` (a preset name) at `requested` (--precision) when given,
// else at the preset's default. As the fallback of a profile file (`fallback`), it times the
// layers the file lacks at the file's precision instead: `recorded` when the file records one;
// for a file that records none, `requested` when it may be the file's (fp32, tf32), else the
// default. So a --precision the file is not for is refused by the plan's check, naming the
// file, not by the fallback. INVALID_ARGUMENT where the preset lacks that precision, NOT_FOUND
// for an unknown preset.
StatusOr<planner::DeviceModel> AnalyticalDeviceAt(const std::string& device,
                                                  std::optional<planner::Precision> requested,
                                                  bool fallback,
                                                  std::optional<planner::Precision> recorded);

// One line for a report: "precision: bf16 (activations and their gradients 2 bytes per element;
// weights, gradient all-reduces and the optimizer fp32)"; for an unrecorded one (nullopt), what
// it stands for.
std::string DescribePrecision(std::optional<planner::Precision> precision);

// Adds --gradient-bucket-mb, --gradient-precision, --no-overlap, --ring-only,
// --pareto-tolerance, --concurrent-branches and --batch-norm.
void AddSearchFlags(CLI::App* command, SearchFlags* flags);

}  // namespace deepool::cli

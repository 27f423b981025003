#include "coordinator/admission.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "protocol/training_spec.h"
#include "protocol/version.h"

namespace deepool::coordinator {
namespace {

using FreeDevices = std::map<std::string, std::vector<DeviceKey>>;  // by device type

// `gpus` devices of `keys` (one type) on as few nodes as possible: the nodes with the most free
// devices first, and within a node the devices without a BG job first (fewer BG jobs make way).
ForegroundGrant Pack(const std::string& job_id, const std::string& type,
                     const std::vector<DeviceKey>& keys, int gpus, const DeviceLedger& ledger) {
  std::map<std::string, std::vector<DeviceKey>> by_node;
  for (const DeviceKey& key : keys) by_node[key.first].push_back(key);
  std::vector<std::vector<DeviceKey>> groups;
  for (auto& [node, node_keys] : by_node) {
    std::stable_sort(node_keys.begin(), node_keys.end(), [&](const auto& a, const auto& b) {
      return ledger.BackgroundOf(a).has_value() < ledger.BackgroundOf(b).has_value();
    });
    groups.push_back(std::move(node_keys));
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  ForegroundGrant grant;
  grant.job_id = job_id;
  grant.shape.device_type = type;
  grant.shape.devices = gpus;
  for (const auto& group : groups) {
    const int held = static_cast<int>(grant.devices.size());
    if (held == gpus) break;
    const int take = std::min<int>(static_cast<int>(group.size()), gpus - held);
    grant.shape.devices_per_node = std::max(grant.shape.devices_per_node, take);
    grant.devices.insert(grant.devices.end(), group.begin(), group.begin() + take);
  }
  grant.shape.nodes = (gpus + grant.shape.devices_per_node - 1) / grant.shape.devices_per_node;
  return grant;
}

// The feature of `spec` that needs executor protocol `version` (jobspec::RequiredProtocolVersion):
// "adamw", "image_folder data", "epochs", "evaluation" or "image_folder eval data".
std::string ProtocolFeature(const jobspec::JobSpec& spec, int version) {
  if (protocol::OptimizerProtocolVersion(spec.optimizer.name) == version) {
    return spec.optimizer.name;
  }
  if (protocol::OptimizerProtocolVersion(jobspec::RunSpecOptimizer(spec.optimizer)) == version) {
    return "training recipes";
  }
  if (protocol::DataProtocolVersion(spec.data.kind) == version) return spec.data.kind + " data";
  if (spec.epochs > 0 && protocol::kEpochsProtocolVersion == version) return "epochs";
  if (!spec.init_path.empty() && protocol::kInitProtocolVersion == version) return "init";
  if (spec.precision && protocol::kPrecisionProtocolVersion == version) {
    return planner::PrecisionName(*spec.precision);
  }
  if (spec.eval && protocol::kEvaluationProtocolVersion == version) return "evaluation";
  if (spec.eval && protocol::DataProtocolVersion(spec.eval->data.kind) == version) {
    return spec.eval->data.kind + " eval data";
  }
  return spec.data.kind + " data";
}

// "needs workers that speak executor protocol 2 (adamw); 3 of 4 nodes speak only 1: upgrade
// them": why no schedulable node reads the version a job's run spec is written at.
std::string ProtocolReason(const JobRecord& job, int version,
                           const std::vector<NodeRecord>& nodes) {
  int schedulable = 0;
  int older = 0;  // speak only versions before it: the workers need upgrading
  int newer = 0;  // read only versions after it: the coordinator does
  std::set<int> older_newest;
  for (const NodeRecord& node : nodes) {
    if (!node.schedulable()) continue;
    ++schedulable;
    if (node.protocol.newest < version) {
      ++older;
      older_newest.insert(node.protocol.newest);
    } else if (node.protocol.oldest > version) {
      ++newer;
    }
  }
  std::string reason = "needs workers that speak executor protocol " + std::to_string(version) +
                       " (" + ProtocolFeature(job.spec, version) + ")";
  const std::string of = " of " + std::to_string(schedulable) + " nodes ";
  if (older > 0) {
    reason += "; " + std::to_string(older) + of + "speak only " +
              (older_newest.size() == 1 ? "" : "up to ") + std::to_string(*older_newest.rbegin()) +
              ": upgrade them";
  }
  if (newer > 0) {
    reason += "; " + std::to_string(newer) + of + "no longer read it: upgrade the coordinator";
  }
  return reason;
}

class Round {
 public:
  // The round changes its own ledger: the input's, moved in (a pool's ledger is thousands of
  // devices, copied once by the caller already).
  explicit Round(AdmissionInput input) : in_(std::move(input)), ledger_(std::move(in_.ledger)) {
    for (const NodeRecord& node : in_.nodes) {
      if (!node.schedulable()) continue;
      protocol_[node.id] = node.protocol;
      for (const DeviceInfo& device : node.devices) {
        DeviceKey key{node.id, device.device};
        if (!ledger_.ForegroundOf(key)) free_[device.type].push_back(key);
      }
    }
  }

  Admission Run() {
    // Highest priority first, then submission order (the order `pending` comes in); the jobs
    // are looked at through pointers, as a round with 10,000 waiting copies none of them.
    std::vector<const JobRecord*> order;
    order.reserve(in_.pending.size());
    for (const JobSnapshot& job : in_.pending) order.push_back(job.get());
    std::stable_sort(order.begin(), order.end(), [](const JobRecord* a, const JobRecord* b) {
      return a->spec.priority > b->spec.priority;
    });
    // FG jobs first: BG jobs never hold FG jobs back, and a BG job placed after them sees the
    // devices they just took as held.
    std::string blocker;
    for (const JobRecord* job : order) {
      if (job->spec.role == JobRole::kBg) continue;
      if (!blocker.empty()) {
        Wait(*job, ReasonCode::kQueuedBehind, "queued behind " + blocker);
      } else if (!AdmitForeground(*job) && CouldEverFit(*job)) {
        blocker = job->id;
      }
    }
    for (const JobRecord* job : order) {
      if (job->spec.role == JobRole::kBg) AdmitBackground(*job);
    }
    return std::move(out_);
  }

 private:
  // Whether the device's node reads run specs of `version` (NodeRecord::protocol).
  bool Reads(const DeviceKey& key, int version) const {
    auto found = protocol_.find(key.first);
    return found != protocol_.end() && found->second.Contains(version);
  }

  // The devices of `keys` on nodes that read `version`: all of them in a pool of one release,
  // the common case, which costs no copy.
  const std::vector<DeviceKey>& Readable(const std::vector<DeviceKey>& keys, int version,
                                         std::vector<DeviceKey>* filtered) const {
    auto all_read = all_read_.find(version);
    if (all_read == all_read_.end()) {
      const bool all = std::all_of(protocol_.begin(), protocol_.end(), [version](const auto& node) {
        return node.second.Contains(version);
      });
      all_read = all_read_.emplace(version, all).first;
    }
    if (all_read->second) return keys;
    for (const DeviceKey& key : keys) {
      if (Reads(key, version)) filtered->push_back(key);
    }
    return *filtered;
  }

  // The most schedulable devices of one type, counting only nodes that read `version` or, with
  // any_version, every node. Computed once a round per version.
  int LargestGroup(int version, bool any_version = false) const {
    const int key = any_version ? kAnyVersion : version;
    auto cached = largest_group_.find(key);
    if (cached != largest_group_.end()) return cached->second;
    std::map<std::string, int> capacity;
    for (const NodeRecord& node : in_.nodes) {
      if (!node.schedulable() || (!any_version && !node.protocol.Contains(version))) continue;
      for (const DeviceInfo& device : node.devices) ++capacity[device.type];
    }
    int largest = 0;
    for (const auto& [type, count] : capacity) largest = std::max(largest, count);
    largest_group_[key] = largest;
    return largest;
  }

  // The devices the job's next attempt is planned for: its `gpus`, or, for a job that re-plans
  // on node loss and ran before, as many as the largest group of schedulable devices it can run
  // on has when that is fewer (the global batch stays).
  int DevicesWanted(const JobRecord& job) const {
    if (!ReplansOnNodeLoss(job.spec) || job.attempt < 1) return job.spec.gpus;
    const int largest = LargestGroup(jobspec::RequiredProtocolVersion(job.spec));
    return largest >= 1 ? std::min(job.spec.gpus, largest) : job.spec.gpus;
  }

  bool AdmitForeground(const JobRecord& job) {
    const int wanted = DevicesWanted(job);
    const int version = jobspec::RequiredProtocolVersion(job.spec);
    for (auto& [type, all_keys] : free_) {
      if (static_cast<int>(all_keys.size()) < wanted) continue;
      std::vector<DeviceKey> filtered;
      const std::vector<DeviceKey>& keys = Readable(all_keys, version, &filtered);
      if (static_cast<int>(keys.size()) < wanted) continue;
      ForegroundGrant grant = Pack(job.id, type, keys, wanted, ledger_);
      for (const DeviceKey& key : grant.devices) {
        all_keys.erase(std::find(all_keys.begin(), all_keys.end(), key));
        ledger_.HoldForeground(key, job.id);
        if (std::optional<std::string> bg = ledger_.BackgroundOf(key)) {
          out_.displaced.push_back({*bg, job.id, key});
          ledger_.Release(*bg);
        }
      }
      out_.foreground.push_back(std::move(grant));
      return true;
    }
    return false;
  }

  // Sets the reason of a FG job that did not fit; true when it would fit an idle cluster.
  bool CouldEverFit(const JobRecord& job) {
    const int version = jobspec::RequiredProtocolVersion(job.spec);
    const int largest = LargestGroup(version, /*any_version=*/true);
    if (largest < DevicesWanted(job)) {
      Wait(job, ReasonCode::kNotEnoughDevices,
           "needs " + std::to_string(job.spec.gpus) +
               " devices of one type; the largest group of schedulable devices has " +
               std::to_string(largest));
      return false;
    }
    // Enough devices, but too few on nodes that read the job's run spec: not the job's turn to
    // block others, as no device freed will change that.
    if (LargestGroup(version) < DevicesWanted(job)) {
      Wait(job, ReasonCode::kWorkerProtocol, ProtocolReason(job, version, in_.nodes));
      return false;
    }
    int most_free = 0;
    for (const auto& [type, keys] : free_) {
      std::vector<DeviceKey> filtered;
      most_free = std::max(most_free, static_cast<int>(Readable(keys, version, &filtered).size()));
    }
    const int wanted = DevicesWanted(job);
    Wait(job, ReasonCode::kWaitingForDevices,
         "waiting for " + std::to_string(wanted) + " free devices of one type (" +
             std::to_string(most_free) + " free" +
             (wanted < job.spec.gpus
                  ? "; re-planned from " + std::to_string(job.spec.gpus) + " after a node loss"
                  : "") +
             ")");
    return true;
  }

  void AdmitBackground(const JobRecord& job) {
    const int version = jobspec::RequiredProtocolVersion(job.spec);
    std::optional<DeviceKey> best;
    double best_idle = -1;
    bool best_ready = false;
    bool any_readable = false;
    for (const NodeRecord& node : in_.nodes) {
      if (!node.schedulable() || !node.protocol.Contains(version)) continue;
      any_readable = true;
      for (const DeviceInfo& device : node.devices) {
        DeviceKey key{node.id, device.device};
        if (ledger_.BackgroundOf(key)) continue;
        const double idle = ledger_.IdleFraction(key);
        const bool ready = !ledger_.ForegroundOf(key) || in_.running_fg_ranks.count(key) > 0;
        if (idle > best_idle || (idle == best_idle && ready && !best_ready)) {
          best_idle = idle;
          best = key;
          best_ready = ready;
        }
      }
    }
    if (!best && !any_readable && LargestGroup(version, /*any_version=*/true) > 0) {
      Wait(job, ReasonCode::kWorkerProtocol, ProtocolReason(job, version, in_.nodes));
      return;
    }
    if (!best) {
      Wait(job, ReasonCode::kWaitingForBgSlot, "waiting for a device without a bg job");
      return;
    }
    if (!best_ready) {
      // As its own process it would compete with the FG rank for the device; inside the FG
      // executor the gate gives the FG rank priority. So it waits for that executor.
      Wait(job, ReasonCode::kWaitingForFgRank,
           "waiting for FG job " + *ledger_.ForegroundOf(*best) + "'s rank on " + best->first +
               "/" + best->second + " to start (to run inside it) or to end (predicted idle " +
               IdlePercent(best_idle) + ")");
      return;
    }
    ledger_.HoldBackground(*best, job.id);
    out_.background.push_back({job.id, *best, best_idle});
  }

  void Wait(const JobRecord& job, ReasonCode code, std::string message) {
    out_.pending.push_back({job.id, code, std::move(message)});
  }

  static constexpr int kAnyVersion = -1;

  const AdmissionInput in_;  // its ledger moved to ledger_
  DeviceLedger ledger_;      // the input's, with this round's grants
  FreeDevices free_;
  std::map<std::string, protocol::ProtocolRange> protocol_;  // of schedulable nodes, by id
  mutable std::map<int, int> largest_group_;                 // LargestGroup by version
  mutable std::map<int, bool> all_read_;  // by version: whether every schedulable node reads it
  Admission out_;
};

}  // namespace

std::string IdlePercent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f%%", fraction * 100);
  return text;
}

Admission Admit(AdmissionInput input) { return Round(std::move(input)).Run(); }

std::map<std::string, int> QueuePositions(std::vector<QueuedJob> pending) {
  // Admit's order.
  std::stable_sort(pending.begin(), pending.end(),
                   [](const QueuedJob& a, const QueuedJob& b) { return a.priority > b.priority; });
  std::map<std::string, int> positions;
  int fg = 0;
  int bg = 0;
  for (const QueuedJob& job : pending) positions[job.id] = job.role == JobRole::kBg ? ++bg : ++fg;
  return positions;
}

}  // namespace deepool::coordinator

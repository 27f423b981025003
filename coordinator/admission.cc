#include "coordinator/admission.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

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

class Round {
 public:
  explicit Round(AdmissionInput input) : in_(std::move(input)) {
    for (const NodeRecord& node : in_.nodes) {
      if (!node.schedulable()) continue;
      for (const DeviceInfo& device : node.devices) {
        ++capacity_[device.type];
        DeviceKey key{node.id, device.device};
        if (!in_.ledger.ForegroundOf(key)) free_[device.type].push_back(key);
      }
    }
  }

  Admission Run() {
    SortForAdmission(&in_.pending);
    // FG jobs first: BG jobs never hold FG jobs back, and a BG job placed after them sees the
    // devices they just took as held.
    std::string blocker;
    for (const JobRecord& job : in_.pending) {
      if (job.spec.role == JobRole::kBg) continue;
      if (!blocker.empty()) {
        Wait(job, ReasonCode::kQueuedBehind, "queued behind " + blocker);
      } else if (!AdmitForeground(job) && CouldEverFit(job)) {
        blocker = job.id;
      }
    }
    for (const JobRecord& job : in_.pending) {
      if (job.spec.role == JobRole::kBg) AdmitBackground(job);
    }
    return std::move(out_);
  }

 private:
  // The devices the job's next attempt is planned for: its `gpus`, or, for a job that re-plans
  // on node loss and ran before, as many as the largest group of schedulable devices has when
  // that is fewer (the global batch stays).
  int DevicesWanted(const JobRecord& job) const {
    if (!ReplansOnNodeLoss(job.spec) || job.attempt < 1) return job.spec.gpus;
    int largest = 0;
    for (const auto& [type, count] : capacity_) largest = std::max(largest, count);
    return largest >= 1 ? std::min(job.spec.gpus, largest) : job.spec.gpus;
  }

  bool AdmitForeground(const JobRecord& job) {
    const int wanted = DevicesWanted(job);
    for (auto& [type, keys] : free_) {
      if (static_cast<int>(keys.size()) < wanted) continue;
      ForegroundGrant grant = Pack(job.id, type, keys, wanted, in_.ledger);
      for (const DeviceKey& key : grant.devices) {
        keys.erase(std::find(keys.begin(), keys.end(), key));
        in_.ledger.HoldForeground(key, job.id);
        if (std::optional<std::string> bg = in_.ledger.BackgroundOf(key)) {
          out_.displaced.push_back({*bg, job.id, key});
          in_.ledger.Release(*bg);
        }
      }
      out_.foreground.push_back(std::move(grant));
      return true;
    }
    return false;
  }

  // Sets the reason of a FG job that did not fit; true when it would fit an idle cluster.
  bool CouldEverFit(const JobRecord& job) {
    int largest = 0;
    for (const auto& [type, count] : capacity_) largest = std::max(largest, count);
    if (largest < DevicesWanted(job)) {
      Wait(job, ReasonCode::kNotEnoughDevices,
           "needs " + std::to_string(job.spec.gpus) +
               " devices of one type; the largest group of schedulable devices has " +
               std::to_string(largest));
      return false;
    }
    int most_free = 0;
    for (const auto& [type, keys] : free_) {
      most_free = std::max(most_free, static_cast<int>(keys.size()));
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
    std::optional<DeviceKey> best;
    double best_idle = -1;
    bool best_ready = false;
    for (const NodeRecord& node : in_.nodes) {
      if (!node.schedulable()) continue;
      for (const DeviceInfo& device : node.devices) {
        DeviceKey key{node.id, device.device};
        if (in_.ledger.BackgroundOf(key)) continue;
        const double idle = in_.ledger.IdleFraction(key);
        const bool ready = !in_.ledger.ForegroundOf(key) || in_.running_fg_ranks.count(key) > 0;
        if (idle > best_idle || (idle == best_idle && ready && !best_ready)) {
          best_idle = idle;
          best = key;
          best_ready = ready;
        }
      }
    }
    if (!best) {
      Wait(job, ReasonCode::kWaitingForBgSlot, "waiting for a device without a bg job");
      return;
    }
    if (!best_ready) {
      // As its own process it would compete with the FG rank for the device; inside the FG
      // executor the gate gives the FG rank priority. So it waits for that executor.
      Wait(job, ReasonCode::kWaitingForFgRank,
           "waiting for FG job " + *in_.ledger.ForegroundOf(*best) + "'s rank on " +
               best->first + "/" + best->second +
               " to start (to run inside it) or to end (predicted idle " + IdlePercent(best_idle) +
               ")");
      return;
    }
    in_.ledger.HoldBackground(*best, job.id);
    out_.background.push_back({job.id, *best, best_idle});
  }

  void Wait(const JobRecord& job, ReasonCode code, std::string message) {
    out_.pending.push_back({job.id, code, std::move(message)});
  }

  AdmissionInput in_;
  FreeDevices free_;
  std::map<std::string, int> capacity_;
  Admission out_;
};

}  // namespace

std::string IdlePercent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f%%", fraction * 100);
  return text;
}

Admission Admit(AdmissionInput input) { return Round(std::move(input)).Run(); }

void SortForAdmission(std::vector<JobRecord>* pending) {
  std::stable_sort(pending->begin(), pending->end(), [](const JobRecord& a, const JobRecord& b) {
    return a.spec.priority > b.spec.priority;  // stable: submission order
  });
}

std::map<std::string, int> QueuePositions(std::vector<QueuedJob> pending) {
  // SortForAdmission's order.
  std::stable_sort(pending.begin(), pending.end(),
                   [](const QueuedJob& a, const QueuedJob& b) { return a.priority > b.priority; });
  std::map<std::string, int> positions;
  int fg = 0;
  int bg = 0;
  for (const QueuedJob& job : pending) positions[job.id] = job.role == JobRole::kBg ? ++bg : ++fg;
  return positions;
}

}  // namespace deepool::coordinator

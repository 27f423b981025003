#include "coordinator/policy/pool_state.h"

#include <algorithm>
#include <cstdio>

namespace deepool::coordinator::policy {

PoolState::PoolState(const PolicySnapshot& snapshot) : snapshot_(snapshot) {
  for (size_t i = 0; i < snapshot.devices.size(); ++i) {
    const PolicyDevice& device = snapshot.devices[i];
    device_[device.key] = &device;
    index_[device.key] = static_cast<int>(i);
    ++devices_of_type_[device.type];
  }
  for (const auto& [type, count] : devices_of_type_) types_.push_back(type);
  for (const PolicyJob& job : snapshot.jobs) {
    for (const DeviceKey& key : job.devices) {
      (job.role == Role::kFg ? fg_ : bg_)[key] = job.id;
    }
  }
  for (size_t i = 0; i < snapshot.devices.size(); ++i) {
    const PolicyDevice& device = snapshot.devices[i];
    if (!fg_.count(device.key)) free_[device.type].insert(static_cast<int>(i));
  }
}

std::vector<DeviceKey> PoolState::FreeOf(const std::string& type, int version) const {
  std::vector<DeviceKey> keys;
  auto found = free_.find(type);
  if (found == free_.end()) return keys;
  for (int i : found->second) {
    const PolicyDevice& device = snapshot_.devices[static_cast<size_t>(i)];
    if (device.Reads(version)) keys.push_back(device.key);
  }
  return keys;
}

int PoolState::FreeCount(const std::string& type, int version) const {
  auto found = free_.find(type);
  if (found == free_.end()) return 0;
  if (version <= 0) return static_cast<int>(found->second.size());
  int count = 0;
  for (int i : found->second) count += snapshot_.devices[static_cast<size_t>(i)].Reads(version);
  return count;
}

int PoolState::LargestGroup(int version) const {
  auto cached = largest_group_.find(version);
  if (cached != largest_group_.end()) return cached->second;
  std::map<std::string, int> capacity;
  for (const PolicyDevice& device : snapshot_.devices) {
    if (device.Reads(version)) ++capacity[device.type];
  }
  int largest = 0;
  for (const auto& [type, count] : capacity) largest = std::max(largest, count);
  largest_group_[version] = largest;
  return largest;
}

int PoolState::DevicesOfType(const std::string& type) const {
  auto found = devices_of_type_.find(type);
  return found == devices_of_type_.end() ? 0 : found->second;
}

std::vector<DeviceKey> PoolState::Pack(const std::vector<DeviceKey>& free, int count) const {
  std::map<std::string, std::vector<DeviceKey>> by_node;
  for (const DeviceKey& key : free) by_node[key.first].push_back(key);
  std::vector<std::vector<DeviceKey>> groups;
  for (auto& [node, node_keys] : by_node) {
    std::stable_sort(node_keys.begin(), node_keys.end(),
                     [&](const auto& a, const auto& b) { return bg_.count(a) < bg_.count(b); });
    groups.push_back(std::move(node_keys));
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  std::vector<DeviceKey> taken;
  for (const auto& group : groups) {
    const int held = static_cast<int>(taken.size());
    if (held == count) break;
    const int take = std::min<int>(static_cast<int>(group.size()), count - held);
    taken.insert(taken.end(), group.begin(), group.begin() + take);
  }
  return taken;
}

void PoolState::HoldForeground(const std::string& job_id, const std::vector<DeviceKey>& devices,
                               std::vector<Preemption>* preempted) {
  for (const DeviceKey& key : devices) {
    const PolicyDevice& device = *device_.at(key);
    free_[device.type].erase(index_.at(key));
    fg_[key] = job_id;
    taken_this_round_.insert(key);
    auto bg = bg_.find(key);
    if (bg != bg_.end()) {
      const std::string bg_job = bg->second;
      preempted->push_back(
          {bg_job, job_id, "FG job " + job_id + " takes " + key.first + "/" + key.second});
      Release(bg_job);
    }
  }
}

void PoolState::Release(const std::string& job_id) {
  for (auto it = fg_.begin(); it != fg_.end();) {
    if (it->second == job_id) {
      free_[device_.at(it->first)->type].insert(index_.at(it->first));
      taken_this_round_.erase(it->first);
      it = fg_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = bg_.begin(); it != bg_.end();) {
    it = it->second == job_id ? bg_.erase(it) : std::next(it);
  }
}

PoolState::BackgroundChoice PoolState::PlaceBackground(const PolicyJob& job) {
  const PolicyDevice* best = nullptr;
  double best_idle = -1;
  bool best_ready = false;
  bool any_readable = false;
  for (const PolicyDevice& device : snapshot_.devices) {
    if (!device.Reads(job.protocol_version)) continue;
    if (!job.required_device_type.empty() && device.type != job.required_device_type) continue;
    any_readable = true;
    if (bg_.count(device.key)) continue;
    const bool held = fg_.count(device.key) > 0;
    const bool new_holder = taken_this_round_.count(device.key) > 0;
    const double idle = !held ? 1.0 : new_holder ? 0.0 : device.idle_fraction;
    const bool ready = !held || (device.fg_rank_running && !new_holder);
    if (idle > best_idle || (idle == best_idle && ready && !best_ready)) {
      best_idle = idle;
      best = &device;
      best_ready = ready;
    }
  }
  BackgroundChoice choice;
  if (!best && !any_readable && LargestGroup(0) > 0) {
    choice.wait =
        Wait{job.id, WaitCode::kWorkerProtocol,
             "needs workers that speak executor protocol " + std::to_string(job.protocol_version)};
  } else if (!best) {
    choice.wait =
        Wait{job.id, WaitCode::kWaitingForBgSlot, "waiting for a device without a bg job"};
  } else if (!best_ready) {
    // As its own process it would compete with the FG rank for the device; inside the FG
    // executor the gate gives the FG rank priority. So it waits for that executor.
    choice.wait =
        Wait{job.id, WaitCode::kWaitingForFgRank,
             "waiting for FG job " + fg_.at(best->key) + "'s rank on " + best->key.first + "/" +
                 best->key.second + " to start (to run inside it) or to end (predicted idle " +
                 Percent(best_idle) + ")"};
  } else {
    bg_[best->key] = job.id;
    choice.grant = Grant{job.id, best->type, {best->key}, best_idle};
  }
  return choice;
}

std::optional<std::string> PoolState::ForegroundOf(const DeviceKey& key) const {
  auto found = fg_.find(key);
  if (found == fg_.end()) return std::nullopt;
  return found->second;
}

std::optional<std::string> PoolState::BackgroundOf(const DeviceKey& key) const {
  auto found = bg_.find(key);
  if (found == bg_.end()) return std::nullopt;
  return found->second;
}

int PoolState::HeldBy(const std::string& job_id) const {
  int count = 0;
  for (const auto& [key, holder] : fg_) count += holder == job_id;
  return count;
}

bool RunsOn(const PolicyJob& job, const std::string& type) {
  return job.required_device_type.empty() || job.required_device_type == type;
}

double IterationSeconds(const PolicyJob& job, const std::string& type, int g) {
  if (g < 1) return 0;
  auto curve = job.curves.find(type);
  if (curve == job.curves.end()) return 1.0 / g;
  return curve->second.IterationS(g);
}

double Throughput(const PolicyJob& job, const std::string& type, int g) {
  const double seconds = IterationSeconds(job, type, g);
  return seconds > 0 ? static_cast<double>(job.global_batch) / seconds : 0;
}

double BestThroughput(const PolicyJob& job, const std::vector<std::string>& types) {
  double best = 0;
  for (const std::string& type : types) {
    if (RunsOn(job, type)) best = std::max(best, Throughput(job, type, job.requested_devices));
  }
  return best > 0 ? best : 1;
}

std::vector<UserShare> SharesOf(const PolicySnapshot& snapshot,
                                const std::map<std::string, std::pair<std::string, int>>& held,
                                const std::vector<std::string>& types) {
  std::map<std::string, UserShare> by_user;
  for (const PolicyJob& job : snapshot.jobs) {
    if (job.role != Role::kFg) continue;
    UserShare& share = by_user[job.user];
    share.user = job.user;
    auto found = held.find(job.id);
    if (found == held.end() || found->second.second == 0) continue;
    share.devices += found->second.second;
    share.share +=
        Throughput(job, found->second.first, found->second.second) / BestThroughput(job, types);
  }
  std::vector<UserShare> shares;
  for (auto& [user, share] : by_user) shares.push_back(std::move(share));
  return shares;
}

std::vector<const PolicyJob*> AdmissionOrder(const PolicySnapshot& snapshot) {
  std::vector<const PolicyJob*> order;
  order.reserve(snapshot.jobs.size());
  for (const PolicyJob& job : snapshot.jobs) order.push_back(&job);
  std::stable_sort(order.begin(), order.end(), [](const PolicyJob* a, const PolicyJob* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->seq < b->seq;
  });
  return order;
}

std::string Percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f%%", fraction * 100);
  return text;
}

}  // namespace deepool::coordinator::policy

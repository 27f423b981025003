#include "coordinator/device_ledger.h"

#include <algorithm>

namespace deepool::coordinator {

void DeviceLedger::HoldForeground(const DeviceKey& key, const std::string& job_id) {
  fg_[key] = job_id;
  idle_.erase(key);
}

void DeviceLedger::HoldBackground(const DeviceKey& key, const std::string& job_id) {
  bg_[key] = job_id;
}

void DeviceLedger::SetIdleFraction(const DeviceKey& key, double idle) {
  if (fg_.count(key) != 0) idle_[key] = std::clamp(idle, 0.0, 1.0);
}

void DeviceLedger::ReleaseForeground(const DeviceKey& key) {
  fg_.erase(key);
  idle_.erase(key);
}

std::vector<DeviceKey> DeviceLedger::DevicesOf(const std::string& job_id) const {
  std::vector<DeviceKey> keys;
  for (const auto& [key, holder] : fg_) {
    if (holder == job_id) keys.push_back(key);
  }
  for (const auto& [key, holder] : bg_) {
    if (holder == job_id) keys.push_back(key);
  }
  return keys;
}

void DeviceLedger::Release(const std::string& job_id) {
  for (auto it = fg_.begin(); it != fg_.end();) {
    if (it->second == job_id) {
      idle_.erase(it->first);
      it = fg_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = bg_.begin(); it != bg_.end();) {
    it = it->second == job_id ? bg_.erase(it) : std::next(it);
  }
}

std::optional<std::string> DeviceLedger::ForegroundOf(const DeviceKey& key) const {
  auto it = fg_.find(key);
  if (it == fg_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> DeviceLedger::BackgroundOf(const DeviceKey& key) const {
  auto it = bg_.find(key);
  if (it == bg_.end()) return std::nullopt;
  return it->second;
}

double DeviceLedger::IdleFraction(const DeviceKey& key) const {
  if (fg_.count(key) == 0) return 1.0;
  auto it = idle_.find(key);
  return it == idle_.end() ? 0.0 : it->second;
}

bool DeviceLedger::IdleKnown(const DeviceKey& key) const {
  return fg_.count(key) == 0 || idle_.count(key) != 0;
}

std::set<std::string> DeviceLedger::JobsOnNode(const std::string& node_id) const {
  std::set<std::string> jobs;
  for (const auto* holders : {&fg_, &bg_}) {
    for (const auto& [key, job] : *holders) {
      if (key.first == node_id) jobs.insert(job);
    }
  }
  return jobs;
}

std::map<DeviceKey, DeviceUse> DeviceLedger::Uses() const {
  std::map<DeviceKey, DeviceUse> out;
  for (const auto& [key, job] : fg_) {
    out[key].fg_job = job;
    out[key].idle_fraction = IdleFraction(key);
  }
  for (const auto& [key, job] : bg_) out[key].bg_job = job;
  return out;
}

}  // namespace deepool::coordinator

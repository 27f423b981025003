#include "coordinator/policy/pool_state.h"

#include <algorithm>
#include <cstdio>

namespace deepool::coordinator::policy {

namespace {

// The snapshot's index when it brings one that fits, else one made into *own.
const DeviceIndex* IndexFor(const PolicySnapshot& snapshot,
                            std::shared_ptr<const DeviceIndex>* own) {
  const DeviceIndex* given = snapshot.device_index.get();
  if (given && given->size() == static_cast<int>(snapshot.devices.size())) return given;
  *own = std::make_shared<const DeviceIndex>(snapshot.devices);
  return own->get();
}

}  // namespace

PoolState::PoolState(const PolicySnapshot& snapshot)
    : snapshot_(snapshot),
      index_(IndexFor(snapshot, &own_index_)),
      rates_(snapshot, index_->Types()) {
  const size_t count = snapshot.devices.size();
  fg_.assign(count, -1);
  bg_.assign(count, -1);
  taken_this_round_.assign(count, 0);
  for (size_t j = 0; j < snapshot.jobs.size(); ++j) {
    const PolicyJob& job = snapshot.jobs[j];
    for (const DeviceKey& key : job.devices) {
      const int device = index_->Find(key);
      if (device < 0) continue;
      (job.role == Role::kFg ? fg_ : bg_)[static_cast<size_t>(device)] = static_cast<int>(j);
    }
  }
  free_of_type_.assign(index_->Types().size(), 0);
  for (size_t i = 0; i < count; ++i) {
    if (fg_[i] < 0) ++free_of_type_[static_cast<size_t>(index_->TypeOf(static_cast<int>(i)))];
  }
}

const std::vector<std::string>& PoolState::Types() const { return index_->Types(); }

int PoolState::JobOf(const PolicyJob& job) const {
  return static_cast<int>(&job - snapshot_.jobs.data());
}

int PoolState::TypeId(const std::string& type) const { return index_->TypeId(type); }

std::vector<int> PoolState::FreeOf(int type, int version) const {
  std::vector<int> devices;
  if (type < 0) return devices;
  for (int i : index_->OfType(type)) {
    const size_t at = static_cast<size_t>(i);
    if (fg_[at] < 0 && snapshot_.devices[at].Reads(version)) devices.push_back(i);
  }
  return devices;
}

int PoolState::FreeCount(int type, int version) const {
  if (type < 0) return 0;
  if (version <= 0) return free_of_type_[static_cast<size_t>(type)];
  int count = 0;
  for (int i : index_->OfType(type)) {
    const size_t at = static_cast<size_t>(i);
    count += fg_[at] < 0 && snapshot_.devices[at].Reads(version);
  }
  return count;
}

int PoolState::LargestGroup(int version) const {
  auto cached = largest_group_.find(version);
  if (cached != largest_group_.end()) return cached->second;
  int largest = 0;
  for (size_t type = 0; type < index_->Types().size(); ++type) {
    int capacity = 0;
    for (int i : index_->OfType(static_cast<int>(type))) {
      capacity += snapshot_.devices[static_cast<size_t>(i)].Reads(version);
    }
    largest = std::max(largest, capacity);
  }
  largest_group_[version] = largest;
  return largest;
}

int PoolState::DevicesOfType(int type) const {
  return type < 0 ? 0 : static_cast<int>(index_->OfType(type).size());
}

std::vector<DeviceKey> PoolState::Keys(const std::vector<int>& devices) const {
  std::vector<DeviceKey> keys;
  keys.reserve(devices.size());
  for (int i : devices) keys.push_back(snapshot_.devices[static_cast<size_t>(i)].key);
  return keys;
}

std::vector<int> PoolState::Pack(const std::vector<int>& free, int count) const {
  // Group by node (node id order), each group keeping `free`'s order.
  std::vector<int> sorted = free;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](int a, int b) { return index_->NodeRankOf(a) < index_->NodeRankOf(b); });
  struct Group {
    size_t begin, end;
  };
  std::vector<Group> groups;
  for (size_t begin = 0; begin < sorted.size();) {
    size_t end = begin + 1;
    const int node = index_->NodeRankOf(sorted[begin]);
    while (end < sorted.size() && index_->NodeRankOf(sorted[end]) == node) ++end;
    std::stable_partition(sorted.begin() + static_cast<std::ptrdiff_t>(begin),
                          sorted.begin() + static_cast<std::ptrdiff_t>(end),
                          [&](int device) { return bg_[static_cast<size_t>(device)] < 0; });
    groups.push_back({begin, end});
    begin = end;
  }
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    return a.end - a.begin > b.end - b.begin;
  });
  std::vector<int> taken;
  for (const Group& group : groups) {
    const int held = static_cast<int>(taken.size());
    if (held == count) break;
    const int take = std::min<int>(static_cast<int>(group.end - group.begin), count - held);
    taken.insert(taken.end(), sorted.begin() + static_cast<std::ptrdiff_t>(group.begin),
                 sorted.begin() + static_cast<std::ptrdiff_t>(group.begin) + take);
  }
  return taken;
}

void PoolState::HoldForeground(const PolicyJob& job, const std::vector<int>& devices,
                               std::vector<Preemption>* preempted) {
  Changed();
  const int holder = JobOf(job);
  for (int device : devices) {
    const size_t at = static_cast<size_t>(device);
    if (fg_[at] < 0) --free_of_type_[static_cast<size_t>(index_->TypeOf(device))];
    fg_[at] = holder;
    taken_this_round_[at] = 1;
    if (bg_[at] >= 0) {
      const PolicyJob& bg_job = snapshot_.jobs[static_cast<size_t>(bg_[at])];
      const DeviceKey& key = snapshot_.devices[at].key;
      preempted->push_back(
          {bg_job.id, job.id, "FG job " + job.id + " takes " + key.first + "/" + key.second});
      Release(bg_job);
    }
  }
}

void PoolState::Release(const PolicyJob& job) {
  Changed();
  const int holder = JobOf(job);
  for (size_t at = 0; at < fg_.size(); ++at) {
    if (fg_[at] == holder) {
      ++free_of_type_[static_cast<size_t>(index_->TypeOf(static_cast<int>(at)))];
      taken_this_round_[at] = 0;
      fg_[at] = -1;
    }
    if (bg_[at] == holder) bg_[at] = -1;
  }
}

PoolState::BackgroundChoice PoolState::PlaceBackground(const PolicyJob& job, double min_idle) {
  BackgroundChoice choice;
  const std::pair<int, std::string> needs{job.protocol_version, job.required_device_type};
  if (const auto known = waits_.find(needs); known != waits_.end()) {
    choice.wait = known->second;
    choice.wait->job_id = job.id;
    return choice;
  }
  const int required_type =
      job.required_device_type.empty() ? -1 : index_->TypeId(job.required_device_type);
  int best = -1;
  double best_idle = -1;
  bool best_ready = false;
  double best_speed = 0;
  bool any_readable = false;
  bool any_too_busy = false;  // a device without a BG job whose FG rank leaves too little idle
  std::vector<double> speed_of_type;  // by type id: one look-up per type, not per device
  speed_of_type.reserve(index_->Types().size());
  for (size_t type = 0; type < index_->Types().size(); ++type) {
    speed_of_type.push_back(rates_.Throughput(job, static_cast<int>(type), 1));
  }
  for (size_t at = 0; at < fg_.size(); ++at) {
    const PolicyDevice& device = snapshot_.devices[at];
    if (!device.Reads(job.protocol_version)) continue;
    if (!job.required_device_type.empty() && index_->TypeOf(static_cast<int>(at)) != required_type)
      continue;
    any_readable = true;
    if (bg_[at] >= 0) continue;
    const bool held = fg_[at] >= 0;
    const bool new_holder = taken_this_round_[at] != 0;
    const double idle = !held ? 1.0 : new_holder ? 0.0 : device.idle_fraction;
    const bool ready = !held || (device.fg_rank_running && !new_holder);
    if (held && !new_holder && device.idle_known && idle < min_idle) {
      any_too_busy = true;
      continue;
    }
    // Of equally idle devices, one usable now, then the type the job trains fastest on (as the
    // FG jobs' choices are heterogeneity-aware); without curves every type is alike.
    const double speed = speed_of_type[static_cast<size_t>(index_->TypeOf(static_cast<int>(at)))];
    if (idle > best_idle || (idle == best_idle && ready && !best_ready) ||
        (idle == best_idle && ready == best_ready && speed > best_speed)) {
      best_idle = idle;
      best = static_cast<int>(at);
      best_ready = ready;
      best_speed = speed;
    }
  }
  if (best < 0 && !any_readable && LargestGroup(0) > 0) {
    choice.wait =
        Wait{job.id, WaitCode::kWorkerProtocol,
             "needs workers that speak executor protocol " + std::to_string(job.protocol_version)};
  } else if (best < 0 && any_too_busy) {
    choice.wait = Wait{job.id, WaitCode::kWaitingForBgSlot,
                       "waiting for a device with idle time: every device without a bg job runs a "
                       "FG rank predicted idle less than " +
                           Percent(min_idle) + " of each iteration"};
  } else if (best < 0) {
    choice.wait =
        Wait{job.id, WaitCode::kWaitingForBgSlot, "waiting for a device without a bg job"};
  } else if (!best_ready) {
    // As its own process it would compete with the FG rank for the device; inside the FG
    // executor the gate gives the FG rank priority. So it waits for that executor.
    const size_t at = static_cast<size_t>(best);
    const DeviceKey& key = snapshot_.devices[at].key;
    choice.wait = Wait{job.id, WaitCode::kWaitingForFgRank,
                       "waiting for FG job " + snapshot_.jobs[static_cast<size_t>(fg_[at])].id +
                           "'s rank on " + key.first + "/" + key.second +
                           " to start (to run inside it) or to end (predicted idle " +
                           Percent(best_idle) + ")",
                       key};
  } else {
    const PolicyDevice& device = snapshot_.devices[static_cast<size_t>(best)];
    Changed();
    bg_[static_cast<size_t>(best)] = JobOf(job);
    choice.grant = Grant{job.id, device.type, {device.key}, best_idle};
    return choice;
  }
  waits_[needs] = *choice.wait;
  return choice;
}

bool RunsOn(const PolicyJob& job, const std::string& type) {
  return job.required_device_type.empty() || job.required_device_type == type;
}

double IterationSeconds(const PolicyJob& job, const std::string& type, int g) {
  const auto curve = job.curves.find(type);
  return IterationSecondsOn(curve == job.curves.end() ? nullptr : &curve->second, g);
}

double IterationSecondsOn(const SpeedCurve* curve, int g) {
  if (g < 1) return 0;
  return curve ? curve->IterationS(g) : 1.0 / g;
}

double Throughput(const PolicyJob& job, const std::string& type, int g) {
  return ThroughputAt(job, IterationSeconds(job, type, g));
}

double ThroughputAt(const PolicyJob& job, double seconds) {
  return seconds > 0 ? static_cast<double>(job.global_batch) / seconds : 0;
}

std::vector<Held> NothingHeld(const PolicySnapshot& snapshot) {
  return std::vector<Held>(snapshot.jobs.size());
}

void SetHeld(const PoolState& pool, const PolicyJob& job, const std::string& type, int devices,
             std::vector<Held>* held) {
  Held& row = (*held)[static_cast<size_t>(pool.JobOf(job))];
  row.type = pool.TypeId(type);
  if (row.type < 0) row.name = type;
  row.devices = devices;
}

std::vector<UserShare> SharesOf(const PoolState& pool, const std::vector<Held>& held) {
  const JobRates& rates = pool.Rates();
  std::map<std::string, UserShare> by_user;
  for (const PolicyJob& job : pool.Snapshot().jobs) {
    if (job.role != Role::kFg) continue;
    UserShare& share = by_user[job.user];
    share.user = job.user;
    const Held& row = held[static_cast<size_t>(pool.JobOf(job))];
    if (row.devices == 0) continue;
    share.devices += row.devices;
    const double throughput = row.type >= 0 ? rates.Throughput(job, row.type, row.devices)
                                            : Throughput(job, row.name, row.devices);
    share.share += throughput / rates.Best(job);
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

std::string Fixed(double value, int digits) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return text;
}

}  // namespace deepool::coordinator::policy

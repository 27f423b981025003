// Static partitions (pool_partitions.h).
#include "simulator/pool_partitions.h"

#include <algorithm>
#include <utility>

namespace deepool::simulator {

std::vector<std::vector<PoolDeviceType>> PartitionedPolicy::Split(
    const std::vector<PoolDeviceType>& pool, int partitions) {
  partitions = std::max(1, partitions);
  std::vector<std::vector<PoolDeviceType>> split(static_cast<size_t>(partitions));
  for (const PoolDeviceType& type : pool) {
    for (int i = 0; i < partitions; ++i) {
      split[static_cast<size_t>(i)].push_back(
          {type.name, type.devices / partitions + (i < type.devices % partitions ? 1 : 0)});
    }
  }
  return split;
}

PartitionedPolicy::PartitionedPolicy(std::string name, const std::vector<PoolDeviceType>& pool,
                                     int partitions, const PolicyFactory& make)
    : name_(std::move(name)), devices_(Split(pool, partitions)) {
  for (size_t i = 0; i < devices_.size(); ++i) {
    policies_.push_back(make(devices_[i], static_cast<int>(i)));
  }
}

int PartitionedPolicy::PartitionOf(const std::string& user) {
  const auto found = partition_of_user_.find(user);
  if (found != partition_of_user_.end()) return found->second;
  const int partition = static_cast<int>(partition_of_user_.size() % policies_.size());
  partition_of_user_[user] = partition;
  return partition;
}

StatusOr<PoolDecisions> PartitionedPolicy::Decide(const PoolSnapshot& snapshot) {
  std::vector<PoolSnapshot> parts(policies_.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i].now_s = snapshot.now_s;
    parts[i].device_types = devices_[i];
  }
  for (const PoolJobView& job : snapshot.jobs) {
    parts[static_cast<size_t>(PartitionOf(job.job->user))].jobs.push_back(job);
  }
  PoolDecisions decisions;
  for (size_t i = 0; i < parts.size(); ++i) {
    ASSIGN_OR_RETURN(PoolDecisions part, policies_[i]->Decide(parts[i]));
    decisions.run.insert(decisions.run.end(), part.run.begin(), part.run.end());
  }
  return decisions;
}

}  // namespace deepool::simulator

// Static partitions, a baseline for the pool simulator (issue 44, point 5): the pool's devices of
// every type split evenly into fixed partitions, each user's jobs confined to one partition
// (users assigned round-robin in the order they first appear), and one policy per partition that
// sees only its devices and jobs. It composes policies; it does not schedule by itself.
// docs/simulator.md, "Pool simulation".
// Threading: one thread at a time (PoolPolicy).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "simulator/pool_policy.h"

namespace deepool::simulator {

class PartitionedPolicy : public PoolPolicy {
 public:
  // `make` builds the policy of partition `index` for its devices.
  using PolicyFactory = std::function<std::unique_ptr<PoolPolicy>(
      const std::vector<PoolDeviceType>& devices, int index)>;

  PartitionedPolicy(std::string name, const std::vector<PoolDeviceType>& pool, int partitions,
                    const PolicyFactory& make);

  std::string name() const override { return name_; }
  StatusOr<PoolDecisions> Decide(const PoolSnapshot& snapshot) override;

  // The partition sizes: each type's devices split evenly, the first partitions taking the
  // remainder.
  static std::vector<std::vector<PoolDeviceType>> Split(const std::vector<PoolDeviceType>& pool,
                                                        int partitions);

 private:
  int PartitionOf(const std::string& user);

  std::string name_;
  std::vector<std::vector<PoolDeviceType>> devices_;  // per partition
  std::vector<std::unique_ptr<PoolPolicy>> policies_;
  std::map<std::string, int> partition_of_user_;
};

}  // namespace deepool::simulator

// The pool simulator's scheduling configurations (pool_configurations.h).
#include "simulator/pool_configurations.h"

#include <algorithm>
#include <utility>

#include "coordinator/policy/policy.h"
#include "simulator/pool_partitions.h"
#include "simulator/pool_policy_adapter.h"

namespace deepool::simulator {

const std::vector<PoolConfiguration>& PoolConfigurations() {
  static const std::vector<PoolConfiguration> configurations = {
      {"fifo-dp", "fifo", Parallelism::kDataParallel, false},
      {"static-partitions", "fifo", Parallelism::kDataParallel, false, true},
      {"max-min", "max-min", Parallelism::kDataParallel, false},
      {"deeppool-bp-bg", "fifo", Parallelism::kBurst, true},
      {"deepool", "deepool", Parallelism::kBurst, true},
  };
  return configurations;
}

const std::vector<PoolConfiguration>& AblationConfigurations() {
  static const std::vector<PoolConfiguration> configurations = {
      {"fifo-bp", "fifo", Parallelism::kBurst, false},
      {"fifo-dp-bg", "fifo", Parallelism::kDataParallel, true},
      {"deepool-dp", "deepool", Parallelism::kDataParallel, false},
  };
  return configurations;
}

StatusOr<PoolConfiguration> FindPoolConfiguration(const std::string& name) {
  std::string names;
  for (const auto* list : {&PoolConfigurations(), &AblationConfigurations()}) {
    for (const PoolConfiguration& configuration : *list) {
      if (configuration.name == name) return configuration;
      names += (names.empty() ? "" : ", ") + configuration.name;
    }
  }
  return NotFoundError("no scheduling configuration named \"" + name + "\" (choices: " + names +
                       ")");
}

int StaticPartitions(const std::vector<PoolDeviceType>& pool) {
  int fewest = pool.empty() ? 0 : pool.front().devices;
  for (const PoolDeviceType& type : pool) fewest = std::min(fewest, type.devices);
  return std::clamp(fewest / 8, 1, 4);
}

StatusOr<std::unique_ptr<PoolPolicy>> MakePoolPolicy(
    const PoolConfiguration& configuration, const std::vector<PoolDeviceType>& pool,
    const coordinator::policy::PolicyOptions& policy_options) {
  const PolicyAdapterOptions adapter_options{configuration.name, configuration.parallelism,
                                             configuration.multiplex};
  if (!configuration.partitioned) {
    ASSIGN_OR_RETURN(std::unique_ptr<coordinator::policy::Policy> policy,
                     coordinator::policy::MakePolicy(configuration.policy, policy_options));
    return std::unique_ptr<PoolPolicy>(
        std::make_unique<PolicyAdapter>(std::move(policy), pool, adapter_options));
  }
  // Checked once here, so that the factory below cannot fail.
  RETURN_IF_ERROR(coordinator::policy::MakePolicy(configuration.policy, policy_options).status());
  const std::string policy_name = configuration.policy;
  return std::unique_ptr<PoolPolicy>(std::make_unique<PartitionedPolicy>(
      configuration.name, pool, StaticPartitions(pool),
      [policy_name, policy_options, adapter_options](const std::vector<PoolDeviceType>& devices,
                                                     int) {
        return std::make_unique<PolicyAdapter>(
            std::move(*coordinator::policy::MakePolicy(policy_name, policy_options)), devices,
            adapter_options);
      }));
}

}  // namespace deepool::simulator

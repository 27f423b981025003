// The pool simulator's configurations by name: the compared ones in their order, the ablations
// found by name only, and a policy built for each.
#include "simulator/pool_configurations.h"

#include <catch2/catch.hpp>

namespace deepool::simulator {
namespace {

TEST_CASE("Configurations and ablations are found by name and build a policy", "[pool]") {
  std::vector<std::string> names;
  for (const PoolConfiguration& configuration : PoolConfigurations()) {
    names.push_back(configuration.name);
  }
  CHECK(names == std::vector<std::string>{"fifo-dp", "static-partitions", "max-min",
                                          "deeppool-bp-bg", "deepool"});
  const std::vector<PoolDeviceType> pool = {{"a100", 16}, {"v100", 16}};
  for (const std::string name :
       {"fifo-dp", "static-partitions", "deepool", "fifo-bp", "fifo-dp-bg", "deepool-dp"}) {
    INFO(name);
    StatusOr<PoolConfiguration> found = FindPoolConfiguration(name);
    REQUIRE(found.ok());
    CHECK(found->name == name);
    StatusOr<std::unique_ptr<PoolPolicy>> policy = MakePoolPolicy(*found, pool);
    REQUIRE(policy.ok());
    CHECK((*policy)->name() == name);
  }
  // Each ablation is one setting away from a compared configuration.
  const PoolConfiguration fifo_bp = *FindPoolConfiguration("fifo-bp");
  CHECK(fifo_bp.policy == "fifo");
  CHECK(fifo_bp.parallelism == Parallelism::kBurst);
  CHECK_FALSE(fifo_bp.multiplex);
  const PoolConfiguration deepool_dp = *FindPoolConfiguration("deepool-dp");
  CHECK(deepool_dp.policy == "deepool");
  CHECK(deepool_dp.parallelism == Parallelism::kDataParallel);
  CHECK_FALSE(deepool_dp.multiplex);

  StatusOr<PoolConfiguration> unknown = FindPoolConfiguration("fifo");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == StatusCode::kNotFound);
  CHECK_THAT(unknown.status().message(), Catch::Contains("deepool, fifo-bp, fifo-dp-bg"));
  CHECK(StaticPartitions(pool) == 2);
}

}  // namespace
}  // namespace deepool::simulator

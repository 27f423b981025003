// Admission among devices of one type but different memory (docs/coordinator.md, "Device
// memory"): within a node a FG job is granted the free devices with the most memory first, so a
// job whose plan fits only the larger devices runs there instead of failing on the smaller ones.
#include <catch2/catch.hpp>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator::testing {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// Node "a": a100s of 4, 8, 4 and 8 GiB, the smaller ones first in its list and in device order.
void AddMixedNode(Harness& h) {
  h.planner.analytical_types.insert("a100");
  const std::vector<DeviceInfo> devices{{"cuda:0", "a100", 4 * kGiB},
                                        {"cuda:1", "a100", 8 * kGiB},
                                        {"cuda:2", "a100", 4 * kGiB},
                                        {"cuda:3", "a100", 8 * kGiB}};
  REQUIRE(h.scheduler.RegisterNode("a", "10.0.0.a:7000", devices, {}).ok());
}

std::set<std::string> DevicesHeldBy(const Harness& h, const std::string& job_id) {
  std::set<std::string> devices;
  for (const auto& [key, use] : h.scheduler.DeviceUses()) {
    if (use.fg_job == job_id) devices.insert(key.first + "/" + key.second);
  }
  return devices;
}

TEST_CASE("a FG job gets the devices of its type with the most memory",
          "[scheduler][memory][admission]") {
  Harness h;
  h.planner.memory_needed_bytes = 6 * kGiB;  // fits the 8 GiB devices only
  AddMixedNode(h);
  const JobRecord job = h.Submit(Fg(2));
  h.scheduler.Tick();

  const JobRecord placed = h.Get(job.id);
  INFO(placed.reason);
  CHECK(placed.state == JobState::kRunning);
  CHECK(h.planner.last_shape().device_memory_bytes == 8 * kGiB);
  CHECK(DevicesHeldBy(h, job.id) == std::set<std::string>{"node-a/cuda:1", "node-a/cuda:3"});

  // The smaller devices stay free for a job they hold.
  h.planner.memory_needed_bytes = 3 * kGiB;
  const JobRecord small = h.Submit(Fg(2));
  h.scheduler.Tick();
  CHECK(h.Get(small.id).state == JobState::kRunning);
  CHECK(h.planner.last_shape().device_memory_bytes == 4 * kGiB);
  CHECK(DevicesHeldBy(h, small.id) == std::set<std::string>{"node-a/cuda:0", "node-a/cuda:2"});
}

}  // namespace
}  // namespace deepool::coordinator::testing

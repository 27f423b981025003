// Static partitions: each partition's policy sees only its share of every type's devices and the
// jobs of its users, and the partitions' answers are joined.
#include "simulator/pool_partitions.h"

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

namespace deepool::simulator {
namespace {

// Runs every job it sees on one device and records what it saw.
class RecordingPolicy : public PoolPolicy {
 public:
  explicit RecordingPolicy(std::vector<PoolSnapshot>* seen) : seen_(seen) {}
  std::string name() const override { return "recording"; }
  StatusOr<PoolDecisions> Decide(const PoolSnapshot& snapshot) override {
    seen_->push_back(snapshot);
    PoolDecisions decisions;
    for (const PoolJobView& job : snapshot.jobs) {
      decisions.run.push_back({job.job->id, PoolAllocation{"a100", 1, {}, -1}});
    }
    return decisions;
  }

 private:
  std::vector<PoolSnapshot>* seen_;
};

WorkloadJob Job(int64_t id, const std::string& user) {
  WorkloadJob job;
  job.id = id;
  job.user = user;
  job.model = "m";
  job.global_batch = 8;
  job.iterations = 1;
  return job;
}

TEST_CASE("Each partition sees its devices and its users' jobs", "[pool]") {
  CHECK(PartitionedPolicy::Split({{"a100", 5}, {"v100", 2}}, 2)[0][0].devices == 3);
  CHECK(PartitionedPolicy::Split({{"a100", 5}, {"v100", 2}}, 2)[1][0].devices == 2);
  CHECK(PartitionedPolicy::Split({{"a100", 5}, {"v100", 2}}, 2)[1][1].devices == 1);

  std::vector<std::vector<PoolSnapshot>> seen(2);
  PartitionedPolicy policy("static", {{"a100", 4}}, 2,
                           [&](const std::vector<PoolDeviceType>&, int index) {
                             return std::make_unique<RecordingPolicy>(&seen[index]);
                           });
  const std::vector<WorkloadJob> jobs = {Job(0, "ann"), Job(1, "bob"), Job(2, "ann")};
  PoolSnapshot snapshot;
  snapshot.device_types = {{"a100", 4}};
  for (const WorkloadJob& job : jobs) {
    PoolJobView view;
    view.job = &job;
    snapshot.jobs.push_back(view);
  }
  StatusOr<PoolDecisions> decisions = policy.Decide(snapshot);
  REQUIRE(decisions.ok());
  CHECK(decisions->run.size() == 3);
  REQUIRE(seen[0].size() == 1);
  REQUIRE(seen[1].size() == 1);
  CHECK(seen[0][0].device_types[0].devices == 2);
  REQUIRE(seen[0][0].jobs.size() == 2);  // ann's two jobs
  CHECK(seen[0][0].jobs[1].job->id == 2);
  REQUIRE(seen[1][0].jobs.size() == 1);  // bob's
  CHECK(seen[1][0].jobs[0].job->user == "bob");
}

}  // namespace
}  // namespace deepool::simulator

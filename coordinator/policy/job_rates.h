// JobRates: each snapshot job's speed-up curve on each of the pool's device types, found once a
// round. A round asks a job's iteration time and throughput on a type many times (max-min's demand
// and water-fill, the shares, the deepool policy's sizing); finding the curve by the type's name
// each time made a saturated pool's rounds mostly string compares. The values are exactly those of
// IterationSeconds and Throughput (pool_state.h) for the same job and type.
// Internal to deepool_policy.
// Threading: a plain value owned by one Decide call (its lazy tables are not guarded).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "coordinator/policy/policy.h"

namespace deepool::coordinator::policy {

class JobRates {
 public:
  // `types`: the pool's device types in name order (DeviceIndex::Types); jobs are asked by
  // reference into snapshot.jobs. Nothing is looked up until a job is first asked about.
  JobRates(const PolicySnapshot& snapshot, const std::vector<std::string>& types);

  // Whether the job may run on types[type].
  bool RunsOn(const PolicyJob& job, int type) const;
  // IterationSeconds(job, types[type], g).
  double IterationS(const PolicyJob& job, int type, int g) const;
  // Throughput(job, types[type], g).
  double Throughput(const PolicyJob& job, int type, int g) const;
  // Its throughput on its requested count of its fastest type it may run on (> 0: 1 where it
  // has none), the unit of its share.
  double Best(const PolicyJob& job) const;

 private:
  struct Row {
    bool found = false;
    bool best_known = false;
    double best = 0;
  };
  // The job's row, its curves and types found on first use.
  const Row& Find(const PolicyJob& job) const;
  size_t At(const PolicyJob& job) const {
    return static_cast<size_t>(&job - snapshot_.jobs.data());
  }

  const PolicySnapshot& snapshot_;
  const std::vector<std::string>& types_;
  mutable std::vector<Row> rows_;                  // by job position
  mutable std::vector<const SpeedCurve*> curves_;  // job * types + type; nullptr: no curve
  mutable std::vector<char> runs_on_;              // job * types + type
};

}  // namespace deepool::coordinator::policy

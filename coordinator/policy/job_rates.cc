#include "coordinator/policy/job_rates.h"

#include <algorithm>

#include "coordinator/policy/pool_state.h"

namespace deepool::coordinator::policy {

JobRates::JobRates(const PolicySnapshot& snapshot, const std::vector<std::string>& types)
    : snapshot_(snapshot),
      types_(types),
      rows_(snapshot.jobs.size()),
      curves_(snapshot.jobs.size() * types.size(), nullptr),
      runs_on_(snapshot.jobs.size() * types.size(), 0) {}

const JobRates::Row& JobRates::Find(const PolicyJob& job) const {
  const size_t at = At(job);
  Row& row = rows_[at];
  if (row.found) return row;
  row.found = true;
  const size_t base = at * types_.size();
  // Both in name order: one merge instead of a search per type.
  auto curve = job.curves.begin();
  for (size_t type = 0; type < types_.size(); ++type) {
    const std::string& name = types_[type];
    while (curve != job.curves.end() && curve->first < name) ++curve;
    if (curve != job.curves.end() && curve->first == name) curves_[base + type] = &curve->second;
    runs_on_[base + type] = policy::RunsOn(job, name);
  }
  return row;
}

bool JobRates::RunsOn(const PolicyJob& job, int type) const {
  Find(job);
  return runs_on_[At(job) * types_.size() + static_cast<size_t>(type)] != 0;
}

double JobRates::IterationS(const PolicyJob& job, int type, int g) const {
  Find(job);
  return IterationSecondsOn(curves_[At(job) * types_.size() + static_cast<size_t>(type)], g);
}

double JobRates::Throughput(const PolicyJob& job, int type, int g) const {
  return ThroughputAt(job, IterationS(job, type, g));
}

double JobRates::Best(const PolicyJob& job) const {
  Find(job);
  Row& row = rows_[At(job)];
  if (row.best_known) return row.best;
  double best = 0;
  for (size_t type = 0; type < types_.size(); ++type) {
    const int id = static_cast<int>(type);
    if (RunsOn(job, id)) best = std::max(best, Throughput(job, id, job.requested_devices));
  }
  row.best = best > 0 ? best : 1;
  row.best_known = true;
  return row.best;
}

}  // namespace deepool::coordinator::policy

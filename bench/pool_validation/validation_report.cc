#include "bench/pool_validation/validation_report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <numeric>

#include "bench/pool_validation/validation_trace.h"

namespace deepool::bench {
namespace {

double Mean(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

JctSummary Summarise(std::vector<double> jcts, const std::vector<double>& waits,
                     double makespan_s) {
  JctSummary summary;
  summary.mean_wait_s = Mean(waits);
  summary.mean_jct_s = Mean(jcts);
  summary.mean_run_s = summary.mean_jct_s - summary.mean_wait_s;
  std::sort(jcts.begin(), jcts.end());
  const size_t rank = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(jcts.size())));
  summary.p99_jct_s = jcts[std::max<size_t>(rank, 1) - 1];
  summary.makespan_s = makespan_s;
  return summary;
}

double RelativeError(double simulated, double real) {
  return real > 0 ? (simulated - real) / real : 0;
}

std::string Line(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Line(const char* format, ...) {
  char buffer[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  return std::string(buffer) + "\n";
}

}  // namespace

StatusOr<ValidationComparison> CompareRuns(const std::vector<RealJobRecord>& real,
                                           const simulator::PoolRun& simulated) {
  if (real.empty() || real.size() != simulated.jobs.size()) {
    return InvalidArgumentError("the real replay has " + std::to_string(real.size()) +
                                " jobs, the simulation " + std::to_string(simulated.jobs.size()));
  }
  std::vector<double> real_jcts, simulated_jcts, real_waits, simulated_waits;
  double real_makespan = 0;
  for (size_t i = 0; i < real.size(); ++i) {
    const simulator::PoolJobRecord& sim = simulated.jobs[i];
    if (real[i].id != sim.id) {
      return InvalidArgumentError("job " + std::to_string(i) + " is " + std::to_string(real[i].id) +
                                  " on the cluster and " + std::to_string(sim.id) +
                                  " in the simulation");
    }
    real_jcts.push_back(real[i].finish_s - real[i].submit_s);
    simulated_jcts.push_back(sim.finish_s - sim.arrival_s);
    real_waits.push_back(real[i].start_s - real[i].submit_s);
    simulated_waits.push_back(sim.start_s - sim.arrival_s);
    real_makespan = std::max(real_makespan, real[i].finish_s);
  }
  ValidationComparison comparison;
  comparison.real = Summarise(real_jcts, real_waits, real_makespan);
  comparison.simulated = Summarise(simulated_jcts, simulated_waits, simulated.end_s);
  comparison.mean_wait_error =
      RelativeError(comparison.simulated.mean_wait_s, comparison.real.mean_wait_s);
  comparison.mean_run_error =
      RelativeError(comparison.simulated.mean_run_s, comparison.real.mean_run_s);
  comparison.mean_jct_error =
      RelativeError(comparison.simulated.mean_jct_s, comparison.real.mean_jct_s);
  comparison.p99_jct_error =
      RelativeError(comparison.simulated.p99_jct_s, comparison.real.p99_jct_s);
  comparison.makespan_error =
      RelativeError(comparison.simulated.makespan_s, comparison.real.makespan_s);
  return comparison;
}

std::string FormatComparison(const std::vector<simulator::WorkloadJob>& jobs,
                             const std::vector<RealJobRecord>& real,
                             const simulator::PoolRun& simulated,
                             const ValidationComparison& comparison) {
  std::string out = Line("%4s  %-22s %-6s %8s | %8s %8s | %8s %8s | %7s", "job", "kind", "user",
                         "arrive_s", "real_wt", "real_jct", "sim_wt", "sim_jct", "error");
  for (size_t i = 0; i < jobs.size() && i < real.size() && i < simulated.jobs.size(); ++i) {
    const simulator::PoolJobRecord& sim = simulated.jobs[i];
    const double real_jct = real[i].finish_s - real[i].submit_s;
    const double sim_jct = sim.finish_s - sim.arrival_s;
    out += Line("%4lld  %-22s %-6s %8.1f | %8.1f %8.1f | %8.1f %8.1f | %+6.1f%%",
                static_cast<long long>(jobs[i].id), KindKey(jobs[i]).c_str(), jobs[i].user.c_str(),
                jobs[i].arrival_s, real[i].start_s - real[i].submit_s, real_jct,
                sim.start_s - sim.arrival_s, sim_jct, 100 * RelativeError(sim_jct, real_jct));
  }
  const JctSummary& r = comparison.real;
  const JctSummary& s = comparison.simulated;
  out += Line("%-12s %10s %10s %8s", "", "real", "simulated", "error");
  out += Line("%-12s %10.1f %10.1f %+7.1f%%", "mean wait s", r.mean_wait_s, s.mean_wait_s,
              100 * comparison.mean_wait_error);
  out += Line("%-12s %10.1f %10.1f %+7.1f%%", "mean run s", r.mean_run_s, s.mean_run_s,
              100 * comparison.mean_run_error);
  out += Line("%-12s %10.1f %10.1f %+7.1f%%", "mean JCT s", r.mean_jct_s, s.mean_jct_s,
              100 * comparison.mean_jct_error);
  out += Line("%-12s %10.1f %10.1f %+7.1f%%", "p99 JCT s", r.p99_jct_s, s.p99_jct_s,
              100 * comparison.p99_jct_error);
  out += Line("%-12s %10.1f %10.1f %+7.1f%%", "makespan s", r.makespan_s, s.makespan_s,
              100 * comparison.makespan_error);
  return out;
}

}  // namespace deepool::bench

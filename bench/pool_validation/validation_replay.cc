#include "bench/pool_validation/validation_replay.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench_util.h"
#include "bench/pool_validation/validation_trace.h"
#include "cli/services/client.h"

namespace deepool::bench {
namespace {

using Clock = std::chrono::steady_clock;

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The time of the first transition into `state`, or -1.
int64_t TransitionMs(const v1::Job& job, v1::JobState state) {
  for (const v1::StateTransition& transition : job.history()) {
    if (transition.state() == state) return transition.time_ms();
  }
  return -1;
}

StatusOr<RealJobRecord> RecordOf(const v1::Job& job, int64_t id, int64_t origin_ms) {
  if (job.state() != v1::JOB_STATE_SUCCEEDED) {
    return InternalError("job " + std::to_string(id) + " (" + job.job_id() + ") ended " +
                         cli::StateName(job.state()) + ": " + job.reason());
  }
  const int64_t start_ms = TransitionMs(job, v1::JOB_STATE_RUNNING);
  const int64_t finish_ms = TransitionMs(job, v1::JOB_STATE_SUCCEEDED);
  if (start_ms < 0 || finish_ms < 0) {
    return InternalError("job " + job.job_id() + " has no RUNNING or SUCCEEDED transition");
  }
  RealJobRecord record;
  record.id = id;
  record.job_id = job.job_id();
  record.submit_s = static_cast<double>(job.submitted_ms() - origin_ms) / 1000;
  record.start_s = static_cast<double>(start_ms - origin_ms) / 1000;
  record.finish_s = static_cast<double>(finish_ms - origin_ms) / 1000;
  const v1::JobProgress& progress = job.progress();
  if (job.spec().role() == v1::JOB_ROLE_FG && progress.iteration_ms() > 0) {
    record.iteration_s = progress.iteration_ms() / 1000;
  } else if (progress.samples_per_s() > 0) {
    record.iteration_s = static_cast<double>(job.spec().global_batch()) / progress.samples_per_s();
  }
  const double busy_and_idle = progress.busy_ms() + progress.idle_ms();
  if (job.spec().role() == v1::JOB_ROLE_FG && busy_and_idle > 0) {
    record.busy_fraction = progress.busy_ms() / busy_and_idle;
  }
  return record;
}

}  // namespace

std::string ValidationSpecJson(const simulator::WorkloadJob& job, const std::string& name,
                               const std::string& checkpoint_root) {
  nlohmann::json spec = {{"name", name},
                         {"model", job.model},
                         {"role", simulator::WorkloadRoleName(job.role)},
                         {"global_batch", job.global_batch},
                         {"gpus", job.gpus},
                         {"iterations", job.iterations},
                         {"priority", job.priority},
                         {"profile", "analytical"},
                         {"optimizer", {{"name", "sgd"}, {"lr", 0.01}}},
                         {"data", {{"kind", "synthetic"}, {"seed", job.id + 1}}}};
  if (job.role == simulator::WorkloadRole::kFg) {
    spec["amplification_limit"] = job.amplification_limit;
  } else {
    spec["checkpoint"] = {{"dir", checkpoint_root + "/" + name}, {"every_iterations", 50}};
  }
  return spec.dump();
}

StatusOr<std::vector<RealJobRecord>> ReplayOnCluster(
    const std::vector<simulator::WorkloadJob>& jobs, const ReplayTarget& target,
    const std::string& name_prefix) {
  const StubForUser& stub_for = target.stub_for;
  const double timeout_s = target.timeout_s;
  const Clock::time_point start = Clock::now();
  const int64_t origin_ms = WallMs();
  const Clock::time_point deadline =
      start + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  std::vector<std::string> ids;
  for (const simulator::WorkloadJob& job : jobs) {
    // Arrivals are the trace's times: the replay waits for each one as a user would.
    std::this_thread::sleep_until(
        start + std::chrono::milliseconds(static_cast<int64_t>(job.arrival_s * 1000)));
    v1::SubmitJobRequest request;
    request.set_spec_json(
        ValidationSpecJson(job, name_prefix + std::to_string(job.id), target.checkpoint_root));
    v1::SubmitJobResponse response;
    auto context = cli::UnaryContext(std::chrono::seconds(30));
    const grpc::Status status = stub_for(job.user).SubmitJob(context.get(), request, &response);
    if (!status.ok()) {
      return InternalError("job " + std::to_string(job.id) +
                           " was refused: " + status.error_message());
    }
    ids.push_back(response.job_id());
  }
  std::vector<RealJobRecord> records(jobs.size());
  std::vector<bool> ended(jobs.size(), false);
  size_t left = jobs.size();
  while (left > 0) {
    if (Clock::now() > deadline) {
      return DeadlineExceededError(std::to_string(left) + " jobs still running after " +
                                   std::to_string(timeout_s) + " s");
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (ended[i]) continue;
      v1::GetJobRequest request;
      request.set_job_id(ids[i]);
      v1::Job job;
      auto context = cli::UnaryContext(std::chrono::seconds(10));
      if (!stub_for(jobs[i].user).GetJob(context.get(), request, &job).ok()) continue;
      if (!cli::IsTerminal(job.state())) continue;
      ASSIGN_OR_RETURN(records[i], RecordOf(job, jobs[i].id, origin_ms));
      ended[i] = true;
      --left;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return records;
}

KindCalibration KindFromDurations(int64_t iterations, double short_s, double long_s) {
  KindCalibration calibration;
  calibration.iterations = iterations;
  calibration.short_s = short_s;
  calibration.long_s = long_s;
  calibration.iteration_s = (long_s - short_s) / static_cast<double>(2 * iterations);
  calibration.overhead_s = short_s - static_cast<double>(iterations) * calibration.iteration_s;
  return calibration;
}

StatusOr<KindCalibration> MedianKindCalibration(const std::vector<KindCalibration>& repetitions) {
  if (repetitions.empty()) return InvalidArgumentError("a kind's calibration needs a repetition");
  std::vector<double> short_s;
  std::vector<const KindCalibration*> by_long;
  for (const KindCalibration& repetition : repetitions) {
    if (repetition.iterations < 1 || repetition.iterations != repetitions.front().iterations) {
      return InvalidArgumentError("a kind's repetitions need one positive iteration count");
    }
    short_s.push_back(repetition.short_s);
    by_long.push_back(&repetition);
  }
  std::stable_sort(
      by_long.begin(), by_long.end(),
      [](const KindCalibration* a, const KindCalibration* b) { return a->long_s < b->long_s; });
  // The same middle as bench_util.h's Median.
  const KindCalibration& median_long = *by_long[by_long.size() / 2];
  KindCalibration median =
      KindFromDurations(median_long.iterations, Median(std::move(short_s)), median_long.long_s);
  if (!(median.iteration_s > 0)) {
    return InvalidArgumentError(
        "the median longer run took no longer than the median shorter one (a machine too busy "
        "to calibrate on)");
  }
  median.reported_iteration_s = median_long.reported_iteration_s;
  median.busy_fraction = median_long.busy_fraction;
  return median;
}

StatusOr<std::map<std::string, std::vector<KindCalibration>>> MeasureKinds(
    const std::vector<simulator::WorkloadJob>& jobs, const ReplayTarget& target, int repetitions,
    const std::string& name_prefix) {
  if (repetitions < 1) return InvalidArgumentError("the calibration needs at least one repetition");
  std::map<std::string, std::vector<KindCalibration>> kinds;
  for (const simulator::WorkloadJob& job : jobs) {
    // Two runs alone, of n and 3n iterations: the difference of their submit-to-finish times is
    // 2n iterations (the executors' mean, not one reported iteration), the rest of the shorter
    // run's time the per-job overhead.
    simulator::WorkloadJob longer = job;
    longer.iterations = 3 * job.iterations;
    std::vector<KindCalibration>& measured = kinds[KindKey(job)];
    for (int repetition = 0; repetition < repetitions; ++repetition) {
      const std::string prefix = name_prefix + std::to_string(repetition);
      ASSIGN_OR_RETURN(const std::vector<RealJobRecord> short_run,
                       ReplayOnCluster({job}, target, prefix + "-short-"));
      ASSIGN_OR_RETURN(const std::vector<RealJobRecord> long_run,
                       ReplayOnCluster({longer}, target, prefix + "-long-"));
      const double short_s = short_run.front().finish_s - short_run.front().submit_s;
      const double long_s = long_run.front().finish_s - long_run.front().submit_s;
      KindCalibration calibration = KindFromDurations(job.iterations, short_s, long_s);
      calibration.reported_iteration_s = long_run.front().iteration_s;
      calibration.busy_fraction = long_run.front().busy_fraction;
      measured.push_back(calibration);
    }
  }
  return kinds;
}

StatusOr<std::map<std::string, KindCalibration>> MedianKinds(
    const std::map<std::string, std::vector<KindCalibration>>& repetitions) {
  std::map<std::string, KindCalibration> kinds;
  for (const auto& [key, measured] : repetitions) {
    StatusOr<KindCalibration> median = MedianKindCalibration(measured);
    if (!median.ok()) return median.status().WithContext("kind " + key);
    kinds[key] = std::move(median).value();
  }
  return kinds;
}

std::map<std::string, std::vector<KindCalibration>> BothSides(
    std::map<std::string, std::vector<KindCalibration>> before,
    const std::map<std::string, std::vector<KindCalibration>>& after) {
  for (const auto& [key, measured] : after) {
    std::vector<KindCalibration>& all = before[key];
    all.insert(all.end(), measured.begin(), measured.end());
  }
  return before;
}

}  // namespace deepool::bench

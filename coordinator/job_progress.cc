#include "coordinator/job_progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "protocol/run_spec.h"

namespace deepool::coordinator {
namespace {

const RankPlacement* FindPlacement(const JobRecord& job, int rank) {
  for (const RankPlacement& p : job.devices) {
    if (p.rank == rank) return &p;
  }
  return nullptr;
}

// The row for `rank`, inserted in rank order when missing.
DeviceProgress* RowFor(JobProgress* progress, int rank) {
  auto it = std::lower_bound(progress->devices.begin(), progress->devices.end(), rank,
                             [](const DeviceProgress& d, int r) { return d.rank < r; });
  if (it == progress->devices.end() || it->rank != rank) {
    DeviceProgress row;
    row.rank = rank;
    it = progress->devices.insert(it, std::move(row));
  }
  return &*it;
}

}  // namespace

void ApplyIterationEvent(const v1::IterationEvent& e, const DeviceJobsLookup& jobs_on_device,
                         int64_t now_ms, JobRecord* job) {
  // A worker's numbers: past what any run may reach (or negative) they are no progress, and
  // iteration + 1 below would overflow.
  if (e.iteration() < 0 || e.iteration() >= protocol::kMaxRunIterations ||
      e.total_iterations() < 0 || e.total_iterations() > protocol::kMaxRunIterations) {
    return;
  }
  JobProgress& progress = job->progress;
  // An epochs job's executors count its iterations from the data set: the total is news.
  if (e.total_iterations() > 0) progress.iterations = e.total_iterations();
  // Executors number iterations from 0: iteration i done means i + 1 completed.
  int64_t done = e.iteration() + 1;
  const int64_t total = progress.iterations > 0 ? progress.iterations : job->spec.iterations;
  if (total > 0) done = std::min(done, total);
  if (done >= progress.iteration) {
    progress.iteration = done;
    if (e.has_loss()) progress.loss = e.loss();
    if (e.rank() == 0 || progress.samples_per_s == 0) {
      progress.samples_per_s = e.samples_per_s();
      progress.iteration_ms = e.iteration_ms();
      progress.busy_ms = e.busy_ms();
      progress.idle_ms = e.idle_ms();
    }
  }
  progress.updated_ms = now_ms;

  const RankPlacement* placement = FindPlacement(*job, e.rank());
  if (!placement) return;
  DeviceProgress* row = RowFor(&progress, e.rank());
  if (done < row->iteration) return;
  const DeviceJobs on_device = jobs_on_device ? jobs_on_device(*placement) : DeviceJobs{};
  row->node_id = placement->node_id;
  row->node_name = placement->node_name;
  row->device = placement->device;
  row->iteration = done;
  row->idle_ms = e.idle_ms();
  row->updated_ms = now_ms;
  if (job->spec.role == JobRole::kBg) {
    row->fg_job_id = on_device.fg_job;
    row->bg_job_id = job->id;
    // Inside a FG executor its device times are in the FG job's row; here only its rate.
    row->shared_executor = e.in_fg_executor();
    row->fg_busy_ms = 0;
    row->bg_busy_ms = e.busy_ms();
    row->bg_samples_per_s = e.samples_per_s();
    return;
  }
  row->fg_job_id = job->id;
  row->bg_job_id = on_device.bg_job;
  row->shared_executor = e.has_fg_busy_ms();
  row->fg_busy_ms = row->shared_executor ? e.fg_busy_ms() : e.busy_ms();
  row->bg_busy_ms = e.has_bg_busy_ms() ? e.bg_busy_ms() : 0;
  row->bg_samples_per_s = e.bg_samples_per_s();
}

bool ApplyEvaluation(const v1::Evaluation& e, int64_t now_ms, JobRecord* job) {
  auto fraction = [](double x) { return x >= 0 && x <= 1; };  // false for NaN
  if (e.iteration() < 0 || e.samples() < 0 || !fraction(e.top1()) || !fraction(e.top5())) {
    return false;
  }
  Evaluation evaluation;
  evaluation.iteration = e.iteration();
  evaluation.samples = e.samples();
  if (e.has_loss() && std::isfinite(e.loss())) evaluation.loss = e.loss();
  evaluation.top1 = e.top1();
  evaluation.top5 = e.top5();
  evaluation.time_ms = e.time_ms() > 0 ? e.time_ms() : now_ms;
  std::vector<Evaluation>& kept = job->progress.evaluations;
  auto it = std::lower_bound(kept.begin(), kept.end(), evaluation.iteration,
                             [](const Evaluation& k, int64_t i) { return k.iteration < i; });
  if (it != kept.end() && it->iteration == evaluation.iteration) {
    const bool same = it->samples == evaluation.samples && it->loss == evaluation.loss &&
                      it->top1 == evaluation.top1 && it->top5 == evaluation.top5;
    if (same) return false;
    *it = evaluation;
    return true;
  }
  if (kept.size() >= JobProgress::kMaxEvaluations && it == kept.begin()) return false;  // older
  kept.insert(it, evaluation);
  if (kept.size() > JobProgress::kMaxEvaluations) {
    kept.erase(kept.begin(), kept.end() - JobProgress::kMaxEvaluations);
  }
  return true;
}

std::string DescribeEvaluation(const Evaluation& e) {
  char text[160];
  std::snprintf(text, sizeof(text), "evaluation after iteration %lld: top-1 %.1f %%, top-5 %.1f %%",
                static_cast<long long>(e.iteration), 100 * e.top1, 100 * e.top5);
  std::string line = text;
  if (e.loss) {
    std::snprintf(text, sizeof(text), ", loss %.3f", *e.loss);
    line += text;
  }
  return line + " (" + std::to_string(e.samples) + " samples)";
}

}  // namespace deepool::coordinator

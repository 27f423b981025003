#include "worker/runtime/background/background_checkpoints.h"

#include <chrono>
#include <limits>

#include "common/logging.h"
#include "worker/runtime/checkpoints/checkpoint_dir.h"
#include "worker/runtime/checkpoints/periodic_checkpoints.h"
#include "worker/runtime/checkpoints/training_state.h"

namespace deepool::worker {
namespace {

// A BG job with no iteration count trains until its host ends: no last iteration to write at.
int64_t LastIteration(const BackgroundSpec& spec) {
  return spec.iterations > 0 ? spec.iterations : std::numeric_limits<int64_t>::max();
}

std::vector<int> AllLayers(const planner::Graph& graph) {
  std::vector<int> layers;
  for (int id = 0; id < graph.num_layers(); ++id) layers.push_back(id);
  return layers;
}

}  // namespace

StatusOr<int64_t> ResumeBackgroundTrainer(BackgroundTrainer& trainer) {
  const BackgroundSpec& spec = trainer.spec();
  ASSIGN_OR_RETURN(std::optional<FoundCheckpoint> found,
                   FindLatestCheckpoint(spec.checkpoints->dir));
  if (!found) return int64_t{0};
  RETURN_IF_ERROR(LoadFoundCheckpoint(*found, spec.iterations, spec.optimizer.name, trainer.graph(),
                                      trainer.ModulesById(), trainer.optimizer())
                      .WithContext("background job " + spec.job_id));
  DP_LOG_INFO("background job {} resumed from {} (iteration {}; written by {} rank(s))",
              spec.job_id, found->path, found->manifest.iteration, found->manifest.world_size);
  return found->manifest.iteration;
}

CheckpointingStepper::CheckpointingStepper(std::unique_ptr<BackgroundStepper> inner,
                                           BackgroundTrainer* trainer, const Clock* clock)
    : inner_(std::move(inner)),
      trainer_(trainer),
      clock_(clock),
      schedule_(trainer->spec().checkpoints->every_iterations,
                trainer->spec().checkpoints->every_seconds, trainer->first_iteration(),
                LastIteration(trainer->spec()), Seconds()) {}

double CheckpointingStepper::Seconds() const {
  return std::chrono::duration<double>(clock_->Now().time_since_epoch()).count();
}

bool CheckpointingStepper::Due(int64_t done) {
  switch (schedule_.After(done)) {
    case CheckpointSchedule::Step::kNothing:
      return false;
    case CheckpointSchedule::Step::kAgree:
      return schedule_.Agreed(done, schedule_.SecondsSinceLast(Seconds()));
    case CheckpointSchedule::Step::kWrite:
      return true;
  }
  return false;
}

StatusOr<BgUnitResult> CheckpointingStepper::RunUnit() {
  ASSIGN_OR_RETURN(BgUnitResult unit, inner_->RunUnit());
  if (!unit.iteration_done) return unit;
  const int64_t done = unit.iteration + 1;
  if (!Due(done)) return unit;
  StatusOr<StateDict> state = CopyState();
  if (!state.ok()) {
    DP_LOG_WARN("background job {}: no checkpoint after iteration {}: {}", trainer_->spec().job_id,
                done, state.status().ToString());
    schedule_.Written(done, Seconds());
    return unit;
  }
  pending_ = Snapshot{done, std::move(state).value()};
  return unit;
}

// Copies, not aliases: the files are written after the gate is released, while the next units
// may already be updating the parameters.
StatusOr<StateDict> CheckpointingStepper::CopyState() const {
  try {
    ASSIGN_OR_RETURN(StateDict state,
                     CollectTrainingState(trainer_->graph(), trainer_->ModulesById(),
                                          AllLayers(trainer_->graph()), trainer_->optimizer()));
    for (auto& [key, tensor] : state) {
      tensor = tensor.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
    }
    return state;
  } catch (const std::exception& e) {
    return InternalError(std::string("copying the state: ") + e.what());
  }
}

void CheckpointingStepper::AfterUnit() {
  inner_->AfterUnit();
  if (!pending_) return;
  const auto start = clock_->Now();
  Status written = Write(*pending_);
  const double ms = std::chrono::duration<double, std::milli>(clock_->Now() - start).count();
  if (written.ok()) {
    ++written_;
    DP_LOG_INFO("background job {}: checkpoint of iteration {} written in {:.0f} ms",
                trainer_->spec().job_id, pending_->done, ms);
  } else {
    DP_LOG_WARN("background job {}: {}", trainer_->spec().job_id, written.ToString());
  }
  schedule_.Written(pending_->done, Seconds());
  pending_.reset();
}

Status CheckpointingStepper::Write(const Snapshot& snapshot) const {
  const BackgroundSpec& spec = trainer_->spec();
  const std::string path = CheckpointPath(spec.checkpoints->dir, snapshot.done);
  RETURN_IF_ERROR(WriteRankPart(path, /*rank=*/0, snapshot.state));
  CheckpointManifest manifest;
  manifest.iteration = snapshot.done;
  manifest.world_size = 1;
  manifest.job_id = spec.job_id;
  manifest.optimizer = spec.optimizer.name;
  return CommitAndPrune(path, std::move(manifest), *spec.checkpoints).status();
}

}  // namespace deepool::worker

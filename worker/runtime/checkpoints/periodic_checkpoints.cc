#include "worker/runtime/checkpoints/periodic_checkpoints.h"

#include <chrono>
#include <filesystem>

#include "common/logging.h"
#include "worker/runtime/checkpoints/checkpoint.h"
#include "worker/runtime/checkpoints/checkpoint_dir.h"
#include "worker/runtime/checkpoints/training_state.h"
#include "worker/runtime/data/epoch_order.h"

namespace deepool::worker {
namespace {

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// The sums of `values` over every rank (one world all-reduce on the rank's device).
StatusOr<std::vector<double>> SumOverRanks(Communicator& comm, const torch::Device& device,
                                           const std::vector<double>& values) {
  RankGroup world;
  for (int r = 0; r < comm.world_size(); ++r) world.push_back(r);
  torch::Tensor t =
      torch::tensor(values, torch::TensorOptions(torch::kFloat64)).to(device).contiguous();
  ASSIGN_OR_RETURN(auto work, comm.AllReduceSum(t, world));
  RETURN_IF_ERROR(work->Wait(comm.timeout()));
  torch::Tensor host = t.cpu();
  return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
}

// The position of the first row after `iterations` iterations (EpochOrder's numbering).
DataPosition PositionAfter(int64_t iterations, int64_t samples, int64_t global_batch) {
  const EpochPosition p =
      EpochOrder(std::max<int64_t>(samples, 1), global_batch, 0).Position(iterations, 0);
  return DataPosition{samples, global_batch, p.epoch, p.offset};
}

}  // namespace

Status WriteRankPart(const std::string& checkpoint_path, int rank, const StateDict& state) {
  std::error_code ec;
  std::filesystem::create_directories(checkpoint_path, ec);
  if (ec) return UnavailableError("cannot create " + checkpoint_path + ": " + ec.message());
  CheckpointFile file;
  file.name = RankFileName(rank);
  RETURN_IF_ERROR(
      SaveCheckpoint(checkpoint_path + "/" + file.name, state, &file.bytes, &file.digest));
  return WriteRankSidecar(checkpoint_path, rank, file);
}

StatusOr<int> CommitAndPrune(const std::string& checkpoint_path, CheckpointManifest manifest,
                             const protocol::PeriodicCheckpoints& periodic) {
  RETURN_IF_ERROR(CommitCheckpoint(checkpoint_path, std::move(manifest))
                      .WithContext("checkpoint " + checkpoint_path));
  StatusOr<int> pruned = PruneCheckpoints(periodic.dir, periodic.keep);
  if (!pruned.ok()) {
    DP_LOG_WARN("pruning {}: {}", periodic.dir, pruned.status().ToString());
    return 0;
  }
  return *pruned;
}

Status LoadFoundCheckpoint(const FoundCheckpoint& found, int64_t iterations,
                           const std::string& optimizer_name, const planner::Graph& graph,
                           const std::map<int, std::shared_ptr<LayerModule>>& modules,
                           torch::optim::Optimizer* optimizer) {
  const CheckpointManifest& manifest = found.manifest;
  if (iterations > 0 && manifest.iteration > iterations) {
    return FailedPreconditionError("checkpoint " + found.path + " is past this run's " +
                                   std::to_string(iterations) + " iterations");
  }
  if (manifest.optimizer != optimizer_name) {
    return FailedPreconditionError("checkpoint " + found.path + " holds " + manifest.optimizer +
                                   " state; this run uses " + optimizer_name);
  }
  StateDict state;
  for (const CheckpointFile& file : manifest.files) {
    ASSIGN_OR_RETURN(StateDict part, LoadCheckpoint(found.path + "/" + file.name));
    for (auto& entry : part) state.push_back(std::move(entry));
  }
  return LoadTrainingState(state, graph, modules, optimizer)
      .WithContext("checkpoint " + found.path);
}

StatusOr<int> ExportCheckpointModel(const FoundCheckpoint& found, const std::string& path) {
  StateDict model;
  for (const CheckpointFile& file : found.manifest.files) {
    ASSIGN_OR_RETURN(StateDict part, LoadCheckpoint(found.path + "/" + file.name));
    for (auto& [key, tensor] : part) {
      if (key.rfind(kOptimizerKeyPrefix, 0) != 0) model.emplace_back(key, std::move(tensor));
    }
  }
  RETURN_IF_ERROR(SaveCheckpoint(path, model));
  return static_cast<int>(model.size());
}

StatusOr<double> MeanOverRanks(Communicator& comm, const torch::Device& device, double value) {
  ASSIGN_OR_RETURN(std::vector<double> sum, SumOverRanks(comm, device, {value}));
  return sum[0] / comm.world_size();
}

// Every rank takes part in the sum whatever happened to its own file, so none is left waiting.
StatusOr<CheckpointOutcome> WriteTrainingCheckpoint(const RunSpec& spec, int rank, int64_t done,
                                                    int64_t data_samples, Executor& executor,
                                                    Communicator& comm, const torch::Device& device,
                                                    bool stop_asked) {
  const auto start = std::chrono::steady_clock::now();
  const std::string path = CheckpointPath(spec.checkpoints->dir, done);
  auto write_own = [&]() -> Status {
    ASSIGN_OR_RETURN(
        StateDict state,
        CollectTrainingState(*spec.graph, executor.modules(),
                             LayersWrittenBy(*spec.graph, spec.plan, rank), executor.optimizer()));
    return WriteRankPart(path, rank, state);
  };
  Status own = write_own();
  if (!own.ok()) DP_LOG_WARN("rank {}: checkpoint {}: {}", rank, path, own.ToString());
  ASSIGN_OR_RETURN(std::vector<double> sums,
                   SumOverRanks(comm, device, {own.ok() ? 1.0 : 0.0, stop_asked ? 1.0 : 0.0}));
  const double written = sums[0];
  if (written != comm.world_size()) {
    return CheckpointOutcome{
        UnavailableError("checkpoint " + path + ": " +
                         std::to_string(comm.world_size() - static_cast<int>(written)) +
                         " rank(s) could not write their part")};
  }
  // Every rank takes the same decision from the same sums; rank 0 commits before it stops.
  const bool stop = sums[1] > 0;
  if (rank != 0) return CheckpointOutcome{Status::Ok(), stop};
  CheckpointManifest manifest;
  manifest.iteration = done;
  manifest.world_size = comm.world_size();
  manifest.job_id = spec.job_id;
  manifest.optimizer = spec.optimizer.name;
  manifest.data = PositionAfter(done, data_samples, spec.IterationBatch());
  if (executor.loss_scaler()) manifest.loss_scaling = executor.loss_scaler()->state();
  StatusOr<int> pruned = CommitAndPrune(path, manifest, *spec.checkpoints);
  // A failed commit stops the other ranks all the same; the job then resumes from the previous
  // checkpoint.
  if (!pruned.ok()) return CheckpointOutcome{pruned.status(), stop};
  DP_LOG_INFO("checkpoint {} written in {:.0f} ms ({} older removed)", path, MillisSince(start),
              *pruned);
  return CheckpointOutcome{Status::Ok(), stop};
}

// The ranks check with a sum that they all found the same checkpoint.
StatusOr<int64_t> ResumeFromCheckpoint(const RunSpec& spec, int rank, int64_t data_samples,
                                       Executor& executor, Communicator& comm,
                                       const torch::Device& device, std::ostream& out) {
  if (!spec.checkpoints) return int64_t{0};
  ASSIGN_OR_RETURN(std::optional<FoundCheckpoint> found,
                   FindLatestCheckpoint(spec.checkpoints->dir));
  const int64_t first = found ? found->manifest.iteration : 0;
  ASSIGN_OR_RETURN(std::vector<double> sum,
                   SumOverRanks(comm, device, {static_cast<double>(first)}));
  if (sum[0] != static_cast<double>(first) * comm.world_size()) {
    return FailedPreconditionError("the ranks found different checkpoints in " +
                                   spec.checkpoints->dir + " (rank " + std::to_string(rank) +
                                   " found iteration " + std::to_string(first) + ")");
  }
  if (!found) return int64_t{0};
  const CheckpointManifest& manifest = found->manifest;
  RETURN_IF_ERROR(LoadFoundCheckpoint(*found, spec.iterations, spec.optimizer.name, *spec.graph,
                                      executor.modules(), executor.optimizer()));
  // Every rank read the same manifest, so every rank's scaler goes on alike.
  if (manifest.loss_scaling) executor.RestoreLossScaler(*manifest.loss_scaling);
  // A log line on stdout, so that it reaches the job's logs (`deepool logs`).
  if (rank == 0) {
    const DataPosition now = PositionAfter(manifest.iteration, data_samples, spec.IterationBatch());
    out << "resumed from " << found->path << " (iteration " << manifest.iteration << " of "
        << spec.iterations << ", epoch " << now.epoch << " at sample " << now.offset
        << "; written by " << manifest.world_size << " rank(s))" << std::endl;
    if (manifest.data && !(*manifest.data == now)) {
      out << "warning: the checkpoint was trained on " << manifest.data->samples
          << " samples at a global batch of " << manifest.data->global_batch << " (epoch "
          << manifest.data->epoch << " at sample " << manifest.data->offset << "); this run has "
          << now.samples << " at " << now.global_batch
          << ": it goes on from the same iteration, not from the same sample" << std::endl;
    }
  }
  return manifest.iteration;
}

}  // namespace deepool::worker

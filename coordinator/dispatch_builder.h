// DispatchBuilder: what the coordinator sends workers for a job, built from the job's record:
// its run spec (protocol/run_spec.h), its TRAIN tasks (one per node, the rank-0 node's first),
// the spec of a BG job run inside a FG executor, a PROFILE task, and the periodic checkpoints
// and precision these carry.
//
// It decides nothing about devices: the Scheduler has chosen them (admission.h) and holds them
// in its ledger; the builder only turns a placement into messages. Every method is a function
// of its arguments, the defaults given at construction and the nodes' records (read through
// NodeRegistry, which has its own lock), so it may be called from any thread, with or without
// the Scheduler's lock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/device_ledger.h"
#include "coordinator/dispatcher.h"
#include "coordinator/job.h"
#include "coordinator/node_registry.h"
#include "planner/precision.h"
#include "protocol/run_spec.h"

namespace deepool::coordinator {

// The cluster's settings that go into what is dispatched (SchedulerOptions carries them).
struct DispatchDefaults {
  // --timeout-s for executors (0: none).
  int64_t executor_timeout_s = 0;
  // Periodic checkpoints for FG jobs whose spec asks for none: ROOT/JOB_ID every that many
  // seconds. Empty root: no default.
  std::string checkpoint_root;
  double checkpoint_every_seconds = 600;
};

// The PROFILE task's parts that the Scheduler chooses: which task, where, what is measured.
struct ProfileRequest {
  std::string task_id;
  DeviceKey where;
  std::string device_type;
  std::string graph_json;  // the very graph the job will be planned with
  std::vector<int64_t> batch_sizes;
  // The precision the worker measures at (ProfilePrecisionOn); none: the worker's default.
  std::optional<planner::Precision> precision;
};

class DispatchBuilder {
 public:
  // `nodes` must outlive the builder.
  DispatchBuilder(const NodeRegistry* nodes, DispatchDefaults defaults);

  // The precision `job` trains at on `devices` (jobspec::TrainingPrecision): whether every node
  // among them reads executor protocol 6 decides a default.
  planner::Precision PrecisionOn(const JobRecord& job, const std::vector<DeviceKey>& devices) const;
  // The job's periodic checkpoints: its spec's, else the cluster default for a FG job.
  std::optional<protocol::PeriodicCheckpoints> PeriodicCheckpointsOf(const JobRecord& job) const;
  // Whether the job writes periodic checkpoints at an interval, so it can be asked to stop at
  // its next one (a resize, a preemption, an evacuation).
  bool StopsAtCheckpoints(const JobRecord& job) const;

  // The run spec every rank of the job's attempt reads; the planner's documents go out unparsed.
  std::string RunSpecJson(const JobRecord& job, planner::Precision precision,
                          const std::string& graph_json, const std::string& plan_json) const;
  // What a FG executor needs to run BG job `bg` beside its rank (TrainTask.background_json).
  std::string BackgroundJson(const JobRecord& bg, planner::Precision precision,
                             const std::string& graph_json) const;
  // Rank r on rank_devices[r], with its node's name (the node id where the node is unknown).
  std::vector<RankPlacement> PlaceRanks(const std::vector<DeviceKey>& rank_devices) const;
  // One TRAIN task per node holding ranks of `placements` (rank order), the rank-0 node's first
  // (phase kSent) and the others waiting for its store address; none carries a store address.
  std::vector<Task> MakeTrainTasks(const JobRecord& job, int64_t attempt,
                                   const std::vector<RankPlacement>& placements,
                                   const std::string& run_spec, bool background) const;
  // The PROFILE task measuring `job`'s layers as `request` says.
  Task MakeProfileTask(const JobRecord& job, ProfileRequest request) const;

 private:
  const NodeRegistry* nodes_;
  const DispatchDefaults defaults_;
};

}  // namespace deepool::coordinator

#include "coordinator/dispatch_builder.h"

#include <map>
#include <utility>

#include "jobspec/job_spec.h"

namespace deepool::coordinator {
namespace {

// The optimizer, data and eval of a job as its run spec carries them (protocol/training_spec.h).
protocol::OptimizerSpec ToRunSpec(const jobspec::OptimizerSpec& opt) {
  return jobspec::RunSpecOptimizer(opt);
}

protocol::DataSpec ToRunSpec(const jobspec::DataSpec& data) {
  protocol::DataSpec spec;
  spec.kind = data.kind;
  spec.seed = static_cast<uint64_t>(data.seed);  // unsigned in the run spec
  spec.path = data.path;
  spec.skip_bad = data.skip_bad;
  spec.dtype = data.dtype;
  return spec;
}

protocol::EvalSpec ToRunSpec(const jobspec::EvalSpec& eval) {
  return protocol::EvalSpec{ToRunSpec(eval.data), eval.every_iterations, eval.batch};
}

}  // namespace

DispatchBuilder::DispatchBuilder(const NodeRegistry* nodes, DispatchDefaults defaults)
    : nodes_(nodes), defaults_(std::move(defaults)) {}

planner::Precision DispatchBuilder::PrecisionOn(const JobRecord& job,
                                                const std::vector<DeviceKey>& devices) const {
  std::string device_type;  // a job's devices are all of one type
  bool read_precision = !devices.empty();
  for (const DeviceKey& key : devices) {
    StatusOr<NodeRecord> node = nodes_->Get(key.first);
    read_precision =
        read_precision && node.ok() && node->protocol.Contains(protocol::kPrecisionProtocolVersion);
    if (!node.ok()) continue;
    for (const DeviceInfo& device : node->devices) {
      if (device.device == key.second) device_type = device.type;
    }
  }
  return jobspec::TrainingPrecision(job.spec, device_type, read_precision);
}

std::optional<protocol::PeriodicCheckpoints> DispatchBuilder::PeriodicCheckpointsOf(
    const JobRecord& job) const {
  protocol::PeriodicCheckpoints periodic;
  if (!job.spec.checkpoint_dir.empty()) {
    periodic.dir = job.spec.checkpoint_dir;
    periodic.every_iterations = job.spec.checkpoint_every_iterations;
    periodic.every_seconds = job.spec.checkpoint_every_seconds;
    periodic.keep = job.spec.checkpoint_keep;
    return periodic;
  }
  if (defaults_.checkpoint_root.empty()) return std::nullopt;
  periodic.dir = defaults_.checkpoint_root + "/" + job.id;
  periodic.every_seconds = defaults_.checkpoint_every_seconds;
  return periodic;
}

bool DispatchBuilder::StopsAtCheckpoints(const JobRecord& job) const {
  const std::optional<protocol::PeriodicCheckpoints> periodic = PeriodicCheckpointsOf(job);
  return periodic && (periodic->every_iterations >= 1 || periodic->every_seconds > 0);
}

std::string DispatchBuilder::RunSpecJson(const JobRecord& job, planner::Precision precision,
                                         const std::string& graph_json,
                                         const std::string& plan_json) const {
  protocol::RunSpec spec;
  spec.precision = precision;
  spec.job_id = job.id;
  spec.iterations = job.spec.iterations;
  spec.epochs = job.spec.epochs;
  if (!job.spec.init_path.empty()) spec.init_path = job.spec.init_path;
  spec.seed = static_cast<uint64_t>(job.spec.seed);
  spec.optimizer = ToRunSpec(job.spec.optimizer);
  spec.data = ToRunSpec(job.spec.data);
  spec.sync_batch_norm = SynchronizesBatchNorm(job.spec);
  spec.gradient_bucket_mb = job.spec.gradient_bucket_mb;
  // The plan is for one pass of global_batch / N (PassBatch), so the run spec's iteration batch
  // (plan batch x N) is the job's global batch.
  spec.accumulation_steps = job.spec.accumulation_steps;
  spec.gradient_precision = job.spec.gradient_precision;
  spec.memory_format = job.spec.memory_format;  // auto: each rank resolves it
  if (!job.spec.checkpoint_path.empty()) spec.checkpoint_path = job.spec.checkpoint_path;
  spec.checkpoints = PeriodicCheckpointsOf(job);
  if (job.spec.eval) spec.eval = ToRunSpec(*job.spec.eval);
  // The planner's documents go out unparsed; the executor ranks check them.
  return protocol::RunSpecToJson(spec, protocol::PlannedDocuments{graph_json, plan_json});
}

std::string DispatchBuilder::BackgroundJson(const JobRecord& bg, planner::Precision precision,
                                            const std::string& graph_json) const {
  protocol::BackgroundSpec background;
  background.job_id = bg.id;
  background.batch_size = bg.spec.global_batch;
  background.iterations = bg.spec.iterations;
  background.seed = static_cast<uint64_t>(bg.spec.seed);
  background.precision = precision;
  background.optimizer = ToRunSpec(bg.spec.optimizer);
  background.data = ToRunSpec(bg.spec.data);
  background.checkpoints = PeriodicCheckpointsOf(bg);
  return protocol::BackgroundToJson(background, graph_json).dump();
}

std::vector<RankPlacement> DispatchBuilder::PlaceRanks(
    const std::vector<DeviceKey>& rank_devices) const {
  std::vector<RankPlacement> placements;
  for (size_t rank = 0; rank < rank_devices.size(); ++rank) {
    const DeviceKey& key = rank_devices[rank];
    StatusOr<NodeRecord> node = nodes_->Get(key.first);
    placements.push_back(
        {static_cast<int>(rank), key.first, node.ok() ? node->name : key.first, key.second});
  }
  return placements;
}

std::vector<Task> DispatchBuilder::MakeTrainTasks(const JobRecord& job, int64_t attempt,
                                                  const std::vector<RankPlacement>& placements,
                                                  const std::string& run_spec,
                                                  bool background) const {
  std::vector<Task> tasks;
  std::map<std::string, size_t> index_of;  // node id -> index in tasks
  for (const RankPlacement& p : placements) {
    auto it = index_of.find(p.node_id);
    if (it == index_of.end()) {
      Task task;
      task.id = job.id + ".a" + std::to_string(attempt) + "." + p.node_id;
      task.job_id = job.id;
      task.node_id = p.node_id;
      task.attempt = attempt;
      task.rank0_node = tasks.empty();
      task.phase = task.rank0_node ? TaskPhase::kSent : TaskPhase::kWaitingForStore;
      v1::TaskAssignment& a = task.assignment;
      a.set_task_id(task.id);
      a.set_job_id(job.id);
      v1::TrainTask* train = a.mutable_train();
      train->set_run_spec_json(run_spec);
      train->set_world_size(static_cast<int>(placements.size()));
      train->set_background(background);
      train->set_timeout_s(defaults_.executor_timeout_s);
      train->set_owner(job.owner);  // the worker checks the paths against this user's roots
      it = index_of.emplace(p.node_id, tasks.size()).first;
      tasks.push_back(std::move(task));
    }
    v1::RankDevice* rd = tasks[it->second].assignment.mutable_train()->add_ranks();
    rd->set_rank(p.rank);
    rd->set_device(p.device);
  }
  return tasks;
}

Task DispatchBuilder::MakeProfileTask(const JobRecord& job, ProfileRequest request) const {
  Task task;
  task.id = std::move(request.task_id);
  task.job_id = job.id;
  task.node_id = request.where.first;
  v1::TaskAssignment& assignment = task.assignment;
  assignment.set_task_id(task.id);
  assignment.set_job_id(job.id);
  v1::ProfileTask* profile = assignment.mutable_profile();
  profile->set_model(job.spec.model);
  profile->set_graph_json(std::move(request.graph_json));
  profile->set_device(request.where.second);
  profile->set_device_type(request.device_type);
  for (int64_t batch : request.batch_sizes) profile->add_batch_sizes(batch);
  profile->mutable_optimizer()->set_name(job.spec.optimizer.name);
  profile->mutable_optimizer()->set_momentum(job.spec.optimizer.momentum);
  profile->mutable_optimizer()->set_weight_decay(job.spec.optimizer.weight_decay);
  if (request.precision) profile->set_precision(planner::PrecisionName(*request.precision));
  return task;
}

}  // namespace deepool::coordinator

#include "coordinator/admission.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "coordinator/device_memory.h"
#include "coordinator/policy/fifo_policy.h"
#include "coordinator/policy/pool_state.h"
#include "protocol/training_spec.h"
#include "protocol/version.h"

namespace deepool::coordinator {
namespace {

// The feature of `spec` that needs executor protocol `version` (jobspec::RequiredProtocolVersion):
// "adamw", "image_folder data", "epochs", "evaluation" or "image_folder eval data".
std::string ProtocolFeature(const jobspec::JobSpec& spec, int version) {
  if (protocol::OptimizerProtocolVersion(spec.optimizer.name) == version) {
    return spec.optimizer.name;
  }
  if (protocol::OptimizerProtocolVersion(jobspec::RunSpecOptimizer(spec.optimizer)) == version) {
    return "training recipes";
  }
  if (protocol::DataProtocolVersion(spec.data.kind) == version) return spec.data.kind + " data";
  if (spec.epochs > 0 && protocol::kEpochsProtocolVersion == version) return "epochs";
  if (!spec.init_path.empty() && protocol::kInitProtocolVersion == version) return "init";
  if (spec.precision && protocol::kPrecisionProtocolVersion == version) {
    return planner::PrecisionName(*spec.precision);
  }
  if (protocol::kAccumulationProtocolVersion == version) {
    if (spec.accumulation_steps != 1) return "gradient accumulation";
    if (spec.gradient_precision != planner::Precision::kFp32) return "bf16 gradient all-reduce";
  }
  if (spec.memory_format != planner::MemoryFormat::kAuto &&
      protocol::kMemoryFormatProtocolVersion == version) {
    return std::string("memory format ") + planner::MemoryFormatName(spec.memory_format);
  }
  if (spec.eval && protocol::kEvaluationProtocolVersion == version) return "evaluation";
  if (spec.eval && protocol::DataProtocolVersion(spec.eval->data.kind) == version) {
    return spec.eval->data.kind + " eval data";
  }
  return spec.data.kind + " data";
}

// "needs workers that speak executor protocol 2 (adamw); 3 of 4 nodes speak only 1: upgrade
// them": why no schedulable node reads the version a job's run spec is written at.
std::string ProtocolReason(const JobRecord& job, int version,
                           const std::vector<NodeRecord>& nodes) {
  int schedulable = 0;
  int older = 0;  // speak only versions before it: the workers need upgrading
  int newer = 0;  // read only versions after it: the coordinator does
  std::set<int> older_newest;
  for (const NodeRecord& node : nodes) {
    if (!node.schedulable()) continue;
    ++schedulable;
    if (node.protocol.newest < version) {
      ++older;
      older_newest.insert(node.protocol.newest);
    } else if (node.protocol.oldest > version) {
      ++newer;
    }
  }
  std::string reason = "needs workers that speak executor protocol " + std::to_string(version) +
                       " (" + ProtocolFeature(job.spec, version) + ")";
  const std::string of = " of " + std::to_string(schedulable) + " nodes ";
  if (older > 0) {
    reason += "; " + std::to_string(older) + of + "speak only " +
              (older_newest.size() == 1 ? "" : "up to ") + std::to_string(*older_newest.rbegin()) +
              ": upgrade them";
  }
  if (newer > 0) {
    reason += "; " + std::to_string(newer) + of + "no longer read it: upgrade the coordinator";
  }
  return reason;
}

// Seconds the job has been RUNNING over all its attempts, up to `now_ms` (from its history).
double AttainedSeconds(const JobRecord& record, int64_t now_ms) {
  int64_t running_since = -1;
  double attained_ms = 0;
  for (const StateChange& change : record.history) {
    if (running_since >= 0) attained_ms += static_cast<double>(change.time_ms - running_since);
    running_since = change.state == JobState::kRunning ? change.time_ms : -1;
  }
  if (running_since >= 0) attained_ms += static_cast<double>(now_ms - running_since);
  return attained_ms / 1000;
}

// The iterations the job has left: its latest report's total (else its spec's) less those it
// completed; 0 when neither says (a job trained by epochs before its first report).
int64_t RemainingIterations(const JobRecord& record) {
  const int64_t total =
      record.progress.iterations > 0 ? record.progress.iterations : record.spec.iterations;
  if (total <= 0) return 0;
  return std::max<int64_t>(total - record.progress.iteration, 1);
}

// What a policy weighs of a placed job: its user, request, since when it holds its devices and
// how long it has run in all (from its history), what it has left, and whether it may be
// preempted.
void DescribePlaced(const JobRecord& record, const AdmissionInput& input, policy::PolicyJob* job) {
  job->user = record.owner;
  job->priority = record.spec.priority;
  job->requested_devices = record.spec.gpus;
  job->amplification_limit = record.spec.amplification_limit;
  job->global_batch = record.spec.global_batch;
  job->remaining_iterations = RemainingIterations(record);
  job->preemptible = input.preemptible.count(record.id) > 0;
  int64_t placed_at = record.submitted_ms;
  for (const StateChange& change : record.history) {
    if (change.state == JobState::kPending) placed_at = -1;
    if (change.state != JobState::kPending && placed_at < 0) placed_at = change.time_ms;
  }
  job->placed_at_s = static_cast<double>(std::max<int64_t>(placed_at, 0)) / 1000;
  job->attained_s = AttainedSeconds(record, input.now_ms);
}

// A node's devices, those with the most memory (DeviceMemoryBytes) first and otherwise in the
// node's order. A policy packs a FG job's devices within a node in snapshot order, so among
// devices of one type of different sizes a job gets the largest free ones, and the least memory
// its plan must fit (ShapeOf) is as large as the node allows.
std::vector<const DeviceInfo*> LargestMemoryFirst(const std::vector<DeviceInfo>& devices) {
  std::vector<std::pair<int64_t, const DeviceInfo*>> by_memory;
  by_memory.reserve(devices.size());
  for (const DeviceInfo& device : devices) {
    by_memory.emplace_back(DeviceMemoryBytes(device), &device);
  }
  std::stable_sort(by_memory.begin(), by_memory.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<const DeviceInfo*> ordered;
  ordered.reserve(devices.size());
  for (const auto& entry : by_memory) ordered.push_back(entry.second);
  return ordered;
}

// Devices a grown job still stopping is to be placed on (AdmissionInput::growing) shown held by it,
// where no FG job holds them and they are in the snapshot (`type_of`: schedulable devices). Returns
// the devices so shown, each with the job it is reserved for.
std::map<DeviceKey, std::string> ReserveGrowths(const AdmissionInput& input,
                                                const std::map<DeviceKey, std::string>& type_of,
                                                std::map<std::string, policy::PolicyJob>* holders) {
  std::map<DeviceKey, std::string> reserved;
  for (const auto& [job_id, devices] : input.growing) {
    auto holder = holders->find(job_id);
    if (holder == holders->end() || holder->second.role != policy::Role::kFg) continue;
    for (const DeviceKey& key : devices) {
      if (!type_of.count(key) || input.ledger.ForegroundOf(key) ||
          !reserved.emplace(key, job_id).second) {
        continue;
      }
      holder->second.devices.push_back(key);
    }
  }
  return reserved;
}

// Why a BG job waits for a device reserved for a grown job (ReserveGrowths): the policy sees the
// device held by that job, so it would say the job's rank there has yet to start, yet no rank of
// it runs there, nor will before it has stopped at its checkpoint and been placed anew. A BG job is
// not placed there meanwhile: the grown job's grant would displace it soon after.
std::string ReservedDeviceReason(const AdmissionInput& input, const DeviceKey& device,
                                 const std::string& grown_job, std::string_view policy_name) {
  const size_t held = input.ledger.DevicesOf(grown_job).size();
  const size_t grown_to = held + input.growing.at(grown_job).size();
  return "device " + device.first + "/" + device.second + " is reserved for FG job " + grown_job +
         ", grown by the " + std::string(policy_name) + " policy from " + std::to_string(held) +
         " to " + std::to_string(grown_to) +
         " devices, until it stops at its checkpoint (a BG job started there would make way for "
         "it when it resumes)";
}

// The snapshot a policy sees of an admission input: the pending jobs (by pointer into `input`)
// and, as placed jobs, the holders of the ledger's devices (and the devices reserved for grown
// jobs still stopping, also returned in *reserved with the job each is reserved for).
policy::PolicySnapshot SnapshotOf(const AdmissionInput& input,
                                  std::map<DeviceKey, std::string>* reserved) {
  policy::PolicySnapshot snapshot;
  for (const NodeRecord& node : input.nodes) {
    if (!node.schedulable()) continue;
    for (const DeviceInfo* device : LargestMemoryFirst(node.devices)) {
      policy::PolicyDevice entry;
      entry.key = {node.id, device->device};
      entry.type = device->type;
      entry.protocol_oldest = node.protocol.oldest;
      entry.protocol_newest = node.protocol.newest;
      entry.idle_fraction = input.ledger.IdleFraction(entry.key);
      entry.idle_known = input.ledger.IdleKnown(entry.key);
      entry.fg_rank_running = input.running_fg_ranks.count(entry.key) > 0;
      snapshot.devices.push_back(std::move(entry));
    }
  }
  std::map<DeviceKey, std::string> type_of;
  for (const policy::PolicyDevice& device : snapshot.devices) type_of[device.key] = device.type;
  snapshot.now_s = static_cast<double>(input.now_ms) / 1000;
  // Holders first (in the order of their ids), then the pending jobs in submission order.
  std::map<std::string, policy::PolicyJob> holders;
  for (const auto& [key, use] : input.ledger.Uses()) {
    for (const auto& [holder, role] :
         {std::pair{use.fg_job, policy::Role::kFg}, std::pair{use.bg_job, policy::Role::kBg}}) {
      if (holder.empty()) continue;
      policy::PolicyJob& job = holders[holder];
      job.id = holder;
      job.role = role;
      job.devices.push_back(key);
    }
  }
  *reserved = ReserveGrowths(input, type_of, &holders);
  std::map<std::string, const JobRecord*> placed;
  for (const JobSnapshot& job : input.placed) placed.emplace(job->id, job.get());
  auto add_curves = [&input](policy::PolicyJob& job) {
    auto curves = input.curves.find(job.id);
    if (curves != input.curves.end()) job.curves = *curves->second;
  };
  for (auto& [id, job] : holders) {
    auto record = placed.find(id);
    if (record != placed.end()) DescribePlaced(*record->second, input, &job);
    add_curves(job);
    job.device_type = type_of[job.devices.front()];
    job.seq = static_cast<int64_t>(snapshot.jobs.size());
    snapshot.jobs.push_back(std::move(job));
  }
  for (const JobSnapshot& record : input.pending) {
    const JobRecord& job = *record;
    policy::PolicyJob entry;
    entry.id = job.id;
    entry.user = job.owner;
    entry.role = job.spec.role == JobRole::kBg ? policy::Role::kBg : policy::Role::kFg;
    entry.priority = job.spec.priority;
    entry.seq = static_cast<int64_t>(snapshot.jobs.size());  // submission order, as given
    entry.requested_devices = job.spec.gpus;
    entry.amplification_limit = job.spec.amplification_limit;
    entry.global_batch = job.spec.global_batch;
    entry.remaining_iterations = RemainingIterations(job);
    entry.protocol_version = jobspec::RequiredProtocolVersion(job.spec);
    entry.shrinks_to_fit = ReplansOnNodeLoss(job.spec) && job.attempt >= 1;
    if (input.now_ms > 0) entry.attained_s = AttainedSeconds(job, input.now_ms);
    add_curves(entry);
    snapshot.jobs.push_back(std::move(entry));
  }
  return snapshot;
}

ReasonCode ReasonCodeOf(policy::WaitCode code) {
  switch (code) {
    case policy::WaitCode::kQueuedBehind:
      return ReasonCode::kQueuedBehind;
    case policy::WaitCode::kNotEnoughDevices:
      return ReasonCode::kNotEnoughDevices;
    case policy::WaitCode::kWorkerProtocol:
      return ReasonCode::kWorkerProtocol;
    case policy::WaitCode::kWaitingForBgSlot:
      return ReasonCode::kWaitingForBgSlot;
    case policy::WaitCode::kWaitingForFgRank:
      return ReasonCode::kWaitingForFgRank;
    case policy::WaitCode::kWaitingForDevices:
    case policy::WaitCode::kFairShare:
      break;
  }
  return ReasonCode::kWaitingForDevices;
}

// The shape of a grant's devices: as many per node as its fullest node holds, and the least
// memory among them (DeviceMemoryBytes; of those whose memory is known).
ClusterShape ShapeOf(const policy::Grant& grant,
                     const std::map<std::string_view, const NodeRecord*>& nodes) {
  std::map<std::string, int> per_node;
  for (const DeviceKey& key : grant.devices) ++per_node[key.first];
  ClusterShape shape;
  shape.device_type = grant.device_type;
  shape.devices = static_cast<int>(grant.devices.size());
  for (const DeviceKey& key : grant.devices) {
    auto node = nodes.find(key.first);
    if (node == nodes.end()) continue;
    for (const DeviceInfo& device : node->second->devices) {
      const int64_t memory = device.device == key.second ? DeviceMemoryBytes(device) : 0;
      if (memory > 0 && (shape.device_memory_bytes == 0 || memory < shape.device_memory_bytes)) {
        shape.device_memory_bytes = memory;
      }
    }
  }
  for (const auto& [node, count] : per_node) {
    shape.devices_per_node = std::max(shape.devices_per_node, count);
  }
  shape.nodes = shape.devices_per_node > 0
                    ? (shape.devices + shape.devices_per_node - 1) / shape.devices_per_node
                    : 0;
  return shape;
}

}  // namespace

std::string IdlePercent(double fraction) { return policy::Percent(fraction); }

Admission Admit(AdmissionInput input) { return Admit(input, policy::FifoPolicy()); }

Admission Admit(const AdmissionInput& input, const policy::Policy& policy) {
  std::map<DeviceKey, std::string> reserved;  // for grown jobs still stopping
  const policy::PolicySnapshot snapshot = SnapshotOf(input, &reserved);
  policy::Decisions decisions = policy.Decide(snapshot);
  std::map<std::string, const JobRecord*> pending;
  for (const JobSnapshot& job : input.pending) pending.emplace(job->id, job.get());
  std::map<std::string, DeviceKey> bg_device;  // the device each BG holder holds
  for (const auto& [key, use] : input.ledger.Uses()) {
    if (!use.bg_job.empty()) bg_device.emplace(use.bg_job, key);
  }
  std::map<std::string_view, const NodeRecord*> node_by_id;
  if (!decisions.grants.empty()) {
    for (const NodeRecord& node : input.nodes) node_by_id.emplace(node.id, &node);
  }
  Admission out;
  out.round =
      std::make_shared<const PolicyRound>(SummarizeRound(policy.Name(), snapshot, decisions));
  for (policy::Grant& grant : decisions.grants) {
    ClusterShape shape = ShapeOf(grant, node_by_id);
    if (pending.at(grant.job_id)->spec.role == JobRole::kBg) {
      out.background.push_back(
          {grant.job_id, grant.devices.front(), grant.idle_fraction, std::move(shape)});
      continue;
    }
    out.foreground.push_back({grant.job_id, std::move(grant.devices), std::move(shape)});
  }
  // Each growth is also among the preemptions (policy::Resize): it is carried out as one.
  std::map<std::string_view, const policy::Resize*> resize_of;
  for (const policy::Resize& resize : decisions.resizes) resize_of.emplace(resize.job_id, &resize);
  for (const policy::Preemption& preempted : decisions.preemptions) {
    auto bg = bg_device.find(preempted.job_id);
    if (bg != bg_device.end()) {
      out.displaced.push_back({preempted.job_id, preempted.for_job, bg->second});
      continue;
    }
    FgPreemption& moved = out.preempted.emplace_back(
        FgPreemption{preempted.job_id, preempted.for_job, preempted.message});
    auto resize = resize_of.find(preempted.job_id);
    if (resize == resize_of.end()) continue;
    const std::vector<DeviceKey>& devices = resize->second->devices;  // held ones first
    moved.from_devices = resize->second->from_devices;
    moved.grow_to = static_cast<int>(devices.size());
    moved.added.assign(devices.begin() + std::min<size_t>(moved.from_devices, devices.size()),
                       devices.end());
  }
  for (policy::Wait& wait : decisions.waits) {
    const JobRecord& job = *pending.at(wait.job_id);
    if (wait.code == policy::WaitCode::kWorkerProtocol) {
      wait.message = ProtocolReason(job, jobspec::RequiredProtocolVersion(job.spec), input.nodes);
    }
    auto grown = wait.code == policy::WaitCode::kWaitingForFgRank ? reserved.find(wait.device)
                                                                  : reserved.end();
    if (grown != reserved.end()) {
      wait.message = ReservedDeviceReason(input, grown->first, grown->second, policy.Name());
    }
    out.pending.push_back({wait.job_id, ReasonCodeOf(wait.code), std::move(wait.message)});
  }
  out.shares = std::move(decisions.shares);
  return out;
}

std::map<std::string, int> QueuePositions(std::vector<QueuedJob> pending) {
  // Admit's order.
  std::stable_sort(pending.begin(), pending.end(),
                   [](const QueuedJob& a, const QueuedJob& b) { return a.priority > b.priority; });
  std::map<std::string, int> positions;
  int fg = 0;
  int bg = 0;
  for (const QueuedJob& job : pending) positions[job.id] = job.role == JobRole::kBg ? ++bg : ++fg;
  return positions;
}

}  // namespace deepool::coordinator

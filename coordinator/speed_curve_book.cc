#include "coordinator/speed_curve_book.h"

#include <algorithm>

#include "common/logging.h"
#include "coordinator/device_memory.h"
#include "coordinator/profile_cache_key.h"
#include "jobspec/job_spec.h"
#include "protocol/version.h"

namespace deepool::coordinator {

std::vector<PoolDeviceType> PoolDeviceTypes(const std::vector<NodeRecord>& nodes) {
  std::map<std::string, PoolDeviceType> by_type;
  for (const NodeRecord& node : nodes) {
    if (!node.schedulable()) continue;
    std::map<std::string, int> on_node;
    for (const DeviceInfo& device : node.devices) ++on_node[device.type];
    for (const auto& [type, count] : on_node) {
      PoolDeviceType& entry = by_type[type];
      entry.type = type;
      entry.devices += count;
      entry.devices_per_node = std::max(entry.devices_per_node, count);
      entry.reads_precision =
          entry.reads_precision && node.protocol.Contains(protocol::kPrecisionProtocolVersion);
    }
    for (const DeviceInfo& device : node.devices) {
      PoolDeviceType& entry = by_type[device.type];
      const int64_t memory = DeviceMemoryBytes(device);
      if (memory > 0 && (entry.device_memory_bytes == 0 || memory < entry.device_memory_bytes)) {
        entry.device_memory_bytes = memory;
      }
    }
  }
  std::vector<PoolDeviceType> types;
  for (auto& [type, entry] : by_type) types.push_back(std::move(entry));
  return types;
}

SpeedCurveBook::SpeedCurveBook(const PlanningBackend* planner, ProfileLookup profiles,
                               const Clock* clock, Clock::Duration planning_budget)
    : planner_(planner),
      profiles_(std::move(profiles)),
      clock_(clock),
      planning_budget_(planning_budget) {}

int SpeedCurveBook::WantedDevices(const JobSpec& spec, const PoolDeviceType& type) {
  if (spec.role == JobRole::kBg) return 1;  // a BG job trains on one device
  return std::max(1, std::min(spec.gpus, type.devices));
}

int64_t SpeedCurveBook::GenerationLocked(const std::string& profile_key,
                                         const std::string& type) const {
  auto found = generations_.find({profile_key, type});
  return found == generations_.end() ? 0 : found->second;
}

bool SpeedCurveBook::NeedsPlanLocked(const std::string& job_id, const std::string& profile_key,
                                     const PoolDeviceType& type, int wanted) const {
  auto job = jobs_.find(job_id);
  if (job == jobs_.end()) return true;
  auto planned = job->second.planned.find(type.type);
  if (planned == job->second.planned.end()) return true;
  const Planned& was = planned->second;
  if (was.profile_generation != GenerationLocked(profile_key, type.type)) return true;
  if (was.devices_per_node != type.devices_per_node) return true;
  if (was.device_memory_bytes != type.device_memory_bytes) return true;
  // A longer curve than the pool needs now serves as well (a node lost and back costs nothing);
  // a failed one is retried when asked for another length.
  return was.ok ? was.devices < wanted : was.devices != wanted;
}

int SpeedCurveBook::Refresh(const std::vector<JobSnapshot>& jobs,
                            const std::vector<PoolDeviceType>& types) {
  // PENDING jobs first: the next round decides them. BG jobs too: their one-device times choose
  // the type a BG job takes among equally idle devices.
  std::vector<const JobRecord*> order;
  for (const JobSnapshot& job : jobs) order.push_back(job.get());
  std::stable_partition(order.begin(), order.end(),
                        [](const JobRecord* job) { return job->state == JobState::kPending; });
  struct Wanted {
    const JobRecord* job;
    std::string model_key;
    std::string profile_key;  // ProfileCacheKey at the precision it would train at on `type`
    const PoolDeviceType* type;
    int devices;
  };
  std::vector<Wanted> to_plan;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, JobEntry> kept;
    for (const JobRecord* job : order) {
      auto known = jobs_.find(job->id);
      if (known != jobs_.end()) kept.insert(jobs_.extract(known));
    }
    jobs_.swap(kept);  // jobs no longer active are forgotten
    for (const JobRecord* job : order) {
      auto known = jobs_.find(job->id);
      // The model key of a job seen before is kept: an inline graph's costs a hash of its text.
      const std::string model_key =
          known != jobs_.end() ? known->second.model_key : planner_->ModelKey(job->spec);
      for (const PoolDeviceType& type : types) {
        const int wanted = WantedDevices(job->spec, type);
        std::string profile_key = ProfileCacheKey(
            model_key, jobspec::TrainingPrecision(job->spec, type.type, type.reads_precision));
        if (NeedsPlanLocked(job->id, profile_key, type, wanted)) {
          to_plan.push_back({job, model_key, std::move(profile_key), &type, wanted});
        }
      }
    }
  }
  const Clock::TimePoint deadline = clock_->Now() + planning_budget_;
  int planned = 0;
  for (const Wanted& wanted : to_plan) {
    if (planned > 0 && clock_->Now() >= deadline) break;  // the rest at the next Refresh
    PlanOne(*wanted.job, wanted.model_key, wanted.profile_key, *wanted.type, wanted.devices);
    ++planned;
  }
  return planned;
}

std::optional<std::string> SpeedCurveBook::ProfileFor(const JobRecord& job,
                                                      const std::string& profile_key,
                                                      const std::string& type) const {
  // As Scheduler::ReserveForegroundLocked chooses, except that a job not measured yet is
  // curved on the preset meanwhile rather than waiting for its PROFILE task.
  const bool analytical = planner_->HasAnalyticalPreset(type);
  if (job.spec.profile == "analytical" && analytical) return std::string();
  StatusOr<std::optional<std::string>> cached = profiles_(profile_key, type);
  if (cached.ok() && cached->has_value()) return **cached;
  if (!cached.ok()) {
    DP_LOG_WARN("job {}: cannot read the profile cache for its speed-up curve on {}: {}", job.id,
                type, cached.status().ToString());
  }
  if (analytical) return std::string();
  return std::nullopt;
}

void SpeedCurveBook::PlanOne(const JobRecord& job, const std::string& model_key,
                             const std::string& profile_key, const PoolDeviceType& type,
                             int wanted) {
  Planned planned;
  planned.devices = wanted;
  planned.devices_per_node = type.devices_per_node;
  planned.device_memory_bytes = type.device_memory_bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    planned.profile_generation = GenerationLocked(profile_key, type.type);
  }
  StatusOr<policy::SpeedCurve> curve = NotFoundError("no profile and no analytical preset");
  if (const std::optional<std::string> profile = ProfileFor(job, profile_key, type.type)) {
    // At the precision its plan on this type would take (as Scheduler::PlanReserved does).
    JobSpec spec = job.spec;
    const planner::Precision precision =
        jobspec::TrainingPrecision(spec, type.type, type.reads_precision);
    if (spec.precision || precision != planner::Precision::kFp32) spec.precision = precision;
    ClusterShape pool;
    pool.device_type = type.type;
    pool.devices_per_node = std::max(1, std::min(type.devices_per_node, wanted));
    pool.nodes = (wanted + pool.devices_per_node - 1) / pool.devices_per_node;
    pool.devices = wanted;
    pool.device_memory_bytes = type.device_memory_bytes;
    curve = planner_->SpeedupCurve(spec, pool, *profile);
  }
  if (!curve.ok()) {
    DP_LOG_INFO("job {}: no speed-up curve on {} ({}); the policy sees it scale perfectly there",
                job.id, type.type, curve.status().ToString());
  }
  planned.ok = curve.ok();
  std::lock_guard<std::mutex> lock(mu_);
  JobEntry& entry = jobs_[job.id];
  entry.model_key = model_key;
  entry.planned[type.type] = planned;
  auto curves = std::make_shared<CurvesByType>(entry.curves ? *entry.curves : CurvesByType{});
  if (curve.ok()) {
    (*curves)[type.type] = *std::move(curve);
  } else {
    curves->erase(type.type);
  }
  entry.curves = std::move(curves);
}

void SpeedCurveBook::ProfileChanged(const std::string& profile_key,
                                    const std::string& device_type) {
  std::lock_guard<std::mutex> lock(mu_);
  ++generations_[{profile_key, device_type}];
}

std::map<std::string, std::shared_ptr<const CurvesByType>> SpeedCurveBook::Curves() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::shared_ptr<const CurvesByType>> out;
  for (const auto& [id, entry] : jobs_) {
    if (entry.curves && !entry.curves->empty()) out.emplace(id, entry.curves);
  }
  return out;
}

}  // namespace deepool::coordinator

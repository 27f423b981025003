#include "simulator/workload.h"

#include <cmath>

namespace deepool::simulator {
namespace {

constexpr int64_t kMaxGlobalBatch = 1 << 20;       // as jobspec/job_spec.cc
constexpr int64_t kMaxIterations = 1'000'000'000;  // protocol::kMaxRunIterations
constexpr double kMaxSeconds = 1e10;  // about 300 years: far beyond any trace, below overflow

Status FieldError(const std::string& field, const std::string& what) {
  return InvalidArgumentError(field + ": " + what);
}

bool HasControlCharacters(const std::string& text) {
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

Status ValidateName(const std::string& field, const std::string& value, bool required) {
  if (required && value.empty()) return FieldError(field, "must not be empty");
  if (value.size() > 128) return FieldError(field, "must be at most 128 characters");
  if (HasControlCharacters(value)) return FieldError(field, "has control characters");
  return Status::Ok();
}

}  // namespace

const char* WorkloadRoleName(WorkloadRole role) { return role == WorkloadRole::kFg ? "fg" : "bg"; }

Status ValidateWorkloadJob(const WorkloadJob& job) {
  if (job.id < 0) return FieldError("id", "must be >= 0");
  if (!(job.arrival_s >= 0 && job.arrival_s <= kMaxSeconds)) {
    return FieldError("arrival_s", "must be in [0, 1e10]");
  }
  RETURN_IF_ERROR(ValidateName("user", job.user, true));
  RETURN_IF_ERROR(ValidateName("model", job.model, true));
  RETURN_IF_ERROR(ValidateName("device_type", job.device_type, false));
  if (job.global_batch < 1 || job.global_batch > kMaxGlobalBatch) {
    return FieldError("global_batch", "must be in [1, " + std::to_string(kMaxGlobalBatch) + "]");
  }
  if (job.gpus < 1 || job.gpus > 4096) return FieldError("gpus", "must be in [1, 4096]");
  if (job.gpus > job.global_batch) {
    return FieldError("gpus", "must be <= global_batch (" + std::to_string(job.global_batch) + ")");
  }
  if (job.role == WorkloadRole::kBg && job.gpus != 1) {
    return FieldError("gpus", "a bg job runs on exactly 1 device");
  }
  if (job.priority < -1000 || job.priority > 1000) {
    return FieldError("priority", "must be in [-1000, 1000]");
  }
  if (!std::isfinite(job.amplification_limit) ||
      (job.amplification_limit != 0 && job.amplification_limit < 1)) {
    return FieldError("amplification_limit", "must be 0 (unconstrained) or >= 1");
  }
  if ((job.iterations > 0) == (job.duration_s > 0)) {
    return FieldError("iterations", "give exactly one of \"iterations\" and \"duration_s\"");
  }
  if (job.iterations < 0 || job.iterations > kMaxIterations) {
    return FieldError("iterations", "must be in [1, " + std::to_string(kMaxIterations) + "]");
  }
  if (!(job.duration_s >= 0 && job.duration_s <= kMaxSeconds)) {
    return FieldError("duration_s", "must be in (0, 1e10]");
  }
  return Status::Ok();
}

int64_t IterationsFor(const WorkloadJob& job, double iteration_s) {
  if (job.iterations > 0) return job.iterations;
  const double iterations = std::ceil(job.duration_s / iteration_s);
  if (!(iterations >= 1)) return 1;
  return iterations >= static_cast<double>(kMaxIterations) ? kMaxIterations
                                                           : static_cast<int64_t>(iterations);
}

double OfferedDeviceSeconds(const WorkloadJob& job) { return job.gpus * job.duration_s; }

}  // namespace deepool::simulator

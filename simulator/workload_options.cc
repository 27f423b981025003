#include "simulator/workload_options.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "simulator/random_draws.h"

namespace deepool::simulator {
namespace {

Status FieldError(const std::string& field, const std::string& what) {
  return InvalidArgumentError(field + ": " + what);
}

bool InRange(double value, double low, double high) {
  return value >= low && value <= high;  // false for NaN
}

Status ValidateMix(const WorkloadOptions& options) {
  if (options.models.empty()) return FieldError("models", "must name at least one model");
  double model_weight = 0;
  int max_gpus = 1;
  for (const GpuShare& share : options.gpus) max_gpus = std::max(max_gpus, share.gpus);
  for (size_t i = 0; i < options.models.size(); ++i) {
    const ModelShare& share = options.models[i];
    const std::string field = "models[" + std::to_string(i) + "].";
    if (share.model.empty()) return FieldError(field + "model", "must not be empty");
    if (!InRange(share.weight, 0, 1e9)) return FieldError(field + "weight", "must be in [0, 1e9]");
    if (share.global_batch < max_gpus || share.global_batch > (1 << 20)) {
      return FieldError(field + "global_batch", "must be in [" + std::to_string(max_gpus) +
                                                    ", 1048576] (at least the largest gpus)");
    }
    model_weight += share.weight;
  }
  if (!(model_weight > 0)) return FieldError("models", "weights must not all be 0");
  if (options.gpus.empty()) return FieldError("gpus", "must give at least one device count");
  double gpu_weight = 0;
  for (size_t i = 0; i < options.gpus.size(); ++i) {
    const std::string field = "gpus[" + std::to_string(i) + "].";
    if (options.gpus[i].gpus < 1 || options.gpus[i].gpus > 4096) {
      return FieldError(field + "gpus", "must be in [1, 4096]");
    }
    if (!InRange(options.gpus[i].weight, 0, 1e9)) {
      return FieldError(field + "weight", "must be in [0, 1e9]");
    }
    gpu_weight += options.gpus[i].weight;
  }
  if (!(gpu_weight > 0)) return FieldError("gpus", "weights must not all be 0");
  return Status::Ok();
}

Status ValidateDurations(const WorkloadOptions& options) {
  if (options.durations != DurationDistribution::kBoundedPareto) return Status::Ok();
  if (!InRange(options.pareto_alpha, 0.01, 100)) {
    return FieldError("pareto_alpha", "must be in [0.01, 100]");
  }
  if (!InRange(options.pareto_min_minutes, 1e-3, 1e7)) {
    return FieldError("pareto_min_minutes", "must be in [0.001, 1e7]");
  }
  if (!(options.pareto_max_minutes > options.pareto_min_minutes &&
        options.pareto_max_minutes <= 1e8)) {
    return FieldError("pareto_max_minutes", "must be in (pareto_min_minutes, 1e8]");
  }
  return Status::Ok();
}

}  // namespace

const char* DurationDistributionName(DurationDistribution distribution) {
  return distribution == DurationDistribution::kGavel ? "gavel" : "pareto";
}

StatusOr<DurationDistribution> ParseDurationDistribution(const std::string& name) {
  if (name == "gavel") return DurationDistribution::kGavel;
  if (name == "pareto") return DurationDistribution::kBoundedPareto;
  return InvalidArgumentError("durations: must be gavel or pareto, not " + name);
}

std::vector<ModelShare> DefaultModelMix() {
  return {{"resnet50", 1, 256},         {"vgg16", 1, 256},    {"inception_v3", 1, 256},
          {"wide_resnet101_2", 1, 128}, {"vit_b_16", 1, 256}, {"gpt_tiny", 1, 64}};
}

Status ValidateWorkloadOptions(const WorkloadOptions& options) {
  // JSON readers take integers up to 2^63 - 1 (common/json_fields.h).
  if (options.seed > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return FieldError("seed", "must be in [0, 2^63 - 1]");
  }
  if (options.jobs < 1 || options.jobs > 10'000'000) {
    return FieldError("jobs", "must be in [1, 10000000]");
  }
  if (!InRange(options.jobs_per_hour, 0, 1e9)) {
    return FieldError("jobs_per_hour", "must be in [0, 1e9] (0: from load)");
  }
  if (options.jobs_per_hour == 0 && !(options.load > 0 && options.load <= 10)) {
    return FieldError("load", "must be in (0, 10]");
  }
  if (options.devices < 1 || options.devices > 1'000'000) {
    return FieldError("devices", "must be in [1, 1000000]");
  }
  RETURN_IF_ERROR(ValidateMix(options));
  if (!InRange(options.bg_fraction, 0, 1)) return FieldError("bg_fraction", "must be in [0, 1]");
  if (options.users < 1 || options.users > 100'000) {
    return FieldError("users", "must be in [1, 100000]");
  }
  if (!InRange(options.user_skew, 0, 10)) return FieldError("user_skew", "must be in [0, 10]");
  if (!InRange(options.constrained_fraction, 0, 1)) {
    return FieldError("constrained_fraction", "must be in [0, 1]");
  }
  if (options.constrained_fraction > 0 && options.device_types.empty()) {
    return FieldError("device_types", "must name a type when constrained_fraction > 0");
  }
  for (size_t i = 0; i < options.device_types.size(); ++i) {
    if (options.device_types[i].empty()) {
      return FieldError("device_types[" + std::to_string(i) + "]", "must not be empty");
    }
  }
  if (options.reference_device.empty()) return FieldError("reference_device", "must not be empty");
  RETURN_IF_ERROR(ValidateDurations(options));
  if (!InRange(options.priority_fraction, 0, 1)) {
    return FieldError("priority_fraction", "must be in [0, 1]");
  }
  if (!std::isfinite(options.amplification_limit) ||
      (options.amplification_limit != 0 && options.amplification_limit < 1)) {
    return FieldError("amplification_limit", "must be 0 (unconstrained) or >= 1");
  }
  return Status::Ok();
}

double MeanDurationSeconds(const WorkloadOptions& options) {
  if (options.durations == DurationDistribution::kBoundedPareto) {
    return 60 * BoundedParetoMean(options.pareto_alpha, options.pareto_min_minutes,
                                  options.pareto_max_minutes);
  }
  return 60 * (0.8 * LogUniform10Mean(1.5, 3) + 0.2 * LogUniform10Mean(3, 4));
}

double MeanGpus(const WorkloadOptions& options) {
  double weight = 0;
  double weighted = 0;
  for (const GpuShare& share : options.gpus) {
    weight += share.weight;
    weighted += share.weight * share.gpus;
  }
  return options.bg_fraction + (1 - options.bg_fraction) * weighted / weight;
}

double ArrivalRatePerSecond(const WorkloadOptions& options) {
  if (options.jobs_per_hour > 0) return options.jobs_per_hour / 3600;
  return options.load * options.devices / (MeanGpus(options) * MeanDurationSeconds(options));
}

}  // namespace deepool::simulator

#include "coordinator/policy/policy.h"

#include "coordinator/policy/deepool_policy.h"
#include "coordinator/policy/fifo_policy.h"
#include "coordinator/policy/max_min_policy.h"

namespace deepool::coordinator::policy {

double SpeedCurve::IterationS(int g) const {
  if (g < 1 || g > MaxDevices()) return 0;
  const double seconds = iteration_s[static_cast<size_t>(g - 1)];
  return seconds > 0 ? seconds : 0;
}

const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> names = {"fifo", "max-min", "deepool"};
  return names;
}

StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name, PolicyOptions options) {
  if (name == "fifo") return std::unique_ptr<Policy>(std::make_unique<FifoPolicy>(options));
  if (name == "max-min") return std::unique_ptr<Policy>(std::make_unique<MaxMinPolicy>(options));
  if (name == "deepool") return std::unique_ptr<Policy>(std::make_unique<DeepoolPolicy>(options));
  return Status(StatusCode::kInvalidArgument,
                "policy: must be fifo, max-min or deepool, not \"" + std::string(name) + "\"");
}

}  // namespace deepool::coordinator::policy

#include "planner/profile_environment.h"

#include "common/json_fields.h"

namespace deepool::planner {

nlohmann::json EnvironmentToJson(const ProfileEnvironment& environment) {
  nlohmann::json out = nlohmann::json::object();
  const std::pair<const char*, const std::string*> texts[] = {
      {"device_model", &environment.device_model}, {"driver", &environment.driver},
      {"torch", &environment.torch},               {"cuda", &environment.cuda},
      {"nccl", &environment.nccl},                 {"deepool", &environment.deepool}};
  for (const auto& [key, value] : texts) {
    if (!value->empty()) out[key] = *value;
  }
  if (environment.threads > 0) out["threads"] = environment.threads;
  return out;
}

StatusOr<ProfileEnvironment> EnvironmentFromJson(const nlohmann::json& object,
                                                 const std::string& path) {
  if (!object.is_object()) return InvalidArgumentError(path + " must be an object");
  const std::string prefix = path + ".";
  RETURN_IF_ERROR(CheckKnownFields(
      object, {"device_model", "driver", "torch", "cuda", "nccl", "deepool", "threads"}, prefix));
  ProfileEnvironment out;
  RETURN_IF_ERROR(ReadOptionalField(object, "device_model", prefix, &out.device_model));
  RETURN_IF_ERROR(ReadOptionalField(object, "driver", prefix, &out.driver));
  RETURN_IF_ERROR(ReadOptionalField(object, "torch", prefix, &out.torch));
  RETURN_IF_ERROR(ReadOptionalField(object, "cuda", prefix, &out.cuda));
  RETURN_IF_ERROR(ReadOptionalField(object, "nccl", prefix, &out.nccl));
  RETURN_IF_ERROR(ReadOptionalField(object, "deepool", prefix, &out.deepool));
  RETURN_IF_ERROR(ReadOptionalField(object, "threads", prefix, &out.threads));
  if (out.threads < 0) return InvalidArgumentError(prefix + "threads must be >= 0");
  return out;
}

std::string EnvironmentSummary(const ProfileEnvironment& environment) {
  std::string out;
  auto add = [&out](const std::string& label, const std::string& value) {
    if (value.empty()) return;
    out += (out.empty() ? "" : ", ") + label + (label.empty() ? "" : " ") + value;
  };
  add("", environment.device_model);
  if (environment.threads > 0) {
    add("", std::to_string(environment.threads) +
                (environment.threads == 1 ? " thread" : " threads"));
  }
  add("driver", environment.driver);
  add("torch", environment.torch);
  add("CUDA", environment.cuda);
  add("NCCL", environment.nccl);
  add("deepool", environment.deepool);
  return out;
}

}  // namespace deepool::planner

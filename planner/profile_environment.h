// What a measured profile was measured on: the device's model, its driver, the torch, CUDA and
// NCCL versions, the CPU threads and the deepool commit. Profiles carry it ("environment" in the
// profile document) and plans made from them repeat it ("profile_environment"), so a number
// can always be traced to the hardware and software that produced it. Every field is optional:
// profiles made before it was recorded, and reference or analytical ones, have none.
// Threading: plain values and pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace deepool::planner {

struct ProfileEnvironment {
  std::string device_model;  // "NVIDIA H200", or the CPU's model name
  std::string driver;        // the NVIDIA driver's version; empty on the CPU
  std::string torch;         // libtorch's version, e.g. "2.12.1"
  std::string cuda;          // the CUDA runtime torch was built with; CUDA devices only
  std::string nccl;          // NCCL's version; CUDA devices only
  std::string deepool;       // the deepool commit of the tool that measured ("unknown" without git)
  int threads = 0;           // torch intra-op threads (CPU devices); 0: not recorded
  bool empty() const { return *this == ProfileEnvironment{}; }
  bool operator==(const ProfileEnvironment& o) const {
    return device_model == o.device_model && driver == o.driver && torch == o.torch &&
           cuda == o.cuda && nccl == o.nccl && deepool == o.deepool && threads == o.threads;
  }
};

// {"device_model": ..., "driver": ..., "torch": ..., "cuda": ..., "nccl": ..., "deepool": ...,
//  "threads": N}: only the fields that are set.
nlohmann::json EnvironmentToJson(const ProfileEnvironment& environment);
// The object above; unknown fields are refused, errors name `path` + the field.
StatusOr<ProfileEnvironment> EnvironmentFromJson(const nlohmann::json& object,
                                                 const std::string& path);
// One line for people: "NVIDIA H200, driver 550.54.15, torch 2.12.1, CUDA 12.8, NCCL 2.27.3,
// deepool e955cab1f2a3"; "" when empty.
std::string EnvironmentSummary(const ProfileEnvironment& environment);

}  // namespace deepool::planner

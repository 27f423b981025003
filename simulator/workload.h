// A workload: the jobs a pool simulation replays, in arrival order (docs/simulator.md,
// "Workload traces"). A WorkloadJob is a job spec (jobspec/job_spec.h) with an arrival time, a
// user and an optional device type: fields that a spec also has carry the spec's name, meaning
// and range, so a row becomes a JobSpec by copying them (name = "job-<id>", the rest at the
// spec's defaults); `iterations` may instead be `duration_s` (time at the reference device's
// speed), which the simulator turns into iterations with IterationsFor.
// Threading: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace deepool::simulator {

enum class WorkloadRole { kFg, kBg };
const char* WorkloadRoleName(WorkloadRole role);  // "fg", "bg" (JobSpec's role names)

struct WorkloadJob {
  int64_t id = 0;        // unique in the workload
  double arrival_s = 0;  // seconds from the workload's start; never before the previous job's
  std::string user;      // the submitting user (JobSpec has none: the submitter's identity)
  WorkloadRole role = WorkloadRole::kFg;  // JobSpec::role
  std::string model;                      // JobSpec::model: a zoo name
  int64_t global_batch = 0;               // JobSpec::global_batch, [1, 2^20]
  int gpus = 1;                           // JobSpec::gpus, [1, 4096], <= global_batch; bg: 1
  int priority = 0;                       // JobSpec::priority, [-1000, 1000]
  double amplification_limit = 2.0;       // JobSpec::amplification_limit: 0 or >= 1
  // How long the job trains: exactly one of the two is > 0. iterations: JobSpec::iterations,
  // [1, 1e9]. duration_s: seconds the job takes data parallel on `gpus` devices of the
  // workload's reference device type (WorkloadHeader::reference_device), as Gavel's traces.
  int64_t iterations = 0;
  double duration_s = 0;
  // The device type the job must run on ("a100", "h100", "v100": planner/device_model.h's
  // names); empty: any type.
  std::string device_type;
};

// Checks one job's ranges and combinations. Errors are INVALID_ARGUMENT and start with the
// field's name ("gpus: must be in [1, 4096]"), as ValidateJobSpec's.
Status ValidateWorkloadJob(const WorkloadJob& job);

// The iterations a job trains: its `iterations`, or its duration over `iteration_s`, the time
// one iteration takes data parallel on `gpus` reference devices (rounded up, at least 1).
int64_t IterationsFor(const WorkloadJob& job, double iteration_s);

// Device-seconds the job asks for at the reference speed: gpus x duration_s (0 for a job given
// in iterations, whose time only a cost model knows).
double OfferedDeviceSeconds(const WorkloadJob& job);

}  // namespace deepool::simulator

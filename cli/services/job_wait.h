// Waiting for jobs to finish while showing their progress (deepool submit, deepool up).
// Polls GetJob, so a coordinator restart in the middle only pauses the display.
// Runs on the calling thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "deepool/v1/coordinator.grpc.pb.h"

namespace deepool::cli {

struct WaitOptions {
  bool json = false;  // one JSON object per line per change, instead of progress lines
  std::chrono::milliseconds poll_interval{500};
  // How long the coordinator may stay unreachable before giving up (kExitUnavailable).
  std::chrono::seconds unavailable_grace{120};
  // 0: no limit. Past it, returns kExitFailure with the jobs still running.
  std::chrono::seconds timeout{0};
  // Polled between rounds; returning true stops waiting (kExitFailure), e.g. on Ctrl-C.
  std::function<bool()> interrupted;
  // Called after each round with the jobs' last answers, by id (`up` measures the FG job's pace).
  std::function<void(std::chrono::steady_clock::time_point, const std::map<std::string, v1::Job>&)>
      on_poll;
};

// Returns kExitOk when every job SUCCEEDED, kExitFailure when one FAILED or was CANCELLED
// (its reason is printed), kExitNotFound / kExitUnavailable on RPC errors. `final_jobs`, when
// given, receives the last state of each job.
int WaitForJobs(v1::CoordinatorService::Stub& stub, const std::string& address,
                const std::vector<std::string>& job_ids, const WaitOptions& options,
                std::ostream& out, std::vector<v1::Job>* final_jobs = nullptr);

// "job  state  iterations  samples/s  wall time  devices" for finished jobs, then one line per
// BG job saying where each of its dispatches ran: inside a FG executor or as its own process,
// then one line per job with evaluations: its last one (EvaluationText).
std::string JobsSummary(const std::vector<v1::Job>& jobs);

}  // namespace deepool::cli

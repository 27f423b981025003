// What the JobManager tests share: small specs, and moving a job to RUNNING as the scheduler
// does.
#pragma once

#include <catch2/catch.hpp>
#include <string>

#include "coordinator/job_manager.h"

namespace deepool::coordinator::testing {

inline JobSpec TinySpec() {
  JobSpec spec;
  spec.name = "tiny";
  spec.model = "tiny";
  spec.global_batch = 8;
  spec.iterations = 4;
  return spec;
}

// A spec with an inline graph of `bytes` bytes (the manager does not parse it).
inline JobSpec GraphSpec(size_t bytes, const std::string& name = "big") {
  JobSpec spec = TinySpec();
  spec.name = name;
  spec.model.clear();
  spec.graph_json = std::string(bytes, ' ');
  return spec;
}

// Moves a job through planning to RUNNING with a planned graph and plan, as the scheduler does.
inline void Run(JobManager* jobs, const std::string& id) {
  REQUIRE(jobs->Transition(id, JobState::kPlanning, "planning").ok());
  REQUIRE(jobs->Transition(id, JobState::kRunning, "go",
                           [](JobRecord& r) {
                             r.graph_json = R"({"format":"deepool.graph"})";
                             r.plan_json = R"({"format":"deepool.plan"})";
                           })
              .ok());
}

}  // namespace deepool::coordinator::testing

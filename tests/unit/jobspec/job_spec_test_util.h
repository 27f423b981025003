// Job specs as JSON for the job-spec tests: a minimal FG job (resnet50, global batch 32, 10
// iterations) with extra fields appended, parsed as `deepool submit --spec` would read it.
#pragma once

#include <catch2/catch.hpp>
#include <string>

#include "jobspec/job_spec.h"
#include "jobspec/job_spec_json.h"

namespace deepool::jobspec {

// `fields`: "" or text that starts with a comma, e.g. R"(,"precision":"bf16")".
inline StatusOr<JobSpec> ParseMinimalWith(const std::string& fields) {
  return ParseJobSpecJson(R"({"name":"demo","model":"resnet50","global_batch":32,"iterations":10)" +
                          fields + "}");
}

// The INVALID_ARGUMENT message the spec with `fields` is refused with, or "accepted".
inline std::string RefusalOf(const std::string& fields) {
  StatusOr<JobSpec> spec = ParseMinimalWith(fields);
  if (spec.ok()) return "accepted";
  CHECK(spec.status().code() == StatusCode::kInvalidArgument);
  return spec.status().message();
}

}  // namespace deepool::jobspec

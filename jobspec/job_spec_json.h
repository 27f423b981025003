// The JSON form of a job spec (docs/formats.md, "Job specs").
//
// Reading goes through the API message: JobSpecProtoFromJson checks field names and types and
// refuses unknown fields, but defaults and validates nothing (absent fields stay unset), so
// JobSpecFromProto (job_spec_proto.h) applies the one set of defaults and the one validation
// whether a spec came as JSON or as a message. `deepool submit` converts with it and sends the
// message; the coordinator reads SubmitJob's spec_json and the specs in stored job records with
// JobSpecFromJson, which is the two steps together.
// Threading: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "common/status.h"
#include "deepool/v1/job.pb.h"
#include "jobspec/job_spec.h"

namespace deepool::jobspec {

// JSON -> message, nothing defaulted. Errors name the field ("unknown field gpu", "field
// iterations must be an integer", "name: is not valid UTF-8").
StatusOr<v1::JobSpec> JobSpecProtoFromJson(const nlohmann::json& doc);
// Parses the text first (common/json_fields.h ParseJson): "job spec: not valid JSON at line L,
// column C: ..." when it is not, "job spec: duplicate key ..." when a key repeats in an object.
StatusOr<v1::JobSpec> ParseJobSpecProto(std::string_view text);

// JSON -> spec, defaulted and validated: JobSpecProtoFromJson, then JobSpecFromProto.
StatusOr<JobSpec> JobSpecFromJson(const nlohmann::json& doc);
StatusOr<JobSpec> ParseJobSpecJson(std::string_view text);
// Spec -> JSON (optional fields only when set); JobSpecFromJson reads it back as the same spec.
nlohmann::json JobSpecToJson(const JobSpec& spec);

}  // namespace deepool::jobspec

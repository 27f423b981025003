// The JSON job spec (docs/formats.md, "Job specs") read into the API's JobSpec message: field
// names and types are checked and unknown fields refused, but nothing is defaulted or validated
// here. Absent fields stay unset, so the coordinator's JobSpecFromProto (convert.h) applies the
// one set of defaults and the one validation whether a spec came as JSON or as a message.
// `deepool submit` converts with it and sends the message; the coordinator uses it for
// SubmitJob's spec_json and for the specs in stored job records.
// Threading: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "common/status.h"
#include "deepool/v1/job.pb.h"

namespace deepool::coordinator {

StatusOr<v1::JobSpec> JobSpecProtoFromJson(const nlohmann::json& doc);
// Parses the text first (common/json_fields.h ParseJson): "job spec: not valid JSON at line L,
// column C: ..." when it is not, "job spec: duplicate key ..." when a key repeats in an object.
StatusOr<v1::JobSpec> ParseJobSpecProto(std::string_view text);

}  // namespace deepool::coordinator

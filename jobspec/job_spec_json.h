// The JSON job spec (docs/formats.md, "Job specs") read into the API's JobSpec message: field
// names and types are checked and unknown fields refused, but nothing is defaulted or validated
// here. Absent fields stay unset, so the coordinator's JobSpecFromProto (convert.h) applies the
// one set of defaults and the one validation whether a spec came as JSON or as a message.
// `deepool submit` converts with it and sends the message; the coordinator uses it for
// SubmitJob's spec_json and for the specs in stored job records.
// Threading: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "deepool/v1/job.pb.h"

namespace deepool::coordinator {

StatusOr<v1::JobSpec> JobSpecProtoFromJson(const nlohmann::json& doc);
// Parses the text first (common/json_fields.h ParseJson): "job spec: not valid JSON at line L,
// column C: ..." when it is not, "job spec: duplicate key ..." when a key repeats in an object.
StatusOr<v1::JobSpec> ParseJobSpecProto(std::string_view text);

// Every string field of `message` (nested messages and repeated fields too) must be UTF-8, as
// proto3 requires of them: a client that sends other bytes gets INVALID_ARGUMENT naming the field
// ("optimizer.name: is not valid UTF-8"), not a message that peers fail to parse or display.
// `path` goes before field names ("" at the top). Bytes fields are not checked.
Status CheckStringsAreUtf8(const google::protobuf::Message& message, const std::string& path);

}  // namespace deepool::coordinator

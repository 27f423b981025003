// A job spec as the API's message (deepool.v1.JobSpec, proto/deepool/v1/job.proto), both ways.
// Threading: pure functions.
#pragma once

#include <google/protobuf/message.h>

#include <string>

#include "common/status.h"
#include "deepool/v1/job.pb.h"
#include "jobspec/job_spec.h"

namespace deepool::jobspec {

// Applies the documented defaults to unset fields, then validates (errors name the field).
// Fields the message holds that this build does not know, and strings that are not UTF-8, are
// INVALID_ARGUMENT too ("unknown field optimizer.#77 ...", "data.path: is not valid UTF-8").
StatusOr<JobSpec> JobSpecFromProto(const v1::JobSpec& proto);
// The spec's fields (optional ones only when set); JobSpecFromProto reads it back as the same spec.
v1::JobSpec JobSpecToProto(const JobSpec& spec);

// Every string field of `message` (nested messages and repeated fields too) must be UTF-8, as
// proto3 requires of them: a client that sends other bytes gets INVALID_ARGUMENT naming the field
// ("optimizer.name: is not valid UTF-8"), not a message that peers fail to parse or display.
// `path` goes before field names ("" at the top). Bytes fields are not checked.
Status CheckStringsAreUtf8(const google::protobuf::Message& message, const std::string& path);

}  // namespace deepool::jobspec

// JSON job specs as `deepool submit` and SubmitJob's spec_json take them: read into the API
// message, then defaulted and validated as the coordinator does.
#include "fuzz/fuzz_target.h"
#include "jobspec/job_spec_json.h"
#include "jobspec/job_spec_proto.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto proto = deepool::jobspec::ParseJobSpecProto(deepool::fuzz::AsText(data, size));
  if (proto.ok()) (void)deepool::jobspec::JobSpecFromProto(*proto);  // any answer
  return 0;
}

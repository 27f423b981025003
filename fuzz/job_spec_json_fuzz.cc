// JSON job specs as `deepool submit` and SubmitJob's spec_json take them: read into the API
// message, then defaulted and validated as the coordinator does.
#include "coordinator/convert.h"
#include "coordinator/job_spec_json.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto proto = deepool::coordinator::ParseJobSpecProto(deepool::fuzz::AsText(data, size));
  if (proto.ok()) (void)deepool::coordinator::JobSpecFromProto(*proto);  // any answer
  return 0;
}

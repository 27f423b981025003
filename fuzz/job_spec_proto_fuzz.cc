// Job specs as SubmitJob's binary message: whatever a client sends that protobuf accepts is
// defaulted and validated as the coordinator does.
#include "deepool/v1/job.pb.h"
#include "fuzz/fuzz_target.h"
#include "jobspec/job_spec_proto.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  deepool::v1::JobSpec proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  (void)deepool::jobspec::JobSpecFromProto(proto);  // any answer
  return 0;
}

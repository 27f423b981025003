// What a worker of this build sends to register a node of CPU devices "cpu:0".."cpu:N-1", for
// the tests and benchmarks that play workers against a real coordinator.
// Threading: a pure function.
#pragma once

#include <string>

#include "deepool/v1/node.pb.h"
#include "protocol/version.h"

namespace deepool::testing {

inline v1::RegisterNodeRequest CpuNodeRegistration(const std::string& name,
                                                   const std::string& address, int devices) {
  v1::RegisterNodeRequest request;
  request.set_name(name);
  request.set_address(address);
  request.set_protocol_version(protocol::kProtocolVersion);
  request.set_oldest_protocol_version(protocol::kOldestProtocolVersion);
  for (int i = 0; i < devices; ++i) {
    v1::Device* device = request.add_devices();
    device->set_device("cpu:" + std::to_string(i));
    device->set_type("cpu");
  }
  return request;
}

}  // namespace deepool::testing

// A gRPC channel of its own for a benchmark's client or fake worker: a distinct channel
// argument per id keeps gRPC from sharing one connection among them, as separate machines
// would not. `unlimited_messages` lifts gRPC's 4 MiB receive limit (answers with large graphs).
#pragma once

#include <grpcpp/create_channel.h>

#include <memory>
#include <string>

namespace deepool::bench {

inline std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, int id,
                                                 bool unlimited_messages = false) {
  grpc::ChannelArguments args;
  args.SetInt("deepool.bench.connection", id);
  if (unlimited_messages) args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

}  // namespace deepool::bench

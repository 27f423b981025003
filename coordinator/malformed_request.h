// MalformedRequestInterceptorFactory: a request gRPC could not parse into its message (a string
// field that is not UTF-8, truncated or garbled bytes) is the caller's mistake, yet gRPC answers
// it INTERNAL with no message. This interceptor turns that answer into INVALID_ARGUMENT naming
// the method and the message type, and logs the peer's address (at most 20 lines a minute,
// common/log_limiter.h, so a flood of bad requests cannot fill the log).
// Threading: one interceptor per call, run on that call's thread; the log limit is shared and
// thread-safe.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <string>

namespace deepool::coordinator {

class MalformedRequestInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

// The answer's text for a request of `method` ("/deepool.v1.CoordinatorService/SubmitJob") that
// did not parse: "SubmitJob: the request is not a valid deepool.v1.SubmitJobRequest: ...".
std::string MalformedRequestMessage(const std::string& method);

}  // namespace deepool::coordinator

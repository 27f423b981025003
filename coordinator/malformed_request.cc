#include "coordinator/malformed_request.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/server_context.h>

#include <chrono>

#include "common/clock.h"
#include "common/log_limiter.h"
#include "common/logging.h"

namespace deepool::coordinator {
namespace {

using grpc::experimental::InterceptionHookPoints;

// Refusals of unparsable requests share one limit: a flood of them cannot fill the log.
LogLimiter& RefusalLines() {
  static LogLimiter limiter(SystemClock::Get(), 20, std::chrono::minutes(1));
  return limiter;
}

class MalformedRequest : public grpc::experimental::Interceptor {
 public:
  explicit MalformedRequest(grpc::experimental::ServerRpcInfo* info) : info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    // The sync server hands POST_RECV_MESSAGE a null message when parsing failed.
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      unparsed_ = true;
    }
    if (unparsed_ && methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        methods->GetSendStatus().error_code() == grpc::StatusCode::INTERNAL) {
      const std::string method = info_->method() ? info_->method() : "";
      const std::string message = MalformedRequestMessage(method);
      int64_t held_back = 0;
      if (RefusalLines().Allow(&held_back)) {
        DP_LOG_WARN("refused a request from {}: {} ({} more refusals not logged)",
                    info_->server_context()->peer(), message, held_back);
      }
      methods->ModifySendStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message));
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* info_;
  bool unparsed_ = false;
};

}  // namespace

std::string MalformedRequestMessage(const std::string& method) {
  // "/deepool.v1.CoordinatorService/SubmitJob" -> "deepool.v1.CoordinatorService.SubmitJob".
  std::string full_name = method.empty() ? "" : method.substr(1);
  const size_t slash = full_name.rfind('/');
  const std::string short_name =
      slash == std::string::npos ? full_name : full_name.substr(slash + 1);
  if (slash != std::string::npos) full_name[slash] = '.';
  const google::protobuf::MethodDescriptor* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(full_name);
  const std::string type =
      descriptor ? descriptor->input_type()->full_name() : std::string("request message");
  return short_name + ": the request is not a valid " + type +
         ": a string field is not UTF-8, or its bytes are malformed";
}

grpc::experimental::Interceptor* MalformedRequestInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new MalformedRequest(info);
}

}  // namespace deepool::coordinator

#include "coordinator/malformed_request.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/server_context.h>

#include <atomic>
#include <chrono>

#include "common/logging.h"

namespace deepool::coordinator {
namespace {

using grpc::experimental::InterceptionHookPoints;

// True at most once per second across all calls.
bool MayLogNow() {
  static std::atomic<int64_t> last_second{0};
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = last_second.load();
  return last != now && last_second.compare_exchange_strong(last, now);
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
    if (unparsed_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        methods->GetSendStatus().error_code() == grpc::StatusCode::INTERNAL) {
      const std::string method = info_->method() ? info_->method() : "";
      const std::string message = MalformedRequestMessage(method);
      if (MayLogNow()) {
        DP_LOG_WARN("refused a request from {}: {}", info_->server_context()->peer(), message);
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
  const std::string short_name = slash == std::string::npos ? full_name : full_name.substr(slash + 1);
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

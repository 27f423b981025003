#include "security/grpc_logs.h"

#include <grpc/support/log.h>

#include <chrono>
#include <cstdio>

#include "common/clock.h"
#include "common/log_limiter.h"
#include "common/logging.h"

namespace deepool::security {
namespace {

LogLimiter& HandshakeLines() {
  static LogLimiter limiter(SystemClock::Get(), 20, std::chrono::minutes(1));
  return limiter;
}

void ToOurLog(gpr_log_func_args* args) {
  const std::string line = args->message != nullptr ? args->message : "";
  if (std::optional<std::string> refused = DescribeRefusedHandshake(line)) {
    int64_t held_back = 0;
    if (!HandshakeLines().Allow(&held_back)) return;
    if (held_back > 0) {
      DP_LOG_WARN("{} ({} more refused handshakes were not logged)", *refused, held_back);
    } else {
      DP_LOG_WARN("{}", *refused);
    }
    return;
  }
  switch (args->severity) {
    case GPR_LOG_SEVERITY_ERROR:
      DP_LOG_ERROR("grpc {}:{}: {}", args->file, args->line, line);
      break;
    case GPR_LOG_SEVERITY_INFO:
      DP_LOG_INFO("grpc {}:{}: {}", args->file, args->line, line);
      break;
    default:
      DP_LOG_DEBUG("grpc {}:{}: {}", args->file, args->line, line);
      break;
  }
}

void ToStderr(gpr_log_func_args* args) {
  if (args->severity != GPR_LOG_SEVERITY_ERROR || args->message == nullptr) return;
  std::fprintf(stderr, "grpc %s:%d: %s\n", args->file, args->line, args->message);
}

}  // namespace

std::optional<std::string> DescribeRefusedHandshake(const std::string& line) {
  if (line.find("Handshake failed") == std::string::npos) return std::nullopt;
  // OpenSSL's reason ends the line: "...:SSL routines::wrong version number."
  std::string reason = line.substr(line.rfind(':') + 1);
  while (!reason.empty() && (reason.back() == '.' || reason.back() == ' ')) reason.pop_back();
  const std::string prefix = "refused a TLS handshake: ";
  if (reason.find("wrong version number") != std::string::npos ||
      reason.find("http request") != std::string::npos) {
    return prefix + "the client does not speak TLS (a CLI or worker without TLS files?)";
  }
  if (reason.find("alert") != std::string::npos) {
    return prefix + "the client refused this coordinator's certificate (" + reason +
           "): does it trust this cluster's CA?";
  }
  return prefix + reason;
}

GrpcLogRoute::GrpcLogRoute() { gpr_set_log_function(ToOurLog); }

GrpcLogRoute::~GrpcLogRoute() { gpr_set_log_function(ToStderr); }

}  // namespace deepool::security

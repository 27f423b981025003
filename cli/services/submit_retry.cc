#include "cli/services/submit_retry.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

namespace deepool::cli {

std::string NewRequestId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) {
    char word[9];
    std::snprintf(word, sizeof(word), "%08x", static_cast<unsigned>(random()));
    id += word;
  }
  return id;
}

grpc::Status SubmitWithRetry(const SubmitCall& call, v1::SubmitJobRequest request,
                             v1::SubmitJobResponse* response, const SubmitRetry& retry,
                             std::ostream& notes) {
  using Clock = std::chrono::steady_clock;
  const auto now = [&retry] { return retry.now ? retry.now() : Clock::now(); };
  if (request.request_id().empty()) request.set_request_id(NewRequestId());
  const Clock::time_point give_up = now() + retry.budget;
  std::chrono::milliseconds pause = retry.first_pause;
  grpc::Status status;
  while (true) {
    status = call(request, response);
    if (status.error_code() == grpc::StatusCode::CANCELLED) {
      // Never this client's doing (it cancels no submit): the coordinator ended the call
      // unanswered as it stopped, or as its starting server handed the port on.
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "the coordinator dropped the call unanswered (it was stopping or "
                            "starting)");
    }
    const bool transient = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (status.ok() || !transient || now() + pause > give_up) return status;
    notes << "deepool: submit: " << status.error_message() << "; trying again in " << pause.count()
          << " ms (request " << request.request_id()
          << ": a job already stored is not submitted twice)\n";
    if (retry.sleep) {
      retry.sleep(pause);
    } else {
      std::this_thread::sleep_for(pause);
    }
    pause = std::min(pause * 2, retry.max_pause);
  }
}

}  // namespace deepool::cli

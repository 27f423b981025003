// Submitting so that a lost answer costs no duplicate job. Every try carries the same request_id
// (the coordinator's idempotency key, SubmitJobRequest.request_id), and a try that failed with
// UNAVAILABLE or DEADLINE_EXCEEDED (the coordinator unreachable or restarting, or its answer
// lost on the way), or with CANCELLED (which this client never causes: gRPC ends calls a stopping
// server had not taken up so; it is reported as UNAVAILABLE) is repeated after a growing pause until the budget is spent, so a submission
// outlives a coordinator restart shorter than the budget: if the first try was stored, the retry
// returns that job. Used from the main thread only.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <ostream>
#include <string>

#include "deepool/v1/coordinator.grpc.pb.h"

namespace deepool::cli {

struct SubmitRetry {
  // No try starts once this long has passed since the first began (the last may run past it).
  std::chrono::milliseconds budget{30'000};
  std::chrono::milliseconds first_pause{250};  // doubled after every try, up to max_pause
  std::chrono::milliseconds max_pause{2'000};
  std::function<void(std::chrono::milliseconds)> sleep;        // empty: the real sleep
  std::function<std::chrono::steady_clock::time_point()> now;  // empty: the steady clock
};

using SubmitCall =
    std::function<grpc::Status(const v1::SubmitJobRequest&, v1::SubmitJobResponse*)>;

// 32 random hexadecimal digits.
std::string NewRequestId();

// Sets a request_id when the request has none, then calls until a try succeeds, fails with
// another code, or the budget is spent; returns the last status. A line on `notes` says each
// retry. A caller's try should wait for the connection (wait_for_ready, with its own deadline):
// a channel that is reconnecting then finishes its handshake during the try.
grpc::Status SubmitWithRetry(const SubmitCall& call, v1::SubmitJobRequest request,
                             v1::SubmitJobResponse* response, const SubmitRetry& retry,
                             std::ostream& notes);

}  // namespace deepool::cli

// The executor process's stdout protocol: one JSON object per line (docs/runtime.md).
//   {"event":"store_ready","host":H,"port":P}                       (rank 0, first, port 0 only)
//   {"event":"iteration","rank":R,"iteration":i,"loss":x|null,"iteration_ms":t,
//    "samples_per_s":s,"busy_ms":b,"idle_ms":d}
//   {"event":"done","rank":R,"iterations":K,"checkpoint":PATH|null}
//   {"event":"error","rank":R,"message":"..."}
// Writers here are used by deepool-executor; launchers and the worker daemon parse the lines.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "worker/runtime/executor.h"

namespace deepool::worker {

std::string StoreReadyEvent(const std::string& host, int port);
std::string IterationEvent(int rank, const IterationStats& stats);
std::string DoneEvent(int rank, int64_t iterations, const std::optional<std::string>& checkpoint);
std::string ErrorEvent(int rank, const std::string& message);

// A parsed line; INVALID_ARGUMENT when it is not a JSON object with a string "event".
StatusOr<nlohmann::json> ParseExecutorEvent(std::string_view line);

}  // namespace deepool::worker

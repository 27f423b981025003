// The event lines deepool-executor prints on stdout, from the runtime's own values. The events,
// their one writer and their one parser are the executor protocol's (protocol/executor_events.h;
// docs/runtime.md); these only fill its structs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "protocol/executor_events.h"
#include "worker/runtime/executor.h"

namespace deepool::worker {

std::string StoreReadyEvent(const std::string& host, int port);
// total_iterations: the run's iterations in all (written when above 0).
// peak_memory_bytes: PeakMemoryBytes of the rank's device (0: not written).
std::string IterationEvent(int rank, const IterationStats& stats, int64_t total_iterations,
                           int64_t peak_memory_bytes = 0);
// The held-out set's results after `iteration` iterations (written by rank 0).
std::string EvaluationEvent(int rank, int64_t iteration, const EvaluationStats& stats);
std::string DoneEvent(int rank, int64_t iterations, const std::optional<std::string>& checkpoint,
                      std::optional<double> checkpoint_ms = std::nullopt);
// A rank that stopped after the periodic checkpoint of `iteration`, as asked (a resize).
std::string StoppedEvent(int rank, int64_t iteration);
// A failed rank: the status's code and first line (the caller logs the whole text).
std::string ErrorEvent(int rank, const Status& status);

}  // namespace deepool::worker

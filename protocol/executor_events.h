// The executor process's stdout protocol: one JSON object per line (docs/runtime.md, "Executor
// events"); any other line is a log line. deepool-executor writes these with ExecutorEventToJson;
// the worker daemon and the launcher read them with ParseExecutorEvent.
//   {"event":"store_ready","host":H,"port":P}                       (rank 0, first, port 0 only)
//   {"event":"iteration","rank":R,"iteration":i,"loss":x|null,"iteration_ms":t,
//    "samples_per_s":s,"busy_ms":b,"idle_ms":d[,"data_ms":w][,"total_iterations":K]
//    [,"loss_scale":S,"skipped_steps":N]
//    [,"fg_busy_ms":f,"bg_busy_ms":g,"bg_samples_per_s":s,"bg_iterations":k,"bg_loss":l|null]}
//   {"event":"evaluation","rank":R,"iteration":i,"samples":n,"loss":x|null,"top1":a,"top5":b}
//   (rank 0, after each evaluation on the held-out set)
//   {"event":"done","rank":R,"iterations":K,"checkpoint":PATH|null[,"checkpoint_ms":t]
//    [,"stopped":true]}   (stopped: ended after the periodic checkpoint of iteration K, as a
//                          "stop_at_checkpoint" command asked; K < the run's iterations)
//   {"event":"error","rank":R,"code":"UNAVAILABLE","message":"..."}
//   (code: the failure's status code, common/status.h's names; UNAVAILABLE and DEADLINE_EXCEEDED
//    mean the rank lost its peers or connections. message: one line; the whole text, a libtorch
//    stack trace for example, goes to the rank's log instead. Without "code": UNKNOWN.)
// and, from an FG rank hosting a BG job attached by command (executor_commands.h):
//   {"event":"background","job_id":J,"iterations":K,"samples_per_s":S,"loss":L|null}
//   {"event":"background_done","job_id":J,"status":"ok"|"error"|"detached"|"host_ended",
//    "iterations":K,"samples_per_s":S,"loss":L|null,"message":M}
// and, answering a "trace" command (executor_commands.h), one or more lines per rank, the last
// with "last":true, each holding at most kMaxTraceSpansPerEvent spans (lines stay far below the
// worker's line limit):
//   {"event":"trace","rank":R,"request_id":Q,"first_iteration":F,"iterations":N,"last":b,
//    "spans":[[kind,name,iteration,start_us,duration_us],...]}
//   (start_us: wall-clock microseconds since the Unix epoch; kind: common/timeline.h's names)
// Threading: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "common/timeline.h"

namespace deepool::protocol {

// Rank 0's c10d store listens (it was started on port 0, so the port is news).
struct StoreReadyEvent {
  std::string host;
  int port = 0;
};

// An iteration's BG fields, when a BG job shares the rank's device. Then the iteration's
// idle_ms is the device's idle time (neither FG nor BG computing); busy_ms stays the FG rank's.
struct IterationSharing {
  double fg_busy_ms = 0;
  double bg_busy_ms = 0;
  double bg_samples_per_s = 0;  // since the BG job started
  int64_t bg_iterations = 0;
  std::optional<double> bg_loss;  // the last finished BG iteration's
};

struct IterationEvent {
  int rank = 0;
  int64_t iteration = 0;
  std::optional<double> loss;  // null on ranks that do not compute the loss (or non-finite)
  double iteration_ms = 0;
  double samples_per_s = 0;
  double busy_ms = 0;
  double idle_ms = 0;
  // Of busy_ms: waiting for the iteration's batch from the data source. Written when above 0;
  // absent from executors older than the field (read as 0).
  double data_ms = 0;
  // The run's iterations in all, which an epochs run's executor counts from its data set
  // (protocol 5; absent from older executors: read as 0).
  int64_t total_iterations = 0;
  // fp16 runs (protocol 6): the loss scale the next iteration uses and the steps skipped so far
  // for inf or nan gradients; written when loss_scale is above 0 (absent: read as 0 and 0).
  double loss_scale = 0;
  int64_t skipped_steps = 0;
  // The rank's peak memory so far in bytes (worker::PeakMemoryBytes: the CUDA allocator's peak
  // on a GPU, the process's peak resident set on CPU); written when above 0, absent from older
  // executors (read as 0).
  int64_t peak_memory_bytes = 0;
  std::optional<IterationSharing> sharing;
};

// Written by rank 0 after each evaluation: the held-out set's mean loss and top-1/top-5
// accuracy (fractions in [0,1]) after `iteration` iterations, over `samples` samples.
struct EvaluationEvent {
  int rank = 0;
  int64_t iteration = 0;
  int64_t samples = 0;
  std::optional<double> loss;  // null when not finite
  double top1 = 0;
  double top5 = 0;
};

struct DoneEvent {
  int rank = 0;
  int64_t iterations = 0;
  std::optional<std::string> checkpoint;  // the file this rank wrote
  std::optional<double> checkpoint_ms;    // how long writing it took
  bool stopped = false;  // ended early, after the periodic checkpoint of `iterations`
};

struct ErrorEvent {
  int rank = 0;
  std::string message;  // one line
  StatusCode code = StatusCode::kUnknown;

  // The event for a failed status: its code, and its text cut to the first line (at most
  // kMaxMessageBytes), saying that the rest is in the rank's log when something was cut.
  static ErrorEvent FromStatus(int rank, const Status& status);
  static constexpr size_t kMaxMessageBytes = 400;
};

// Whether a rank failing with `code` may only be echoing another rank's failure: its
// connections closed or its collectives timed out (the communicators' UNAVAILABLE and
// DEADLINE_EXCEEDED).
bool IsPeerFailureCode(StatusCode code);

// A hosted BG job's progress so far.
struct BackgroundEvent {
  std::string job_id;
  int64_t iterations = 0;
  double samples_per_s = 0;
  std::optional<double> loss;
};

enum class BackgroundEnd { kOk, kError, kDetached, kHostEnded };
const char* BackgroundEndName(BackgroundEnd end);  // "ok", "error", "detached", "host_ended"

struct BackgroundDoneEvent {
  BackgroundEvent progress;
  BackgroundEnd status = BackgroundEnd::kOk;
  std::string message;  // why, when not ok
};

// A part of one rank's timeline. Spans' track is unused (0); start_us is wall-clock time.
struct TraceEvent {
  int rank = 0;
  int64_t request_id = 0;
  int64_t first_iteration = 0;  // the iterations actually recorded
  int iterations = 0;
  bool last = false;  // the rank's final part for this request
  std::vector<TimelineSpan> spans;
  static constexpr size_t kMaxTraceSpansPerEvent = 200;
  static constexpr size_t kMaxSpanNameBytes = 120;  // longer names are cut when written
};

using ExecutorEvent =
    std::variant<StoreReadyEvent, IterationEvent, DoneEvent, ErrorEvent, BackgroundEvent,
                 BackgroundDoneEvent, TraceEvent, EvaluationEvent>;

// One line without its newline. Invalid UTF-8 in strings is replaced, never thrown on (error
// messages may quote arbitrary library text); non-finite losses are written as null.
std::string ExecutorEventToJson(const ExecutorEvent& event);

// INVALID_ARGUMENT when the line is not an event: not a JSON object with a string "event" of a
// known kind, or a field of that kind missing or of the wrong type (named, e.g. "iteration:
// field busy_ms must be a number").
StatusOr<ExecutorEvent> ParseExecutorEvent(std::string_view line);

}  // namespace deepool::protocol

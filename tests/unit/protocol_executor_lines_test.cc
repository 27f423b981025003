// The executor protocol's lines (protocol/executor_commands.h, protocol/executor_events.h):
// commands on an executor's stdin and the events it prints round-trip through their one writer
// and one reader, and the readers refuse malformed lines by naming the field.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "protocol/executor_commands.h"
#include "protocol/executor_events.h"
#include "tests/unit/run_spec_test_util.h"

namespace deepool::protocol {
namespace {

using nlohmann::json;

TEST_CASE("executor commands: attach and detach round-trip", "[protocol]") {
  ExecutorCommand attach;
  attach.background = SampleBackgroundSpec();
  attach.job_id = attach.background.job_id;
  StatusOr<ExecutorCommand> parsed = ParseExecutorCommand(ExecutorCommandToJson(attach));
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(parsed->kind == ExecutorCommand::Kind::kAttachBackground);
  CHECK(parsed->job_id == "bg-1");
  CHECK(parsed->background.iterations == 7);
  CHECK(parsed->background.sharing == attach.background.sharing);

  ExecutorCommand detach;
  detach.kind = ExecutorCommand::Kind::kDetachBackground;
  detach.job_id = "bg-1";
  const std::string line = ExecutorCommandToJson(detach);
  CHECK(line == R"({"command":"detach_background","job_id":"bg-1"})");
  parsed = ParseExecutorCommand(line);
  REQUIRE(parsed.ok());
  CHECK(parsed->kind == ExecutorCommand::Kind::kDetachBackground);
  CHECK(parsed->job_id == "bg-1");
}

TEST_CASE("executor commands: stop_at_checkpoint round-trips", "[protocol]") {
  ExecutorCommand stop;
  stop.kind = ExecutorCommand::Kind::kStopAtCheckpoint;
  const std::string line = ExecutorCommandToJson(stop);
  CHECK(line == R"({"command":"stop_at_checkpoint"})");
  StatusOr<ExecutorCommand> parsed = ParseExecutorCommand(line);
  REQUIRE(parsed.ok());
  CHECK(parsed->kind == ExecutorCommand::Kind::kStopAtCheckpoint);
}

TEST_CASE("executor commands: malformed lines are refused naming the field", "[protocol]") {
  CHECK_THAT(ParseExecutorCommand("nonsense").status().message(), Catch::Contains("command"));
  CHECK_THAT(ParseExecutorCommand(R"({"command":"reboot"})").status().message(),
             Catch::Contains("unknown command"));
  CHECK_THAT(ParseExecutorCommand(R"({"command":"detach_background"})").status().message(),
             Catch::Contains("job_id"));
  CHECK_THAT(ParseExecutorCommand(R"({"command":"attach_background"})").status().message(),
             Catch::Contains("background"));
  json attach = json::parse(ExecutorCommandToJson(ExecutorCommand{
      ExecutorCommand::Kind::kAttachBackground, SampleBackgroundSpec(), "bg-1", {}}));
  attach["background"]["batch_size"] = 0;
  CHECK_THAT(ParseExecutorCommand(attach.dump()).status().message(),
             Catch::Contains("background.batch_size"));
}

template <typename T>
T RoundTrip(const T& event) {
  StatusOr<ExecutorEvent> parsed = ParseExecutorEvent(ExecutorEventToJson(event));
  INFO(ExecutorEventToJson(event) << ": " << parsed.status().ToString());
  REQUIRE(parsed.ok());
  REQUIRE(std::holds_alternative<T>(*parsed));
  return std::get<T>(*parsed);
}

TEST_CASE("executor events: every kind round-trips", "[protocol]") {
  const StoreReadyEvent ready = RoundTrip(StoreReadyEvent{"10.0.0.1", 29500});
  CHECK(ready.host == "10.0.0.1");
  CHECK(ready.port == 29500);

  IterationEvent iteration;
  iteration.rank = 1;
  iteration.iteration = 7;
  iteration.loss = 2.5;
  iteration.iteration_ms = 10;
  iteration.samples_per_s = 800;
  iteration.busy_ms = 8;
  iteration.idle_ms = 2;
  IterationEvent plain = RoundTrip(iteration);
  CHECK(plain.rank == 1);
  CHECK(plain.iteration == 7);
  CHECK(plain.loss == 2.5);
  CHECK(plain.samples_per_s == 800);
  CHECK(plain.idle_ms == 2);
  CHECK(plain.data_ms == 0);
  CHECK_FALSE(plain.sharing.has_value());
  iteration.data_ms = 1.5;  // waiting for the batch
  CHECK(RoundTrip(iteration).data_ms == 1.5);
  CHECK(plain.total_iterations == 0);
  iteration.total_iterations = 86;  // an epochs run's count
  CHECK(RoundTrip(iteration).total_iterations == 86);
  iteration.total_iterations = 0;
  iteration.loss_scale = 32768;  // an fp16 run that skipped two steps
  iteration.skipped_steps = 2;
  IterationEvent scaled = RoundTrip(iteration);
  CHECK(scaled.loss_scale == 32768);
  CHECK(scaled.skipped_steps == 2);
  CHECK(plain.loss_scale == 0);
  CHECK(plain.skipped_steps == 0);
  iteration.loss_scale = 0;
  iteration.skipped_steps = 0;
  iteration.loss = std::nan("");  // a rank without the loss
  iteration.sharing = IterationSharing{6, 3, 50, 4, std::nullopt};
  IterationEvent shared = RoundTrip(iteration);
  CHECK_FALSE(shared.loss.has_value());
  REQUIRE(shared.sharing.has_value());
  CHECK(shared.sharing->bg_busy_ms == 3);
  CHECK(shared.sharing->bg_iterations == 4);
  CHECK_FALSE(shared.sharing->bg_loss.has_value());

  const DoneEvent done = RoundTrip(DoneEvent{2, 5, std::string("/tmp/m.pt.rank2"), std::nullopt});
  CHECK(done.rank == 2);
  CHECK(done.iterations == 5);
  CHECK(done.checkpoint == std::optional<std::string>("/tmp/m.pt.rank2"));
  CHECK_FALSE(RoundTrip(DoneEvent{0, 5, std::nullopt, std::nullopt}).checkpoint.has_value());
  CHECK_FALSE(RoundTrip(DoneEvent{0, 5, std::nullopt, std::nullopt}).checkpoint_ms.has_value());
  CHECK(RoundTrip(DoneEvent{1, 5, std::string("/tmp/m.pt"), 12.5}).checkpoint_ms == 12.5);
  CHECK_FALSE(done.stopped);
  DoneEvent stopped{0, 30, std::nullopt, std::nullopt};
  stopped.stopped = true;
  CHECK(ExecutorEventToJson(stopped) ==
        R"({"checkpoint":null,"event":"done","iterations":30,"rank":0,"stopped":true})");
  CHECK(RoundTrip(stopped).stopped);

  const ErrorEvent error = RoundTrip(ErrorEvent{3, "plan: bad \xff byte"});
  CHECK(error.rank == 3);
  CHECK_THAT(error.message, Catch::StartsWith("plan: bad"));  // invalid UTF-8 replaced
  CHECK(error.code == StatusCode::kUnknown);
  for (int i = 0; i <= 16; ++i) {  // every code survives the trip under its name
    const auto code = static_cast<StatusCode>(i);
    CHECK(RoundTrip(ErrorEvent{0, "x", code}).code == code);
  }
  // An executor of an older release writes no code.
  auto old = ParseExecutorEvent(R"({"event":"error","rank":1,"message":"m"})");
  REQUIRE(old.ok());
  CHECK(std::get<ErrorEvent>(*old).code == StatusCode::kUnknown);

  const BackgroundEvent progress = RoundTrip(BackgroundEvent{"bg-1", 3, 55.5, 1.25});
  CHECK(progress.job_id == "bg-1");
  CHECK(progress.iterations == 3);
  CHECK(progress.loss == 1.25);

  for (BackgroundEnd end : {BackgroundEnd::kOk, BackgroundEnd::kError, BackgroundEnd::kDetached,
                            BackgroundEnd::kHostEnded}) {
    const BackgroundDoneEvent ended =
        RoundTrip(BackgroundDoneEvent{{"bg-1", 9, 60, std::nullopt}, end, "why"});
    CHECK(ended.status == end);
    CHECK(ended.progress.iterations == 9);
    CHECK(ended.message == "why");
  }

  const EvaluationEvent evaluation = RoundTrip(EvaluationEvent{0, 200, 800, 0.52, 0.812, 0.99});
  CHECK(evaluation.iteration == 200);
  CHECK(evaluation.samples == 800);
  CHECK(evaluation.loss == 0.52);
  CHECK(evaluation.top1 == 0.812);
  CHECK(evaluation.top5 == 0.99);
  CHECK(ExecutorEventToJson(EvaluationEvent{0, 10, 64, std::nan(""), 0.5, 1}) ==
        R"({"event":"evaluation","iteration":10,"loss":null,"rank":0,"samples":64,"top1":0.5,)"
        R"("top5":1.0})");
  CHECK_FALSE(RoundTrip(EvaluationEvent{0, 10, 64, std::nan(""), 0.5, 1}).loss.has_value());
}

TEST_CASE("executor events: the lines executors print parse", "[protocol]") {
  // As written by deepool-executor before this library (and by the worker's fake executors).
  auto event = ParseExecutorEvent(
      R"({"event":"iteration","rank":0,"iteration":0,"loss":null,"iteration_ms":5,)"
      R"("samples_per_s":80,"busy_ms":4,"idle_ms":1})");
  REQUIRE(event.ok());
  CHECK_FALSE(std::get<IterationEvent>(*event).loss.has_value());
  event = ParseExecutorEvent(
      R"({"event":"background_done","job_id":"bg-1","status":"detached","iterations":0,)"
      R"("samples_per_s":0,"loss":null,"message":""})");
  REQUIRE(event.ok());
  CHECK(std::get<BackgroundDoneEvent>(*event).status == BackgroundEnd::kDetached);
}

TEST_CASE("executor events: malformed lines are refused naming the field", "[protocol]") {
  auto message = [](std::string_view line) {
    StatusOr<ExecutorEvent> event = ParseExecutorEvent(line);
    REQUIRE_FALSE(event.ok());
    CHECK(event.status().code() == StatusCode::kInvalidArgument);
    return event.status().message();
  };
  CHECK_THAT(message("epoch 3 done"), Catch::Contains("not an executor event"));
  CHECK_THAT(message(R"({"rank":0})"), Catch::Contains("not an executor event"));
  CHECK_THAT(message(R"({"event":"reboot"})"), Catch::Contains("unknown event kind"));
  CHECK_THAT(message(R"({"event":"store_ready","host":"h"})"),
             Catch::Contains("store_ready") && Catch::Contains("port"));
  CHECK_THAT(message(R"({"event":"iteration","rank":0,"iteration":"1"})"),
             Catch::Contains("iteration") && Catch::Contains("field iteration"));
  CHECK_THAT(message(R"({"event":"done","rank":0,"iterations":3,"checkpoint":7})"),
             Catch::Contains("checkpoint"));
  CHECK_THAT(message(R"({"event":"error","rank":0})"), Catch::Contains("message"));
  CHECK_THAT(message(R"({"event":"evaluation","rank":0,"iteration":5,"samples":8,"top1":1})"),
             Catch::Contains("evaluation") && Catch::Contains("top5"));
  CHECK_THAT(message(R"({"event":"background_done","job_id":"b","iterations":1,)"
                     R"("samples_per_s":1,"status":"paused"})"),
             Catch::Contains("status"));
}

TEST_CASE("executor commands: trace requests round-trip and bad windows are refused",
          "[protocol]") {
  ExecutorCommand command;
  command.kind = ExecutorCommand::Kind::kTrace;
  command.trace.request_id = 4;
  command.trace.first_iteration = 120;
  command.trace.iterations = 3;
  const std::string line = ExecutorCommandToJson(command);
  CHECK(line == R"({"command":"trace","first_iteration":120,"iterations":3,"request_id":4})");
  StatusOr<ExecutorCommand> parsed = ParseExecutorCommand(line);
  REQUIRE(parsed.ok());
  CHECK(parsed->kind == ExecutorCommand::Kind::kTrace);
  CHECK(parsed->trace.request_id == 4);
  CHECK(parsed->trace.first_iteration == 120);
  CHECK(parsed->trace.iterations == 3);
  CHECK_THAT(ParseExecutorCommand(
                 R"({"command":"trace","request_id":1,"first_iteration":0,"iterations":0})")
                 .status()
                 .message(),
             Catch::Contains("iterations"));
  CHECK_THAT(ParseExecutorCommand(
                 R"({"command":"trace","request_id":1,"first_iteration":-1,"iterations":2})")
                 .status()
                 .message(),
             Catch::Contains("first_iteration"));
  CHECK_THAT(ParseExecutorCommand(R"({"command":"trace","first_iteration":0,"iterations":2})")
                 .status()
                 .message(),
             Catch::Contains("request_id"));
}

TEST_CASE("executor events: trace parts round-trip and malformed spans are refused", "[protocol]") {
  TraceEvent event;
  event.rank = 2;
  event.request_id = 9;
  event.first_iteration = 40;
  event.iterations = 3;
  event.last = true;
  TimelineSpan span;
  span.kind = SpanKind::kAllReduce;
  span.name = "gradients of fc1 + 2 more (64 KiB)";
  span.iteration = 41;
  span.start_us = 1.7e15 + 0.5;
  span.duration_us = 12.25;
  event.spans = {span};
  const TraceEvent back = RoundTrip(event);
  CHECK(back.rank == 2);
  CHECK(back.request_id == 9);
  CHECK(back.first_iteration == 40);
  CHECK(back.iterations == 3);
  CHECK(back.last);
  REQUIRE(back.spans.size() == 1);
  CHECK(back.spans[0].kind == SpanKind::kAllReduce);
  CHECK(back.spans[0].name == span.name);
  CHECK(back.spans[0].iteration == 41);
  CHECK(back.spans[0].start_us == span.start_us);
  CHECK(back.spans[0].duration_us == span.duration_us);

  const std::string head =
      R"({"event":"trace","rank":0,"request_id":1,"first_iteration":0,"iterations":1,"last":true,"spans":)";
  CHECK(ParseExecutorEvent(head + R"([["forward","fc1",0,1.0,2.0]]})").ok());
  CHECK_THAT(ParseExecutorEvent(head + R"([["sleeping","fc1",0,1.0,2.0]]})").status().message(),
             Catch::Contains("sleeping"));
  CHECK_THAT(ParseExecutorEvent(head + R"([["forward","fc1",0,1.0,-2.0]]})").status().message(),
             Catch::Contains("out of range"));
  CHECK_THAT(ParseExecutorEvent(head + R"([["forward","fc1",0]]})").status().message(),
             Catch::Contains("spans"));
  CHECK_THAT(ParseExecutorEvent(head + R"(7})").status().message(), Catch::Contains("spans"));
}

TEST_CASE("executor events: an error is one line with its code, the rest stays in the log",
          "[protocol]") {
  const std::string trace =
      "CUDA out of memory. Tried to allocate 28.80 GiB\n"
      "Exception raised from malloc at c10/cuda/CUDACachingAllocator.cpp\n"
      "frame #0: c10::Error::Error(...)";
  const ErrorEvent oom = ErrorEvent::FromStatus(2, InternalError(trace));
  CHECK(oom.rank == 2);
  CHECK(oom.code == StatusCode::kInternal);
  CHECK(oom.message ==
        "INTERNAL: CUDA out of memory. Tried to allocate 28.80 GiB (more in the rank's log)");
  const ErrorEvent long_line = ErrorEvent::FromStatus(0, UnavailableError(std::string(5000, 'x')));
  CHECK(long_line.message.size() < ErrorEvent::kMaxMessageBytes + 40);
  CHECK(ErrorEvent::FromStatus(0, UnavailableError("recv: closed")).message ==
        "UNAVAILABLE: recv: closed");
  CHECK(IsPeerFailureCode(StatusCode::kUnavailable));
  CHECK(IsPeerFailureCode(StatusCode::kDeadlineExceeded));
  CHECK_FALSE(IsPeerFailureCode(StatusCode::kInternal));
  CHECK_FALSE(IsPeerFailureCode(StatusCode::kUnknown));
}
}  // namespace
}  // namespace deepool::protocol

#include "protocol/executor_events.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/json_fields.h"

namespace deepool::protocol {
namespace {

// The code StatusCodeName spells `name`; UNKNOWN for any other text.
StatusCode StatusCodeNamed(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(StatusCode::kUnauthenticated); ++i) {
    const auto code = static_cast<StatusCode>(i);
    if (name == StatusCodeName(code)) return code;
  }
  return StatusCode::kUnknown;
}

using nlohmann::json;

constexpr BackgroundEnd kBackgroundEnds[] = {BackgroundEnd::kOk, BackgroundEnd::kError,
                                             BackgroundEnd::kDetached, BackgroundEnd::kHostEnded};

json NullableNumber(const std::optional<double>& value) {
  return value && std::isfinite(*value) ? json(*value) : json(nullptr);
}

// Absent or null: nullopt.
Status ReadNullableNumber(const json& doc, const char* name, std::optional<double>* out) {
  auto found = doc.find(name);
  if (found == doc.end() || found->is_null()) return Status::Ok();
  double value = 0;
  RETURN_IF_ERROR(ReadOptionalField(doc, name, "", &value));
  *out = value;
  return Status::Ok();
}

json ProgressFields(const BackgroundEvent& e) {
  return {{"job_id", e.job_id},
          {"iterations", e.iterations},
          {"samples_per_s", e.samples_per_s},
          {"loss", NullableNumber(e.loss)}};
}

json ToJson(const StoreReadyEvent& e) {
  return {{"event", "store_ready"}, {"host", e.host}, {"port", e.port}};
}

json ToJson(const IterationEvent& e) {
  json doc{{"event", "iteration"},           {"rank", e.rank},
           {"iteration", e.iteration},       {"loss", NullableNumber(e.loss)},
           {"iteration_ms", e.iteration_ms}, {"samples_per_s", e.samples_per_s},
           {"busy_ms", e.busy_ms},           {"idle_ms", e.idle_ms}};
  if (e.data_ms > 0) doc["data_ms"] = e.data_ms;
  if (e.total_iterations > 0) doc["total_iterations"] = e.total_iterations;
  if (e.peak_memory_bytes > 0) doc["peak_memory_bytes"] = e.peak_memory_bytes;
  if (e.loss_scale > 0) {
    doc["loss_scale"] = e.loss_scale;
    doc["skipped_steps"] = e.skipped_steps;
  }
  if (e.sharing) {
    doc["fg_busy_ms"] = e.sharing->fg_busy_ms;
    doc["bg_busy_ms"] = e.sharing->bg_busy_ms;
    doc["bg_samples_per_s"] = e.sharing->bg_samples_per_s;
    doc["bg_iterations"] = e.sharing->bg_iterations;
    doc["bg_loss"] = NullableNumber(e.sharing->bg_loss);
  }
  return doc;
}

json ToJson(const EvaluationEvent& e) {
  return {{"event", "evaluation"},
          {"rank", e.rank},
          {"iteration", e.iteration},
          {"samples", e.samples},
          {"loss", NullableNumber(e.loss)},
          {"top1", e.top1},
          {"top5", e.top5}};
}

json ToJson(const DoneEvent& e) {
  json doc{{"event", "done"},
           {"rank", e.rank},
           {"iterations", e.iterations},
           {"checkpoint", e.checkpoint ? json(*e.checkpoint) : json(nullptr)}};
  if (e.checkpoint_ms && std::isfinite(*e.checkpoint_ms)) doc["checkpoint_ms"] = *e.checkpoint_ms;
  if (e.stopped) doc["stopped"] = true;
  return doc;
}

json ToJson(const ErrorEvent& e) {
  return {{"event", "error"},
          {"rank", e.rank},
          {"code", StatusCodeName(e.code)},
          {"message", e.message}};
}

json ToJson(const BackgroundEvent& e) {
  json doc = ProgressFields(e);
  doc["event"] = "background";
  return doc;
}

json ToJson(const BackgroundDoneEvent& e) {
  json doc = ProgressFields(e.progress);
  doc["event"] = "background_done";
  doc["status"] = BackgroundEndName(e.status);
  doc["message"] = e.message;
  return doc;
}

json ToJson(const TraceEvent& e) {
  json spans = json::array();
  for (const TimelineSpan& span : e.spans) {
    spans.push_back(
        json::array({SpanKindName(span.kind), span.name.substr(0, TraceEvent::kMaxSpanNameBytes),
                     span.iteration, span.start_us, span.duration_us}));
  }
  return {{"event", "trace"},           {"rank", e.rank},
          {"request_id", e.request_id}, {"first_iteration", e.first_iteration},
          {"iterations", e.iterations}, {"last", e.last},
          {"spans", std::move(spans)}};
}

StatusOr<ExecutorEvent> ParseStoreReady(const json& doc) {
  StoreReadyEvent e;
  ASSIGN_OR_RETURN(e.host, ReadRequiredField<std::string>(doc, "host", ""));
  ASSIGN_OR_RETURN(e.port, ReadRequiredField<int>(doc, "port", ""));
  return ExecutorEvent(std::move(e));
}

// The BG fields come together (AddSharingFields writes them all); fg_busy_ms says they are there.
StatusOr<std::optional<IterationSharing>> ParseSharing(const json& doc) {
  if (!doc.contains("fg_busy_ms")) return std::optional<IterationSharing>();
  IterationSharing s;
  ASSIGN_OR_RETURN(s.fg_busy_ms, ReadRequiredField<double>(doc, "fg_busy_ms", ""));
  ASSIGN_OR_RETURN(s.bg_busy_ms, ReadRequiredField<double>(doc, "bg_busy_ms", ""));
  ASSIGN_OR_RETURN(s.bg_samples_per_s, ReadRequiredField<double>(doc, "bg_samples_per_s", ""));
  ASSIGN_OR_RETURN(s.bg_iterations, ReadRequiredField<int64_t>(doc, "bg_iterations", ""));
  RETURN_IF_ERROR(ReadNullableNumber(doc, "bg_loss", &s.bg_loss));
  return std::optional<IterationSharing>(s);
}

StatusOr<ExecutorEvent> ParseIteration(const json& doc) {
  IterationEvent e;
  ASSIGN_OR_RETURN(e.rank, ReadRequiredField<int>(doc, "rank", ""));
  ASSIGN_OR_RETURN(e.iteration, ReadRequiredField<int64_t>(doc, "iteration", ""));
  RETURN_IF_ERROR(ReadNullableNumber(doc, "loss", &e.loss));
  ASSIGN_OR_RETURN(e.iteration_ms, ReadRequiredField<double>(doc, "iteration_ms", ""));
  ASSIGN_OR_RETURN(e.samples_per_s, ReadRequiredField<double>(doc, "samples_per_s", ""));
  ASSIGN_OR_RETURN(e.busy_ms, ReadRequiredField<double>(doc, "busy_ms", ""));
  ASSIGN_OR_RETURN(e.idle_ms, ReadRequiredField<double>(doc, "idle_ms", ""));
  RETURN_IF_ERROR(ReadOptionalField(doc, "data_ms", "", &e.data_ms));
  RETURN_IF_ERROR(ReadOptionalField(doc, "total_iterations", "", &e.total_iterations));
  RETURN_IF_ERROR(ReadOptionalField(doc, "loss_scale", "", &e.loss_scale));
  RETURN_IF_ERROR(ReadOptionalField(doc, "skipped_steps", "", &e.skipped_steps));
  RETURN_IF_ERROR(ReadOptionalField(doc, "peak_memory_bytes", "", &e.peak_memory_bytes));
  ASSIGN_OR_RETURN(e.sharing, ParseSharing(doc));
  return ExecutorEvent(e);  // trivially copyable
}

StatusOr<ExecutorEvent> ParseEvaluation(const json& doc) {
  EvaluationEvent e;
  ASSIGN_OR_RETURN(e.rank, ReadRequiredField<int>(doc, "rank", ""));
  ASSIGN_OR_RETURN(e.iteration, ReadRequiredField<int64_t>(doc, "iteration", ""));
  ASSIGN_OR_RETURN(e.samples, ReadRequiredField<int64_t>(doc, "samples", ""));
  RETURN_IF_ERROR(ReadNullableNumber(doc, "loss", &e.loss));
  ASSIGN_OR_RETURN(e.top1, ReadRequiredField<double>(doc, "top1", ""));
  ASSIGN_OR_RETURN(e.top5, ReadRequiredField<double>(doc, "top5", ""));
  return ExecutorEvent(e);  // trivially copyable
}

StatusOr<ExecutorEvent> ParseDone(const json& doc) {
  DoneEvent e;
  ASSIGN_OR_RETURN(e.rank, ReadRequiredField<int>(doc, "rank", ""));
  ASSIGN_OR_RETURN(e.iterations, ReadRequiredField<int64_t>(doc, "iterations", ""));
  std::string checkpoint;
  RETURN_IF_ERROR(ReadOptionalField(doc, "checkpoint", "", &checkpoint));
  if (doc.contains("checkpoint") && !doc["checkpoint"].is_null()) e.checkpoint = checkpoint;
  RETURN_IF_ERROR(ReadNullableNumber(doc, "checkpoint_ms", &e.checkpoint_ms));
  RETURN_IF_ERROR(ReadOptionalField(doc, "stopped", "", &e.stopped));
  return ExecutorEvent(std::move(e));
}

StatusOr<ExecutorEvent> ParseError(const json& doc) {
  ErrorEvent e;
  ASSIGN_OR_RETURN(e.rank, ReadRequiredField<int>(doc, "rank", ""));
  ASSIGN_OR_RETURN(e.message, ReadRequiredField<std::string>(doc, "message", ""));
  std::string code;
  RETURN_IF_ERROR(ReadOptionalField(doc, "code", "", &code));
  if (!code.empty()) e.code = StatusCodeNamed(code);
  return ExecutorEvent(std::move(e));
}

StatusOr<BackgroundEvent> ParseProgress(const json& doc) {
  BackgroundEvent e;
  ASSIGN_OR_RETURN(e.job_id, ReadRequiredField<std::string>(doc, "job_id", ""));
  ASSIGN_OR_RETURN(e.iterations, ReadRequiredField<int64_t>(doc, "iterations", ""));
  ASSIGN_OR_RETURN(e.samples_per_s, ReadRequiredField<double>(doc, "samples_per_s", ""));
  RETURN_IF_ERROR(ReadNullableNumber(doc, "loss", &e.loss));
  return e;
}

StatusOr<ExecutorEvent> ParseBackground(const json& doc) {
  ASSIGN_OR_RETURN(BackgroundEvent e, ParseProgress(doc));
  return ExecutorEvent(std::move(e));
}

StatusOr<ExecutorEvent> ParseBackgroundDone(const json& doc) {
  BackgroundDoneEvent e;
  ASSIGN_OR_RETURN(e.progress, ParseProgress(doc));
  ASSIGN_OR_RETURN(std::string status, ReadRequiredField<std::string>(doc, "status", ""));
  bool known = false;
  for (BackgroundEnd end : kBackgroundEnds) {
    if (status == BackgroundEndName(end)) {
      e.status = end;
      known = true;
    }
  }
  if (!known) return InvalidArgumentError("unknown status \"" + status + "\"");
  RETURN_IF_ERROR(ReadOptionalField(doc, "message", "", &e.message));
  return ExecutorEvent(std::move(e));
}

StatusOr<TimelineSpan> ParseSpan(const json& item) {
  if (!item.is_array() || item.size() != 5 || !item[0].is_string() || !item[1].is_string() ||
      !item[2].is_number_integer() || !item[3].is_number() || !item[4].is_number()) {
    return InvalidArgumentError("spans: an entry is not [kind, name, iteration, start, duration]");
  }
  TimelineSpan span;
  ASSIGN_OR_RETURN(span.kind, ParseSpanKind(item[0].get<std::string>()));
  span.name = item[1].get<std::string>();
  span.iteration = item[2].get<int64_t>();
  span.start_us = item[3].get<double>();
  span.duration_us = item[4].get<double>();
  if (!std::isfinite(span.start_us) || !(span.duration_us >= 0)) {
    return InvalidArgumentError("spans: a start or duration is out of range");
  }
  return span;
}

StatusOr<ExecutorEvent> ParseTrace(const json& doc) {
  TraceEvent e;
  ASSIGN_OR_RETURN(e.rank, ReadRequiredField<int>(doc, "rank", ""));
  ASSIGN_OR_RETURN(e.request_id, ReadRequiredField<int64_t>(doc, "request_id", ""));
  ASSIGN_OR_RETURN(e.first_iteration, ReadRequiredField<int64_t>(doc, "first_iteration", ""));
  ASSIGN_OR_RETURN(e.iterations, ReadRequiredField<int>(doc, "iterations", ""));
  ASSIGN_OR_RETURN(e.last, ReadRequiredField<bool>(doc, "last", ""));
  ASSIGN_OR_RETURN(const json* spans, ReadRequiredArray(doc, "spans", ""));
  if (spans->size() > TraceEvent::kMaxTraceSpansPerEvent) {
    return InvalidArgumentError("spans: more than " +
                                std::to_string(TraceEvent::kMaxTraceSpansPerEvent));
  }
  for (const json& item : *spans) {
    ASSIGN_OR_RETURN(TimelineSpan span, ParseSpan(item));
    e.spans.push_back(std::move(span));
  }
  return ExecutorEvent(std::move(e));
}

StatusOr<ExecutorEvent> ParseKind(const std::string& kind, const json& doc) {
  if (kind == "trace") return ParseTrace(doc);
  if (kind == "store_ready") return ParseStoreReady(doc);
  if (kind == "iteration") return ParseIteration(doc);
  if (kind == "evaluation") return ParseEvaluation(doc);
  if (kind == "done") return ParseDone(doc);
  if (kind == "error") return ParseError(doc);
  if (kind == "background") return ParseBackground(doc);
  if (kind == "background_done") return ParseBackgroundDone(doc);
  return InvalidArgumentError("unknown event kind");
}

}  // namespace

ErrorEvent ErrorEvent::FromStatus(int rank, const Status& status) {
  ErrorEvent e;
  e.rank = rank;
  e.code = status.code();
  std::string text = status.ToString();
  const size_t newline = text.find('\n');
  const bool cut = newline != std::string::npos || text.size() > kMaxMessageBytes;
  text = text.substr(0, std::min(newline, kMaxMessageBytes));
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) text.pop_back();
  e.message = cut ? text + " (more in the rank's log)" : text;
  return e;
}

bool IsPeerFailureCode(StatusCode code) {
  return code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded;
}

const char* BackgroundEndName(BackgroundEnd end) {
  switch (end) {
    case BackgroundEnd::kOk:
      return "ok";
    case BackgroundEnd::kError:
      return "error";
    case BackgroundEnd::kDetached:
      return "detached";
    case BackgroundEnd::kHostEnded:
      return "host_ended";
  }
  return "error";
}

std::string ExecutorEventToJson(const ExecutorEvent& event) {
  const json doc = std::visit([](const auto& e) { return ToJson(e); }, event);
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

StatusOr<ExecutorEvent> ParseExecutorEvent(std::string_view line) {
  StatusOr<json> parsed = ParseJson(line, "executor event");
  const json doc = parsed.ok() ? std::move(*parsed) : json();
  if (!doc.is_object() || !doc.contains("event") || !doc["event"].is_string()) {
    return InvalidArgumentError("not an executor event: " + std::string(line.substr(0, 200)));
  }
  const std::string kind = doc["event"].get<std::string>();
  StatusOr<ExecutorEvent> event = ParseKind(kind, doc);
  if (!event.ok()) return event.status().WithContext(kind);
  return event;
}

}  // namespace deepool::protocol

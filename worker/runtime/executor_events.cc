#include "worker/runtime/executor_events.h"

#include <cmath>

namespace deepool::worker {

using nlohmann::json;

std::string StoreReadyEvent(const std::string& host, int port) {
  return json{{"event", "store_ready"}, {"host", host}, {"port", port}}.dump();
}

std::string IterationEvent(int rank, const IterationStats& stats) {
  json event{{"event", "iteration"}, {"rank", rank}, {"iteration", stats.iteration}};
  event["loss"] = std::isfinite(stats.loss) ? json(stats.loss) : json(nullptr);
  event["iteration_ms"] = stats.iteration_ms;
  event["samples_per_s"] = stats.samples_per_s;
  event["busy_ms"] = stats.busy_ms;
  event["idle_ms"] = stats.idle_ms;
  return event.dump();
}

std::string DoneEvent(int rank, int64_t iterations, const std::optional<std::string>& checkpoint) {
  return json{{"event", "done"},
              {"rank", rank},
              {"iterations", iterations},
              {"checkpoint", checkpoint ? json(*checkpoint) : json(nullptr)}}
      .dump();
}

std::string ErrorEvent(int rank, const std::string& message) {
  // Replace invalid UTF-8 rather than throw: messages may quote arbitrary library text.
  return json{{"event", "error"}, {"rank", rank}, {"message", message}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

StatusOr<json> ParseExecutorEvent(std::string_view line) {
  json event = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (event.is_discarded() || !event.is_object() || !event.contains("event") ||
      !event["event"].is_string()) {
    return InvalidArgumentError("not an executor event: " + std::string(line.substr(0, 200)));
  }
  return event;
}

}  // namespace deepool::worker

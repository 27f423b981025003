#include "worker/runtime/executor_events.h"

namespace deepool::worker {

using protocol::ExecutorEventToJson;

std::string StoreReadyEvent(const std::string& host, int port) {
  return ExecutorEventToJson(protocol::StoreReadyEvent{host, port});
}

std::string IterationEvent(int rank, const IterationStats& stats, int64_t total_iterations,
                           int64_t peak_memory_bytes) {
  protocol::IterationEvent event;
  event.rank = rank;
  event.iteration = stats.iteration;
  event.loss = stats.loss;  // written as null when not finite (ranks without the loss)
  event.iteration_ms = stats.iteration_ms;
  event.samples_per_s = stats.samples_per_s;
  event.busy_ms = stats.busy_ms;
  event.idle_ms = stats.idle_ms;
  event.data_ms = stats.data_ms;
  event.total_iterations = total_iterations;
  event.loss_scale = stats.loss_scale;
  event.skipped_steps = stats.skipped_steps;
  event.peak_memory_bytes = peak_memory_bytes;
  return ExecutorEventToJson(event);
}

std::string EvaluationEvent(int rank, int64_t iteration, const EvaluationStats& stats) {
  protocol::EvaluationEvent event;
  event.rank = rank;
  event.iteration = iteration;
  event.samples = stats.samples;
  event.loss = stats.loss;  // written as null when not finite
  event.top1 = stats.top1;
  event.top5 = stats.top5;
  return ExecutorEventToJson(event);
}

std::string DoneEvent(int rank, int64_t iterations, const std::optional<std::string>& checkpoint,
                      std::optional<double> checkpoint_ms) {
  return ExecutorEventToJson(protocol::DoneEvent{rank, iterations, checkpoint, checkpoint_ms});
}

std::string StoppedEvent(int rank, int64_t iteration) {
  protocol::DoneEvent done{rank, iteration, std::nullopt, std::nullopt};
  done.stopped = true;
  return ExecutorEventToJson(done);
}

std::string ErrorEvent(int rank, const Status& status) {
  return ExecutorEventToJson(protocol::ErrorEvent::FromStatus(rank, status));
}

}  // namespace deepool::worker

#include "worker/runtime/profiling/span_recorder.h"

#include <algorithm>
#include <chrono>

namespace deepool::worker {

SpanRecorder::SpanRecorder(const Clock* clock, double wall_origin_us)
    : clock_(clock), origin_(clock->Now()), wall_origin_us_(wall_origin_us) {}

void SpanRecorder::Request(const protocol::TraceCommand& command) {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = Window{command, -1, 0};
}

void SpanRecorder::BeginIteration(int64_t iteration) {
  std::lock_guard<std::mutex> lock(mu_);
  iteration_ = iteration;
  if (recording_ || !armed_) return;
  // The window begins at its first iteration, or at once when that has passed.
  if (iteration < armed_->command.first_iteration) return;
  recording_ = std::move(armed_);
  armed_.reset();
  recording_->first = iteration;
  spans_.clear();
  on_.store(true, std::memory_order_relaxed);
}

void SpanRecorder::Add(SpanKind kind, std::string name, Clock::TimePoint start) {
  const Clock::TimePoint end = clock_->Now();
  auto micros = [this](Clock::TimePoint t) {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  };
  std::lock_guard<std::mutex> lock(mu_);
  if (!recording_) return;
  TimelineSpan span;
  span.kind = kind;
  span.name = std::move(name);
  span.iteration = iteration_;
  span.start_us = wall_origin_us_ + micros(start);
  span.duration_us = std::max(0.0, micros(end) - micros(start));
  spans_.push_back(std::move(span));
}

std::vector<protocol::TraceEvent> SpanRecorder::TakeFinished(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!recording_) return {};
  if (++recording_->recorded < recording_->command.iterations) return {};
  on_.store(false, std::memory_order_relaxed);
  std::vector<protocol::TraceEvent> events = EventsOf(*recording_, rank);
  recording_.reset();
  return events;
}

std::vector<protocol::TraceEvent> SpanRecorder::Finish(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  on_.store(false, std::memory_order_relaxed);
  std::vector<protocol::TraceEvent> events;
  for (std::optional<Window>* window : {&recording_, &armed_}) {
    if (!*window) continue;
    for (auto& e : EventsOf(**window, rank)) events.push_back(std::move(e));
    window->reset();
    spans_.clear();  // an armed window recorded nothing
  }
  return events;
}

// Splits the spans into events of at most kMaxTraceSpansPerEvent; the last one says so. Called
// with mu_ held; takes the spans.
std::vector<protocol::TraceEvent> SpanRecorder::EventsOf(const Window& window, int rank) {
  std::vector<protocol::TraceEvent> events;
  const size_t per_event = protocol::TraceEvent::kMaxTraceSpansPerEvent;
  size_t next = 0;
  do {
    protocol::TraceEvent e;
    e.rank = rank;
    e.request_id = window.command.request_id;
    e.first_iteration = window.first >= 0 ? window.first : window.command.first_iteration;
    e.iterations = static_cast<int>(window.recorded);
    const size_t end = std::min(spans_.size(), next + per_event);
    e.spans.assign(std::make_move_iterator(spans_.begin() + static_cast<ptrdiff_t>(next)),
                   std::make_move_iterator(spans_.begin() + static_cast<ptrdiff_t>(end)));
    next = end;
    e.last = next >= spans_.size();
    events.push_back(std::move(e));
  } while (next < spans_.size());
  spans_.clear();
  return events;
}

}  // namespace deepool::worker

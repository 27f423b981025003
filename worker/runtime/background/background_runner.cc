#include "worker/runtime/background/background_runner.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "common/thread_name.h"

namespace deepool::worker {

BackgroundRunner::BackgroundRunner(BackgroundStepper* stepper, DeviceGate* gate, const Clock* clock,
                                   int64_t max_iterations,
                                   std::function<std::shared_ptr<void>()> thread_init)
    : stepper_(stepper),
      gate_(gate),
      clock_(clock),
      max_iterations_(max_iterations),
      thread_init_(std::move(thread_init)),
      unit_clock_(clock),
      tuner_(stepper->batch_size()) {
  progress_.iterations = stepper_->first_iteration();
}

BackgroundRunner::~BackgroundRunner() { Stop(); }

void BackgroundRunner::Start() {
  start_ = clock_->Now();
  thread_ = std::thread([this] { Loop(); });
}

void BackgroundRunner::TraceUnits(SpanRecorder* spans, std::string unit_name) {
  spans_ = spans;
  unit_name_ = std::move(unit_name);
}

void BackgroundRunner::Stop() {
  gate_->Stop();
  Join();
}

void BackgroundRunner::Join() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundRunner::Loop() {
  SetCurrentThreadName("dp-bg-runner");
  std::shared_ptr<void> thread_state;
  if (thread_init_) thread_state = thread_init_();
  // Released before thread_state, on this thread (e.g. leaving the BG stream).
  std::shared_ptr<void> stepper_state = stepper_->EnterThread();
  Status status;
  const auto reached = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return max_iterations_ > 0 && progress_.iterations >= max_iterations_;
  };
  // A job resumed from a checkpoint of its last iteration has nothing left to do.
  double longest_ms = 0;  // of this iteration's splittable units
  while (!reached() && gate_->BgBegin(stepper_->NextUnitNeedsFgIdle())) {
    const Clock::TimePoint unit_start = unit_clock_->Now();
    auto unit = [&] {
      SpanScope span(spans_, SpanKind::kBackground, [&] { return unit_name_; });
      return stepper_->RunUnit();
    }();
    const double unit_ms =
        std::chrono::duration<double, std::milli>(unit_clock_->Now() - unit_start).count();
    gate_->BgEnd();
    if (unit.ok()) stepper_->AfterUnit();
    if (!unit.ok()) {
      status = unit.status();
      DP_LOG_ERROR("background job stopped: {}", status.ToString());
      break;
    }
    if (unit->splittable) longest_ms = std::max(longest_ms, unit_ms);
    if (unit->iteration_done) {
      AdaptMicroBatches(longest_ms);
      longest_ms = 0;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++progress_.units;
    if (unit->iteration_done) {
      if (progress_.samples == 0) progress_.first_loss = unit->loss;
      ++progress_.iterations;
      progress_.samples += stepper_->batch_size();
      progress_.last_loss = unit->loss;
    }
  }
  stepper_state.reset();  // waits for the stepper's queued device work, if it has any
  std::lock_guard<std::mutex> lock(mu_);
  progress_.finished = true;
  progress_.status = status;
}

void BackgroundRunner::AdaptMicroBatches(double longest_ms) {
  const double bound_ms = gate_->UnitBoundMs();
  const int64_t current = stepper_->micro_batches();
  if (keep_units_under_bound_) {
    const int64_t next = tuner_.Next(current, longest_ms, bound_ms);
    if (next != current) {
      Status split = stepper_->SetMicroBatches(next);
      if (split.ok()) {
        DP_LOG_DEBUG("background job: {} micro-batches (longest unit {:.2f} ms, bound {:.2f} ms)",
                     next, longest_ms, bound_ms);
      } else {
        DP_LOG_WARN("background job keeps whole units of up to {:.2f} ms (bound {:.2f} ms): {}",
                    longest_ms, bound_ms, split.message());
        keep_units_under_bound_ = false;
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  progress_.micro_batches = stepper_->micro_batches();
  progress_.longest_unit_ms = longest_ms;
  progress_.unit_bound_ms = bound_ms;
}

BackgroundProgress BackgroundRunner::progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  BackgroundProgress out = progress_;
  out.elapsed_ms = std::chrono::duration<double, std::milli>(clock_->Now() - start_).count();
  out.samples_per_s = out.elapsed_ms > 0 ? out.samples * 1000.0 / out.elapsed_ms : 0;
  return out;
}

Status DemoteCurrentThreadToIdle() {
#ifdef SCHED_IDLE
  sched_param param{};
  param.sched_priority = 0;
  int error = pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
  if (error != 0) {
    return UnavailableError("SCHED_IDLE refused: error " + std::to_string(error));
  }
  return Status::Ok();
#else
  return UnavailableError("SCHED_IDLE is not available on this OS");
#endif
}

std::string AddSharingFields(const std::string& iteration_line, const SharingWindow& window,
                             const BackgroundProgress& progress) {
  nlohmann::json event = nlohmann::json::parse(iteration_line, nullptr, false);
  if (event.is_discarded() || !event.is_object()) return iteration_line;
  double fg_busy = std::max(0.0, window.window_ms - window.fg_wait_ms);
  event["fg_busy_ms"] = fg_busy;
  event["bg_busy_ms"] = window.bg_busy_ms;
  event["idle_ms"] = std::max(0.0, window.window_ms - fg_busy - window.bg_busy_ms);
  event["bg_samples_per_s"] = progress.samples_per_s;
  event["bg_iterations"] = progress.iterations;
  event["fg_bg_overrun_ms"] = window.bg_overrun_ms;
  event["fg_wait_timeouts"] = window.fg_wait_timeouts;
  event["bg_micro_batches"] = progress.micro_batches;
  event["bg_unit_bound_ms"] = progress.unit_bound_ms;
  event["bg_longest_unit_ms"] = progress.longest_unit_ms;
  event["bg_loss"] = progress.iterations > 0 && std::isfinite(progress.last_loss)
                         ? nlohmann::json(progress.last_loss)
                         : nlohmann::json(nullptr);
  return event.dump();
}

}  // namespace deepool::worker

// The simulator's discrete-event engine; the model is documented in sim_engine.h and
// docs/simulator.md.
#include "planner/sim_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace deepool::planner {
namespace {

// Times are sums of many doubles; a BG kernel that would start this close to an FG step's ready
// time counts as starting at it (and so does not start under FG priority).
constexpr double kEpsilonMs = 1e-9;

std::vector<int> UnionOf(const std::vector<int>& a, const std::vector<int>& b) {
  std::set<int> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  return std::vector<int>(all.begin(), all.end());
}

// Adds the step after the steps `after` and returns what the next dependent step waits for: the
// new step, or `after` itself when the step takes no time and is left out.
std::vector<int> AddStep(std::string label, std::vector<int> devices, double ms,
                         std::vector<int> after, FgTimeline* timeline) {
  if (ms <= 0) return after;
  timeline->steps.push_back({std::move(label), std::move(devices), ms, std::move(after)});
  return {static_cast<int>(timeline->steps.size()) - 1};
}

void Append(const std::vector<int>& more, std::vector<int>* steps) {
  steps->insert(steps->end(), more.begin(), more.end());
}

// One iteration's steps from `begin_ms` by the FgStep rule: each when the steps it waits for
// have ended and its devices are free (device_free, updated). `start_on(step, ready)` gives the
// time a step starts at from that FG-ready time (without BG work: the ready time itself);
// `ended(s, end)` hears each step's end. Returns when the last step ends (begin_ms without steps).
template <typename StartOn, typename Ended>
double ScheduleSteps(const FgTimeline& fg, const std::vector<double>& step_ms, double begin_ms,
                     std::vector<double>& device_free, StartOn start_on, Ended ended) {
  std::vector<double> ends(fg.steps.size(), begin_ms);
  double last = begin_ms;
  for (size_t s = 0; s < fg.steps.size(); ++s) {
    const FgStep& step = fg.steps[s];
    double ready = begin_ms;
    for (int before : step.after) ready = std::max(ready, ends[static_cast<size_t>(before)]);
    for (int d : step.devices) ready = std::max(ready, device_free[static_cast<size_t>(d)]);
    ends[s] = start_on(step, ready) + step_ms[s];
    for (int d : step.devices) device_free[static_cast<size_t>(d)] = ends[s];
    ended(s, ends[s]);
    last = std::max(last, ends[s]);
  }
  return last;
}

void AddKernels(const std::string& label, double ms, double max_kernel_ms, BgIteration* bg) {
  if (ms <= 0) return;
  const int pieces =
      max_kernel_ms > 0 ? std::max(1, static_cast<int>(std::ceil(ms / max_kernel_ms - 1e-9))) : 1;
  for (int i = 0; i < pieces; ++i) {
    std::string name = label;
    if (pieces > 1) name += " " + std::to_string(i + 1) + "/" + std::to_string(pieces);
    bg->kernels.push_back({std::move(name), ms / pieces});
  }
}

// One device's BG job: where it stands in its kernel sequence and what it ran in the window.
struct BgState {
  const BgIteration* job = nullptr;
  size_t next_kernel = 0;
  double free_at = 0;                              // end of the last BG kernel started
  double fg_free_at = 0;                           // end of the last FG step on this device
  std::vector<std::pair<double, double>> kernels;  // [start, end) of kernels that may count
};

// Runs the device's BG kernels in its FG-idle time before an FG step that is ready at
// `ready_ms`, and returns when the device can start that step. `policy` decides whether a kernel
// may overrun the ready time; `record_from` is the start of the measured window (kernels ending
// before it are not kept).
double FillIdleTime(BgState& state, double ready_ms, BgPolicy policy, double record_from) {
  if (state.job == nullptr || state.job->kernels.empty()) return ready_ms;
  const std::vector<BgKernel>& kernels = state.job->kernels;
  double start = std::max(state.fg_free_at, state.free_at);
  while (start < ready_ms - kEpsilonMs) {
    const double length = kernels[state.next_kernel].duration_ms;
    if (policy == BgPolicy::kFitGaps && start + length > ready_ms + kEpsilonMs) break;
    const double end = start + length;
    if (end > record_from) state.kernels.emplace_back(start, end);
    state.free_at = end;
    state.next_kernel = (state.next_kernel + 1) % kernels.size();
    start = end;
  }
  return std::max(ready_ms, state.free_at);
}

double ClippedSum(const std::vector<std::pair<double, double>>& intervals, double from, double to) {
  double sum = 0;
  for (const auto& [start, end] : intervals) {
    sum += std::max(0.0, std::min(end, to) - std::max(start, from));
  }
  return sum;
}

}  // namespace

double FgTimeline::iteration_ms() const {
  std::vector<double> step_ms;
  for (const FgStep& step : steps) step_ms.push_back(step.duration_ms);
  std::vector<double> device_free(static_cast<size_t>(std::max(0, num_devices)), 0.0);
  return ScheduleSteps(
      *this, step_ms, 0.0, device_free, [](const FgStep&, double ready) { return ready; },
      [](size_t, double) {});
}

double FgTimeline::BusyMs(int device) const {
  double total = 0;
  for (const FgStep& step : steps) {
    if (std::binary_search(step.devices.begin(), step.devices.end(), device)) {
      total += step.duration_ms;
    }
  }
  return total;
}

StatusOr<FgTimeline> BuildFgTimeline(const Plan& plan, const CostModel& model) {
  const Graph& graph = model.graph();
  RETURN_IF_ERROR(CheckPlanMatchesGraph(plan, graph));
  if (plan.global_batch != model.global_batch()) {
    return InvalidArgumentError("plan global batch " + std::to_string(plan.global_batch) +
                                " differs from the cost model's " +
                                std::to_string(model.global_batch()));
  }
  FgTimeline timeline;
  timeline.num_devices = plan.num_devices;
  timeline.global_batch = plan.global_batch;
  auto devices_of = [&](int id) -> const std::vector<int>& {
    return plan.layers[static_cast<size_t>(id)].devices;
  };
  auto count_of = [&](int id) { return static_cast<int>(devices_of(id).size()); };
  std::vector<LayerTime> times(static_cast<size_t>(graph.num_layers()));
  for (int id = 0; id < graph.num_layers(); ++id) {
    ASSIGN_OR_RETURN(times[static_cast<size_t>(id)], model.Compute(id, count_of(id)));
  }
  const std::vector<DeviceRange> ranges = RangesOf(plan);
  auto range_of = [&](int id) { return ranges[static_cast<size_t>(id)]; };
  // What each layer's forward output, and each layer's output gradient, waits for.
  const size_t num_layers = static_cast<size_t>(graph.num_layers());
  std::vector<std::vector<int>> forward_done(num_layers), gradient_in(num_layers);
  // Forward: re-splits into each layer, then its compute.
  for (int id = 0; id < graph.num_layers(); ++id) {
    const Layer& layer = graph.layer(id);
    std::vector<int> inputs;
    for (int producer : layer.input_ids) {
      if (producer == kGraphInputId) continue;
      Append(AddStep(graph.layer(producer).name + " -> " + layer.name + " resplit fw",
                     UnionOf(devices_of(producer), devices_of(id)),
                     model.ResplitMs(producer, range_of(producer), range_of(id)) / 2.0,
                     forward_done[static_cast<size_t>(producer)], &timeline),
             &inputs);
    }
    std::vector<int> done = AddStep(layer.name + " fw", devices_of(id),
                                    times[static_cast<size_t>(id)].forward_ms, inputs, &timeline);
    forward_done[static_cast<size_t>(id)] =
        AddStep(layer.name + " bn stats fw", devices_of(id),
                model.BatchNormSyncMs(id, count_of(id)), done, &timeline);
  }
  // Backward in reverse: compute, then the gradients back to the producers. A layer nothing
  // reads starts backward from its own forward.
  std::vector<int> backward_done;
  for (int id = graph.num_layers() - 1; id >= 0; --id) {
    const Layer& layer = graph.layer(id);
    const size_t at = static_cast<size_t>(id);
    const std::vector<int>& ready =
        graph.consumers(id).empty() ? forward_done[at] : gradient_in[at];
    std::vector<int> done =
        AddStep(layer.name + " bw", devices_of(id), times[at].backward_ms, ready, &timeline);
    done = AddStep(layer.name + " bn stats bw", devices_of(id),
                   model.BatchNormSyncMs(id, count_of(id)), done, &timeline);
    Append(done, &backward_done);
    for (int producer : layer.input_ids) {
      if (producer == kGraphInputId) continue;
      const std::vector<int> back = AddStep(
          layer.name + " -> " + graph.layer(producer).name + " resplit bw",
          UnionOf(devices_of(producer), devices_of(id)),
          model.ResplitMs(producer, range_of(producer), range_of(id)) / 2.0, done, &timeline);
      Append(back, &gradient_in[static_cast<size_t>(producer)]);
      Append(back, &backward_done);
    }
  }
  // The gradient all-reduces run in buckets beside backward; only their exposed tail after it
  // holds the devices (cost_model.h), as one step per bucket after the whole backward.
  ASSIGN_OR_RETURN(const GradientSyncTimeline sync, model.GradientSync(ranges));
  std::vector<int> tail = backward_done;
  for (const GradientBucketSync& bucket : sync.buckets) {
    tail = AddStep(graph.layer(bucket.layers.front()).name + " allreduce",
                   devices_of(bucket.layers.front()), bucket.exposed_ms, tail, &timeline);
  }
  return timeline;
}

double BgIteration::iteration_ms() const {
  double total = 0;
  for (const BgKernel& kernel : kernels) total += kernel.duration_ms;
  return total;
}

StatusOr<BgIteration> BuildBgIteration(const Graph& graph, const Profile& profile, int64_t batch,
                                       double max_kernel_ms) {
  if (batch < 1) {
    return InvalidArgumentError("BG batch must be >= 1, got " + std::to_string(batch));
  }
  if (!(max_kernel_ms >= 0)) return InvalidArgumentError("max BG kernel length must be >= 0");
  BgIteration bg;
  bg.model = graph.name();
  bg.batch = batch;
  std::vector<LayerTime> times(static_cast<size_t>(graph.num_layers()));
  for (int id = 0; id < graph.num_layers(); ++id) {
    StatusOr<LayerTime> time = profile.Time(graph, id, batch);
    if (!time.ok()) return time.status().WithContext("BG job " + graph.name());
    times[static_cast<size_t>(id)] = *time;
    AddKernels(graph.layer(id).name + " fw", time->forward_ms, max_kernel_ms, &bg);
  }
  for (int id = graph.num_layers() - 1; id >= 0; --id) {
    AddKernels(graph.layer(id).name + " bw", times[static_cast<size_t>(id)].backward_ms,
               max_kernel_ms, &bg);
  }
  if (bg.kernels.empty()) {
    return InvalidArgumentError("BG job " + graph.name() + ": the profile gives it no work");
  }
  return bg;
}

const char* BgPolicyName(BgPolicy policy) {
  return policy == BgPolicy::kGreedy ? "greedy" : "fit-gaps";
}

namespace {

Status CheckBgJobs(const std::vector<const BgIteration*>& bg) {
  for (const BgIteration* job : bg) {
    if (job == nullptr) continue;
    for (const BgKernel& kernel : job->kernels) {
      // A zero-length kernel would never advance the device's clock.
      if (!(kernel.duration_ms > 0) || !std::isfinite(kernel.duration_ms)) {
        return InvalidArgumentError("BG job " + job->model + ": kernel '" + kernel.label +
                                    "' must take a finite time > 0");
      }
    }
    if (job->batch < 1) {
      return InvalidArgumentError("BG job " + job->model + ": batch must be >= 1");
    }
  }
  return Status::Ok();
}

Status CheckFgSteps(const FgTimeline& fg) {
  for (size_t s = 0; s < fg.steps.size(); ++s) {
    const FgStep& step = fg.steps[s];
    for (int before : step.after) {
      if (before < 0 || static_cast<size_t>(before) >= s) {
        return InvalidArgumentError("FG step '" + step.label + "' waits for step " +
                                    std::to_string(before) + ", which is not an earlier step");
      }
    }
    if (!(step.duration_ms >= 0) || !std::isfinite(step.duration_ms)) {
      return InvalidArgumentError("FG step '" + step.label + "' must take a finite time >= 0");
    }
    for (int d : step.devices) {
      if (d < 0 || d >= fg.num_devices) {
        return InvalidArgumentError("FG step '" + step.label + "' names device " +
                                    std::to_string(d) + " outside the timeline's " +
                                    std::to_string(fg.num_devices));
      }
    }
  }
  return Status::Ok();
}

Status CheckMultiplexInputs(const FgTimeline& fg, const std::vector<const BgIteration*>& bg,
                            const EngineOptions& options) {
  if (fg.num_devices < 1 || static_cast<int>(bg.size()) != fg.num_devices) {
    return InvalidArgumentError(
        "need one BG entry (or none) per FG device: " + std::to_string(bg.size()) + " for " +
        std::to_string(fg.num_devices) + " devices");
  }
  RETURN_IF_ERROR(CheckFgSteps(fg));
  if (fg.global_batch < 1 || !(fg.iteration_ms() > 0)) {
    return InvalidArgumentError("the FG timeline must have a batch and take time");
  }
  if (options.iterations < 1 || options.warmup_iterations < 0) {
    return InvalidArgumentError("need >= 1 measured and >= 0 warm-up iterations");
  }
  const double slowdown = options.interference.fg_slowdown;
  if (!(slowdown >= 1.0) || !std::isfinite(slowdown)) {
    return InvalidArgumentError("FG slowdown must be a finite factor >= 1");
  }
  return CheckBgJobs(bg);
}

// What a run of the FG timeline with BG jobs in its idle time leaves behind.
struct MultiplexRun {
  std::vector<BgState> states;  // per device
  std::vector<double> fg_busy;  // per device, summed over the measured iterations
  double window_start = 0;
  double window_end = 0;
};

// Runs the warm-up and measured iterations (and one more, so every device's idle time up to
// the window's end has been filled with the BG kernels that really run there).
MultiplexRun RunMultiplexed(const FgTimeline& fg, const std::vector<const BgIteration*>& bg,
                            const EngineOptions& options) {
  const InterferenceModel& interference = options.interference;
  MultiplexRun run;
  run.states.resize(static_cast<size_t>(fg.num_devices));
  for (size_t d = 0; d < run.states.size(); ++d) run.states[d].job = bg[d];
  run.fg_busy.assign(run.states.size(), 0.0);
  // A step stretches when any of its devices hosts a BG job.
  std::vector<double> step_ms(fg.steps.size());
  for (size_t s = 0; s < fg.steps.size(); ++s) {
    bool collocated = false;
    for (int d : fg.steps[s].devices) collocated |= bg[static_cast<size_t>(d)] != nullptr;
    step_ms[s] = fg.steps[s].duration_ms * (collocated ? interference.fg_slowdown : 1.0);
  }
  const double kNotYet = std::numeric_limits<double>::infinity();
  run.window_start = options.warmup_iterations == 0 ? 0 : kNotYet;
  run.window_end = kNotYet;
  double now = 0;
  std::vector<double> device_free(run.states.size(), 0.0);  // end of each device's last FG step
  const int total_iterations = options.warmup_iterations + options.iterations + 1;
  for (int iteration = 0; iteration < total_iterations; ++iteration) {
    const bool measured = iteration >= options.warmup_iterations &&
                          iteration < options.warmup_iterations + options.iterations;
    // BG kernels fill each device's idle time up to the step's FG-ready time.
    now = ScheduleSteps(
        fg, step_ms, now, device_free,
        [&](const FgStep& step, double ready) {
          double start = ready;
          for (int d : step.devices) {
            start = std::max(start, FillIdleTime(run.states[static_cast<size_t>(d)], ready,
                                                 interference.policy, run.window_start));
          }
          return start;
        },
        [&](size_t s, double end) {
          for (int d : fg.steps[s].devices) {
            run.states[static_cast<size_t>(d)].fg_free_at = end;
            if (measured) run.fg_busy[static_cast<size_t>(d)] += step_ms[s];
          }
        });
    if (iteration + 1 == options.warmup_iterations) run.window_start = now;
    if (iteration + 1 == options.warmup_iterations + options.iterations) run.window_end = now;
  }
  // Devices without FG steps after the window (or none at all) run BG until its end.
  for (BgState& state : run.states) {
    FillIdleTime(state, run.window_end, BgPolicy::kGreedy, run.window_start);
  }
  return run;
}

MultiplexResult Summarise(const FgTimeline& fg, const MultiplexRun& run, int iterations) {
  MultiplexResult result;
  result.window_ms = run.window_end - run.window_start;
  result.fg_iteration_ms = result.window_ms / iterations;
  result.fg_samples_per_s = static_cast<double>(fg.global_batch) * 1000.0 / result.fg_iteration_ms;
  result.fg_delay_ms = result.fg_iteration_ms - fg.iteration_ms();
  for (size_t d = 0; d < run.states.size(); ++d) {
    DeviceUsage usage;
    usage.device = static_cast<int>(d);
    usage.fg_busy_ms = run.fg_busy[d] / iterations;
    if (const BgIteration* job = run.states[d].job) {
      const double bg_ms = ClippedSum(run.states[d].kernels, run.window_start, run.window_end);
      usage.bg_model = job->model;
      usage.bg_busy_ms = bg_ms / iterations;
      usage.bg_samples_per_s =
          bg_ms / job->iteration_ms() * static_cast<double>(job->batch) * 1000.0 / result.window_ms;
    }
    usage.idle_ms = std::max(0.0, result.fg_iteration_ms - usage.fg_busy_ms - usage.bg_busy_ms);
    result.bg_samples_per_s += usage.bg_samples_per_s;
    result.devices.push_back(std::move(usage));
  }
  return result;
}

}  // namespace

StatusOr<MultiplexResult> SimulateMultiplexing(const FgTimeline& fg,
                                               const std::vector<const BgIteration*>& bg,
                                               const EngineOptions& options) {
  RETURN_IF_ERROR(CheckMultiplexInputs(fg, bg, options));
  return Summarise(fg, RunMultiplexed(fg, bg, options), options.iterations);
}

}  // namespace deepool::planner

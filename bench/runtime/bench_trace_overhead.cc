// Benchmark: what recording a timeline (`deepool trace`) costs the iterations it records. One
// rank trains through the Executor; trials alternate between recording nothing and recording
// every iteration of the trial as one window (its events serialised as the executor process
// prints them), each kind first in every other trial. The same executor runs both, so the
// allocator's placement of its tensors, which moves a separately built executor's times by a
// few per cent either way, is the same on both sides. Prints medians over trials of wall and
// process CPU ms per iteration and of the trials' paired ratios traced / untraced, and the spans
// per iteration.
//   build-*/bin/deepool-bench-trace_overhead [iterations_per_trial] [trials]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/runtime/runtime_bench_util.h"
#include "common/clock.h"
#include "planner/zoo/zoo.h"
#include "protocol/executor_events.h"
#include "worker/runtime/communication/communicator_gloo.h"
#include "worker/runtime/data/data.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/profiling/span_recorder.h"

namespace dw = deepool::worker;
namespace dp = deepool::planner;

namespace {

using deepool::bench::Check;
using deepool::bench::Median;
using deepool::bench::StepTiming;
using deepool::bench::TimeSteps;

// One rank on a one-device data-parallel plan; Record() arms a window for the next iterations.
class Loop {
 public:
  Loop(const dp::Graph& graph, int64_t batch, dw::Communicator* comm)
      : spans_(deepool::SystemClock::Get(), 0) {
    plan_ = dp::DataParallelLayout(graph, batch, 1);
    plan_.num_devices = 1;
    data_ = Check(dw::MakeDataSource(dw::DataSpec{}, graph, batch));
    dw::ExecutorOptions options;
    options.seed = 1;
    options.optimizer = deepool::bench::BenchSgd();
    options.spans = &spans_;
    executor_ = Check(dw::Executor::Create(graph, plan_, comm, data_.get(), dw::BuildLayerModule,
                                           options, deepool::SystemClock::Get()));
  }
  void Record(int64_t first, int iterations) {
    deepool::protocol::TraceCommand window;
    window.request_id = first + 1;
    window.first_iteration = first;
    window.iterations = iterations;
    spans_.Request(window);
  }
  void Step(int64_t i) {
    spans_.BeginIteration(i);
    Check(executor_->Step(i));
    for (const auto& event : spans_.TakeFinished(0)) {
      printed_bytes_ += deepool::protocol::ExecutorEventToJson(event).size();
      spans_recorded_ += static_cast<int64_t>(event.spans.size());
    }
  }
  int64_t spans_recorded() const { return spans_recorded_; }

 private:
  dw::SpanRecorder spans_;
  dp::Plan plan_;
  std::unique_ptr<dw::DataSource> data_;
  std::unique_ptr<dw::Executor> executor_;
  int64_t spans_recorded_ = 0;
  size_t printed_bytes_ = 0;
};

// Nanoseconds per span mark, recording (a window open) or not: a loop of marks named like a
// layer (the name is copied only while recording), the recorded spans dropped per window.
double NanosPerMark(bool recording) {
  dw::SpanRecorder spans(deepool::SystemClock::Get(), 0);
  const std::string layer = "layer3.0.conv2";
  constexpr int kMarksPerIteration = 1000;
  constexpr int kIterations = 200;
  if (recording) {
    deepool::protocol::TraceCommand window;
    window.request_id = 1;
    window.iterations = 100;
    spans.Request(window);
  }
  const auto begin = std::chrono::steady_clock::now();
  for (int i = 0; i < kIterations; ++i) {
    if (recording && !spans.on()) {
      deepool::protocol::TraceCommand window;
      window.request_id = i + 2;
      window.first_iteration = i;
      window.iterations = 100;
      spans.Request(window);
    }
    spans.BeginIteration(i);
    for (int m = 0; m < kMarksPerIteration; ++m) {
      dw::SpanScope mark(&spans, deepool::SpanKind::kForward, [&] { return layer; });
    }
    (void)spans.TakeFinished(0);  // dropped: only the marks are timed
  }
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - begin).count();
  return ns / (kIterations * kMarksPerIteration);
}

StepTiming TimeLoop(Loop& loop, int iterations, int64_t start, bool traced) {
  if (traced) loop.Record(start, iterations);
  return TimeSteps(iterations, start, [&](int64_t i) { loop.Step(i); });
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 100;
  int trials = 15;
  CLI::App app{
      "Tracing overhead: one rank trained through the Executor, trials alternating between no "
      "recording and recording every iteration; wall and CPU ms per iteration and ratios "
      "traced / untraced"};
  app.add_option("iterations_per_trial", iterations,
                 "iterations per trial (a trace window holds at most 100)")
      ->capture_default_str()
      ->check(CLI::Range(1, deepool::protocol::TraceCommand::kMaxTraceIterations));
  app.add_option("trials", trials, "trials, alternating the two sides")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  std::printf("span mark: %.1f ns recording, %.2f ns not recording (medians of 5)\n\n",
              Median({NanosPerMark(true), NanosPerMark(true), NanosPerMark(true),
                      NanosPerMark(true), NanosPerMark(true)}),
              Median({NanosPerMark(false), NanosPerMark(false), NanosPerMark(false),
                      NanosPerMark(false), NanosPerMark(false)}));
  auto comm = Check(dw::ConnectGloo(dw::CommOptions{}));
  struct Case {
    std::string model;
    int64_t batch;
  };
  std::printf(
      "| model | batch | spans/iter | untraced wall ms/iter | traced wall ms/iter | wall ratio | "
      "untraced CPU ms/iter | traced CPU ms/iter | CPU ratio |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Case& c : {Case{"small_cnn", 32}, Case{"small_cnn", 128}, Case{"mlp", 64}}) {
    dp::zoo::ModelOptions model_options;
    model_options.num_classes = 10;
    auto graph = Check(dp::zoo::BuildModel(c.model, model_options));
    Loop loop(graph, c.batch, comm.get());
    TimeLoop(loop, 5, 0, false);  // warm-up
    TimeLoop(loop, 5, 5, true);
    const int64_t spans_before = loop.spans_recorded();
    int64_t traced_iterations = 0;
    std::vector<double> plain_wall, traced_wall, wall_ratio, plain_cpu, traced_cpu, cpu_ratio;
    for (int t = 0; t < trials; ++t) {
      // Each trial's two halves run different batches of the same sizes.
      const int64_t start = 10 + static_cast<int64_t>(t) * 2 * iterations;
      StepTiming off, on;
      if (t % 2 == 0) {
        off = TimeLoop(loop, iterations, start, false);
        on = TimeLoop(loop, iterations, start + iterations, true);
      } else {
        on = TimeLoop(loop, iterations, start, true);
        off = TimeLoop(loop, iterations, start + iterations, false);
      }
      traced_iterations += iterations;
      plain_wall.push_back(off.wall_ms);
      traced_wall.push_back(on.wall_ms);
      wall_ratio.push_back(on.wall_ms / off.wall_ms);
      plain_cpu.push_back(off.cpu_ms);
      traced_cpu.push_back(on.cpu_ms);
      cpu_ratio.push_back(on.cpu_ms / off.cpu_ms);
    }
    const double spans_per_iteration =
        static_cast<double>(loop.spans_recorded() - spans_before) / traced_iterations;
    std::printf("| %s | %lld | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", c.model.c_str(),
                static_cast<long long>(c.batch), spans_per_iteration, Median(plain_wall),
                Median(traced_wall), Median(wall_ratio), Median(plain_cpu), Median(traced_cpu),
                Median(cpu_ratio));
    std::fflush(stdout);
  }
  return 0;
}

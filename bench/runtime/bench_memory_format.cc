// Benchmark: channels_last against contiguous (NCHW) training (docs/runtime.md, "Memory
// format"), the measurement behind the memory_format "auto" default. One rank trains each model
// through the Executor (a one-rank data-parallel plan; Gloo on CPU, NCCL on CUDA) in both
// formats, built once each and warmed up; trials then alternate the two (each goes first in every
// other trial) so that load on a shared machine hits both alike. Prints per format the median
// wall ms per iteration and the median of the trials' paired ratios channels_last / contiguous
// (below 1: channels_last is faster).
// A second table times what a re-split of a channels_last activation would cost if it crossed
// as NCHW instead of NHWC: the copy to NCHW before the send and the copy back to channels_last
// after the receive, at ResNet-50's activation shapes (the executor sends NHWC: no copy).
//   build-*/bin/deepool-bench-memory_format [iterations_per_trial] [trials] [--device D]
//       [--precision P] [--case MODEL:BATCH ...] [--threads T]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/runtime/runtime_bench_util.h"
#include "common/clock.h"
#include "planner/memory_format.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/communication/communicator_gloo.h"
#include "worker/runtime/communication/communicator_nccl.h"
#include "worker/runtime/data/data.h"
#include "worker/runtime/devices/device.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/layers/precision_scope.h"

namespace dw = deepool::worker;
namespace dp = deepool::planner;

namespace {

using deepool::bench::Check;
using deepool::bench::Median;
using deepool::bench::StepTiming;
using deepool::bench::TimeSteps;

struct Case {
  std::string model;
  int64_t batch = 0;
};

Case ParseCase(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return Case{text, 8};
  return Case{text.substr(0, colon), std::stoll(text.substr(colon + 1))};
}

// The executor on a one-rank data-parallel plan in one memory format.
class FormatLoop {
 public:
  FormatLoop(const dp::Graph& graph, int64_t batch, dp::MemoryFormat format,
             dp::Precision precision, dw::Communicator* comm, dw::DeviceContext* device) {
    plan_ = dp::DataParallelLayout(graph, batch, 1);
    plan_.num_devices = 1;
    data_ = Check(dw::MakeDataSource(dw::DataSpec{}, graph, batch));
    if (device->device().is_cuda())
      data_ = dw::WithPrefetch(std::move(data_), dw::HostMemory::kPinned);
    dw::ExecutorOptions options;
    options.seed = 1;
    options.optimizer = deepool::bench::BenchSgd();
    options.device = device->device();
    options.precision = precision;
    options.memory_format = format;
    if (options.device.is_cuda()) options.synchronize = [device] { device->Synchronize(); };
    executor_ = Check(dw::Executor::Create(graph, plan_, comm, data_.get(), dw::BuildLayerModule,
                                           options, deepool::SystemClock::Get()));
  }
  StepTiming Time(int iterations, int64_t start) {
    return TimeSteps(iterations, start, [&](int64_t i) { Check(executor_->Step(i).status()); });
  }

 private:
  dp::Plan plan_;
  std::unique_ptr<dw::DataSource> data_;
  std::unique_ptr<dw::Executor> executor_;
};

std::unique_ptr<dw::Communicator> ConnectOneRank(const dw::DeviceSpec& device) {
  if (device.cuda) return Check(dw::ConnectNccl(dw::CommOptions{}));
  return Check(dw::ConnectGloo(dw::CommOptions{}));
}

// Median ms of `reps` runs of `work` (synchronised on CUDA).
double MedianMs(int reps, bool cuda, const std::function<void()>& work) {
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    if (cuda) torch::cuda::synchronize();
    const auto begin = std::chrono::steady_clock::now();
    work();
    if (cuda) torch::cuda::synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin)
                     .count());
  }
  return Median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 2;
  int trials = 3;
  int threads = 2;
  std::string device_text = "cpu";
  std::string precision_text = "fp32";
  std::vector<std::string> case_texts;
  CLI::App app{"channels_last vs contiguous training through the Executor, one rank"};
  app.add_option("iterations_per_trial", iterations, "iterations per trial")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("trials", trials, "trials, alternating the two formats")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--device", device_text, "cpu, cuda or cuda:K")->capture_default_str();
  app.add_option("--precision", precision_text, "fp32, tf32, bf16 or fp16")->capture_default_str();
  app.add_option("--case", case_texts,
                 "MODEL:BATCH, repeatable (default resnet50:8 vgg16:4 on CPU, resnet50:128 "
                 "vgg16:64 on CUDA)");
  app.add_option("--threads", threads, "torch intra-op threads on CPU")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);
  const dw::DeviceSpec device = Check(dw::ParseDevice(device_text));
  const dp::Precision precision = Check(dp::ParsePrecision(precision_text));
  auto context = Check(dw::MakeDeviceContext(device));
  if (!device.cuda) torch::set_num_threads(threads);
  std::vector<Case> cases;
  for (const std::string& text : case_texts) cases.push_back(ParseCase(text));
  if (cases.empty()) {
    cases = device.cuda ? std::vector<Case>{{"resnet50", 128}, {"vgg16", 64}}
                        : std::vector<Case>{{"resnet50", 8}, {"vgg16", 4}};
  }
  auto comm = ConnectOneRank(device);
  std::printf("device %s, precision %s, %d trials of %d iterations\n", device.ToString().c_str(),
              dp::PrecisionName(precision), trials, iterations);
  std::printf(
      "| model | batch | contiguous wall ms/iter | channels_last wall ms/iter | "
      "channels_last / contiguous |\n|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    dp::zoo::ModelOptions model_options;
    model_options.num_classes = 1000;
    const dp::Graph graph = Check(dp::zoo::BuildModel(c.model, model_options));
    FormatLoop contiguous(graph, c.batch, dp::MemoryFormat::kContiguous, precision, comm.get(),
                          context.get());
    FormatLoop channels_last(graph, c.batch, dp::MemoryFormat::kChannelsLast, precision, comm.get(),
                             context.get());
    contiguous.Time(1, 0);  // warm-up: allocator pages, gradients, momentum
    channels_last.Time(1, 0);
    std::vector<double> nchw, nhwc, ratio;
    for (int t = 0; t < trials; ++t) {
      const int64_t start = 1 + static_cast<int64_t>(t) * iterations;  // same batches for both
      StepTiming a, b;
      if (t % 2 == 0) {
        a = contiguous.Time(iterations, start);
        b = channels_last.Time(iterations, start);
      } else {
        b = channels_last.Time(iterations, start);
        a = contiguous.Time(iterations, start);
      }
      nchw.push_back(a.wall_ms);
      nhwc.push_back(b.wall_ms);
      ratio.push_back(b.wall_ms / a.wall_ms);
    }
    std::printf("| %s | %lld | %.1f | %.1f | %.3f |\n", c.model.c_str(),
                static_cast<long long>(c.batch), Median(nchw), Median(nhwc), Median(ratio));
    std::fflush(stdout);
  }

  // Crossing as NCHW: the copies a boundary conversion adds to every re-split piece.
  const auto dtype = dw::ComputeDtype(precision);
  std::printf(
      "\n| activation (rows x C x H x W) | to NCHW before the send ms | back to channels_last "
      "after the receive ms |\n|---|---|---|\n");
  for (auto shape : std::vector<std::vector<int64_t>>{
           {8, 256, 56, 56}, {8, 512, 28, 28}, {8, 1024, 14, 14}, {8, 2048, 7, 7}}) {
    torch::Tensor nhwc =
        torch::randn(shape, torch::TensorOptions().dtype(dtype).device(context->device()))
            .contiguous(torch::MemoryFormat::ChannelsLast);
    torch::Tensor nchw = nhwc.contiguous();
    const double to_nchw = MedianMs(11, device.cuda, [&] { (void)nhwc.contiguous(); });
    const double back = MedianMs(11, device.cuda,
                                 [&] { (void)nchw.contiguous(torch::MemoryFormat::ChannelsLast); });
    std::printf("| %lld x %lld x %lld x %lld | %.3f | %.3f |\n", static_cast<long long>(shape[0]),
                static_cast<long long>(shape[1]), static_cast<long long>(shape[2]),
                static_cast<long long>(shape[3]), to_nchw, back);
  }
  return 0;
}

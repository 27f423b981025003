#include "worker/runtime/profiling/profiler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "common/logging.h"
#include "common/subprocess.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/devices/device.h"
#include "worker/runtime/devices/device_description.h"
#include "worker/runtime/layers/layer_module.h"
#include "worker/runtime/layers/precision_scope.h"
#include "worker/runtime/profiling/iteration_overhead.h"

namespace deepool::worker {
namespace internal {
// profiler_cuda.cc: CUDA-event timer on the current stream of cuda:index; UNIMPLEMENTED
// without CUDA.
StatusOr<std::unique_ptr<DeviceTimer>> MakeCudaEventTimer(int index, CudaTiming timing);
}  // namespace internal

namespace {

class CpuTimer final : public DeviceTimer {
 public:
  explicit CpuTimer(const Clock& clock) : clock_(clock) {}
  void Start() override { start_ = clock_.Now(); }
  double StopMs() override {
    return std::chrono::duration<double, std::milli>(clock_.Now() - start_).count();
  }

 private:
  const Clock& clock_;
  Clock::TimePoint start_{};
};

std::vector<int64_t> Batched(int64_t batch, const planner::Shape& shape) {
  std::vector<int64_t> out{batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

// Batch norm cannot train on one value per channel (torch refuses); such a configuration is
// timed in evaluation mode, which runs the same kernels minus the statistics update.
bool BatchNormNeedsEval(const planner::Graph& graph, const planner::Layer& layer, int64_t batch) {
  if (layer.op != planner::Op::kBatchNorm2d) return false;
  const int in = layer.input_ids.at(0);
  const planner::Shape& shape =
      in == planner::kGraphInputId ? graph.input_shape() : graph.layer(in).output_shape;
  int64_t per_channel = batch;
  for (size_t i = 1; i < shape.size(); ++i) per_channel *= shape[i];
  return per_channel <= 1;
}

}  // namespace

std::unique_ptr<DeviceTimer> MakeCpuTimer(const Clock& clock) {
  return std::make_unique<CpuTimer>(clock);
}

StatusOr<CudaTiming> ParseCudaTiming(const std::string& name) {
  if (name == "device") return CudaTiming::kDevice;
  if (name == "with-launch") return CudaTiming::kWithLaunch;
  return InvalidArgumentError("CUDA timing '" + name + "': expected device or with-launch");
}

StatusOr<std::unique_ptr<DeviceTimer>> MakeDeviceTimer(const c10::Device& device,
                                                       const Clock& clock, CudaTiming cuda_timing) {
  if (device.is_cpu()) return MakeCpuTimer(clock);
  if (device.is_cuda())
    return internal::MakeCudaEventTimer(device.has_index() ? device.index() : 0, cuda_timing);
  return InvalidArgumentError("no timer for device " + device.str());
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

LayerProfiler::LayerProfiler(c10::Device device, DeviceTimer* timer, ProfilerOptions options,
                             ProfileProgress progress)
    : device_(device),
      timer_(timer),
      options_(std::move(options)),
      progress_(std::move(progress)) {}

Status LayerProfiler::Validate() const {
  if (timer_ == nullptr) return InvalidArgumentError("profiler: no timer");
  if (options_.batch_sizes.empty()) return InvalidArgumentError("profiler: no batch sizes");
  std::set<int64_t> seen;
  for (int64_t b : options_.batch_sizes) {
    if (b < 1) return InvalidArgumentError("profiler: batch size " + std::to_string(b) + " < 1");
    if (!seen.insert(b).second) {
      return InvalidArgumentError("profiler: batch size " + std::to_string(b) + " given twice");
    }
  }
  if (options_.repeats < 1) return InvalidArgumentError("profiler: repeats must be >= 1");
  if (options_.warmup < 0) return InvalidArgumentError("profiler: warmup must be >= 0");
  return Status::Ok();
}

namespace {

// Times one module at one batch: warm-up runs, then `repeats` timed forward and backward passes.
planner::BatchTime TimeModule(const planner::Graph& graph, const planner::Layer& layer,
                              LayerModule& module, const c10::Device& device, DeviceTimer& timer,
                              const ProfilerOptions& options, int64_t batch) {
  const bool eval = BatchNormNeedsEval(graph, layer, batch);
  if (eval) {
    DP_LOG_WARN(
        "layer '{}' cannot train at batch {} (one value per channel); timing it in "
        "evaluation mode",
        layer.name, batch);
  }
  module.train(!eval);
  module.set_step({0, 0});
  const planner::Precision precision = options.precision.value_or(planner::Precision::kFp32);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  std::vector<torch::Tensor> inputs;
  for (int in : layer.input_ids) {
    const planner::Shape& shape =
        in == planner::kGraphInputId ? graph.input_shape() : graph.layer(in).output_shape;
    // Token ids for an embedding reading an int64 graph input; normal floats otherwise.
    const bool ids = in == planner::kGraphInputId && graph.input_dtype() == planner::DType::kInt64;
    torch::Tensor t = (ids ? torch::randint(0, std::max<int64_t>(layer.attrs.num_embeddings, 1),
                                            Batched(batch, shape), gen, torch::dtype(torch::kLong))
                           : torch::randn(Batched(batch, shape), gen))
                          .to(device);
    // Activations from other layers arrive in the compute dtype, as the executor's re-splits
    // move them, and need their gradient in training; the graph input does neither.
    if (in != planner::kGraphInputId) {
      t = t.to(ComputeDtype(precision));
      t.requires_grad_(true);
    }
    inputs.push_back(t);
  }
  torch::Tensor grad_output;
  std::vector<double> forward_ms, backward_ms;
  for (int run = 0; run < options.warmup + options.repeats; ++run) {
    torch::Tensor output;
    double fw = 0;
    {
      // The executor's forward scope; its backward runs after it, outside autocast.
      AutocastScope autocast(precision, device);
      timer.Start();
      output = module.Forward(inputs);
      fw = timer.StopMs();
    }
    double bw = 0;
    if (output.requires_grad()) {
      if (!grad_output.defined()) {
        grad_output = torch::randn(output.sizes(), gen).to(device, output.scalar_type());
      }
      timer.Start();
      output.backward(grad_output);
      bw = timer.StopMs();
    }
    // Gradients are dropped rather than accumulated, as a zero_grad(set_to_none) would.
    for (auto& p : module.parameters()) p.mutable_grad() = torch::Tensor();
    for (auto& t : inputs) {
      if (t.requires_grad()) t.mutable_grad() = torch::Tensor();
    }
    if (run >= options.warmup) {
      forward_ms.push_back(fw);
      backward_ms.push_back(bw);
    }
  }
  return planner::BatchTime{batch, Median(forward_ms), Median(backward_ms)};
}

}  // namespace

StatusOr<planner::BatchTime> LayerProfiler::MeasureLayer(const planner::Graph& graph, int layer_id,
                                                         int64_t batch) {
  RETURN_IF_ERROR(Validate());
  if (batch < 1) return InvalidArgumentError("profiler: batch must be >= 1");
  ASSIGN_OR_RETURN(auto module, BuildLayerModule(graph, layer_id, options_.seed));
  const planner::Layer& layer = graph.layer(layer_id);
  try {
    module->to(device_);
    return TimeModule(graph, layer, *module, device_, *timer_, options_, batch);
  } catch (const std::exception& e) {
    return InternalError("profiling layer '" + layer.name + "' at batch " + std::to_string(batch) +
                         ": " + e.what());
  }
}

StatusOr<planner::ProfileData> LayerProfiler::Run(const planner::Graph& graph) {
  RETURN_IF_ERROR(Validate());
  planner::ProfileData data;
  data.device = options_.device_name.empty() ? device_.str() : options_.device_name;
  data.model = graph.name();
  data.precision = options_.precision;
  if (options_.precision) SetMathMode(*options_.precision, device_);
  std::vector<int64_t> batches = options_.batch_sizes;
  std::sort(batches.begin(), batches.end());
  for (int id = 0; id < graph.num_layers(); ++id) {
    const planner::Layer& layer = graph.layer(id);
    if (progress_) progress_(id, graph.num_layers(), layer.name);
    ASSIGN_OR_RETURN(auto module, BuildLayerModule(graph, id, options_.seed));
    planner::LayerProfileData entry;
    entry.name = layer.name;
    entry.op = planner::OpName(layer.op);
    int64_t batch = 0;
    try {
      module->to(device_);
      for (int64_t b : batches) {
        batch = b;
        entry.batches.push_back(TimeModule(graph, layer, *module, device_, *timer_, options_, b));
      }
    } catch (const std::exception& e) {
      return InternalError("profiling layer '" + layer.name + "' at batch " +
                           std::to_string(batch) + ": " + e.what());
    }
    data.layers.push_back(std::move(entry));
  }
  return data;
}

namespace {

StatusOr<planner::Graph> LoadGraph(const ProfileToolOptions& options) {
  if (options.model.empty() == options.graph_path.empty()) {
    return InvalidArgumentError("give exactly one of --model and --graph");
  }
  if (!options.model.empty()) {
    return planner::zoo::BuildModel(options.model, options.model_options);
  }
  std::ifstream in(options.graph_path);
  if (!in) return NotFoundError("cannot read graph file '" + options.graph_path + "'");
  std::stringstream text;
  text << in.rdbuf();
  auto graph = planner::ParseGraphJson(text.str());
  if (!graph.ok()) return graph.status().WithContext(options.graph_path);
  return graph;
}

// Timed iterations per batch of the iteration overhead, per timed run of a layer.
constexpr int kOverheadRepeatsPerRepeat = 4;

// `tool` (deepool-calibrate) with two ranks, as two of this host's CPU ranks talk; the link it
// fitted. Sizes up to 4 MiB and 10 repeats: it takes a few seconds.
StatusOr<planner::Link> MeasureHostLink(const std::string& tool, const std::string& scratch) {
  ProcessSpec spec;
  spec.executable = tool;
  spec.args = {"--ranks",   "2",  "--max-bytes", std::to_string(4 << 20),
               "--repeats", "10", "-o",          scratch};
  std::vector<std::string> lines;
  ChildCallbacks callbacks;
  callbacks.on_stdout_line = [&lines](const std::string& line) { lines.push_back(line); };
  callbacks.on_stderr_line = callbacks.on_stdout_line;
  ASSIGN_OR_RETURN(auto child, ChildProcess::Start(spec, std::move(callbacks)));
  const ProcessExit exit = child->Wait();
  child.reset();  // its reader thread is done with `lines`
  if (!exit.ok()) {
    return UnavailableError(tool + " " + exit.Describe() +
                            (lines.empty() ? std::string() : ": " + lines.back()));
  }
  std::ifstream in(scratch);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(scratch.c_str());
  ASSIGN_OR_RETURN(const planner::Cluster cluster, planner::ParseClusterJson(text.str()));
  return cluster.intra_node;
}

}  // namespace

Status RunProfileTool(const ProfileToolOptions& options, std::ostream& progress) {
  if (options.output_path.empty()) return InvalidArgumentError("no output file (-o)");
  // Checked before any layer is timed, not after the whole profile.
  RETURN_IF_ERROR(ValidateOptimizer(options.overhead_optimizer));
  ASSIGN_OR_RETURN(planner::Graph graph, LoadGraph(options));
  ASSIGN_OR_RETURN(DeviceSpec spec, ParseDevice(options.device));
  ASSIGN_OR_RETURN(auto context, MakeDeviceContext(spec));
  if (options.cuda_timing.has_value() && !context->device().is_cuda()) {
    return InvalidArgumentError("--cuda-timing applies to CUDA devices, not " + options.device);
  }
  ASSIGN_OR_RETURN(auto timer, MakeDeviceTimer(context->device(), *SystemClock::Get(),
                                               options.cuda_timing.value_or(CudaTiming::kDevice)));
  if (options.threads > 0) at::set_num_threads(options.threads);

  ProfilerOptions profiler_options;
  profiler_options.batch_sizes = options.batch_sizes;
  profiler_options.warmup = options.warmup;
  profiler_options.repeats = options.repeats;
  profiler_options.seed = options.seed;
  profiler_options.precision = options.precision;
  profiler_options.device_name =
      options.device_name.empty() ? spec.ToString() : options.device_name;
  LayerProfiler profiler(context->device(), timer.get(), profiler_options,
                         [&](int index, int count, const std::string& layer) {
                           progress << "[" << index + 1 << "/" << count << "] " << layer
                                    << std::endl;
                         });
  ASSIGN_OR_RETURN(planner::ProfileData data, profiler.Run(graph));
  data.environment = DescribeDevice(context->device(), options.deepool_commit);
  if (options.iteration_overhead) {
    progress << "iteration overhead: one-rank training at batches";
    for (int64_t b : options.batch_sizes) progress << " " << b;
    progress << std::endl;
    OverheadOptions overhead;
    overhead.warmup = options.warmup;
    // The overhead is the difference of two measurements, an iteration's and the layers' sum, so
    // a slow iteration moves it far more than a slow layer moves the layer: on the loaded 2-core
    // VM medians of 5 iterations of small_cnn at batch 128 gave overheads of 2.1-17.4 ms.
    overhead.repeats = kOverheadRepeatsPerRepeat * options.repeats;
    overhead.seed = options.seed;
    overhead.optimizer = options.overhead_optimizer;
    overhead.precision = options.precision.value_or(planner::Precision::kFp32);
    overhead.device = context.get();
    ASSIGN_OR_RETURN(data.iteration_overhead,
                     MeasureIterationOverhead(graph, data, options.batch_sizes, overhead));
  }
  if (!options.link_tool.empty() && context->device().is_cpu()) {
    progress << "links: collectives between two ranks of this host (" << options.link_tool << ")"
             << std::endl;
    StatusOr<planner::Link> link =
        MeasureHostLink(options.link_tool, options.output_path + ".links.tmp");
    if (link.ok()) {
      data.links = *link;
    } else {
      // The layers are measured; plans then use the cluster preset's links, as before.
      progress << "warning: links not measured: " << link.status().ToString() << std::endl;
    }
  }

  const std::string tmp = options.output_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return UnavailableError("cannot open '" + tmp + "' for writing");
    out << planner::ProfileToJson(data) << "\n";
    if (!out.flush()) return DataLossError("writing '" + tmp + "' failed");
  }
  if (std::rename(tmp.c_str(), options.output_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return UnavailableError("cannot rename '" + tmp + "' to '" + options.output_path + "'");
  }
  progress << "wrote " << options.output_path << ": " << data.layers.size() << " layers x "
           << options.batch_sizes.size() << " batch sizes on " << profiler_options.device_name
           << " (" << planner::EnvironmentSummary(data.environment) << ")" << std::endl;
  return Status::Ok();
}

}  // namespace deepool::worker

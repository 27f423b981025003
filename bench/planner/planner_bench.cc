// Planning time of the burst-parallel search on the zoo models (A100 analytical profile,
// dgx-a100 nodes) and on a generated 1,000-layer chain on 4,096 devices, with each plan's
// predicted speed-up over data parallelism. Prints a Markdown table for docs/benchmarks.md:
// the first call of each case (cold for the first case; the process has planned the earlier
// cases before the others; with --warm-up M, after a plan of model M) and the median of the
// repeats.
//
// --processes N times what a user meets instead: whole `deepool ... --json` processes (start,
// loading shared libraries, graph, plan, printing), N of each, `deepool` (the offline commands
// only) and `deepool-full` (every command, with gRPC and OpenSSL) alternating.
//
//   build/bin/deepool-bench-planner [--repeats N] [--limit X] [--model NAME] [--gpus G]
//                                   [--global-batch B] [--serial-sync] [--memory-gb GB]
//                                   [--warm-up MODEL]
//   build/bin/deepool-bench-planner --processes N
//
// --curve G times speed-up curves instead: PlanSpeedupCurve over 1..G devices (first call and
// median) beside the G plans made one by one with PlanBurstParallel (median), for the zoo models.
//
//   build/bin/deepool-bench-planner --curve 8 [--repeats N] [--limit X] [--model NAME]
//
// The process keeps freed large blocks in its heap for reuse, as `deepool` does (cli/main.cc,
// common/heap_reuse.h), so a first call reuses pages the graph's construction touched;
// --glibc-heap leaves glibc's settings as they are.
//
// Wall-clock time is measured here, in the benchmark only; the planner itself has no clock.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "common/heap_reuse.h"
#include "planner/cluster.h"
#include "planner/device_model.h"
#include "planner/graph.h"
#include "planner/memory_model.h"
#include "planner/search.h"
#include "planner/speedup_curve.h"
#include "planner/speedup_curve_cache.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

using deepool::bench::Median;

struct Case {
  std::string name;
  Graph graph;
  int devices;
  int64_t batch;
};

// A chain of `length` linear layers with ReLUs folded out (so every layer is planned), widths
// drawn from 256..4096 with a fixed seed.
Graph LongChain(int length) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int64_t> width(256, 4096);
  std::vector<Layer> layers;
  std::string last(kGraphInputName);
  for (int i = 0; i < length; ++i) {
    Layer layer;
    layer.name = "fc" + std::to_string(i);
    layer.op = Op::kLinear;
    layer.inputs = {last};
    layer.attrs.out_features = width(rng);
    layers.push_back(layer);
    last = layer.name;
  }
  return Graph::Create("chain1000", {1024}, std::move(layers)).value();
}

// CPU time of this (single-threaded) process: unaffected by other processes sharing the cores.
double CpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

std::string Milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, seconds < 1e-3 ? "%.3f" : "%.1f", seconds * 1e3);
  return text;
}

// --serial-sync: the cost model before gradient buckets (gradient_sync.h): one ring all-reduce
// per layer, after backward, nothing hidden; for side-by-side tables.
GradientSyncOptions SerialSync() {
  GradientSyncOptions serial;
  serial.bucket_bytes = 0;
  serial.overlap = false;
  serial.tree = false;
  return serial;
}

// The models to time: the four CNNs DeepPool's search plans too, or the one --model names (any
// zoo model, e.g. gpt2 or vit_b_16).
std::vector<std::string> ModelsToTime(const std::string& only_model) {
  if (!only_model.empty()) return {only_model};
  return {"vgg16", "resnet50", "wide_resnet101_2", "inception_v3"};
}

int Run(int repeats, double limit, const std::string& only_model, int only_devices,
        int64_t only_batch, bool serial_sync, bool concurrent_branches,
        SearchGranularity granularity, double memory_gb, const std::string& warm_up) {
  const DeviceModel a100 = DevicePreset("a100").value();
  const auto profile = MakeAnalyticalProfile(a100);
  const Cluster node = ClusterPreset("dgx-a100").value();
  std::vector<Case> cases;
  // The usual counts, or the one --gpus asks for (any count, for side-by-side runs such as
  // deeppool_search_compare.py's); --global-batch replaces each case's batch.
  std::vector<int> device_counts = {8, 64, 1024};
  if (only_devices > 0 &&
      std::find(device_counts.begin(), device_counts.end(), only_devices) == device_counts.end()) {
    device_counts = {only_devices};
  }
  for (const std::string& model : ModelsToTime(only_model)) {
    StatusOr<Graph> graph = zoo::BuildModel(model);
    if (!graph.ok()) {
      std::fprintf(stderr, "--model: %s\n", graph.status().ToString().c_str());
      return 1;
    }
    for (int devices : device_counts) {
      const int64_t batch = only_batch > 0 ? only_batch : (devices > 32 ? devices : 32);
      cases.push_back(Case{model, *graph, devices, batch});
    }
  }
  cases.push_back(Case{"chain1000", LongChain(1000), 4096, 4096});
  std::optional<Graph> warm_up_graph;
  if (!warm_up.empty()) {
    StatusOr<Graph> built = zoo::BuildModel(warm_up);
    if (!built.ok()) {
      std::fprintf(stderr, "--warm-up: %s\n", built.status().ToString().c_str());
      return 1;
    }
    warm_up_graph = std::move(*built);
  }

  std::printf(
      "| model | layers | G | B | limit | first call CPU ms | first call wall ms | CPU ms (median "
      "of %d) | wall ms (median) | iteration ms (plan) | iteration ms (DP) | speed-up vs DP | "
      "amplification (plan / DP) | max devices |\n",
      repeats);
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    if (!only_model.empty() && c.name != only_model) continue;
    if (only_devices > 0 && c.devices != only_devices) continue;
    PlanOptions options;
    options.global_batch = c.batch;
    options.devices = c.devices;
    options.amplification_limit = limit;
    if (serial_sync) options.gradient_sync = SerialSync();
    options.concurrent_branches = concurrent_branches;
    options.granularity = granularity;
    options.device_memory_bytes = DeviceCapacityBytes(memory_gb);
    const Cluster cluster = ResizeCluster(node, c.devices);
    std::vector<double> wall, cpu;
    StatusOr<Plan> plan = InternalError("not run");
    if (warm_up_graph) {
      // A process that has planned another model first: what a coordinator meets when a job of
      // a model it has not planned before arrives (nothing of one plan is kept for the next).
      StatusOr<Plan> other = PlanBurstParallel(*warm_up_graph, *profile, cluster, options);
      if (!other.ok()) {
        std::fprintf(stderr, "--warm-up %s G=%d: %s\n", warm_up.c_str(), c.devices,
                     other.status().ToString().c_str());
        return 1;
      }
    }
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      const double cpu_start = CpuSeconds();
      plan = PlanBurstParallel(c.graph, *profile, cluster, options);
      cpu.push_back(CpuSeconds() - cpu_start);
      wall.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      if (!plan.ok()) {
        std::fprintf(stderr, "%s G=%d: %s\n", c.name.c_str(), c.devices,
                     plan.status().ToString().c_str());
        return 1;
      }
    }
    std::printf(
        "| %s | %d | %d | %lld | %s | %s | %s | %s | %s | %.2f | %.2f | %.2fx | %.2f / %.2f | %d "
        "|\n",
        c.name.c_str(), c.graph.num_layers(), c.devices, static_cast<long long>(c.batch),
        limit > 0 ? std::to_string(limit).substr(0, 4).c_str() : "none",
        Milliseconds(cpu.front()).c_str(), Milliseconds(wall.front()).c_str(),
        Milliseconds(Median(cpu)).c_str(), Milliseconds(Median(wall)).c_str(),
        plan->totals.iteration_ms, plan->data_parallel.iteration_ms,
        plan->data_parallel.iteration_ms / plan->totals.iteration_ms, plan->totals.amplification,
        plan->data_parallel.amplification, plan->totals.devices_used);
    std::fflush(stdout);
  }
  return 0;
}

// Speed-up curves over 1..max_devices on the zoo models at B = 32, against the same plans one by
// one; prints a Markdown table.
int RunCurves(int repeats, double limit, const std::string& only_model, int max_devices) {
  const DeviceModel a100 = DevicePreset("a100").value();
  const auto profile = MakeAnalyticalProfile(a100);
  const Cluster node = ClusterPreset("dgx-a100").value();
  const std::vector<int> counts = DeviceCountsUpTo(max_devices);
  std::printf(
      "| model | layers | G | B | limit | curve first call CPU ms | curve CPU ms (median of %d) | "
      "plans one by one CPU ms (median) | one by one / curve | cache hit CPU ms (median) | "
      "speed-up at 1..G |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n",
      repeats);
  for (const std::string& model : ModelsToTime(only_model)) {
    StatusOr<Graph> built = zoo::BuildModel(model);
    if (!built.ok()) {
      std::fprintf(stderr, "--model: %s\n", built.status().ToString().c_str());
      return 1;
    }
    const Graph& graph = *built;
    PlanOptions options;
    options.global_batch = 32;
    options.amplification_limit = limit;
    std::vector<double> curve_cpu, alone_cpu;
    StatusOr<SpeedupCurve> curve = InternalError("not run");
    for (int r = 0; r < repeats; ++r) {
      double start = CpuSeconds();
      curve = PlanSpeedupCurve(graph, *profile, node, options, counts);
      curve_cpu.push_back(CpuSeconds() - start);
      if (!curve.ok()) {
        std::fprintf(stderr, "%s: %s\n", model.c_str(), curve.status().ToString().c_str());
        return 1;
      }
      start = CpuSeconds();
      for (int devices : counts) {
        PlanOptions alone = options;
        alone.devices = devices;
        if (!PlanBurstParallel(graph, *profile, ResizeCluster(node, devices), alone).ok()) {
          return 1;
        }
      }
      alone_cpu.push_back(CpuSeconds() - start);
    }
    // A hit in SpeedupCurveCache with the graph's key kept (as a policy keeps it per job): the
    // rest of the key and the lookup.
    SpeedupCurveCache cache(16);
    const std::string graph_key = SpeedupCurveGraphKey(graph);
    if (!cache.GetOrPlan(graph, graph_key, *profile, node, options, counts).ok()) return 1;
    std::vector<double> hit_cpu;
    for (int r = 0; r < repeats; ++r) {
      const double start = CpuSeconds();
      if (!cache.GetOrPlan(graph, graph_key, *profile, node, options, counts).ok()) return 1;
      hit_cpu.push_back(CpuSeconds() - start);
    }
    std::string speedups;
    for (const SpeedupPoint& point : curve->points) {
      char text[16];
      std::snprintf(text, sizeof text, "%.2f", point.speedup());
      speedups += (speedups.empty() ? "" : " ") + std::string(text);
    }
    std::printf("| %s | %d | 1..%d | 32 | %s | %s | %s | %s | %.2f | %s | %s |\n", model.c_str(),
                graph.num_layers(), max_devices,
                limit > 0 ? std::to_string(limit).substr(0, 4).c_str() : "none",
                Milliseconds(curve_cpu.front()).c_str(), Milliseconds(Median(curve_cpu)).c_str(),
                Milliseconds(Median(alone_cpu)).c_str(), Median(alone_cpu) / Median(curve_cpu),
                Milliseconds(Median(hit_cpu)).c_str(), speedups.c_str());
    std::fflush(stdout);
  }
  return 0;
}

// Wall seconds of one process running `args` with stdout and stderr to /dev/null; exits the
// benchmark when it cannot start or fails.
double TimeProcess(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  if (spawned != 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "error: %s did not run to exit code 0\n", args[0].c_str());
    std::exit(1);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int RunProcesses(int runs) {
  const std::filesystem::path bin = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  const std::string lean = (bin / "deepool").string();
  const std::string full = (bin / "deepool-full").string();
  if (!std::filesystem::exists(full)) {
    std::fprintf(stderr, "error: %s is not built (DEEPOOL_WITH_SERVICES=OFF?)\n", full.c_str());
    return 1;
  }
  std::printf(
      "| command | deepool wall ms (median of %d) | deepool-full wall ms (median) | "
      "deepool / deepool-full |\n|---|---|---|---|\n",
      runs);
  const std::vector<std::vector<std::string>> commands = {
      {"model", "list"},
      {"plan", "--model", "vgg16", "--global-batch", "32", "--gpus", "8", "--device", "a100",
       "--json"},
      {"plan", "--model", "resnet50", "--global-batch", "32", "--gpus", "8", "--device", "a100",
       "--json"},
      {"plan", "--model", "inception_v3", "--global-batch", "1024", "--gpus", "1024", "--device",
       "a100", "--json"}};
  for (const std::vector<std::string>& command : commands) {
    std::vector<double> lean_s, full_s;
    for (int r = 0; r < runs; ++r) {
      std::vector<std::string> args = command;
      args.insert(args.begin(), lean);
      lean_s.push_back(TimeProcess(args));
      args.front() = full;
      full_s.push_back(TimeProcess(args));
    }
    std::string text;
    for (const std::string& word : command) text += (text.empty() ? "" : " ") + word;
    std::printf("| `deepool %s` | %s | %s | %.2f |\n", text.c_str(),
                Milliseconds(Median(lean_s)).c_str(), Milliseconds(Median(full_s)).c_str(),
                Median(lean_s) / Median(full_s));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace deepool::planner

int main(int argc, char** argv) {
  int repeats = 5;
  double limit = 2.0;
  std::string only_model;
  int only_devices = 0;
  CLI::App app{
      "Planning time of the burst-parallel search on the zoo models and a 1,000-layer "
      "chain, with each plan's predicted speed-up; prints a Markdown table"};
  app.add_option("--repeats", repeats, "plans per case (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--limit", limit, "amplification limit (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--model", only_model,
                 "only this zoo model (any; default: the four CNNs DeepPool plans too)");
  app.add_option("--gpus", only_devices, "only this device count (any count)")
      ->check(CLI::Range(1, 1000000));
  int64_t only_batch = 0;
  app.add_option("--global-batch", only_batch,
                 "plan every case at this global batch (default: 32 at G = 8, else G)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  bool serial_sync = false;
  app.add_flag("--serial-sync", serial_sync,
               "plan with the earlier cost model's gradient sync (one ring all-reduce per layer "
               "after backward, nothing hidden), to compare with the bucketed, overlapped one");
  bool concurrent_branches = false;
  app.add_flag("--concurrent-branches", concurrent_branches,
               "plan with parallel branches packed side by side where faster (PlanOptions::"
               "concurrent_branches), to compare plans and planning times");
  std::string granularity = "mixed";
  app.add_option("--granularity", granularity,
                 "which additive solves search whole blocks (PlanOptions::granularity: layers, "
                 "mixed or blocks), to compare plans and planning times")
      ->check(CLI::IsMember({"layers", "mixed", "blocks"}))
      ->capture_default_str();
  double memory_gb = 0;
  app.add_option("--memory-gb", memory_gb,
                 "plan within this much device memory (PlanOptions::device_memory_bytes, from "
                 "DeviceCapacityBytes; 0: unchecked), to time the memory check")
      ->check(CLI::NonNegativeNumber);
  int processes = 0;
  app.add_option("--processes", processes,
                 "instead: time N whole `deepool plan` processes of each kind, deepool against "
                 "deepool-full")
      ->check(CLI::Range(1, 1000000));
  std::string warm_up;
  app.add_option("--warm-up", warm_up,
                 "plan this zoo model once (same options) before each case's first call, so that "
                 "it is the first call for a new model in a process that has planned before, as "
                 "in a running coordinator");
  int curve = 0;
  app.add_option("--curve", curve,
                 "instead: time speed-up curves over 1..G devices against the G plans one by one")
      ->check(CLI::Range(1, 4096));
  bool glibc_heap = false;
  app.add_flag("--glibc-heap", glibc_heap,
               "leave glibc's heap settings as they are; by default the process keeps freed "
               "large blocks for reuse, as the deepool CLI does (common/heap_reuse.h)");
  CLI11_PARSE(app, argc, argv);
  if (!glibc_heap) deepool::ReuseFreedHeapBlocks();
  if (curve > 0) return deepool::planner::RunCurves(repeats, limit, only_model, curve);
  if (processes > 0) return deepool::planner::RunProcesses(processes);
  return deepool::planner::Run(
      repeats, limit, only_model, only_devices, only_batch, serial_sync, concurrent_branches,
      deepool::planner::ParseSearchGranularity(granularity).value(), memory_gb, warm_up);
}

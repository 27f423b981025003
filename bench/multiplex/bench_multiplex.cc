// Benchmark: a BG job sharing a CPU "device" with a burst-parallel FG rank.
//
// Two FG rank processes (forked; Gloo over loopback; one intra-op thread each; rank r pinned to
// core r, so a core plays a device) train small_cnn under a burst plan whose residual block and
// head run on rank 0 alone: rank 1 waits through them every iteration. A BG job (small_cnn, its
// own batch) shares rank 1's core. Configurations:
//   fg_alone            FG only
//   fg+bg idle_only     BG units only while rank 1 waits (the CPU path of the multiplexer),
//                       the BG thread under SCHED_IDLE (default) or at normal priority
//   fg+bg concurrent    BG thread free-running next to FG, under SCHED_IDLE or at normal
//                       priority (naive collocation)
//   bg_alone            the BG job alone on one pinned core
// Reported: FG iteration time (mean over measured iterations of the slowest rank), its ratio to
// fg_alone, BG samples/s during the FG measurement and its ratio to bg_alone, and gate counters.
// Configurations run round-robin `rounds` times; each row is the median round by FG time.
//   build-*/bin/deepool-bench-multiplex [fg_iterations=40] [fg_batch=64] [bg_batch=8]
//                                       [image_size=32] [rounds=5]
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/background_runner.h"
#include "worker/runtime/background_trainer.h"
#include "worker/runtime/communicator_gloo.h"
#include "worker/runtime/data.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/multiplex_communicator.h"
#include "worker/runtime/multiplex_gate.h"

namespace dw = deepool::worker;
namespace dp = deepool::planner;

namespace {

constexpr int kWarmup = 5;

struct Config {
  int iterations = 40;
  int64_t fg_batch = 64;
  int64_t bg_batch = 8;
  int64_t image_size = 32;
  int rounds = 5;
};

struct RankResult {
  double iteration_ms = 0;   // mean over measured iterations
  double bg_samples_per_s = 0;
  double bg_busy_share = 0;  // BG busy / window over measured iterations
  double fg_wait_share = 0;
  int64_t idle_periods = 0, bg_units = 0, delayed_resumes = 0;
  double overrun_ms_per_iteration = 0;
};

void Die(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::_Exit(1);
}

void PinToCore(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core % std::max(1u, std::thread::hardware_concurrency()), &set);
  sched_setaffinity(0, sizeof(set), &set);  // the whole process (threads inherit it)
}

dp::Graph Model(const Config& config) {
  dp::zoo::ModelOptions options;
  options.num_classes = 10;
  options.image_size = config.image_size;
  auto graph = dp::zoo::BuildModel("small_cnn", options);
  if (!graph.ok()) Die(graph.status().ToString());
  return std::move(graph).value();
}

dp::Plan BurstPlan(const dp::Graph& graph, int64_t global_batch) {
  dp::Plan plan;
  plan.model = graph.name();
  plan.global_batch = global_batch;
  plan.num_devices = 2;
  bool narrow = false;
  for (const auto& layer : graph.layers()) {
    if (layer.name == "res.conv") narrow = true;  // from the residual block on: rank 0 alone
    dp::LayerPlacement placement;
    placement.layer = layer.name;
    placement.devices = narrow ? std::vector<int>{0} : std::vector<int>{0, 1};
    placement.samples =
        dp::NearEqualShares(global_batch, static_cast<int>(placement.devices.size()));
    plan.layers.push_back(placement);
  }
  return plan;
}

dw::BackgroundSpec BgSpec(const Config& config) {
  dw::BackgroundSpec spec;
  spec.job_id = "bg";
  spec.graph = std::make_shared<const dp::Graph>(Model(config));
  spec.batch_size = config.bg_batch;
  spec.seed = 7;
  spec.optimizer.lr = 0.02;
  spec.optimizer.momentum = 0.9;
  spec.data = dw::DataSpec{"synthetic", 13, ""};
  return spec;
}

// One FG rank (optionally with a BG job on its core); writes its result to `result_fd`.
void RankMain(const Config& config, int rank, std::optional<dw::SharingMode> mode,
              bool idle_priority, int port_read, int port_write, int result_fd) {
  PinToCore(rank);
  torch::set_num_threads(1);
  dp::Graph graph = Model(config);
  dp::Plan plan = BurstPlan(graph, config.fg_batch);
  const deepool::Clock* clock = deepool::SystemClock::Get();
  dw::CommOptions comm_options;
  comm_options.rank = rank;
  comm_options.world_size = 2;
  std::unique_ptr<dw::Communicator> comm;
  if (rank == 0) {
    auto connected = dw::ConnectGloo(comm_options, [&](int port) {
      if (write(port_write, &port, sizeof(port)) != sizeof(port)) Die("port pipe");
    });
    if (!connected.ok()) Die(connected.status().ToString());
    comm = std::move(connected).value();
  } else {
    if (read(port_read, &comm_options.store_port, sizeof(int)) != sizeof(int)) Die("port pipe");
    auto connected = dw::ConnectGloo(comm_options);
    if (!connected.ok()) Die(connected.status().ToString());
    comm = std::move(connected).value();
  }
  std::unique_ptr<dw::DeviceGate> gate;
  std::unique_ptr<dw::BackgroundTrainer> trainer;
  std::unique_ptr<dw::BackgroundRunner> runner;
  if (mode && rank == 1) {
    gate = std::make_unique<dw::DeviceGate>(*mode, clock);
    auto made = dw::BackgroundTrainer::Create(BgSpec(config), torch::kCPU);
    if (!made.ok()) Die(made.status().ToString());
    trainer = std::move(made).value();
    comm = std::make_unique<dw::SharingCommunicator>(std::move(comm), gate.get());
    runner = std::make_unique<dw::BackgroundRunner>(
        trainer.get(), gate.get(), clock, 0, [idle_priority]() -> std::shared_ptr<void> {
          if (idle_priority && !dw::DemoteCurrentThreadToIdle().ok()) Die("SCHED_IDLE refused");
          return nullptr;
        });
  }
  auto data = dw::MakeDataSource(dw::DataSpec{"synthetic", 1, ""}, graph, plan.global_batch);
  if (!data.ok()) Die(data.status().ToString());
  dw::ExecutorOptions options;
  options.seed = 1;
  options.optimizer.lr = 0.02;
  options.optimizer.momentum = 0.9;
  auto executor = dw::Executor::Create(graph, plan, comm.get(), data->get(), dw::BuildLayerModule,
                                       options, clock);
  if (!executor.ok()) Die(executor.status().ToString());
  if (runner) runner->Start();
  RankResult result;
  double total_ms = 0, window_ms = 0, bg_busy_ms = 0, fg_wait_ms = 0, overrun_ms = 0;
  int64_t bg_samples_at_start = 0;
  deepool::Clock::TimePoint measure_start{};
  for (int i = 0; i < config.iterations + kWarmup; ++i) {
    if (i == kWarmup) {
      measure_start = clock->Now();
      if (gate) {
        gate->TakeWindow();
        bg_samples_at_start = runner->progress().samples;
      }
    }
    auto stats = (*executor)->Step(i);
    if (!stats.ok()) Die(stats.status().ToString());
    if (i < kWarmup) continue;
    total_ms += stats->iteration_ms;
    if (gate) {
      dw::SharingWindow window = gate->TakeWindow();
      window_ms += window.window_ms;
      bg_busy_ms += window.bg_busy_ms;
      fg_wait_ms += window.fg_wait_ms;
      overrun_ms += window.bg_overrun_ms;
    }
  }
  result.iteration_ms = total_ms / config.iterations;
  if (gate) {
    double elapsed_s =
        std::chrono::duration<double>(clock->Now() - measure_start).count();
    result.bg_samples_per_s = (runner->progress().samples - bg_samples_at_start) / elapsed_s;
    runner->Stop();
    auto counters = gate->counters();
    result.idle_periods = counters.fg_idle_periods;
    result.bg_units = counters.bg_units;
    result.delayed_resumes = counters.fg_resumes_delayed;
    result.bg_busy_share = bg_busy_ms / window_ms;
    result.fg_wait_share = fg_wait_ms / window_ms;
    result.overrun_ms_per_iteration = overrun_ms / config.iterations;
  }
  if (write(result_fd, &result, sizeof(result)) != sizeof(result)) Die("result pipe");
  std::_Exit(0);  // skip c10d teardown
}

// Runs both FG ranks in forked processes; returns their results.
std::vector<RankResult> RunFg(const Config& config, std::optional<dw::SharingMode> mode,
                              bool idle_priority = true) {
  int port_pipe[2], result_pipe[2][2];
  if (pipe(port_pipe) != 0 || pipe(result_pipe[0]) != 0 || pipe(result_pipe[1]) != 0) Die("pipe");
  std::vector<pid_t> children;
  for (int rank = 0; rank < 2; ++rank) {
    pid_t pid = fork();
    if (pid < 0) Die("fork");
    if (pid == 0) {
      RankMain(config, rank, mode, idle_priority, port_pipe[0], port_pipe[1],
               result_pipe[rank][1]);
    }
    children.push_back(pid);
  }
  std::vector<RankResult> results(2);
  for (int rank = 0; rank < 2; ++rank) {
    if (read(result_pipe[rank][0], &results[rank], sizeof(RankResult)) != sizeof(RankResult)) {
      Die("rank " + std::to_string(rank) + " failed");
    }
  }
  for (pid_t pid : children) waitpid(pid, nullptr, 0);
  return results;
}

// The BG job alone on one pinned core for `seconds`; samples/s.
double RunBgAlone(const Config& config, double seconds) {
  int result_pipe[2];
  if (pipe(result_pipe) != 0) Die("pipe");
  pid_t pid = fork();
  if (pid == 0) {
    PinToCore(1);
    torch::set_num_threads(1);
    auto trainer = dw::BackgroundTrainer::Create(BgSpec(config), torch::kCPU);
    if (!trainer.ok()) Die(trainer.status().ToString());
    const deepool::Clock* clock = deepool::SystemClock::Get();
    dw::DeviceGate gate(dw::SharingMode::kIdleOnly, clock);
    gate.FgDetach();
    // Warm up one iteration, then measure whole iterations for `seconds`.
    int64_t iterations = 0;
    auto start = clock->Now();
    while (true) {
      auto unit = (*trainer)->RunUnit();
      if (!unit.ok()) Die(unit.status().ToString());
      if (!unit->iteration_done) continue;
      if (iterations++ == 0) start = clock->Now();
      if (std::chrono::duration<double>(clock->Now() - start).count() >= seconds) break;
    }
    double elapsed = std::chrono::duration<double>(clock->Now() - start).count();
    double rate = (iterations - 1) * config.bg_batch / elapsed;
    if (write(result_pipe[1], &rate, sizeof(rate)) != sizeof(rate)) Die("pipe");
    std::_Exit(0);
  }
  double rate = 0;
  if (read(result_pipe[0], &rate, sizeof(rate)) != sizeof(rate)) Die("bg alone failed");
  waitpid(pid, nullptr, 0);
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  CLI::App app{
      "A BG job sharing a CPU core with a burst-parallel FG rank: FG alone, FG+BG "
      "idle_only and concurrent (SCHED_IDLE or normal priority), BG alone"};
  app.add_option("iterations", config.iterations, "measured FG iterations")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("fg_batch", config.fg_batch, "FG global batch")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("bg_batch", config.bg_batch, "BG batch")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("image_size", config.image_size, "image side")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("rounds", config.rounds, "rounds of every configuration (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);
  std::printf("small_cnn %lldx%lld: FG global batch %lld over 2 CPU ranks (burst plan), "
              "BG batch %lld on rank 1's core; %d measured iterations after %d warm-up\n",
              static_cast<long long>(config.image_size), static_cast<long long>(config.image_size),
              static_cast<long long>(config.fg_batch), static_cast<long long>(config.bg_batch),
              config.iterations, kWarmup);
  // The machine is shared: configurations run round-robin, `rounds` times, and each is
  // summarised by its median round (by FG iteration time).
  struct Variant {
    const char* name;
    std::optional<dw::SharingMode> mode;
    bool idle_priority;
    std::vector<std::vector<RankResult>> rounds;
  };
  std::vector<Variant> variants{
      {"fg_alone", std::nullopt, false, {}},
      {"fg+bg idle_only, BG thread SCHED_IDLE (default)", dw::SharingMode::kIdleOnly, true, {}},
      {"fg+bg idle_only, BG thread normal priority", dw::SharingMode::kIdleOnly, false, {}},
      {"fg+bg concurrent, BG thread SCHED_IDLE", dw::SharingMode::kConcurrent, true, {}},
      {"fg+bg concurrent, normal priority (naive)", dw::SharingMode::kConcurrent, false, {}},
  };
  std::vector<double> bg_alone_rounds;
  for (int round = 0; round < config.rounds; ++round) {
    for (Variant& variant : variants) {
      variant.rounds.push_back(RunFg(config, variant.mode, variant.idle_priority));
    }
    bg_alone_rounds.push_back(RunBgAlone(config, 3.0));
    std::fprintf(stderr, "round %d of %d done\n", round + 1, config.rounds);
  }
  auto fg_ms = [](const std::vector<RankResult>& r) {
    return std::max(r[0].iteration_ms, r[1].iteration_ms);
  };
  auto median_round = [&](Variant& variant) -> const std::vector<RankResult>& {
    std::vector<size_t> order(variant.rounds.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return fg_ms(variant.rounds[a]) < fg_ms(variant.rounds[b]);
    });
    return variant.rounds[order[order.size() / 2]];
  };
  std::sort(bg_alone_rounds.begin(), bg_alone_rounds.end());
  double bg_alone = bg_alone_rounds[bg_alone_rounds.size() / 2];
  double fg_alone_ms = fg_ms(median_round(variants[0]));

  std::printf("\n| configuration | FG iteration ms | FG vs alone | BG samples/s | BG vs alone |"
              " rank 1 waiting | BG busy | FG resumes delayed by BG | overrun ms/iter |"
              " FG ms, all rounds | FG vs alone, median of per-round ratios |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (Variant& variant : variants) {
    const auto& results = median_round(variant);
    double ms = fg_ms(results);
    std::string all;
    for (const auto& round : variant.rounds) {
      char buffer[32];
      std::snprintf(buffer, sizeof(buffer), "%s%.1f", all.empty() ? "" : " ", fg_ms(round));
      all += buffer;
    }
    // Each round's ratio to fg_alone of the same round: robust to load drifting between rounds.
    std::vector<double> paired;
    for (size_t i = 0; i < variant.rounds.size(); ++i) {
      paired.push_back(fg_ms(variant.rounds[i]) / fg_ms(variants[0].rounds[i]));
    }
    std::sort(paired.begin(), paired.end());
    double paired_median = paired[paired.size() / 2];
    if (!variant.mode) {
      std::printf("| %s | %.2f | 1.00 | - | - | - | - | - | - | %s | 1.00 |\n", variant.name, ms,
                  all.c_str());
      continue;
    }
    const RankResult& r1 = results[1];
    std::printf("| %s | %.2f | %.3f | %.1f | %.2f | %.0f%% | %.0f%% | %lld of %lld idle periods |"
                " %.2f | %s | %.3f |\n",
                variant.name, ms, ms / fg_alone_ms, r1.bg_samples_per_s,
                r1.bg_samples_per_s / bg_alone, 100 * r1.fg_wait_share, 100 * r1.bg_busy_share,
                static_cast<long long>(r1.delayed_resumes),
                static_cast<long long>(r1.idle_periods), r1.overrun_ms_per_iteration,
                all.c_str(), paired_median);
  }
  std::string all;
  for (double rate : bg_alone_rounds) all += (all.empty() ? "" : " ") + std::to_string(int(rate));
  std::printf("| bg_alone (samples/s, sorted rounds: %s) | - | - | %.1f | 1.00 | - | - | - | - | - | - |\n",
              all.c_str(), bg_alone);
  return 0;
}

// Benchmark: a BG job sharing a CPU "device" with a burst-parallel FG rank.
//
// Two FG rank processes (forked; Gloo over loopback; one intra-op thread each; rank r pinned to
// core r, so a core plays a device) train small_cnn under a burst plan whose residual block and
// head run on rank 0 alone: rank 1 waits through them every iteration. A BG job (--bg-model, its
// own batch) shares rank 1's core, or every rank's core (a copy per rank, as a BG job without
// "ranks" runs). Configurations:
//   fg_alone            FG only
//   fg+bg idle_only     BG units only while the FG rank waits (the CPU path of the
//                       multiplexer), the BG thread under SCHED_IDLE (default) or at normal
//                       priority; with the wait limits (timeout, units split to the bound from
//                       the FG rank's gaps: the default) or without them
//   fg+bg concurrent    BG thread free-running next to FG, under SCHED_IDLE or at normal
//                       priority (naive collocation)
//   bg_alone            the BG job alone on one pinned core
// Reported: FG iteration time (mean over measured iterations of the slowest rank: the critical
// path), its ratio to fg_alone and the delay per iteration (both as the median over rounds of the
// round's own difference to fg_alone), BG samples/s during the FG measurement (summed over the
// ranks that run it) and its ratio to bg_alone, and gate counters of the most delayed rank.
// Configurations run round-robin `rounds` times; each row is the median round by FG time.
//   build-*/bin/deepool-bench-multiplex [fg_iterations=40] [fg_batch=64] [bg_batch=8]
//                                       [image_size=32] [rounds=5] [--bg-model small_cnn]
#include <sched.h>
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
#include "common/forked_ranks.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/background/background_runner.h"
#include "worker/runtime/background/background_trainer.h"
#include "worker/runtime/communication/communicator_gloo.h"
#include "worker/runtime/data/data.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/background/multiplex_communicator.h"
#include "worker/runtime/background/multiplex_gate.h"

namespace dw = deepool::worker;
namespace dp = deepool::planner;

namespace {

constexpr int kWarmup = 5;

struct Config {
  std::string bg_model = "small_cnn";
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
  int64_t idle_periods = 0, bg_units = 0, delayed_resumes = 0, wait_timeouts = 0;
  double overrun_ms_per_iteration = 0;
  int64_t micro_batches = 1;  // the BG job's split at the end
  double longest_unit_ms = 0, unit_bound_ms = 0;
};

// Where the BG job runs and how it shares.
struct Sharing {
  dw::SharingMode mode = dw::SharingMode::kIdleOnly;
  bool idle_priority = true;
  bool all_ranks = false;  // a copy on every rank's core; else rank 1's only
  bool limits = true;      // the timeout and the unit bound (the run spec's defaults)
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

dp::Graph Model(const Config& config, const std::string& name = "small_cnn") {
  dp::zoo::ModelOptions options;
  options.num_classes = 10;
  options.image_size = config.image_size;
  auto graph = dp::zoo::BuildModel(name, options);
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
  spec.graph = std::make_shared<const dp::Graph>(Model(config, config.bg_model));
  spec.batch_size = config.bg_batch;
  spec.seed = 7;
  spec.optimizer.lr = 0.02;
  spec.optimizer.momentum = 0.9;
  spec.data = dw::DataSpec{"synthetic", 13, ""};
  return spec;
}

// One FG rank (optionally with a BG job on its core); writes its result to `result_fd`.
void RankMain(const Config& config, int rank, std::optional<Sharing> sharing,
              const deepool::PortPipe& ports, int result_fd) {
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
      if (!ports.Publish(port, 1).ok()) Die("port pipe");
    });
    if (!connected.ok()) Die(connected.status().ToString());
    comm = std::move(connected).value();
  } else {
    deepool::StatusOr<int> port = ports.Await();
    if (!port.ok()) Die(port.status().ToString());
    comm_options.store_port = *port;
    auto connected = dw::ConnectGloo(comm_options);
    if (!connected.ok()) Die(connected.status().ToString());
    comm = std::move(connected).value();
  }
  std::unique_ptr<dw::DeviceGate> gate;
  std::unique_ptr<dw::BackgroundTrainer> trainer;
  std::unique_ptr<dw::BackgroundRunner> runner;
  if (sharing && (rank == 1 || sharing->all_ranks)) {
    const dw::GateLimits limits =
        sharing->limits ? dw::GateLimits::From(dw::SharingOptions{}) : dw::GateLimits{};
    gate = std::make_unique<dw::DeviceGate>(sharing->mode, clock, false, limits);
    auto made = dw::BackgroundTrainer::Create(BgSpec(config), torch::kCPU);
    if (!made.ok()) Die(made.status().ToString());
    trainer = std::move(made).value();
    comm = std::make_unique<dw::SharingCommunicator>(std::move(comm), gate.get());
    const bool idle_priority = sharing->idle_priority;
    runner = std::make_unique<dw::BackgroundRunner>(
        trainer.get(), gate.get(), clock, 0, [idle_priority]() -> std::shared_ptr<void> {
          if (idle_priority && !dw::DemoteCurrentThreadToIdle().ok()) Die("SCHED_IDLE refused");
          return nullptr;
        });
    // As the worker wires a CPU device's BG job (multiplex_attach.cc).
    if (sharing->limits && dw::SharingOptions{}.split_units) runner->KeepUnitsUnderBound();
    runner->TimeUnitsWith(deepool::ThreadCpuClock::Get());
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
    result.wait_timeouts = counters.fg_wait_timeouts;
    dw::BackgroundProgress progress = runner->progress();
    result.micro_batches = progress.micro_batches;
    result.longest_unit_ms = progress.longest_unit_ms;
    result.unit_bound_ms = progress.unit_bound_ms;
    result.bg_busy_share = bg_busy_ms / window_ms;
    result.fg_wait_share = fg_wait_ms / window_ms;
    result.overrun_ms_per_iteration = overrun_ms / config.iterations;
  }
  if (write(result_fd, &result, sizeof(result)) != sizeof(result)) Die("result pipe");
  std::_Exit(0);  // skip c10d teardown
}

// Runs both FG ranks in forked processes; returns their results.
// (Each result is one small write, which the pipe holds until the ranks have ended.)
std::vector<RankResult> RunFg(const Config& config, std::optional<Sharing> sharing) {
  int result_pipe[2][2];
  if (pipe(result_pipe[0]) != 0 || pipe(result_pipe[1]) != 0) Die("pipe");
  deepool::StatusOr<deepool::PortPipe> ports = deepool::PortPipe::Create();
  if (!ports.ok()) Die(ports.status().ToString());
  const auto codes = deepool::ForkRanks(2, [&](int rank) {
    RankMain(config, rank, sharing, *ports, result_pipe[rank][1]);
    return 0;  // not reached: RankMain ends the process
  });
  if (!codes.ok()) Die(codes.status().ToString());
  std::vector<RankResult> results(2);
  for (int rank = 0; rank < 2; ++rank) {
    close(result_pipe[rank][1]);
    if (read(result_pipe[rank][0], &results[rank], sizeof(RankResult)) != sizeof(RankResult)) {
      Die("rank " + std::to_string(rank) + " failed (exit " +
          std::to_string((*codes)[static_cast<size_t>(rank)]) + ")");
    }
    close(result_pipe[rank][0]);
  }
  return results;
}

// The BG job alone on one pinned core for `seconds`; samples/s.
double RunBgAlone(const Config& config, double seconds) {
  int result_pipe[2];
  if (pipe(result_pipe) != 0) Die("pipe");
  const auto codes = deepool::ForkRanks(1, [&](int) {
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
    return 0;
  });
  if (!codes.ok()) Die(codes.status().ToString());
  close(result_pipe[1]);
  double rate = 0;
  if (read(result_pipe[0], &rate, sizeof(rate)) != sizeof(rate)) Die("bg alone failed");
  close(result_pipe[0]);
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  CLI::App app{
      "A BG job sharing CPU cores with a burst-parallel FG job of 2 ranks: FG alone; FG+BG "
      "idle_only (with and without the wait limits) and concurrent (SCHED_IDLE or normal "
      "priority), BG on rank 1 or on every rank; BG alone"};
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
  app.add_option("--bg-model", config.bg_model,
                 "the BG job's model (a zoo name; e.g. vgg16, whose long conv units the wait "
                 "limits split)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::printf(
      "FG small_cnn %lldx%lld, global batch %lld over 2 CPU ranks (burst plan); BG %s "
      "batch %lld; %d measured iterations after %d warm-up\n",
      static_cast<long long>(config.image_size), static_cast<long long>(config.image_size),
      static_cast<long long>(config.fg_batch), config.bg_model.c_str(),
      static_cast<long long>(config.bg_batch), config.iterations, kWarmup);
  // The machine is shared: configurations run round-robin, `rounds` times, and each is
  // summarised by its median round (by FG iteration time).
  struct Variant {
    const char* name;
    std::optional<Sharing> sharing;
    std::vector<std::vector<RankResult>> rounds;
  };
  using Mode = dw::SharingMode;
  std::vector<Variant> variants{
      {"fg_alone", std::nullopt, {}},
      {"rank 1: idle_only, SCHED_IDLE, wait limits (default)",
       Sharing{Mode::kIdleOnly, true, false, true},
       {}},
      {"rank 1: idle_only, SCHED_IDLE, no wait limits",
       Sharing{Mode::kIdleOnly, true, false, false},
       {}},
      {"rank 1: idle_only, normal priority", Sharing{Mode::kIdleOnly, false, false, true}, {}},
      {"rank 1: concurrent, SCHED_IDLE", Sharing{Mode::kConcurrent, true, false, true}, {}},
      {"rank 1: concurrent, normal priority (naive)",
       Sharing{Mode::kConcurrent, false, false, true},
       {}},
      {"every rank: idle_only, SCHED_IDLE, wait limits (default)",
       Sharing{Mode::kIdleOnly, true, true, true},
       {}},
      {"every rank: idle_only, SCHED_IDLE, no wait limits",
       Sharing{Mode::kIdleOnly, true, true, false},
       {}},
      {"every rank: concurrent, normal priority (naive)",
       Sharing{Mode::kConcurrent, false, true, true},
       {}},
  };
  std::vector<double> bg_alone_rounds;
  for (int round = 0; round < config.rounds; ++round) {
    for (Variant& variant : variants) variant.rounds.push_back(RunFg(config, variant.sharing));
    bg_alone_rounds.push_back(RunBgAlone(config, 3.0));
    std::fprintf(stderr, "round %d of %d done\n", round + 1, config.rounds);
  }
  // The FG critical path: the slower rank's iteration.
  auto fg_ms = [](const std::vector<RankResult>& r) {
    return std::max(r[0].iteration_ms, r[1].iteration_ms);
  };
  auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  auto median_round = [&](Variant& variant) -> const std::vector<RankResult>& {
    std::vector<size_t> order(variant.rounds.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return fg_ms(variant.rounds[a]) < fg_ms(variant.rounds[b]);
    });
    return variant.rounds[order[order.size() / 2]];
  };
  const double bg_alone = median(bg_alone_rounds);

  std::printf(
      "\n| configuration | FG iteration ms | FG vs alone | FG delay ms/iter | BG samples/s |"
      " BG vs alone | FG waiting | BG busy | FG resumes delayed by BG | timeouts |"
      " overrun ms/iter | BG micro-batches (longest unit / bound ms) | FG ms, all rounds |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (Variant& variant : variants) {
    const auto& results = median_round(variant);
    const double ms = fg_ms(results);
    std::string all;
    for (const auto& round : variant.rounds) {
      char buffer[32];
      std::snprintf(buffer, sizeof(buffer), "%s%.1f", all.empty() ? "" : " ", fg_ms(round));
      all += buffer;
    }
    // Each round against fg_alone of the same round: robust to load drifting between rounds.
    std::vector<double> ratios, delays;
    for (size_t i = 0; i < variant.rounds.size(); ++i) {
      const double alone = fg_ms(variants[0].rounds[i]);
      ratios.push_back(fg_ms(variant.rounds[i]) / alone);
      delays.push_back(fg_ms(variant.rounds[i]) - alone);
    }
    if (!variant.sharing) {
      std::printf("| %s | %.2f | 1.00 | 0 | - | - | - | - | - | - | - | - | %s |\n", variant.name,
                  ms, all.c_str());
      continue;
    }
    // BG throughput over the ranks that run it; gate figures of the rank waiting most for BG.
    double samples = 0;
    const RankResult* worst = nullptr;
    for (int rank = 0; rank < 2; ++rank) {
      if (!variant.sharing->all_ranks && rank != 1) continue;
      const RankResult& r = results[static_cast<size_t>(rank)];
      samples += r.bg_samples_per_s;
      if (!worst || r.overrun_ms_per_iteration > worst->overrun_ms_per_iteration) worst = &r;
    }
    std::printf(
        "| %s | %.2f | %.3f | %.2f | %.1f | %.2f | %.0f%% | %.0f%% | %lld of %lld |"
        " %lld | %.2f | %lld (%.2f / %.2f) | %s |\n",
        variant.name, ms, median(ratios), median(delays), samples, samples / bg_alone,
        100 * worst->fg_wait_share, 100 * worst->bg_busy_share,
        static_cast<long long>(worst->delayed_resumes), static_cast<long long>(worst->idle_periods),
        static_cast<long long>(worst->wait_timeouts), worst->overrun_ms_per_iteration,
        static_cast<long long>(worst->micro_batches), worst->longest_unit_ms, worst->unit_bound_ms,
        all.c_str());
  }
  std::string all;
  for (double rate : bg_alone_rounds) all += (all.empty() ? "" : " ") + std::to_string(int(rate));
  std::printf(
      "| bg_alone (samples/s, rounds: %s) | - | - | - | %.1f | 1.00 | - | - | - | - | - | - | - "
      "|\n",
      all.c_str(), bg_alone);
  return 0;
}

// deepool-calibrate: measures this host's collectives between rank processes (Gloo over
// loopback, as CPU devices train) and fits the cost model's link to them, so that plans for
// this host predict its communication (docs/planner.md, "Calibrating a cluster").
//   deepool-calibrate [--ranks 4] [--max-bytes 16777216] [--repeats 20] [--statistic mean]
//                     [-o cluster.json]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/forked_ranks.h"
#include "common/logging.h"
#include "planner/cluster.h"
#include "planner/link_calibration.h"
#include "worker/runtime/communication/collective_timing.h"
#include "worker/runtime/communication/communicator_gloo.h"

namespace {

namespace dp = deepool::planner;
namespace dw = deepool::worker;

struct Options {
  int ranks = 4;
  dw::CollectiveTimingOptions timing;
  std::string output;
};

// The Markdown table of what was measured, the fit's and the preset's predictions.
void PrintTable(const std::vector<dp::CollectiveSample>& samples, const dp::LinkFit& fit,
                const dp::Cluster& preset) {
  std::printf("| collective | devices | bytes | measured ms | fitted ms | %s preset ms |\n",
              preset.name.c_str());
  std::printf("|---|---|---|---|---|---|\n");
  for (const dp::CollectiveSample& s : samples) {
    std::printf("| %s | %d | %lld | %.3f | %.3f | %.3f |\n", dp::CollectiveKindName(s.kind).c_str(),
                s.devices, static_cast<long long>(s.bytes), s.measured_ms,
                dp::PredictCollectiveMs(fit.link, s),
                dp::PredictCollectiveMs(preset.intra_node, s));
  }
  const dp::LinkFit preset_score = dp::ScoreLink(preset.intra_node, samples);
  const dp::Link reductions = fit.link.ForCollectives();
  std::printf(
      "\nfitted link: messages %.4g GB/s, %.4g us; all-reduces %.4g GB/s, %.4g us; prediction "
      "error (|log|) mean %.3f, worst %.3f\n",
      fit.link.bandwidth_gbps, fit.link.latency_us, reductions.bandwidth_gbps,
      reductions.latency_us, fit.mean_abs_log_error, fit.worst_abs_log_error);
  std::printf("%s preset: %.4g GB/s, %.4g us; prediction error mean %.3f, worst %.3f\n",
              preset.name.c_str(), preset.intra_node.bandwidth_gbps, preset.intra_node.latency_us,
              preset_score.mean_abs_log_error, preset_score.worst_abs_log_error);
}

// Rank 0's work after the measurement: the fit, the table and the cluster file.
int Report(const Options& options, const std::vector<dp::CollectiveSample>& samples) {
  deepool::StatusOr<dp::LinkFit> fit = dp::FitLink(samples);
  if (!fit.ok()) {
    std::cerr << "deepool-calibrate: " << fit.status().ToString() << "\n";
    return 1;
  }
  deepool::StatusOr<dp::Cluster> preset = dp::ClusterPreset("cpu-" + std::to_string(options.ranks));
  if (!preset.ok()) {
    std::cerr << "deepool-calibrate: " << preset.status().ToString() << "\n";
    return 1;
  }
  PrintTable(samples, *fit, *preset);
  dp::Cluster calibrated = *preset;
  calibrated.name = "calibrated-cpu-" + std::to_string(options.ranks);
  calibrated.intra_node = fit->link;
  if (options.output.empty()) return 0;
  std::ofstream out(options.output);
  out << dp::ClusterToJson(calibrated) << "\n";
  if (!out.good()) {
    std::cerr << "deepool-calibrate: cannot write " << options.output << "\n";
    return 1;
  }
  std::printf("wrote %s (plan with: deepool plan --cluster %s ...)\n", options.output.c_str(),
              options.output.c_str());
  return 0;
}

// One rank process: connects, measures, and (rank 0) reports. Returns the exit code.
int RankMain(const Options& options, int rank, const deepool::PortPipe& ports) {
  torch::set_num_threads(1);
  dw::CommOptions comm_options;
  comm_options.rank = rank;
  comm_options.world_size = options.ranks;
  if (rank != 0) {
    deepool::StatusOr<int> port = ports.Await();
    if (!port.ok()) {
      std::cerr << "deepool-calibrate: rank " << rank << ": " << port.status().ToString() << "\n";
      return 1;
    }
    comm_options.store_port = *port;
  }
  auto comm = dw::ConnectGloo(comm_options, [&](int port) {
    if (!ports.Publish(port, options.ranks - 1).ok()) std::_Exit(1);
  });
  if (!comm.ok()) {
    std::cerr << "deepool-calibrate: rank " << rank << ": " << comm.status().ToString() << "\n";
    return 1;
  }
  auto samples = dw::TimeCollectives(**comm, options.timing);
  if (!samples.ok()) {
    std::cerr << "deepool-calibrate: rank " << rank << ": " << samples.status().ToString() << "\n";
    return 1;
  }
  return rank == 0 ? Report(options, *samples) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{
      "deepool-calibrate: time all-reduces and messages between rank processes on this host "
      "(Gloo over loopback) and fit the cost model's link to them; prints the measurements "
      "beside the fit's and the cpu-N preset's predictions, and writes a cluster file"};
  app.add_option("--ranks", options.ranks, "rank processes (all-reduces over 2..ranks of them)")
      ->capture_default_str()
      ->check(CLI::Range(2, 64));
  app.add_option("--min-bytes", options.timing.min_bytes, "smallest tensor or message")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 30));
  app.add_option("--max-bytes", options.timing.max_bytes, "largest (sizes step by 4x)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{4}, int64_t{1} << 30));
  app.add_option("--repeats", options.timing.repeats, "timed runs per size")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  const std::map<std::string, dw::CollectiveStatistic> statistics{
      {"mean", dw::CollectiveStatistic::kTrimmedMean},
      {"median", dw::CollectiveStatistic::kMedian}};
  app.add_option("--statistic", options.timing.statistic,
                 "what a size's runs count as: mean (their mean without the fastest and slowest "
                 "tenth: what a training rank pays over many collectives) or median")
      ->transform(CLI::CheckedTransformer(statistics))
      ->default_str("mean");
  app.add_option("--busy-ms", options.timing.busy_ms,
                 "every rank does about this long of the same work before each timed "
                 "all-reduce, and the sender alone before each message while the receiver "
                 "waits, as in training (0: back to back)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  app.add_option("-o,--output", options.output,
                 "the cluster file to write (cpu-N with the fitted link between its devices)");
  CLI11_PARSE(app, argc, argv);
  deepool::InitLogging("calibrate", "warn");
  deepool::StatusOr<deepool::PortPipe> ports = deepool::PortPipe::Create();
  if (!ports.ok()) {
    std::cerr << "deepool-calibrate: " << ports.status().ToString() << "\n";
    return 1;
  }
  const deepool::StatusOr<std::vector<int>> codes =
      deepool::ForkRanks(options.ranks, [&](int rank) { return RankMain(options, rank, *ports); });
  if (!codes.ok()) {
    std::cerr << "deepool-calibrate: " << codes.status().ToString() << "\n";
    return 1;
  }
  for (int code : *codes) {
    if (code != 0) return 1;
  }
  return 0;
}

#include "planner/link_calibration.h"

#include <algorithm>
#include <cmath>

#include "planner/gradient_sync.h"

namespace deepool::planner {

std::string CollectiveKindName(CollectiveSample::Kind kind) {
  return kind == CollectiveSample::Kind::kAllReduce ? "all-reduce" : "message";
}

double PredictCollectiveMs(const Link& link, const CollectiveSample& sample) {
  if (sample.kind == CollectiveSample::Kind::kMessage) {
    return link.MessageMs(static_cast<double>(sample.bytes));
  }
  Cluster cluster;
  cluster.nodes = 1;
  cluster.devices_per_node = std::max(1, sample.devices);
  cluster.intra_node = link;
  cluster.inter_node = link;
  return AllReduceMs(cluster, sample.bytes, sample.devices);
}

LinkFit ScoreLink(const Link& link, const std::vector<CollectiveSample>& samples) {
  LinkFit fit;
  fit.link = link;
  for (const CollectiveSample& sample : samples) {
    const double error =
        std::fabs(std::log(PredictCollectiveMs(link, sample) / sample.measured_ms));
    fit.mean_abs_log_error += error;
    fit.worst_abs_log_error = std::max(fit.worst_abs_log_error, error);
  }
  if (!samples.empty()) fit.mean_abs_log_error /= static_cast<double>(samples.size());
  return fit;
}

namespace {

// The one latency and bandwidth that best predict `samples` (all of one kind).
Link FitOne(const std::vector<CollectiveSample>& samples) {
  // Grids in log10 space: latency in us, bandwidth in GB/s; each pass narrows around the best.
  double lat_lo = -2, lat_hi = 6, bw_lo = -4, bw_hi = 4;
  constexpr int kSteps = 64;
  LinkFit best;
  best.mean_abs_log_error = INFINITY;
  for (int pass = 0; pass < 4; ++pass) {
    const double lat_step = (lat_hi - lat_lo) / kSteps, bw_step = (bw_hi - bw_lo) / kSteps;
    for (int i = 0; i <= kSteps; ++i) {
      for (int j = 0; j <= kSteps; ++j) {
        const Link link{std::pow(10.0, bw_lo + j * bw_step), std::pow(10.0, lat_lo + i * lat_step)};
        LinkFit fit = ScoreLink(link, samples);
        if (fit.mean_abs_log_error < best.mean_abs_log_error) best = fit;
      }
    }
    const double lat = std::log10(best.link.latency_us), bw = std::log10(best.link.bandwidth_gbps);
    lat_lo = lat - 2 * lat_step;
    lat_hi = lat + 2 * lat_step;
    bw_lo = bw - 2 * bw_step;
    bw_hi = bw + 2 * bw_step;
  }
  return best.link;
}

}  // namespace

StatusOr<LinkFit> FitLink(const std::vector<CollectiveSample>& samples) {
  if (samples.empty()) return InvalidArgumentError("no collective was measured");
  std::vector<CollectiveSample> messages, reductions;
  for (const CollectiveSample& sample : samples) {
    if (!(sample.measured_ms > 0) || !std::isfinite(sample.measured_ms) || sample.bytes <= 0 ||
        sample.devices < 2) {
      return InvalidArgumentError("a " + CollectiveKindName(sample.kind) + " of " +
                                  std::to_string(sample.bytes) + " bytes over " +
                                  std::to_string(sample.devices) + " devices has no positive time");
    }
    (sample.kind == CollectiveSample::Kind::kMessage ? messages : reductions).push_back(sample);
  }
  Link link = FitOne(messages.empty() ? reductions : messages);
  if (!messages.empty() && !reductions.empty()) {
    const Link collective = FitOne(reductions);
    link.collective_bandwidth_gbps = collective.bandwidth_gbps;
    link.collective_latency_us = collective.latency_us;
  }
  return ScoreLink(link, samples);
}

}  // namespace deepool::planner

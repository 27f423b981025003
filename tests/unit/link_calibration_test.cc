// Fitting a link to measured collectives: the cost model's own formulas, fitted back.
#include "planner/link_calibration.h"

#include <catch2/catch.hpp>
#include <cmath>

namespace deepool::planner {
namespace {

std::vector<CollectiveSample> SamplesOf(const Link& link, double noise = 0) {
  std::vector<CollectiveSample> samples;
  int k = 0;
  for (int devices = 2; devices <= 4; ++devices) {
    for (int64_t bytes = 4 << 10; bytes <= (16 << 20); bytes *= 4) {
      CollectiveSample sample{CollectiveSample::Kind::kAllReduce, devices, bytes, 0};
      // Alternating +-noise, so the truth stays the best fit.
      const double factor = 1 + ((k++ % 2) ? noise : -noise);
      sample.measured_ms = PredictCollectiveMs(link, sample) * factor;
      samples.push_back(sample);
    }
  }
  for (int64_t bytes = 4 << 10; bytes <= (16 << 20); bytes *= 4) {
    CollectiveSample sample{CollectiveSample::Kind::kMessage, 2, bytes, 0};
    sample.measured_ms = link.MessageMs(static_cast<double>(bytes));
    samples.push_back(sample);
  }
  return samples;
}

TEST_CASE("a link is fitted back from the collectives it predicts", "[calibration]") {
  // Messages and all-reduces at their own speeds, as a CPU library's can be.
  Link slow_reductions{5.0, 30.0};
  slow_reductions.collective_bandwidth_gbps = 1.2;
  slow_reductions.collective_latency_us = 400.0;
  for (const Link truth : {Link{1.5, 80.0}, Link{0.2, 900.0}, Link{40.0, 5.0}, slow_reductions}) {
    INFO(truth.bandwidth_gbps << " GB/s, " << truth.latency_us << " us");
    auto fit = FitLink(SamplesOf(truth));
    REQUIRE(fit.ok());
    CHECK(fit->link.bandwidth_gbps == Approx(truth.bandwidth_gbps).epsilon(0.03));
    CHECK(fit->link.latency_us == Approx(truth.latency_us).epsilon(0.03));
    const Link reductions = fit->link.ForCollectives(), expected = truth.ForCollectives();
    CHECK(reductions.bandwidth_gbps == Approx(expected.bandwidth_gbps).epsilon(0.03));
    CHECK(reductions.latency_us == Approx(expected.latency_us).epsilon(0.03));
    CHECK(fit->mean_abs_log_error < 0.01);
  }
  // With +-20% noise on the all-reduces, their fit stays near the truth (any fit inside the
  // noise band is as good by mean |log|) and reports an error no larger than the noise's.
  auto noisy = FitLink(SamplesOf(Link{1.5, 80.0}, 0.2));
  REQUIRE(noisy.ok());
  CHECK(noisy->link.bandwidth_gbps == Approx(1.5).epsilon(0.03));  // the messages: no noise
  CHECK(noisy->link.ForCollectives().bandwidth_gbps == Approx(1.5).epsilon(0.3));
  CHECK(noisy->link.ForCollectives().latency_us == Approx(80.0).epsilon(0.3));
  CHECK(noisy->mean_abs_log_error <= -std::log(0.8));
  CHECK(noisy->worst_abs_log_error <= std::log(1.2 / 0.8) + 1e-6);
  // All-reduces alone: the link itself, no separate collective figures.
  std::vector<CollectiveSample> reductions_only;
  for (const CollectiveSample& sample : SamplesOf(Link{1.5, 80.0})) {
    if (sample.kind == CollectiveSample::Kind::kAllReduce) reductions_only.push_back(sample);
  }
  auto alone = FitLink(reductions_only);
  REQUIRE(alone.ok());
  CHECK(alone->link.bandwidth_gbps == Approx(1.5).epsilon(0.03));
  CHECK_FALSE(alone->link.collective_bandwidth_gbps.has_value());
}

TEST_CASE("a fit refuses no samples and samples without a time", "[calibration]") {
  CHECK(FitLink({}).status().code() == StatusCode::kInvalidArgument);
  std::vector<CollectiveSample> bad{{CollectiveSample::Kind::kAllReduce, 2, 4096, 0.0}};
  auto refused = FitLink(bad);
  REQUIRE(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(refused.status().message(), Catch::Contains("all-reduce of 4096 bytes"));
}

TEST_CASE("the predictions are the cost model's: a message is latency plus bytes",
          "[calibration]") {
  const Link link{2.0, 100.0};  // 2 GB/s = 2e6 bytes per ms
  CollectiveSample message{CollectiveSample::Kind::kMessage, 2, 2'000'000, 0};
  CHECK(PredictCollectiveMs(link, message) == Approx(0.1 + 1.0));
  // A ring all-reduce over 2 devices: 2(g-1)/g x S / bw + 2(g-1) x latency.
  CollectiveSample reduce{CollectiveSample::Kind::kAllReduce, 2, 2'000'000, 0};
  CHECK(PredictCollectiveMs(link, reduce) == Approx(1.0 + 0.2));
  // An all-reduce is charged at the link's collective figures where it has them.
  Link slower = link;
  slower.collective_bandwidth_gbps = 1.0;
  slower.collective_latency_us = 500.0;
  CHECK(PredictCollectiveMs(slower, reduce) == Approx(2.0 + 1.0));
  CHECK(PredictCollectiveMs(slower, message) == Approx(0.1 + 1.0));
}

}  // namespace
}  // namespace deepool::planner

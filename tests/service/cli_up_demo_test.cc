// `deepool up`'s local cluster shape and its measurement of the FG job's pace.
#include "cli/services/up_demo.h"

#include <catch2/catch.hpp>

namespace deepool::cli {
namespace {

using std::chrono::milliseconds;

TEST_CASE("up gives every CPU device a core of its own unless told otherwise") {
  // A 2-core machine (CI): two workers of one device and one core each.
  LocalShape two = ShapeLocalCluster(2, 2, 0);
  CHECK(two.devices_per_worker == 1);
  CHECK(two.cores_per_worker == 1);
  CHECK_FALSE(two.oversubscribed);
  // Four cores or more: two devices each, the cores divided between the workers.
  LocalShape eight = ShapeLocalCluster(8, 2, 0);
  CHECK(eight.devices_per_worker == 2);
  CHECK(eight.cores_per_worker == 4);
  CHECK_FALSE(eight.oversubscribed);
  // Asked for more devices than cores: done, and said.
  LocalShape asked = ShapeLocalCluster(2, 2, 2);
  CHECK(asked.devices_per_worker == 2);
  CHECK(asked.cores_per_worker == 1);
  CHECK(asked.oversubscribed);
  // More workers than cores: each still gets one.
  CHECK(ShapeLocalCluster(2, 3, 0).cores_per_worker == 1);
  CHECK(ShapeLocalCluster(2, 3, 0).oversubscribed);
}

TEST_CASE("the measured iteration is the pace between the first iteration done and the end") {
  IterationMeter meter;
  const IterationMeter::TimePoint t0{};
  meter.Observe(t0, 0, 100, false, 0);                          // profiling
  meter.Observe(t0 + milliseconds(900), 0, 100, true, 0);       // executors starting
  meter.Observe(t0 + milliseconds(1000), 2, 100, true, 400);    // iteration 0 was slow
  meter.Observe(t0 + milliseconds(1200), 12, 100, true, 20);
  meter.Observe(t0 + milliseconds(2600), 82, 100, true, 20);
  meter.Observe(t0 + milliseconds(3500), 100, 100, true, 20);  // done, checkpointing
  meter.Observe(t0 + milliseconds(3900), 100, 100, false, 20);
  REQUIRE(meter.IterationMs().has_value());
  // 80 iterations (2 -> 82) in 1.6 s.
  CHECK(*meter.IterationMs() == Approx(20.0));
  CHECK(meter.Basis() == "mean of 80 iterations");
  CHECK(MeasuredLine(meter, 10.0) ==
        "  measured iteration 20ms (mean of 80 iterations), 2.00x the prediction\n");
}

TEST_CASE("a job too short to pace falls back to rank 0's last iteration, or says it has none") {
  IterationMeter none;
  CHECK_FALSE(none.IterationMs().has_value());
  CHECK(MeasuredLine(none, 5.0) == "  measured iteration: none (the job reported no iteration)\n");
  IterationMeter short_job;
  const IterationMeter::TimePoint t0{};
  short_job.Observe(t0, 1, 4, true, 30);
  short_job.Observe(t0 + milliseconds(200), 3, 4, true, 25);
  short_job.Observe(t0 + milliseconds(400), 4, 4, false, 24);
  CHECK(*short_job.IterationMs() == Approx(24.0));
  CHECK(short_job.Basis() == "rank 0's last iteration");
}

}  // namespace
}  // namespace deepool::cli

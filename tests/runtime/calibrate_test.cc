// deepool-calibrate with real rank processes (Gloo on loopback): it measures, fits and writes a
// cluster file the planner reads; the collective timing, in-process over the fake network.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "common/subprocess.h"
#include "planner/cluster.h"
#include "tests/runtime/executor_test_util.h"
#include "tests/temp_dir.h"
#include "worker/runtime/communication/collective_timing.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST_CASE("deepool-calibrate fits a link to this host's collectives and writes a cluster",
          "[calibration][process]") {
  TempDir dir;
  const std::string command = SiblingExecutable("deepool-calibrate") +
                              " --ranks 3 --max-bytes 16384 --repeats 2 -o " +
                              dir.File("cluster.json") + " > " + dir.File("out.txt") + " 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  const std::string said = ReadFile(dir.File("out.txt"));
  INFO(said);
  // All-reduces over 2 and 3 ranks and messages, at 4 and 16 KiB: six rows.
  CHECK_THAT(said, Catch::Contains("| all-reduce | 3 | 16384 |"));
  CHECK_THAT(said, Catch::Contains("| message | 2 | 4096 |"));
  CHECK_THAT(said, Catch::Contains("fitted link: "));
  CHECK_THAT(said, Catch::Contains("cpu-3 preset: "));
  auto cluster = planner::ParseClusterJson(ReadFile(dir.File("cluster.json")));
  REQUIRE(cluster.ok());
  CHECK(cluster->name == "calibrated-cpu-3");
  CHECK(cluster->device_type == "cpu");
  CHECK(cluster->total_devices() == 3);
  CHECK(cluster->intra_node.bandwidth_gbps > 0);
  CHECK(cluster->intra_node.latency_us > 0);
}

TEST_CASE("a size's runs count as their trimmed mean, or their median when asked",
          "[calibration]") {
  // Bimodal, as blocking collectives on a busy host are, with one stall of the machine.
  const std::vector<double> runs{3, 1, 3, 1, 100, 1, 3, 1, 3, 1};
  CHECK(SummariseMs(runs, CollectiveStatistic::kTrimmedMean) == Approx(2.0));  // 1 and 100 out
  CHECK(SummariseMs(runs, CollectiveStatistic::kMedian) == 3.0);
  CHECK(SummariseMs({4, 2}, CollectiveStatistic::kTrimmedMean) == 3.0);  // nothing trimmed
  CHECK(SummariseMs({7}, CollectiveStatistic::kTrimmedMean) == 7.0);
}

TEST_CASE("collective timing: rank 0 gets every all-reduce and message, the others none",
          "[calibration]") {
  auto comms = testing::FakeComms(3);
  std::vector<StatusOr<std::vector<planner::CollectiveSample>>> results(
      3, std::vector<planner::CollectiveSample>{});
  CollectiveTimingOptions options;
  options.min_bytes = 1024;
  options.max_bytes = 4096;
  options.repeats = 2;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    ranks.emplace_back([&, rank] {
      auto comm = comms(rank);
      if (!comm.ok()) {
        results[static_cast<size_t>(rank)] = comm.status();
        return;
      }
      results[static_cast<size_t>(rank)] = TimeCollectives(**comm, options);
    });
  }
  for (auto& thread : ranks) thread.join();
  for (const auto& result : results) REQUIRE(result.ok());
  const auto& samples = *results[0];
  REQUIRE(samples.size() == 6);  // all-reduces over 2 and 3 ranks, messages; 1 and 4 KiB each
  using Kind = planner::CollectiveSample::Kind;
  CHECK(samples[0].kind == Kind::kAllReduce);
  CHECK(samples[0].devices == 2);
  CHECK(samples[0].bytes == 1024);
  CHECK(samples[3].devices == 3);
  CHECK(samples[3].bytes == 4096);
  CHECK(samples[5].kind == Kind::kMessage);
  for (const auto& sample : samples) CHECK(sample.measured_ms > 0);
  CHECK(results[1]->empty());
  CHECK(results[2]->empty());
}

TEST_CASE("collective timing: ranks compute before each run, outside the timed part",
          "[calibration]") {
  auto comms = testing::FakeComms(2);
  CollectiveTimingOptions options;
  options.min_bytes = options.max_bytes = 1024;
  options.repeats = 1;
  // Long beside the skew between the ranks: a rank's timed collective also waits for the other
  // to end its compute, which on a loaded 2-core machine ran up to 51 ms behind with 50 ms.
  options.busy_ms = 200;
  std::vector<StatusOr<std::vector<planner::CollectiveSample>>> results(
      2, std::vector<planner::CollectiveSample>{});
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      auto comm = comms(rank);
      results[static_cast<size_t>(rank)] =
          comm.ok() ? TimeCollectives(**comm, options) : comm.status();
    });
  }
  for (auto& thread : ranks) thread.join();
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (const auto& result : results) REQUIRE(result.ok());
  const auto& samples = *results[0];
  REQUIRE(samples.size() == 2);  // one all-reduce size, one message size
  // Three runs each (two warm-ups), each after about 200 ms of compute (the same work on both
  // ranks, sized by a short probe of this machine's speed, so not exactly 200 ms): about 1.2 s in
  // all, where the collectives alone take a few ms...
  CHECK(elapsed_ms >= 600);
  // ...none of it inside the timed collectives over the in-process network.
  for (const auto& sample : samples) CHECK(sample.measured_ms < options.busy_ms);

  options.busy_ms = -1;  // checked before any collective
  auto refused = testing::FakeComms(2)(0);
  REQUIRE(refused.ok());
  CHECK(TimeCollectives(**refused, options).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE(
    "collective timing: every member works before an all-reduce, only the sender before "
    "a message",
    "[calibration]") {
  auto comms = testing::FakeComms(2);
  CollectiveTimingOptions options;
  options.min_bytes = options.max_bytes = 1024;
  options.repeats = 3;  // and two warm-ups: five runs of each
  options.busy_ms = 1;
  std::atomic<int> works[2] = {0, 0};
  options.work = [&](int rank, int64_t products) {
    CHECK(products >= 1);
    ++works[rank];
  };
  std::vector<Status> statuses(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      auto comm = comms(rank);
      statuses[static_cast<size_t>(rank)] =
          comm.ok() ? TimeCollectives(**comm, options).status() : comm.status();
    });
  }
  for (auto& thread : ranks) thread.join();
  for (const Status& status : statuses) REQUIRE(status.ok());
  // Five all-reduces, which both ranks work before, then five messages, which only rank 0 (the
  // sender) works before: the receiver waits in its receive, as a re-split's receiver does.
  CHECK(works[0] == 10);
  CHECK(works[1] == 5);
}

}  // namespace
}  // namespace deepool::worker

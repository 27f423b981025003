// A BG job's checkpoints end to end: a BG job with periodic checkpoints runs inside a FG rank's
// executor; the FG job ends first; the BG job is requeued, runs again as an executor of its own
// and resumes from the checkpoint its hosted run wrote, instead of iteration 0.
#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/e2e/local_cluster.h"

using namespace deepool;
using namespace deepool::e2e;
using nlohmann::json;

namespace {

// The iteration the job's history says an attempt resumed from ("training again from iteration
// R"), or -1.
int64_t ResumedFrom(const v1::Job& job) {
  const std::string again = "training again from iteration ";
  for (const auto& h : job.history()) {
    const size_t at = h.reason().find(again);
    if (at != std::string::npos) return std::stoll(h.reason().substr(at + again.size()));
  }
  return -1;
}

}  // namespace

TEST_CASE("a hosted BG job whose FG host ends resumes from its checkpoint on its own executor",
          "[e2e][elastic]") {
  LocalCluster cluster;
  REQUIRE(cluster.WaitForNodesUp(2));
  std::string fg, bg;
  REQUIRE(cluster.Submit(FgJob("host", 100000), &fg).ok());
  cluster.WaitForJob(fg, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().devices_size() == 4;
  });
  const std::string dir = cluster.dir() + "/ck-bg";
  // Far more iterations than the test lets it train, so that the hosted run cannot finish
  // before its host ends (a short BG job once did, and its second run had nothing to resume).
  json spec = BgJob("bg-kept", 100000);
  spec["checkpoint"] = {{"dir", dir}, {"every_iterations", 2}, {"keep", 2}};
  REQUIRE(cluster.Submit(spec, &bg).ok());
  // Past iteration 4 inside the FG executor: the checkpoint of iteration 4 (at least) is written
  // before the unit that reports the 5th iteration's end.
  v1::Job hosted = cluster.WaitForJob(bg, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 5;
  });
  REQUIRE(hosted.progress().devices_size() == 1);
  REQUIRE(hosted.progress().devices(0).shared_executor());
  std::string out, err;
  REQUIRE(cluster.RunCli({"cancel", fg}, &out, &err) == 0);

  // Requeued, then training again on an executor of its own, from a checkpoint the hosted run
  // wrote: R >= 4, not 0.
  v1::Job resumed = cluster.WaitForJob(bg, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && ResumedFrom(j) >= 0 &&
           j.progress().devices_size() == 1;
  });
  INFO(cli::ToJson(resumed));
  bool requeued = false;
  for (const auto& h : resumed.history()) {
    requeued |= h.reason().find("it resumes from its newest checkpoint") != std::string::npos;
  }
  CHECK(requeued);
  CHECK(ResumedFrom(resumed) >= 4);
  CHECK_FALSE(resumed.progress().devices(0).shared_executor());
  // Its rank 0 says where it resumed: a checkpoint the hosted run wrote (one rank).
  CHECK(PollUntil([&] {
    return cluster.RunCli({"logs", bg}, &out, &err) == 0 &&
           out.find("written by 1 rank(s)") != std::string::npos;
  }));
  // And it goes on checkpointing past where it resumed.
  const int64_t from = ResumedFrom(resumed);
  CHECK(PollUntil([&] {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("iter-", 0) == 0 && name.find('.') == std::string::npos &&
          std::stoll(name.substr(5)) > from &&
          std::filesystem::exists(entry.path() / "MANIFEST.json", error)) {
        return true;
      }
    }
    return false;
  }));
  REQUIRE(cluster.RunCli({"cancel", bg}, &out, &err) == 0);
  CHECK(cluster.WaitForTerminal(bg).state() == v1::JOB_STATE_CANCELLED);
  CHECK(PollUntil([&] { return cluster.NoTasksLeft(); }));
}

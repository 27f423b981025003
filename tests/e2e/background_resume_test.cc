// A BG job's checkpoints end to end: a BG job with periodic checkpoints runs inside a FG rank's
// executor; the FG job ends first; the BG job is requeued, runs again as an executor of its own
// and resumes from the checkpoint its hosted run wrote, instead of iteration 0.
#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/e2e/local_cluster.h"

using namespace deepool;
using namespace deepool::e2e;
using nlohmann::json;

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
  json spec = BgJob("bg-kept", 60);
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

  v1::Job done = cluster.WaitForTerminal(bg);
  INFO(cli::ToJson(done));
  REQUIRE(done.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(done.progress().iteration() == 60);
  bool requeued = false, resumed = false;
  for (const auto& h : done.history()) {
    requeued |= h.reason().find("it resumes from its newest checkpoint") != std::string::npos;
    // "training again from iteration R": R >= 4, not 0.
    const std::string again = "training again from iteration ";
    const size_t at = h.reason().find(again);
    if (at != std::string::npos) resumed = std::stoll(h.reason().substr(at + again.size())) >= 4;
  }
  CHECK(requeued);
  CHECK(resumed);
  // The second run was an executor of its own, and its rank 0 says where it resumed: a
  // checkpoint the hosted run wrote (one rank).
  CHECK(done.progress().devices_size() == 1);
  CHECK_FALSE(done.progress().devices(0).shared_executor());
  REQUIRE(cluster.RunCli({"logs", bg}, &out, &err) == 0);
  CHECK(out.find("written by 1 rank(s)") != std::string::npos);
  CHECK(std::filesystem::exists(dir + "/iter-000000000060/MANIFEST.json"));
  CHECK(PollUntil([&] { return cluster.NoTasksLeft(); }));
}

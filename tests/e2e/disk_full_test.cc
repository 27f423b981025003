// The coordinator's disk fills up under a running cluster: its data directory is a small tmpfs
// and a file takes the rest. Writes must be refused with an error that says so, reads and
// running jobs must go on, nothing may be half written, and once space returns every
// acknowledged job must finish and survive a kill -9. Skipped where tmpfs cannot be mounted
// (it needs root).
#include <sys/mount.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "tests/e2e/local_cluster.h"

using namespace deepool;
using namespace deepool::e2e;
using nlohmann::json;

namespace {

// A tmpfs of `size` mounted on a new directory, unmounted when destroyed.
class SmallDisk {
 public:
  static std::unique_ptr<SmallDisk> Mount(const std::string& size, std::string* why_not) {
    std::string pattern = (fs::temp_directory_path() / "dp-disk-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      *why_not = std::string("mkdtemp: ") + std::strerror(errno);
      return nullptr;
    }
    if (mount("tmpfs", pattern.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      *why_not = std::string("cannot mount a tmpfs (needs root): ") + std::strerror(errno);
      fs::remove(pattern);
      return nullptr;
    }
    return std::unique_ptr<SmallDisk>(new SmallDisk(pattern));
  }
  ~SmallDisk() {
    umount2(path_.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove(path_, ec);
  }
  const std::string& path() const { return path_; }

  // Writes zeros to `filler` until the disk refuses (ENOSPC).
  void Fill() {
    std::ofstream out(filler(), std::ios::binary);
    const std::string chunk(4096, '\0');
    while (out.write(chunk.data(), chunk.size()) && out.flush()) {
    }
  }
  void Free() { fs::remove(filler()); }

 private:
  explicit SmallDisk(std::string path) : path_(std::move(path)) {}
  std::string filler() const { return path_ + "/filler"; }
  std::string path_;
};

}  // namespace

TEST_CASE("the coordinator's disk full: writes refused saying so, nothing lost once space returns",
          "[e2e]") {
  std::string why_not;
  auto disk = SmallDisk::Mount("8m", &why_not);
  if (!disk) {
    WARN("skipped: " << why_not);
    return;
  }
  ClusterOptions options;
  options.workers = 1;
  options.devices_per_worker = 1;
  options.coordinator_data_dir = disk->path() + "/coordinator";
  LocalCluster cluster(options);

  std::map<std::string, std::string> acknowledged;  // id -> name
  std::string id;
  REQUIRE(cluster.Submit(BgJob("before", 2), &id).ok());
  acknowledged[id] = "before";
  REQUIRE(cluster.WaitForTerminal(id).state() == v1::JOB_STATE_SUCCEEDED);

  disk->Fill();
  // A write may still fit in pages SQLite holds already; the disk refuses one soon.
  grpc::Status refused;
  for (int i = 0; i < 200 && refused.ok(); ++i) {
    const std::string name = "during-" + std::to_string(i);
    refused = cluster.Submit(BgJob(name, 2), &id);
    if (refused.ok()) acknowledged[id] = name;
  }
  INFO(refused.error_message());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(refused.error_message(), Catch::Contains("disk is full"));

  // The CLI says so too, and reads still work.
  const std::string spec_path = cluster.dir() + "/spec.json";
  std::ofstream(spec_path) << BgJob("cli-during", 2).dump();
  std::string out, err;
  CHECK(cluster.RunCli({"submit", spec_path}, &out, &err) == cli::kExitFailure);
  CHECK_THAT(err, Catch::Contains("disk is full"));
  out.clear();
  err.clear();
  CHECK(cluster.RunCli({"status"}, &out, &err) == 0);
  CHECK_THAT(out, Catch::Contains("before"));

  // Space returns: every acknowledged job finishes, a new one runs.
  disk->Free();
  REQUIRE(cluster.Submit(BgJob("after", 2), &id).ok());
  acknowledged[id] = "after";
  for (const auto& [job_id, name] : acknowledged) {
    INFO(name);
    CHECK(cluster.WaitForTerminal(job_id).state() == v1::JOB_STATE_SUCCEEDED);
  }

  // Killed and restarted on that disk, the coordinator loads every job as it was: its store was
  // never left half written.
  cluster.KillCoordinator();
  cluster.RestartCoordinator();
  for (const auto& [job_id, name] : acknowledged) {
    auto job = cluster.GetJob(job_id);
    REQUIRE(job);
    CHECK(job->spec().name() == name);
    CHECK(job->state() == v1::JOB_STATE_SUCCEEDED);
  }
  v1::ListJobsResponse all;
  auto context = cli::UnaryContext(std::chrono::seconds(5));
  REQUIRE(cluster.stub().ListJobs(context.get(), v1::ListJobsRequest(), &all).ok());
  CHECK(static_cast<size_t>(all.jobs_size()) == acknowledged.size());
}

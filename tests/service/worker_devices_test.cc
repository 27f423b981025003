// --devices parsing against a fake machine description.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "tests/temp_dir.h"
#include "worker/daemon/devices.h"

using namespace deepool::worker::daemon;
using deepool::StatusCode;

namespace {

class FakeDeviceProbe : public DeviceProbe {
 public:
  explicit FakeDeviceProbe(std::vector<GpuInfo> gpus) : gpus_(std::move(gpus)) {}
  std::vector<GpuInfo> Gpus() const override { return gpus_; }
  int64_t HostMemoryBytes() const override { return 64LL << 30; }

 private:
  std::vector<GpuInfo> gpus_;
};

}  // namespace

TEST_CASE("cpu:N gives N CPU devices sharing host memory", "[worker][devices]") {
  FakeDeviceProbe probe({});
  auto devices = ParseDevices("cpu:4", probe);
  REQUIRE(devices.ok());
  REQUIRE(devices->size() == 4);
  CHECK((*devices)[3].name == "cpu:3");
  CHECK((*devices)[3].type == "cpu");
  CHECK((*devices)[3].ExecutorDevice() == "cpu");
  CHECK((*devices)[0].memory_bytes == (16LL << 30));
  for (const char* bad : {"cpu:0", "cpu:", "cpu:x", "cpu:999", "cpu", "tpu:1", "", "cpu:-1"}) {
    INFO(bad);
    auto parsed = ParseDevices(bad, probe);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == StatusCode::kInvalidArgument);
    CHECK(parsed.status().message().find("--devices") != std::string::npos);
  }
}

TEST_CASE("cuda:all with no GPU is a clear error", "[worker][devices]") {
  FakeDeviceProbe probe({});
  auto devices = ParseDevices("cuda:all", probe);
  REQUIRE_FALSE(devices.ok());
  CHECK(devices.status().code() == StatusCode::kFailedPrecondition);
  CHECK(devices.status().message().find("no GPU") != std::string::npos);
}

TEST_CASE("cuda:all and cuda:I,J describe the GPUs", "[worker][devices]") {
  FakeDeviceProbe probe({{0, "NVIDIA A100-SXM4-80GB", 80LL << 30},
                         {1, "NVIDIA A100-SXM4-80GB", 80LL << 30},
                         {2, "NVIDIA H100 80GB HBM3", 80LL << 30}});
  auto all = ParseDevices("cuda:all", probe);
  REQUIRE(all.ok());
  REQUIRE(all->size() == 3);
  CHECK((*all)[0].type == "a100");
  CHECK((*all)[2].type == "h100");
  CHECK((*all)[2].ExecutorDevice() == "cuda:2");

  auto some = ParseDevices("cuda:2,0", probe);
  REQUIRE(some.ok());
  REQUIRE(some->size() == 2);
  CHECK((*some)[0].name == "cuda:2");
  CHECK((*some)[1].name == "cuda:0");

  CHECK(ParseDevices("cuda:5", probe).status().code() == StatusCode::kFailedPrecondition);
  CHECK(ParseDevices("cuda:0,0", probe).status().code() == StatusCode::kInvalidArgument);
  CHECK(ParseDevices("cuda:0,", probe).ok());  // a trailing comma is harmless
  CHECK(ParseDevices("cuda:a", probe).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("CUDA_VISIBLE_DEVICES decides which GPUs are offered, numbered as CUDA numbers them",
          "[worker][devices]") {
  const std::vector<GpuInfo> driver = {{0, "NVIDIA A100-SXM4-80GB", 80LL << 30},
                                       {1, "NVIDIA A100-SXM4-80GB", 80LL << 30},
                                       {2, "NVIDIA H100 80GB HBM3", 80LL << 30},
                                       {3, "NVIDIA H100 80GB HBM3", 80LL << 30}};
  CHECK(GpusVisibleToCuda(driver, nullptr)->size() == 4);
  // The executors see GPU 3 as cuda:0 and GPU 2 as cuda:1: so does the worker.
  deepool::StatusOr<std::vector<GpuInfo>> visible = GpusVisibleToCuda(driver, "3, 2");
  REQUIRE(visible.ok());
  REQUIRE(visible->size() == 2);
  CHECK((*visible)[0].index == 0);
  CHECK((*visible)[0].model == "NVIDIA H100 80GB HBM3");
  CHECK((*visible)[1].index == 1);
  CHECK(GpusVisibleToCuda(driver, "")->empty());
  CHECK_THAT(GpusVisibleToCuda(driver, "GPU-5d1c0ab2").status().message(),
             Catch::Contains("UUIDs and MIG instances are not supported"));
  CHECK_THAT(GpusVisibleToCuda(driver, "0,7").status().message(),
             Catch::Contains("GPU 7 is not among the 4"));
}

TEST_CASE("device types come from GPU model names", "[worker][devices]") {
  CHECK(DeviceTypeForModel("Tesla V100-SXM2-32GB") == "v100");
  CHECK(DeviceTypeForModel("NVIDIA A100-PCIE-40GB") == "a100");
  CHECK(DeviceTypeForModel("NVIDIA A10") == "a10");
  CHECK(DeviceTypeForModel("NVIDIA GeForce RTX 4090") == "nvidia-geforce-rtx-4090");
}

TEST_CASE("CPU devices divide the host's cores between their executors", "[worker][devices]") {
  FakeDeviceProbe probe({GpuInfo{0, "NVIDIA H100 80GB HBM3", 80LL << 30}});
  auto cpus = ParseDevices("cpu:4", probe);
  REQUIRE(cpus.ok());
  CHECK(CpuThreadsPerDevice(*cpus, 16) == 4);
  CHECK(CpuThreadsPerDevice(*cpus, 6) == 1);
  CHECK(CpuThreadsPerDevice(*cpus, 2) == 1);  // never 0 threads
  auto gpus = ParseDevices("cuda:all", probe);
  REQUIRE(gpus.ok());
  CHECK(CpuThreadsPerDevice(*gpus, 16) == 0);  // GPU executors keep libtorch's default
}

// The system probe asks nvidia-smi (found on PATH) for the GPUs: a fake one on a PATH of its own
// prints what a node with two H200s prints.
TEST_CASE("the system probe reads nvidia-smi's CSV, and does without a failing one",
          "[worker][devices]") {
  namespace fs = std::filesystem;
  deepool::testing::TempDir dir;
  const fs::path smi = dir.File("nvidia-smi");
  struct PathFirst {  // PATH with `dir` first, restored however the test ends
    explicit PathFirst(const fs::path& dir) {
      const char* old = std::getenv("PATH");
      saved = old ? old : "";
      setenv("PATH", (dir.string() + ":" + saved).c_str(), 1);
    }
    ~PathFirst() { setenv("PATH", saved.c_str(), 1); }
    std::string saved;
  } path_first(dir.path());
  SECTION("two GPUs, asked for index, name and memory") {
    std::ofstream(smi) << "#!/bin/sh\n"
                          "[ \"$1\" = --query-gpu=index,name,memory.total ] || exit 9\n"
                          "echo '0, NVIDIA H200, 143771'\n"
                          "echo '1, NVIDIA H200, 143771'\n";
    fs::permissions(smi, fs::perms::owner_all);
    std::vector<GpuInfo> gpus = SystemDeviceProbe().Gpus();
    REQUIRE(gpus.size() == 2);
    CHECK(gpus[1].index == 1);
    CHECK(gpus[1].model == "NVIDIA H200");
    CHECK(gpus[1].memory_bytes == 143771LL * 1024 * 1024);
  }
  SECTION("one that fails lists nothing from it") {
    std::ofstream(smi) << "#!/bin/sh\necho '0, NVIDIA H200, 143771'\nexit 6\n";
    fs::permissions(smi, fs::perms::owner_all);
    // (A machine with a driver still lists its GPUs from /proc.)
    if (!fs::exists("/proc/driver/nvidia/gpus")) CHECK(SystemDeviceProbe().Gpus().empty());
  }
}

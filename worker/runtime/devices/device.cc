#include "worker/runtime/devices/device.h"

#include <sys/resource.h>

#include <charconv>
#include <fstream>

namespace deepool::worker {
namespace {

// VmHWM of /proc/self/status in bytes, or getrusage's ru_maxrss (KiB on Linux) without it.
int64_t ProcessPeakResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  constexpr std::string_view kKey = "VmHWM:";
  while (std::getline(status, line)) {
    if (line.compare(0, kKey.size(), kKey) != 0) continue;
    int64_t kib = 0;
    const char* first = line.data() + kKey.size();
    while (*first == ' ' || *first == '\t') ++first;
    if (std::from_chars(first, line.data() + line.size(), kib).ec == std::errc()) {
      return kib * 1024;
    }
  }
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) return static_cast<int64_t>(usage.ru_maxrss) * 1024;
  return 0;
}

class CpuContext final : public DeviceContext {
 public:
  torch::Device device() const override { return torch::kCPU; }
  void Synchronize() override {}
};

}  // namespace

std::string DeviceSpec::ToString() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }

torch::Device DeviceSpec::torch_device() const {
  return cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index))
              : torch::Device(torch::kCPU);
}

StatusOr<DeviceSpec> ParseDevice(std::string_view text) {
  if (text == "cpu") return DeviceSpec{};
  if (text == "cuda") return DeviceSpec{true, 0};
  constexpr std::string_view kPrefix = "cuda:";
  if (text.substr(0, kPrefix.size()) == kPrefix) {
    std::string_view digits = text.substr(kPrefix.size());
    int index = -1;
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (error == std::errc() && end == digits.data() + digits.size() && index >= 0) {
      return DeviceSpec{true, index};
    }
  }
  return InvalidArgumentError("device \"" + std::string(text) +
                              "\" is not one of cpu, cuda, cuda:K");
}

StatusOr<std::unique_ptr<DeviceContext>> MakeDeviceContext(const DeviceSpec& spec) {
  if (!spec.cuda) return std::unique_ptr<DeviceContext>(new CpuContext());
  return internal::MakeCudaContext(spec.index);
}

int64_t PeakMemoryBytes(const torch::Device& device) {
  if (device.is_cuda()) return internal::CudaPeakAllocatedBytes(device.index());
  return ProcessPeakResidentBytes();
}

}  // namespace deepool::worker

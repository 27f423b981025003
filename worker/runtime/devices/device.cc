#include "worker/runtime/devices/device.h"

#include <charconv>

namespace deepool::worker {
namespace {

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

}  // namespace deepool::worker

#include "worker/runtime/devices/device_description.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <fstream>
#include <sstream>

#include "worker/runtime/communication/communicator_nccl.h"

namespace deepool::worker {
namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Trim(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return "";
  const size_t last = text.find_last_not_of(" \t\r");
  return std::string(text.substr(first, last - first + 1));
}

}  // namespace

std::string CpuModelName(std::string_view cpuinfo) {
  size_t at = 0;
  while (at < cpuinfo.size()) {
    const size_t end = std::min(cpuinfo.find('\n', at), cpuinfo.size());
    const std::string_view line = cpuinfo.substr(at, end - at);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos && Trim(line.substr(0, colon)) == "model name") {
      return Trim(line.substr(colon + 1));
    }
    at = end + 1;
  }
  return "";
}

std::string NvidiaDriverVersion(std::string_view proc_version) {
  const std::string_view key = "Kernel Module";
  const size_t at = proc_version.find(key);
  if (at == std::string_view::npos) return "";
  std::istringstream rest{std::string(proc_version.substr(at + key.size()))};
  std::string version;
  rest >> version;
  return version;
}

planner::ProfileEnvironment DescribeDevice(const c10::Device& device,
                                           const std::string& deepool_commit) {
  planner::ProfileEnvironment out;
  out.torch = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
              "." + std::to_string(TORCH_VERSION_PATCH);
  out.deepool = deepool_commit;
  if (device.is_cuda()) {
    const internal::CudaDescription cuda =
        internal::DescribeCudaDevice(device.has_index() ? device.index() : 0);
    out.device_model = cuda.device_name;
    out.cuda = cuda.runtime_version;
    out.nccl = LoadedNcclVersion();
    out.driver = NvidiaDriverVersion(ReadFile("/proc/driver/nvidia/version"));
  } else {
    out.device_model = CpuModelName(ReadFile("/proc/cpuinfo"));
    out.threads = at::get_num_threads();
  }
  return out;
}

}  // namespace deepool::worker

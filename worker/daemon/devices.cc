#include "worker/daemon/devices.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "common/logging.h"
#include "common/subprocess.h"

namespace deepool::worker::daemon {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  return s.substr(start);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool ParseInt(std::string_view text, int64_t& out) {
  if (text.empty() || text.size() > 9) return false;
  int64_t value = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    value = value * 10 + (c - '0');
  }
  out = value;
  return true;
}

// nvidia-smi's stdout, or "" when it is missing, fails or hangs (a wedged driver can hold it
// for minutes: the worker starts without GPUs rather than not at all).
std::string QueryNvidiaSmi(const std::vector<std::string>& args) {
  ProcessSpec spec;
  spec.executable = "nvidia-smi";
  spec.args = args;
  std::mutex mu;
  std::string out;
  ChildCallbacks callbacks;
  callbacks.on_stdout_line = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    out += line + "\n";
  };
  callbacks.on_stderr_line = [](const std::string&) {};
  StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(spec, callbacks);
  if (!child.ok()) return "";
  std::optional<ProcessExit> exit = (*child)->Wait(std::chrono::seconds(30));
  if (!exit) {
    (*child)->Terminate(std::chrono::seconds(1));
    return "";
  }
  std::lock_guard<std::mutex> lock(mu);
  return exit->ok() ? out : "";
}

// Without nvidia-smi the driver still lists its GPUs under /proc, in PCI bus order.
std::vector<GpuInfo> ProcDriverGpus() {
  std::vector<GpuInfo> gpus;
  std::error_code ec;
  std::vector<std::string> entries;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    entries.push_back(entry.path().string());
  }
  std::sort(entries.begin(), entries.end());
  for (size_t i = 0; i < entries.size(); ++i) {
    std::string model = "nvidia-gpu";
    std::ifstream info(entries[i] + "/information");
    std::string l;
    while (std::getline(info, l)) {
      if (l.rfind("Model:", 0) == 0) model = Trim(l.substr(6));
    }
    gpus.push_back({static_cast<int>(i), model, 0});
  }
  return gpus;
}

}  // namespace

std::vector<GpuInfo> SystemDeviceProbe::Gpus() const {
  std::vector<GpuInfo> gpus;
  std::string csv =
      QueryNvidiaSmi({"--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"});
  std::istringstream lines(csv);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string index, name, memory_mib;
    if (!std::getline(fields, index, ',') || !std::getline(fields, name, ',') ||
        !std::getline(fields, memory_mib)) {
      continue;
    }
    int64_t idx = 0, mib = 0;
    if (!ParseInt(Trim(index), idx)) continue;
    ParseInt(Trim(memory_mib), mib);
    gpus.push_back({static_cast<int>(idx), Trim(name), mib * 1024 * 1024});
  }
  if (gpus.empty()) gpus = ProcDriverGpus();
  StatusOr<std::vector<GpuInfo>> visible =
      GpusVisibleToCuda(std::move(gpus), std::getenv("CUDA_VISIBLE_DEVICES"));
  if (visible.ok()) return *visible;
  DP_LOG_ERROR("{}: offering no GPU", visible.status().message());
  return {};
}

StatusOr<std::vector<GpuInfo>> GpusVisibleToCuda(std::vector<GpuInfo> gpus, const char* visible) {
  if (visible == nullptr) return gpus;
  std::vector<GpuInfo> listed;
  std::istringstream entries{std::string(visible)};
  std::string entry;
  while (std::getline(entries, entry, ',')) {
    entry = Trim(entry);
    int64_t index = 0;
    if (!ParseInt(entry, index)) {
      return InvalidArgumentError(
          "CUDA_VISIBLE_DEVICES=" + std::string(visible) + ": '" + entry +
          "' is not a GPU index (UUIDs and MIG instances are not supported); give the indices "
          "nvidia-smi lists, or unset it and choose GPUs with --devices cuda:I,J");
    }
    auto found = std::find_if(gpus.begin(), gpus.end(),
                              [&](const GpuInfo& gpu) { return gpu.index == index; });
    if (found == gpus.end()) {
      return InvalidArgumentError("CUDA_VISIBLE_DEVICES=" + std::string(visible) + ": GPU " +
                                  entry + " is not among the " + std::to_string(gpus.size()) +
                                  " nvidia-smi lists");
    }
    GpuInfo renumbered = *found;
    renumbered.index = static_cast<int>(listed.size());  // CUDA's ordinal for it
    listed.push_back(renumbered);
  }
  return listed;
}

int64_t SystemDeviceProbe::HostMemoryBytes() const {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024;
  }
  return 0;
}

std::string DeviceTypeForModel(std::string_view model) {
  std::string lower = Lower(model);
  for (const char* known : {"a100", "h100", "h200", "v100", "a10", "l4", "t4"}) {
    // Whole-token match: "a100" inside "nvidia a100-sxm4-80gb".
    size_t at = lower.find(known);
    while (at != std::string::npos) {
      size_t end = at + std::string_view(known).size();
      bool starts = at == 0 || !std::isalnum(static_cast<unsigned char>(lower[at - 1]));
      bool ends = end == lower.size() || !std::isalnum(static_cast<unsigned char>(lower[end]));
      if (starts && ends) return known;
      at = lower.find(known, at + 1);
    }
  }
  std::string out;
  for (char c : lower) out.push_back(c == ' ' ? '-' : c);
  return out.empty() ? "unknown" : out;
}

StatusOr<std::vector<LocalDevice>> ParseDevices(std::string_view spec, const DeviceProbe& probe) {
  const std::string usage =
      "--devices must be cuda:all, cuda:I[,J...] or cpu:N, got '" + std::string(spec) + "'";
  size_t colon = spec.find(':');
  if (colon == std::string_view::npos) return InvalidArgumentError(usage);
  std::string kind = Lower(spec.substr(0, colon));
  std::string_view rest = spec.substr(colon + 1);
  std::vector<LocalDevice> devices;
  if (kind == "cpu") {
    int64_t count = 0;
    if (!ParseInt(rest, count) || count < 1 || count > 256) return InvalidArgumentError(usage);
    int64_t memory = probe.HostMemoryBytes() / count;
    for (int i = 0; i < count; ++i) {
      devices.push_back({"cpu:" + std::to_string(i), "cpu", i, "cpu", "cpu", memory});
    }
    return devices;
  }
  if (kind != "cuda") return InvalidArgumentError(usage);
  std::vector<GpuInfo> gpus = probe.Gpus();
  auto describe = [](const GpuInfo& gpu) {
    return LocalDevice{"cuda:" + std::to_string(gpu.index), "cuda",          gpu.index, gpu.model,
                       DeviceTypeForModel(gpu.model),       gpu.memory_bytes};
  };
  if (rest == "all") {
    if (gpus.empty()) {
      return FailedPreconditionError(
          "--devices cuda:all: no GPU is visible on this machine (nvidia-smi found none); use "
          "--devices cpu:N to offer CPU devices instead");
    }
    for (const auto& gpu : gpus) devices.push_back(describe(gpu));
    return devices;
  }
  std::stringstream list{std::string(rest)};
  std::string item;
  while (std::getline(list, item, ',')) {
    int64_t index = 0;
    if (!ParseInt(Trim(item), index)) return InvalidArgumentError(usage);
    auto gpu =
        std::find_if(gpus.begin(), gpus.end(), [&](const GpuInfo& g) { return g.index == index; });
    if (gpu == gpus.end()) {
      return FailedPreconditionError("--devices: GPU cuda:" + std::to_string(index) +
                                     " does not exist on this machine (" +
                                     std::to_string(gpus.size()) + " visible)");
    }
    for (const auto& d : devices) {
      if (d.index == index) {
        return InvalidArgumentError("--devices: cuda:" + std::to_string(index) + " listed twice");
      }
    }
    devices.push_back(describe(*gpu));
  }
  if (devices.empty()) return InvalidArgumentError(usage);
  return devices;
}

int CpuThreadsPerDevice(const std::vector<LocalDevice>& devices, int host_cores) {
  int cpu_devices = 0;
  for (const LocalDevice& device : devices) cpu_devices += device.kind == "cpu" ? 1 : 0;
  if (cpu_devices == 0) return 0;
  return std::max(1, host_cores / cpu_devices);
}

}  // namespace deepool::worker::daemon

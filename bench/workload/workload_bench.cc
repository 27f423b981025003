// Times the trace generator and the replay file: generate N jobs (GenerateWorkload), write them
// (WriteWorkload and the file), read them back (ParseWorkload), each repeated and reported as
// the median wall time and the process's CPU time per repetition.
//
//   deepool-bench-workload [--jobs 10000] [--repeats 20] [--load 0.8] [--devices 4096]
//
// Output is Markdown for docs/benchmarks.md.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "simulator/workload_file.h"
#include "simulator/workload_generator.h"

namespace deepool::simulator {
namespace {

struct Timings {
  std::vector<double> generate_ms, write_ms, file_ms, parse_ms;
};

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

int Run(const WorkloadOptions& options, int repeats) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "deepool-bench-workload.jsonl";
  Timings timings;
  size_t bytes = 0;
  const double cpu_start = bench::ProcessCpuMs();
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    Workload workload = bench::Check(GenerateWorkload(options));
    timings.generate_ms.push_back(MillisSince(start));

    start = std::chrono::steady_clock::now();
    const std::string text = WriteWorkload(workload);
    timings.write_ms.push_back(MillisSince(start));

    start = std::chrono::steady_clock::now();
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << text;
      out.close();
      if (!out) bench::Check(InternalError("cannot write " + path.string()));
    }
    timings.file_ms.push_back(MillisSince(start));
    bytes = text.size();

    start = std::chrono::steady_clock::now();
    const Workload read = bench::Check(ParseWorkload(text));
    timings.parse_ms.push_back(MillisSince(start));
    if (read.jobs.size() != workload.jobs.size()) bench::Check(InternalError("lost jobs"));
  }
  const double cpu_per_repeat = (bench::ProcessCpuMs() - cpu_start) / repeats;
  std::filesystem::remove(path);

  std::printf("%lld jobs (load %.2f on %d devices), %zu bytes, median of %d repetitions:\n\n",
              static_cast<long long>(options.jobs), options.load, options.devices, bytes, repeats);
  std::printf("| step | wall ms |\n|---|---:|\n");
  std::printf("| generate (GenerateWorkload) | %.2f |\n", bench::Median(timings.generate_ms));
  std::printf("| serialise (WriteWorkload) | %.2f |\n", bench::Median(timings.write_ms));
  std::printf("| write the file | %.2f |\n", bench::Median(timings.file_ms));
  std::printf("| read back (ParseWorkload) | %.2f |\n", bench::Median(timings.parse_ms));
  std::printf("\nCPU time per repetition (all four steps): %.2f ms\n", cpu_per_repeat);
  return 0;
}

}  // namespace
}  // namespace deepool::simulator

int main(int argc, char** argv) {
  CLI::App app("Times the workload trace generator and the replay file");
  deepool::simulator::WorkloadOptions options;
  options.jobs = 10000;
  int repeats = 20;
  app.add_option("--jobs", options.jobs, "Jobs per trace")->capture_default_str();
  app.add_option("--repeats", repeats, "Repetitions")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--load", options.load, "Offered load")->capture_default_str();
  app.add_option("--devices", options.devices, "Pool capacity")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return deepool::simulator::Run(options, repeats);
}

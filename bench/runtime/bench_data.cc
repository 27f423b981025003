// Benchmark: how long the synthetic data source takes to make a global batch, on one CPU thread
// (the prefetch thread makes each batch while the previous one trains, so a batch that takes
// longer than an iteration bounds the training speed). Prints the time to make the source (it
// draws its dataset then, once per run) and the median and the slowest of `batches` batches per
// case, in ms.
//   build-*/bin/deepool-bench-data [batches]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/bench_util.h"
#include "worker/runtime/data/data.h"

namespace dw = deepool::worker;
using deepool::bench::Check;
using deepool::bench::Median;

int main(int argc, char** argv) {
  int batches = 10;
  CLI::App app{"Synthetic data: ms to make one global batch, on one CPU thread"};
  app.add_option("batches", batches, "batches timed per case")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  struct Case {
    deepool::planner::Shape input;
    int64_t batch;
  };
  std::printf(
      "| input | batch | source made in ms | median ms | slowest ms |\n|---|---|---|---|---|\n");
  for (const Case& c : {Case{{3, 32, 32}, 128}, Case{{3, 224, 224}, 32}, Case{{3, 299, 299}, 32},
                        Case{{784}, 256}}) {
    const auto made = std::chrono::steady_clock::now();
    auto data = dw::MakeSyntheticData(c.input, 1000, c.batch, 1);
    const double made_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - made).count();
    Check(data->GlobalBatch(0));  // warm-up: the allocator's first pages
    std::vector<double> ms;
    for (int i = 1; i <= batches; ++i) {
      const auto begin = std::chrono::steady_clock::now();
      Check(data->GlobalBatch(i));
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin)
              .count());
    }
    std::string shape;
    for (int64_t d : c.input) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    std::printf("| %s | %lld | %.1f | %.2f | %.2f |\n", shape.c_str(),
                static_cast<long long>(c.batch), made_ms, Median(ms),
                *std::max_element(ms.begin(), ms.end()));
  }
  return 0;
}

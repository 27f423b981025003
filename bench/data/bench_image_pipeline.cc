// Benchmark: images per second through an image_folder data source (read, decode the random
// resized crop, resize to 224, flip; uint8 rows, a rank's batch before the copy to the device,
// where ModelInputs normalises them) with T intra-op threads. Batches are made one after the
// other, iterations in order, with no prefetch, so the rate is the source's own. Prints one JSON
// line; bench/data/run.sh puts it beside torchvision's DataLoader.
//   build-*/bin/deepool-bench-image-pipeline ROOT [--threads T] [--batch B] [--batches N]
//       [--warmup W] [--side S] [--seed S]
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "bench/bench_util.h"
#include "worker/runtime/data/image_folder.h"

namespace dw = deepool::worker;
using deepool::bench::Check;

int main(int argc, char** argv) {
  std::string root;
  int threads = 1;
  int64_t batch = 64;
  int64_t batches = 8;
  int64_t warmup = 1;
  int64_t side = 224;
  uint64_t seed = 0;
  CLI::App app{"Images/s of the image_folder data source (training transforms)"};
  app.add_option("root", root, "an image folder (root/<class>/<image>)")->required();
  app.add_option("--threads", threads, "decoding threads")->check(CLI::Range(1, 1024));
  app.add_option("--batch", batch, "rows per batch")->check(CLI::Range(1, 1 << 16));
  app.add_option("--batches", batches, "batches timed")->check(CLI::Range(1, 1 << 20));
  app.add_option("--warmup", warmup, "batches before timing")->check(CLI::Range(0, 1 << 20));
  app.add_option("--side", side, "output side in pixels")->check(CLI::Range(8, 4096));
  app.add_option("--seed", seed, "shuffling and augmentation seed");
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(threads);
  auto data = Check(
      dw::OpenImageFolder(root, {3, side, side}, 1 << 20, batch, dw::ImageDataOptions{seed, 0}));
  for (int64_t i = 0; i < warmup; ++i) Check(data->GlobalBatch(i));
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = warmup; i < warmup + batches; ++i) Check(data->GlobalBatch(i));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "{\"images_per_s\": %.1f, \"threads\": %d, \"batch\": %lld, \"images\": %lld, "
      "\"seconds\": %.3f}\n",
      static_cast<double>(batch * batches) / seconds, threads, static_cast<long long>(batch),
      static_cast<long long>(batch * batches), seconds);
  return 0;
}

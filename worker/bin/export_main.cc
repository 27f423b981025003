// deepool-export: one model file from a periodic checkpoint (docs/runtime.md, "Exporting a
// checkpoint"): the ranks' parameters and buffers merged, the optimizer state left out, in the
// format torchvision loads.
//   deepool-export --checkpoint-dir DIR [--iteration K] -o model.pt
#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>

#include "common/logging.h"
#include "worker/runtime/checkpoints/checkpoint_dir.h"
#include "worker/runtime/checkpoints/periodic_checkpoints.h"

namespace {

deepool::StatusOr<deepool::worker::FoundCheckpoint> Choose(const std::string& dir,
                                                           std::optional<int64_t> iteration) {
  using deepool::worker::FoundCheckpoint;
  if (iteration) return deepool::worker::OpenCheckpoint(dir, *iteration);
  ASSIGN_OR_RETURN(std::optional<FoundCheckpoint> newest,
                   deepool::worker::FindLatestCheckpoint(dir));
  if (!newest) return deepool::NotFoundError("no whole checkpoint in " + dir);
  return *std::move(newest);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, output;
  std::optional<int64_t> iteration;
  CLI::App app{"deepool-export: write the model of a periodic checkpoint as one state_dict file"};
  app.add_option("--checkpoint-dir", dir, "a job's checkpoint.dir")->required();
  app.add_option("--iteration", iteration,
                 "the checkpoint after this many iterations (default: the newest whole one)");
  app.add_option("-o,--output", output, "the model file to write")->required();
  CLI11_PARSE(app, argc, argv);
  deepool::InitLogging("export", "warn");
  deepool::StatusOr<deepool::worker::FoundCheckpoint> found = Choose(dir, iteration);
  deepool::StatusOr<int> tensors = found.ok()
                                       ? deepool::worker::ExportCheckpointModel(*found, output)
                                       : deepool::StatusOr<int>(found.status());
  if (!tensors.ok()) {
    std::cerr << "deepool-export: " << tensors.status().ToString() << std::endl;
    return 1;
  }
  std::cout << "wrote " << output << ": " << *tensors << " tensors from " << found->path
            << " (iteration " << found->manifest.iteration << ", written by "
            << found->manifest.world_size << " rank(s))" << std::endl;
  return 0;
}

// Image data sets in files: torchvision's ImageFolder layout or a list file, decoded and
// transformed on the host as a rank needs its rows.
//   folder: root/<class>/.../<file>, classes sorted by name (label = index), files found
//           recursively below each class folder in sorted order, as torchvision's ImageFolder
//           makes them; only .jpg, .jpeg and .png files (any case) count.
//   list:   a text file of "path<TAB>label" lines (a relative path is taken from the list's
//           folder; blank lines and lines starting with '#' are skipped).
// Row r of iteration i is sample EpochOrder(N, B, seed).Sample(i, r) (epoch_order.h), put
// through the training transform (images::TrainImage: random resized crop and flip, drawn from
// (seed, i, r)) at the graph's input size; for evaluation (ImageDataOptions::use), sample
// (i*B + r) mod N through the evaluation transform. Rows are decoded in parallel on as many threads
// as libtorch's intra-op thread count (the rank's --threads on CPU devices; the node's cores on a
// CUDA device), the calling thread and helpers named "dp-decode". Inputs come back as uint8
// [n, 3, S, S];
// ModelInputs (data.h) normalises them on the device after the copy.
// A sample that cannot be read or decoded fails the batch with an error naming the file and its
// sample index, unless the source was opened with skip_bad > 0: then that sample's row takes the
// next readable sample of the same epoch, and the source fails once more than skip_bad distinct
// samples were bad (each rank counts the samples it reads).
// Threading: as DataSource.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/runtime/data/data.h"

namespace deepool::worker {

struct ImageFileList {
  std::vector<std::string> paths;
  std::vector<int64_t> labels;  // one per path
  int64_t num_classes = 0;      // folder: the class folders; list: 1 + the largest label
};

// A folder in the ImageFolder layout, or a list file. NOT_FOUND when `path` does not exist;
// INVALID_ARGUMENT naming the class folder that holds no image, a list line that does not parse,
// or a data set with no image at all.
StatusOr<ImageFileList> FindImageFiles(const std::string& path);

struct ImageDataOptions {
  uint64_t seed = 0;
  int64_t skip_bad = 0;
  // kEvaluation: row r of iteration i is sample (i*B + r) modulo N, in file order, through the
  // evaluation transform (images::EvalImage: resize and centre crop); no seed is drawn from.
  DataUse use = DataUse::kTraining;
};

// The graph's input must be [3, S, S]; the graph must predict at least the data set's classes.
StatusOr<std::unique_ptr<DataSource>> OpenImageFolder(const std::string& path,
                                                      const planner::Shape& input_shape,
                                                      int64_t num_classes, int64_t global_batch,
                                                      const ImageDataOptions& options);

}  // namespace deepool::worker

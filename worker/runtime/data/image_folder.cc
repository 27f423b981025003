#include "worker/runtime/data/image_folder.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "common/thread_name.h"
#include "worker/runtime/data/epoch_order.h"
#include "worker/runtime/data/images/image.h"
#include "worker/runtime/data/seed_mix.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;

bool IsImageFile(const fs::path& path) {
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == ".jpg" || extension == ".jpeg" || extension == ".png";
}

// Image files below `folder`, sorted (torchvision sorts the walk's folders and each one's files;
// sorting whole paths gives the same order within a folder tree walked depth first).
StatusOr<std::vector<std::string>> ImagesBelow(const fs::path& folder) {
  std::vector<std::string> files;
  std::error_code error;
  fs::recursive_directory_iterator it(folder, fs::directory_options::follow_directory_symlink,
                                      error);
  for (; !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (it->is_regular_file(error) && IsImageFile(it->path())) {
      files.push_back(it->path().string());
    }
  }
  if (error) return UnavailableError("cannot list " + folder.string() + ": " + error.message());
  std::sort(files.begin(), files.end());
  return files;
}

StatusOr<ImageFileList> ScanFolder(const fs::path& root) {
  std::vector<fs::path> classes;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root, error)) {
    if (entry.is_directory(error)) classes.push_back(entry.path());
  }
  if (error) return UnavailableError("cannot list " + root.string() + ": " + error.message());
  if (classes.empty()) {
    return InvalidArgumentError("image folder " + root.string() +
                                " has no class folders (expected root/<class>/<image>)");
  }
  std::sort(classes.begin(), classes.end());
  ImageFileList list;
  list.num_classes = static_cast<int64_t>(classes.size());
  for (size_t label = 0; label < classes.size(); ++label) {
    ASSIGN_OR_RETURN(std::vector<std::string> files, ImagesBelow(classes[label]));
    if (files.empty()) {
      return InvalidArgumentError("class folder " + classes[label].string() +
                                  " holds no .jpg, .jpeg or .png file");
    }
    for (std::string& file : files) {
      list.paths.push_back(std::move(file));
      list.labels.push_back(static_cast<int64_t>(label));
    }
  }
  return list;
}

StatusOr<ImageFileList> ReadList(const fs::path& list_file) {
  std::ifstream in(list_file);
  if (!in) return UnavailableError("cannot read " + list_file.string());
  ImageFileList list;
  const fs::path base = list_file.parent_path();
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.rfind('\t');
    const std::string where = list_file.string() + " line " + std::to_string(number);
    if (tab == std::string::npos || tab == 0) {
      return InvalidArgumentError(where + " is not \"path<TAB>label\"");
    }
    int64_t label = -1;
    try {
      size_t used = 0;
      label = std::stoll(line.substr(tab + 1), &used);
      if (used != line.size() - tab - 1) label = -1;
    } catch (const std::exception&) {
      label = -1;
    }
    if (label < 0) return InvalidArgumentError(where + ": the label must be an integer >= 0");
    const fs::path path(line.substr(0, tab));
    list.paths.push_back((path.is_absolute() ? path : base / path).string());
    list.labels.push_back(label);
    list.num_classes = std::max(list.num_classes, label + 1);
  }
  if (list.paths.empty()) return InvalidArgumentError(list_file.string() + " lists no image");
  return list;
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    const std::string reason = std::string("cannot open: ") + std::strerror(error);
    return error == ENOENT ? NotFoundError(reason) : UnavailableError(reason);
  }
  std::string bytes;
  char buffer[1 << 16];
  size_t read;
  while ((read = std::fread(buffer, 1, sizeof buffer, file)) > 0) bytes.append(buffer, read);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return UnavailableError("cannot read: " + std::string(std::strerror(errno)));
  return bytes;
}

class ImageFolderData final : public DataSource {
 public:
  ImageFolderData(ImageFileList files, int side, int64_t global_batch, ImageDataOptions options)
      : files_(std::move(files)),
        side_(side),
        global_batch_(global_batch),
        options_(options),
        order_(static_cast<int64_t>(files_.paths.size()), global_batch, options.seed) {}

  int64_t global_batch() const override { return global_batch_; }
  int64_t num_samples() const override { return order_.samples(); }

 protected:
  StatusOr<Batch> ReadSamples(int64_t iteration, int64_t first, int64_t last) override {
    const int64_t rows = last - first;
    const int64_t pixels = 3 * int64_t{side_} * side_;
    Batch batch;
    batch.first = first;
    batch.inputs = torch::empty({rows, 3, side_, side_}, torch::kUInt8);
    batch.labels = torch::empty({rows}, torch::kInt64);
    uint8_t* inputs = batch.inputs.data_ptr<uint8_t>();
    int64_t* labels = batch.labels.data_ptr<int64_t>();
    std::vector<EpochPosition> positions;
    std::vector<int64_t> samples;
    for (int64_t row = first; row < last; ++row) {
      positions.push_back(order_.Position(iteration, row));
      samples.push_back(SampleAt(positions.back()));
    }
    std::vector<Status> results(static_cast<size_t>(rows), Status::Ok());
    ForEachRow(rows, [&](int64_t i) {
      results[static_cast<size_t>(i)] =
          Decode(samples[static_cast<size_t>(i)], RowSeed(iteration, first + i),
                 inputs + i * pixels, labels + i);
    });
    // Bad samples (rare) are replaced one row at a time, in row order, on this thread.
    for (int64_t i = 0; i < rows; ++i) {
      if (results[static_cast<size_t>(i)].ok()) continue;
      RETURN_IF_ERROR(Replace(positions[static_cast<size_t>(i)], samples[static_cast<size_t>(i)],
                              results[static_cast<size_t>(i)], RowSeed(iteration, first + i),
                              inputs + i * pixels, labels + i));
    }
    return batch;
  }

 private:
  // Calls decode(i) for every i in [0, rows) on this thread and up to at::get_num_threads() - 1
  // threads named "dp-decode", each taking the next row as it finishes one (images differ in
  // size, so rows are not split up front). at::parallel_for would not do: its OpenMP loop is
  // compiled into the caller, which is built without OpenMP, and so runs on one thread.
  template <typename Decode>
  static void ForEachRow(int64_t rows, const Decode& decode) {
    std::atomic<int64_t> next{0};
    auto work = [&] {
      for (int64_t i = next++; i < rows; i = next++) decode(i);
    };
    const int64_t helpers = std::min<int64_t>(at::get_num_threads(), rows) - 1;
    std::vector<std::thread> threads;
    for (int64_t t = 0; t < helpers; ++t) {
      threads.emplace_back([&] {
        SetCurrentThreadName("dp-decode");
        work();
      });
    }
    work();
    for (std::thread& thread : threads) thread.join();
  }

  // Training shuffles each epoch; evaluation reads the files in order.
  int64_t SampleAt(EpochPosition position) {
    return options_.use == DataUse::kEvaluation ? position.offset : order_.Sample(position);
  }

  uint64_t RowSeed(int64_t iteration, int64_t row) const {
    return SeedMix(SeedMix(options_.seed, static_cast<uint64_t>(iteration)),
                   static_cast<uint64_t>(row));
  }

  // Sample `sample` through the training (or evaluation) transform into `out` (3 * side * side
  // bytes).
  Status Decode(int64_t sample, uint64_t seed, uint8_t* out, int64_t* label) const {
    const std::string& path = files_.paths[static_cast<size_t>(sample)];
    StatusOr<std::string> bytes = ReadFile(path);
    if (!bytes.ok()) return Named(bytes.status(), sample);
    std::mt19937_64 random(seed);
    StatusOr<images::Image> image = options_.use == DataUse::kEvaluation
                                        ? images::EvalImage(*bytes, side_)
                                        : images::TrainImage(*bytes, side_, random);
    if (!image.ok()) return Named(image.status(), sample);
    images::ToChannelsFirst(*image, out);
    *label = files_.labels[static_cast<size_t>(sample)];
    return Status::Ok();
  }

  Status Named(const Status& status, int64_t sample) const {
    return Status(status.code(), "image sample " + std::to_string(sample) + " (" +
                                     files_.paths[static_cast<size_t>(sample)] +
                                     "): " + status.message());
  }

  // The row whose sample failed with `failure` takes the next readable sample of its epoch, when
  // skip_bad allows another bad sample.
  Status Replace(EpochPosition position, int64_t sample, Status failure, uint64_t seed,
                 uint8_t* out, int64_t* label) {
    const int64_t count = order_.samples();
    for (int64_t tries = 0; tries < count; ++tries) {
      bad_.insert(sample);
      if (static_cast<int64_t>(bad_.size()) > options_.skip_bad) {
        if (options_.skip_bad == 0) return failure;
        return Status(failure.code(), failure.message() + " (" + std::to_string(bad_.size()) +
                                          " bad samples, more than data.skip_bad " +
                                          std::to_string(options_.skip_bad) + ")");
      }
      position.offset = (position.offset + 1) % count;
      sample = SampleAt(position);
      if (bad_.count(sample) != 0) continue;
      failure = Decode(sample, seed, out, label);
      if (failure.ok()) return failure;
    }
    return failure;
  }

  const ImageFileList files_;
  const int side_;
  const int64_t global_batch_;
  const ImageDataOptions options_;
  EpochOrder order_;
  std::set<int64_t> bad_;  // samples that could not be read or decoded
};

}  // namespace

StatusOr<ImageFileList> FindImageFiles(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) return ScanFolder(path);
  if (fs::is_regular_file(path, error)) return ReadList(path);
  return NotFoundError("image data path " + path + " is neither a folder nor a list file");
}

StatusOr<std::unique_ptr<DataSource>> OpenImageFolder(const std::string& path,
                                                      const planner::Shape& input_shape,
                                                      int64_t num_classes, int64_t global_batch,
                                                      const ImageDataOptions& options) {
  if (input_shape.size() != 3 || input_shape[0] != 3 || input_shape[1] != input_shape[2] ||
      input_shape[1] < 1 || input_shape[1] > 4096) {
    return InvalidArgumentError("image_folder needs a graph input of shape [3,S,S], not " +
                                planner::ShapeToString(input_shape));
  }
  if (options.skip_bad < 0) return InvalidArgumentError("data.skip_bad must be >= 0");
  ASSIGN_OR_RETURN(ImageFileList files, FindImageFiles(path));
  if (files.num_classes > num_classes) {
    return InvalidArgumentError(path + " has " + std::to_string(files.num_classes) +
                                " classes but the graph predicts " + std::to_string(num_classes));
  }
  return std::unique_ptr<DataSource>(new ImageFolderData(
      std::move(files), static_cast<int>(input_shape[1]), global_batch, options));
}

}  // namespace deepool::worker

#include "worker/runtime/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "worker/runtime/data/seed_mix.h"
#include "worker/runtime/data/token_windows.h"

namespace deepool::worker {
namespace {

// A read-only memory map of a whole file; unmapped when destroyed.
class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      const std::string reason = path + ": cannot open: " + std::strerror(error);
      return error == ENOENT ? NotFoundError(reason) : UnavailableError(reason);
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd);
      return InvalidArgumentError(path + " is not a regular file");
    }
    const size_t size = static_cast<size_t>(info.st_size);
    void* data = nullptr;
    if (size > 0) {
      data = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (data == MAP_FAILED) {
        const int error = errno;
        ::close(fd);
        return UnavailableError(path + ": cannot map: " + std::strerror(error));
      }
      // Windows are read at random offsets: no read-ahead beyond them.
      ::madvise(data, size, MADV_RANDOM);
    }
    ::close(fd);  // the mapping keeps the file
    return std::unique_ptr<MappedFile>(new MappedFile(static_cast<const uint8_t*>(data), size));
  }

  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const uint8_t* data_;
  size_t size_;
};

class TokenFileData final : public DataSource {
 public:
  TokenFileData(std::string path, std::unique_ptr<MappedFile> file, int64_t length,
                int64_t vocabulary, int64_t global_batch, TokenDataOptions options)
      : path_(std::move(path)),
        file_(std::move(file)),
        tokens_(static_cast<int64_t>(file_->size()) / options.token_bytes),
        length_(length),
        vocabulary_(vocabulary),
        global_batch_(global_batch),
        options_(options) {}

  int64_t global_batch() const override { return global_batch_; }
  int64_t num_samples() const override { return (tokens_ - 1) / length_; }

 protected:
  StatusOr<Batch> ReadSamples(int64_t iteration, int64_t first, int64_t last) override {
    return TokenWindowBatch(first, last, length_, [&](int64_t row, int64_t* tokens) -> Status {
      const int64_t start = WindowStart(iteration, row);
      for (int64_t t = 0; t <= length_; ++t) {
        ASSIGN_OR_RETURN(tokens[t], Token(start + t));
      }
      return Status::Ok();
    });
  }

 private:
  int64_t WindowStart(int64_t iteration, int64_t row) const {
    if (options_.use == DataUse::kEvaluation) {
      const int64_t windows = num_samples();
      const int64_t position = (iteration % windows) * (global_batch_ % windows) + row;
      return position % windows * length_;
    }
    std::mt19937_64 random(SeedMix(SeedMix(options_.seed, static_cast<uint64_t>(iteration)),
                                   static_cast<uint64_t>(row)));
    return static_cast<int64_t>(UniformBelow(random, static_cast<uint64_t>(tokens_ - length_)));
  }

  // Token `index` of the file (little-endian), checked against the vocabulary.
  StatusOr<int64_t> Token(int64_t index) const {
    const uint8_t* bytes = file_->data() + index * options_.token_bytes;
    int64_t token = bytes[0] | (int64_t{bytes[1]} << 8);
    if (options_.token_bytes == 4) token |= (int64_t{bytes[2]} << 16) | (int64_t{bytes[3]} << 24);
    if (token >= vocabulary_) {
      return InvalidArgumentError(path_ + ": token " + std::to_string(index) + " is " +
                                  std::to_string(token) + ", beyond the model's vocabulary of " +
                                  std::to_string(vocabulary_));
    }
    return token;
  }

  const std::string path_;
  const std::unique_ptr<MappedFile> file_;
  const int64_t tokens_;
  const int64_t length_;  // T
  const int64_t vocabulary_;
  const int64_t global_batch_;
  const TokenDataOptions options_;
};

}  // namespace

StatusOr<std::unique_ptr<DataSource>> OpenTokenFile(const std::string& path,
                                                    const planner::Shape& input_shape,
                                                    int64_t vocabulary, int64_t global_batch,
                                                    const TokenDataOptions& options) {
  if (input_shape.size() != 1 || input_shape[0] < 1) {
    return InvalidArgumentError("tokens needs a graph input of shape [T] (token ids), not " +
                                planner::ShapeToString(input_shape));
  }
  if (options.token_bytes != 2 && options.token_bytes != 4) {
    return InvalidArgumentError("token ids must be 2 or 4 bytes, not " +
                                std::to_string(options.token_bytes));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  const int64_t length = input_shape[0];
  const auto size = static_cast<int64_t>(file->size());
  if (size % options.token_bytes != 0) {
    return InvalidArgumentError(path + " has " + std::to_string(size) +
                                " bytes, not a whole number of " +
                                std::to_string(options.token_bytes) + "-byte token ids");
  }
  if (size / options.token_bytes < length + 1) {
    return InvalidArgumentError(path + " holds " + std::to_string(size / options.token_bytes) +
                                " tokens; a window of the model's " + std::to_string(length) +
                                " needs " + std::to_string(length + 1));
  }
  return std::unique_ptr<DataSource>(
      new TokenFileData(path, std::move(file), length, vocabulary, global_batch, options));
}

}  // namespace deepool::worker

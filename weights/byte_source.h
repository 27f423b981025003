// Random access to a file's bytes for the weights index: only the parts it needs are read (a
// zip's directory and pickle, a safetensors header), never the tensors. Reads past the end are
// DATA_LOSS naming the range, so callers need no bounds checks of their own before reading.
// Threading: one caller at a time.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

#include "common/status.h"

namespace deepool::weights {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Replaces *out with bytes [offset, offset + length).
  virtual Status Read(uint64_t offset, uint64_t length, std::string* out) = 0;
};

// Bytes held by the caller, who keeps them alive.
class MemoryByteSource final : public ByteSource {
 public:
  explicit MemoryByteSource(std::string_view bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  Status Read(uint64_t offset, uint64_t length, std::string* out) override;

 private:
  std::string_view bytes_;
};

class FileByteSource final : public ByteSource {
 public:
  // NOT_FOUND (no such file) or PERMISSION_DENIED (not readable) naming the path.
  static StatusOr<FileByteSource> Open(const std::string& path);
  uint64_t size() const override { return size_; }
  Status Read(uint64_t offset, uint64_t length, std::string* out) override;

 private:
  FileByteSource(std::ifstream in, uint64_t size) : in_(std::move(in)), size_(size) {}
  std::ifstream in_;
  uint64_t size_ = 0;
};

// OK when [offset, offset + length) lies within `size` bytes (without overflowing).
bool FitsIn(uint64_t offset, uint64_t length, uint64_t size);

}  // namespace deepool::weights

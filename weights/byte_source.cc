#include "weights/byte_source.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace deepool::weights {
namespace {

Status OutOfFile(uint64_t offset, uint64_t length, uint64_t size) {
  return DataLossError("bytes [" + std::to_string(offset) + ", +" + std::to_string(length) +
                       ") lie past the end of the " + std::to_string(size) + "-byte file");
}

}  // namespace

bool FitsIn(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

Status MemoryByteSource::Read(uint64_t offset, uint64_t length, std::string* out) {
  if (!FitsIn(offset, length, bytes_.size())) return OutOfFile(offset, length, bytes_.size());
  out->assign(bytes_.substr(offset, length));
  return Status::Ok();
}

StatusOr<FileByteSource> FileByteSource::Open(const std::string& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) {
    return NotFoundError("cannot open weights file '" + path + "': no such file");
  }
  if (!std::filesystem::is_regular_file(status)) {
    return InvalidArgumentError("weights file '" + path + "' is not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return PermissionDeniedError("cannot open weights file '" + path +
                                 "': " + std::strerror(errno));
  }
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error) return UnavailableError("cannot size weights file '" + path + "': " + error.message());
  return FileByteSource(std::move(in), static_cast<uint64_t>(size));
}

Status FileByteSource::Read(uint64_t offset, uint64_t length, std::string* out) {
  if (!FitsIn(offset, length, size_)) return OutOfFile(offset, length, size_);
  out->resize(length);
  in_.clear();
  in_.seekg(static_cast<std::streamoff>(offset));
  in_.read(out->data(), static_cast<std::streamsize>(length));
  if (static_cast<uint64_t>(in_.gcount()) != length) {
    return DataLossError("reading bytes [" + std::to_string(offset) + ", +" +
                         std::to_string(length) + ") failed (was the file changed?)");
  }
  return Status::Ok();
}

}  // namespace deepool::weights

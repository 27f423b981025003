#include "common/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace deepool {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

Status SyncDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return UnavailableError(Errno("cannot open the directory '" + path + "'"));
  const bool synced = ::fsync(fd) == 0;
  const std::string why = synced ? "" : Errno("cannot sync the directory '" + path + "'");
  ::close(fd);
  if (!synced) return DataLossError(why);
  return Status::Ok();
}

Status ReplaceFileDurably(const std::string& path, std::string_view bytes, mode_t mode) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return UnavailableError(Errno("cannot open '" + tmp + "' for writing"));
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  std::string why;
  if (written != bytes.size()) {
    why = Errno("writing '" + tmp + "' failed");
  } else if (::fsync(fd) != 0) {
    why = Errno("syncing '" + tmp + "' failed");
  }
  if (::close(fd) != 0 && why.empty()) why = Errno("closing '" + tmp + "' failed");
  if (!why.empty()) {
    std::remove(tmp.c_str());
    return DataLossError(why);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string failed = Errno("cannot rename '" + tmp + "' to '" + path + "'");
    std::remove(tmp.c_str());
    return UnavailableError(failed);
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  return SyncDirectory(dir.empty() ? "." : dir);
}

}  // namespace deepool

#include "security/secret_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace deepool::security {
namespace {

std::string OctalMode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

Status CheckMode(const struct stat& info, const std::string& path, const std::string& what,
                 FileTrust trust) {
  const mode_t forbidden = trust == FileTrust::kSecret ? (S_IRWXG | S_IRWXO) : (S_IWGRP | S_IWOTH);
  if ((info.st_mode & forbidden) == 0) return Status::Ok();
  const char* who = trust == FileTrust::kSecret ? "group or others may read or write it"
                                                : "group or others may write it";
  return FailedPreconditionError(what + " " + path + " has mode " + OctalMode(info.st_mode) + ": " +
                                 who + "; run `chmod 600 " + path + "`");
}

}  // namespace

Status CheckSecretFileMode(const std::string& path, const std::string& what, FileTrust trust) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    return NotFoundError(what + ": cannot read " + path + ": " + std::strerror(errno));
  }
  return CheckMode(info, path, what, trust);
}

StatusOr<std::string> ReadSecretFile(const std::string& path, const std::string& what,
                                     FileTrust trust) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFoundError(what + ": cannot read " + path + ": " + std::strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return NotFoundError(what + ": cannot read " + path + ": " + std::strerror(error));
  }
  if (Status mode = CheckMode(info, path, what, trust); !mode.ok()) {
    ::close(fd);
    return mode;
  }
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return NotFoundError(what + ": cannot read " + path + ": " + std::strerror(error));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace deepool::security

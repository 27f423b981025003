#include "common/open_files.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/limits.h"
#include "common/logging.h"

namespace deepool {
namespace {

std::string Describe(uint64_t value) {
  return value == RLIM_INFINITY ? "unlimited" : std::to_string(value);
}

}  // namespace

uint64_t WantedSoftLimit(const OpenFileLimit& now) {
  return std::max(now.soft, std::min(now.hard, kOpenFilesWanted));
}

Status CheckOpenFileLimit(const OpenFileLimit& limit, const std::string& who) {
  if (limit.soft >= kMinOpenFiles) return Status::Ok();
  return FailedPreconditionError(
      who + ": the open-file limit is " + Describe(limit.soft) + " (hard limit " +
      Describe(limit.hard) + "), below the " + std::to_string(kMinOpenFiles) +
      " it needs; raise it: LimitNOFILE=" + std::to_string(kOpenFilesWanted) +
      " in the systemd unit, `ulimit -n " + std::to_string(kOpenFilesWanted) +
      "` in a shell, or the hard limit in /etc/security/limits.conf");
}

int ConnectionBudget(uint64_t soft, int max_connections) {
  const uint64_t spare = soft > kReservedFds ? soft - kReservedFds : 1;
  return static_cast<int>(std::max<uint64_t>(
      1, std::min<uint64_t>(spare, static_cast<uint64_t>(std::max(max_connections, 1)))));
}

StatusOr<OpenFileLimit> ReadOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return InternalError(std::string("getrlimit(RLIMIT_NOFILE): ") + std::strerror(errno));
  }
  return OpenFileLimit{limit.rlim_cur, limit.rlim_max};
}

StatusOr<OpenFileLimit> RaiseOpenFileLimit(const std::string& who) {
  ASSIGN_OR_RETURN(OpenFileLimit limit, ReadOpenFileLimit());
  const uint64_t wanted = WantedSoftLimit(limit);
  if (wanted > limit.soft) {
    rlimit raised{wanted, limit.hard};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      DP_LOG_INFO("open-file limit raised from {} to {}", limit.soft, wanted);
      limit.soft = wanted;
    } else {
      DP_LOG_WARN("cannot raise the open-file limit from {} to {}: {}", limit.soft, wanted,
                  std::strerror(errno));
    }
  }
  RETURN_IF_ERROR(CheckOpenFileLimit(limit, who));
  if (limit.soft < kOpenFilesWanted) {
    DP_LOG_WARN(
        "the open-file limit is {} (hard limit {}), below the {} the systemd units set "
        "(LimitNOFILE): connections are bounded by it",
        limit.soft, Describe(limit.hard), kOpenFilesWanted);
  }
  return limit;
}

}  // namespace deepool

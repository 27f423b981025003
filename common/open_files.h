// The process's open-file limit (RLIMIT_NOFILE), checked once at a daemon's start. Every
// connection, file and child pipe takes a descriptor; a process out of them fails in whatever
// call comes next (gRPC 1.51's listener, for one, stops for good at its first EMFILE). The
// systemd units set LimitNOFILE to kOpenFilesWanted (common/limits.h); a daemon started from a
// shell (often 1,024 soft) raises its soft limit toward that, as far as the hard limit allows.
// Threading: ReadOpenFileLimit and RaiseOpenFileLimit read and set process-wide state (call them
// from main before threads start); the rest are pure.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace deepool {

struct OpenFileLimit {
  uint64_t soft = 0;
  uint64_t hard = 0;  // RLIM_INFINITY when unlimited
};

// The soft limit to ask for: kOpenFilesWanted as far as the hard limit allows; never lower than
// the soft limit already is.
uint64_t WantedSoftLimit(const OpenFileLimit& now);

// What a limit allows: FAILED_PRECONDITION below kMinOpenFiles, saying how to raise it; `who`
// names the daemon in the message.
Status CheckOpenFileLimit(const OpenFileLimit& limit, const std::string& who);

// Connections a server may hold open at once under `soft`: max_connections, within
// soft - kReservedFds; at least 1 (CheckOpenFileLimit keeps a daemon from getting that low).
int ConnectionBudget(uint64_t soft, int max_connections);

// The limit now in force.
StatusOr<OpenFileLimit> ReadOpenFileLimit();

// At a daemon's start: raises the soft limit to WantedSoftLimit, warns when it stays below
// kOpenFilesWanted, and fails as CheckOpenFileLimit does. Returns the limit now in force.
StatusOr<OpenFileLimit> RaiseOpenFileLimit(const std::string& who);

}  // namespace deepool

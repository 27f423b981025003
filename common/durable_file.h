// Files that a crash or a power loss leaves whole or as they were, never cut short.
// Threading: no state; callers writing the same path at once must not (the temporary's name is
// the path's plus ".tmp").
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/status.h"

namespace deepool {

// Replaces `path` with `bytes`: written to `path + ".tmp"` (created with `mode`, replacing one a
// crash left), synced, renamed over `path`, and the directory synced. A reader finds the old
// file or the whole new one, and once this returns OK the new one is on the disk (a power loss
// does not take it back). DATA_LOSS when writing or syncing failed (a full disk), UNAVAILABLE
// when the file cannot be created or renamed; the temporary is removed on every error.
Status ReplaceFileDurably(const std::string& path, std::string_view bytes, mode_t mode = 0644);

// Syncs the directory `path`: the names created, renamed or removed in it reach the disk.
Status SyncDirectory(const std::string& path);

}  // namespace deepool

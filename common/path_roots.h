// Where job specs' files may be: a list of root directories a checkpoint or data path must lie
// under, checked after the path is resolved (symlinks followed and ".." removed as far as the path
// exists), so neither "/shared/ckpt/../../etc" nor a symlink inside a root leads out of it. An
// empty list allows every path (the default; docs/operations.md, "Security").
// The check is made when a job is submitted (on the coordinator's view of the file system) and
// again before a worker starts its executors (on the worker's): a path whose parts change
// between the check and the executor's write is not caught.
// Threading: a value; Check reads the file system.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace deepool {

class PathRoots {
 public:
  PathRoots() = default;
  // Roots must be absolute; each is resolved once here. INVALID_ARGUMENT for a relative one.
  static StatusOr<PathRoots> Make(const std::vector<std::string>& roots);

  bool restricted() const { return !roots_.empty(); }
  const std::vector<std::string>& roots() const { return roots_; }
  // OK for an empty path, when unrestricted, or when the resolved path lies under a root;
  // PERMISSION_DENIED naming the field, the path it resolved to and the roots otherwise.
  Status Check(const std::string& field, const std::string& path) const;

 private:
  std::vector<std::string> roots_;  // resolved, without a trailing '/'
};

}  // namespace deepool

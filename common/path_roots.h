// Where job specs' files may be: a list of root directories a checkpoint or data path must lie
// under, checked after the path is resolved (symlinks followed and ".." removed as far as the path
// exists), so neither "/shared/ckpt/../../etc" nor a symlink inside a root leads out of it. An
// empty list allows every path (the default; docs/operations.md, "Security").
// A root may be per user: one whole component of it is "{user}" ("/shared/users/{user}"), which
// stands for the job's owner (the authenticated submitter), so each user's jobs read and write
// their own folder and nobody else's. A root without "{user}" is shared on purpose (datasets).
// The part before "{user}" is resolved once, when the roots are made; the owner's name and what
// follows it are appended as written, not resolved: the owner's folder need not exist yet, and a
// symlink there (or below it) that leads elsewhere makes paths through it resolve outside the
// root, so they are refused. A job without a usable owner name (empty, as on an open coordinator
// without authentication, or ".", "..", or one with a '/') is admitted by no per-user root.
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
  // Roots must be absolute, and "{user}", if there, a whole component given once; each is
  // resolved here (up to "{user}"). INVALID_ARGUMENT otherwise.
  static StatusOr<PathRoots> Make(const std::vector<std::string>& roots);

  bool restricted() const { return !roots_.empty(); }
  // OK for an empty path, when unrestricted, or when the resolved path lies under a root, with
  // "{user}" standing for `user`; PERMISSION_DENIED naming the field, the path it resolved to
  // and the roots that apply to `user` otherwise (and why a per-user root admits nothing for an
  // unusable name).
  Status Check(const std::string& field, const std::string& path, const std::string& user) const;

 private:
  struct Root {
    std::string base;  // resolved, without a trailing '/': the whole root, or up to {user}
    bool per_user = false;
    std::string below_user;  // per user: "" or "/a/b", the components after {user}
  };
  // The directory `root` stands for with `user` for {user}; "" when it admits nothing for them.
  static std::string Substitute(const Root& root, const std::string& user);

  std::vector<Root> roots_;
};

// OK when `user` can name a folder in a per-user root: not empty, not "." or "..", no '/' or
// NUL; INVALID_ARGUMENT saying why otherwise.
Status CheckPathUserName(const std::string& user);

}  // namespace deepool

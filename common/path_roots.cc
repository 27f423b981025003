#include "common/path_roots.h"

#include <filesystem>

namespace deepool {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUser = "{user}";

StatusOr<std::string> Resolve(const std::string& path) {
  std::error_code ec;
  fs::path resolved = fs::weakly_canonical(fs::path(path), ec);
  if (ec) return InvalidArgumentError("cannot resolve " + path + ": " + ec.message());
  std::string text = resolved.lexically_normal().string();
  while (text.size() > 1 && text.back() == '/') text.pop_back();
  return text;
}

bool IsUnder(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          path[root.size()] == '/');
}

// "/a" + "b" = "/a/b", "/" + "b" = "/b".
std::string Join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

}  // namespace

Status CheckPathUserName(const std::string& user) {
  if (user.empty()) return InvalidArgumentError("no user name");
  if (user == "." || user == "..") return InvalidArgumentError("'" + user + "' names no folder");
  if (user.find_first_of(std::string("/\0", 2)) != std::string::npos) {
    return InvalidArgumentError("a user name with '/' or NUL names no single folder");
  }
  return Status::Ok();
}

StatusOr<PathRoots> PathRoots::Make(const std::vector<std::string>& roots) {
  PathRoots out;
  for (const std::string& root : roots) {
    if (root.empty()) continue;
    if (root.front() != '/') {
      return InvalidArgumentError("path root " + root + ": must be an absolute path");
    }
    Root made;
    const size_t at = root.find(kUser);
    if (at == std::string::npos) {
      ASSIGN_OR_RETURN(made.base, Resolve(root));
    } else {
      const size_t end = at + std::string(kUser).size();
      if (root[at - 1] != '/' || (end < root.size() && root[end] != '/') ||
          root.find(kUser, end) != std::string::npos) {
        return InvalidArgumentError("path root " + root + ": " + kUser +
                                    " must be one whole path component, given once");
      }
      ASSIGN_OR_RETURN(made.base, Resolve(root.substr(0, at)));
      made.per_user = true;
      // What follows {user} is appended as written, like the owner's name (it may not exist
      // yet, and a symlink there must not widen the root): normalized, with no way out.
      if (root.find("..", end) != std::string::npos) {
        return InvalidArgumentError("path root " + root + ": no '..' after " + kUser);
      }
      std::string below = fs::path(root.substr(end)).lexically_normal().string();
      while (!below.empty() && below.back() == '/') below.pop_back();
      made.below_user = below;
    }
    out.roots_.push_back(std::move(made));
  }
  return out;
}

std::string PathRoots::Substitute(const Root& root, const std::string& user) {
  if (!root.per_user) return root.base;
  if (!CheckPathUserName(user).ok()) return "";
  return Join(root.base, user) + root.below_user;
}

Status PathRoots::Check(const std::string& field, const std::string& path,
                        const std::string& user) const {
  if (path.empty() || roots_.empty()) return Status::Ok();
  std::string list;
  std::string per_user_refusal;  // why the per-user roots admit nothing for `user`
  for (const Root& root : roots_) {
    const std::string dir = Substitute(root, user);
    if (!dir.empty()) {
      list += (list.empty() ? "" : ", ") + dir;
    } else if (per_user_refusal.empty()) {
      const std::string why =
          user.empty() ? "the job has no owner (an open coordinator authenticates nobody)"
                       : "owner '" + user + "': " + CheckPathUserName(user).message();
      per_user_refusal = "; the per-user root " + Join(root.base, kUser) + root.below_user +
                         " admits nothing: " + why;
    }
  }
  if (list.empty()) list = "(none for this job)";
  if (path.front() != '/') {
    return PermissionDeniedError(field + ": " + path +
                                 " is relative; give an absolute path under " + list +
                                 per_user_refusal);
  }
  StatusOr<std::string> resolved = Resolve(path);
  if (!resolved.ok()) return PermissionDeniedError(field + ": " + resolved.status().message());
  for (const Root& root : roots_) {
    const std::string dir = Substitute(root, user);
    if (!dir.empty() && IsUnder(*resolved, dir)) return Status::Ok();
  }
  const std::string seen = *resolved == path ? path : path + " (resolved: " + *resolved + ")";
  return PermissionDeniedError(field + ": " + seen + " is outside the allowed roots " + list +
                               per_user_refusal);
}

}  // namespace deepool

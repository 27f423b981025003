#include "common/path_roots.h"

#include <filesystem>

namespace deepool {
namespace {

namespace fs = std::filesystem;

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

}  // namespace

StatusOr<PathRoots> PathRoots::Make(const std::vector<std::string>& roots) {
  PathRoots out;
  for (const std::string& root : roots) {
    if (root.empty()) continue;
    if (root.front() != '/') {
      return InvalidArgumentError("path root " + root + ": must be an absolute path");
    }
    ASSIGN_OR_RETURN(std::string resolved, Resolve(root));
    out.roots_.push_back(std::move(resolved));
  }
  return out;
}

Status PathRoots::Check(const std::string& field, const std::string& path) const {
  if (path.empty() || roots_.empty()) return Status::Ok();
  std::string list;
  for (const std::string& root : roots_) list += (list.empty() ? "" : ", ") + root;
  if (path.front() != '/') {
    return PermissionDeniedError(field + ": " + path +
                                 " is relative; give an absolute path under " + list);
  }
  StatusOr<std::string> resolved = Resolve(path);
  if (!resolved.ok()) return PermissionDeniedError(field + ": " + resolved.status().message());
  for (const std::string& root : roots_) {
    if (IsUnder(*resolved, root)) return Status::Ok();
  }
  const std::string seen = *resolved == path ? path : path + " (resolved: " + *resolved + ")";
  return PermissionDeniedError(field + ": " + seen + " is outside the allowed roots " + list);
}

}  // namespace deepool

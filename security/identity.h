// Who is calling: the name and role that a bearer token or a client certificate proves.
// Roles are ordered by what they may do on the client API: kUser < kAdmin; kWorker may call only
// the worker API, and only for the node its name names.
#pragma once

#include <optional>
#include <string>

namespace deepool::security {

enum class Role { kUser, kAdmin, kWorker, kCoordinator };

// "user", "admin", "worker", "coordinator".
const char* RoleName(Role role);
// The inverse of RoleName; nullopt for anything else.
std::optional<Role> RoleFromName(const std::string& name);

struct Identity {
  std::string name;  // a user's name, or a worker's node name
  Role role = Role::kUser;
  std::string via;  // "token", "certificate" or "open" (no authentication configured)
};

}  // namespace deepool::security

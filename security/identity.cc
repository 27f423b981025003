#include "security/identity.h"

namespace deepool::security {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kUser:
      return "user";
    case Role::kAdmin:
      return "admin";
    case Role::kWorker:
      return "worker";
    case Role::kCoordinator:
      return "coordinator";
  }
  return "user";
}

std::optional<Role> RoleFromName(const std::string& name) {
  for (Role role : {Role::kUser, Role::kAdmin, Role::kWorker, Role::kCoordinator}) {
    if (name == RoleName(role)) return role;
  }
  return std::nullopt;
}

}  // namespace deepool::security

// Secure by default on one host: a coordinator given neither TLS files nor a users file would
// be open (every caller an anonymous admin), and on a shared head node any Unix user could then
// cancel others' jobs and make workers write wherever the coordinator's user may. Instead it
// keeps a users file of its own in its data directory, with an admin token beside it, both made
// at its first start and kept afterwards:
//   DIR/users.json   the users file (mode 0600): "admin" (role admin), and whoever
//                    `deepool token create NAME --users DIR/users.json` adds, such as a worker's
//                    token (`--role worker --out WORK_DIR/node.token`)
//   DIR/admin.token  the admin's token (mode 0600): whoever can read it (the coordinator's Unix
//                    user, root) is the admin; the CLI takes it from DEEPOOL_TOKEN_FILE or
//                    ~/.config/deepool/token
// Only --insecure keeps the coordinator open, with a warning in its log.
// Threading: functions over the file system, called once at start-up.
#pragma once

#include <filesystem>
#include <string>

#include "common/status.h"

namespace deepool::security {

inline constexpr const char* kLocalAdminName = "admin";

struct LocalAdmin {
  std::string users_file;  // DIR/users.json
  std::string token_file;  // DIR/admin.token
  bool created = false;    // made now, at the first start
};

// Makes DIR (mode 0700 when new), the admin's token and the users file when the users file is
// missing (from an existing DIR/admin.token, should a start have stopped between the two); else
// keeps them, refusing a token file that group or others may read (secret_files.h). A missing
// token file beside an existing users file is logged with how to make another.
StatusOr<LocalAdmin> EnsureLocalAdmin(const std::filesystem::path& dir);

// How a coordinator without TLS files or a users file lets callers in.
struct LocalAccess {
  std::string users_file;           // EnsureLocalAdmin's; "" when open (--insecure)
  std::string no_credentials_hint;  // where the admin token is, for a caller who gave none
};
// insecure: open, with a warning logged; else EnsureLocalAdmin(data_dir), which needs one
// (FAILED_PRECONDITION naming the choices when data_dir is "").
StatusOr<LocalAccess> LocalAccessFor(const std::string& data_dir, bool insecure);

}  // namespace deepool::security

#include "security/local_admin.h"

#include <system_error>

#include "common/logging.h"
#include "security/cert_files.h"
#include "security/secret_files.h"
#include "security/transport.h"
#include "security/users.h"

namespace deepool::security {

namespace fs = std::filesystem;

StatusOr<LocalAdmin> EnsureLocalAdmin(const fs::path& dir) {
  LocalAdmin admin;
  admin.users_file = (dir / "users.json").string();
  admin.token_file = (dir / "admin.token").string();
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return UnavailableError("cannot create " + dir.string() + ": " + ec.message());
    fs::permissions(dir, fs::perms::owner_all, ec);
  }
  if (fs::exists(admin.users_file, ec)) {
    if (fs::exists(admin.token_file, ec)) {
      RETURN_IF_ERROR(CheckSecretFileMode(admin.token_file, "the admin token file"));
    } else {
      DP_LOG_WARN(
          "{} is gone; to make another admin token: deepool token create NAME --role admin "
          "--users {} --out {}",
          admin.token_file, admin.users_file, admin.token_file);
    }
    return admin;
  }
  std::string token;
  if (fs::exists(admin.token_file, ec)) {
    ASSIGN_OR_RETURN(token, ReadTokenFile(admin.token_file));
  } else {
    ASSIGN_OR_RETURN(token, NewToken());
    RETURN_IF_ERROR(WriteNewFile(admin.token_file, token + "\n", 0600));
  }
  UserTable users;
  RETURN_IF_ERROR(users.Add(kLocalAdminName, Role::kAdmin, TokenDigest(token)));
  RETURN_IF_ERROR(SaveUserTable(users, admin.users_file));
  admin.created = true;
  return admin;
}

StatusOr<LocalAccess> LocalAccessFor(const std::string& data_dir, bool insecure) {
  if (insecure) {
    DP_LOG_WARN(
        "NO AUTHENTICATION (--insecure, no TLS files, no users file): every caller that reaches "
        "this port, any Unix user of this host included, is an admin: they may cancel any job, "
        "drain nodes and register as a worker, whose executors write wherever its user may");
    return LocalAccess{};
  }
  if (data_dir.empty()) {
    return FailedPreconditionError(
        "no credentials are configured (no --tls-* files, no --users), so the coordinator "
        "keeps its admin token in --data-dir: give --data-dir, or --users / --tls-ca, "
        "--tls-cert, --tls-key, or --insecure to let every caller in as an admin");
  }
  ASSIGN_OR_RETURN(const LocalAdmin admin, EnsureLocalAdmin(data_dir));
  DP_LOG_INFO(
      "no TLS files or --users: callers need a token of {} ({} the admin's token {}; "
      "use it with `export DEEPOOL_TOKEN_FILE={}`); a worker needs a token of its own: "
      "`deepool token create NODE --role worker --users {} --out WORK_DIR/node.token`",
      admin.users_file, admin.created ? "made" : "kept", admin.token_file, admin.token_file,
      admin.users_file);
  LocalAccess access;
  access.users_file = admin.users_file;
  access.no_credentials_hint =
      "this coordinator's admin token is in " + admin.token_file +
      " (readable by the coordinator's Unix user): export DEEPOOL_TOKEN_FILE=" + admin.token_file +
      ", or copy it to ~/.config/deepool/token (mode 0600)";
  return access;
}

}  // namespace deepool::security

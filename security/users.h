// Bearer tokens and the users they stand for. The coordinator keeps only each token's SHA-256
// digest, in a users file (JSON, see docs/formats.md):
//   {"format": "deepool.users", "users": [{"name": "alice", "role": "admin",
//                                           "token_sha256": "<64 hex digits>"}],
//    "revoked": ["bob"]}
// `deepool token create` appends a user and prints the token once; `deepool token revoke`
// removes the user's token and lists the name under "revoked", so that certificates bearing that
// name are refused too (security/authenticator.h): a revoked user has no way in left. Creating a
// token for a revoked name takes it off the list again (the user is back, certificates included).
// UserTable is a value; UsersFile re-reads its file when it changes, so tokens are added and
// revoked without a restart (thread-safe).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "security/identity.h"

namespace deepool::security {

// A new random token: "dpt_" and 64 hex digits (256 bits from the OS's random source).
StatusOr<std::string> NewToken();
// The SHA-256 of the token, 64 lower-case hex digits.
std::string TokenDigest(const std::string& token);

struct UserEntry {
  std::string name;
  Role role = Role::kUser;
  std::string token_sha256;
};

class UserTable {
 public:
  // Refuses unknown roles, duplicate names or digests, and digests that are not 64 hex digits.
  static StatusOr<UserTable> Parse(const std::string& text);
  std::string ToJson() const;

  // The user whose digest matches the token's; nullopt for an unknown token.
  std::optional<Identity> Authenticate(const std::string& token) const;
  // Adds a user; refuses a name that is already there (revoke it first to rotate). A revoked
  // name is taken off the revoked list.
  Status Add(const std::string& name, Role role, const std::string& token_sha256);
  // Removes the user's token; NOT_FOUND when there is none. Certificates are unaffected.
  Status Remove(const std::string& name);
  // Removes the user's token, if any, and lists the name as revoked (idempotent). Returns
  // whether there was a token.
  StatusOr<bool> Revoke(const std::string& name);
  // Whether the name is listed as revoked: certificates bearing it are refused.
  bool IsRevoked(const std::string& name) const;
  const std::vector<UserEntry>& users() const { return users_; }
  const std::vector<std::string>& revoked() const { return revoked_; }

 private:
  std::vector<UserEntry> users_;
  std::vector<std::string> revoked_;
};

// Reads and writes a users file. Load refuses (FAILED_PRECONDITION, naming the fix) a file that
// group or others may write: whoever can add a line can make themselves an admin. Others may
// read it (the digests of 256-bit random tokens reveal nothing usable), but Save writes a
// temporary file of mode 0600, synced, and renames it over the old one (a listing of users is
// nobody else's business), then syncs the directory: a power loss does not undo a revoke.
StatusOr<UserTable> LoadUserTable(const std::filesystem::path& path);
Status SaveUserTable(const UserTable& table, const std::filesystem::path& path);

// Load, `edit`, Save, holding an exclusive lock (flock on `<path>.lock`, made 0600 if missing)
// throughout, so that two edits at once (a `token revoke` beside a `token create`) both land:
// without it the later save would write back the table it read before the other's change (a
// revoked token valid again). `missing_is_empty`: a missing file is an empty table, else
// NOT_FOUND as Load. An error of `edit` saves nothing.
Status EditUserTable(const std::filesystem::path& path, bool missing_is_empty,
                     const std::function<Status(UserTable&)>& edit);

class UsersFile {
 public:
  // Loads the file now; an unreadable or invalid file is an error here.
  static StatusOr<std::unique_ptr<UsersFile>> Open(const std::filesystem::path& path);
  // Re-reads the file when its modification time or size changed; a file that became invalid
  // is logged and the last good table kept (a typo must not lock everyone out).
  std::optional<Identity> Authenticate(const std::string& token);
  // Whether the name is revoked (re-reading the file as above).
  bool IsRevoked(const std::string& name);

 private:
  explicit UsersFile(std::filesystem::path path) : path_(std::move(path)) {}
  void ReloadIfChangedLocked();

  const std::filesystem::path path_;
  std::mutex mu_;
  UserTable table_;
  std::filesystem::file_time_type mtime_{};
  std::uintmax_t size_ = 0;
};

}  // namespace deepool::security

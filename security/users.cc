#include "security/users.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/durable_file.h"
#include "common/json_fields.h"
#include "common/logging.h"
#include "security/cert_files.h"
#include "security/secret_files.h"

namespace deepool::security {
namespace {

std::string Hex(const unsigned char* bytes, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * size);
  for (size_t i = 0; i < size; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

bool IsDigest(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Status CheckUserName(const std::string& name) {
  if (name.empty() || name.size() > 64)
    return InvalidArgumentError("user name: 1 to 64 characters");
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
          c == '@')) {
      return InvalidArgumentError("user name '" + name +
                                  "': letters, digits, '-', '_', '.' and '@' only");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::string> NewToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return UnavailableError("no random bytes from the OS for a token");
  }
  return "dpt_" + Hex(bytes, sizeof(bytes));
}

std::string TokenDigest(const std::string& token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(token.data(), token.size(), digest, &size, EVP_sha256(), nullptr);
  return Hex(digest, size);
}

StatusOr<UserTable> UserTable::Parse(const std::string& text) {
  ASSIGN_OR_RETURN(const nlohmann::json doc, ParseJson(text, "users file"));
  // Compared as JSON values: json::value("format", std::string()) throws on a number.
  if (!doc.is_object() || !doc.contains("format") || doc["format"] != "deepool.users" ||
      !doc.contains("users") || !doc["users"].is_array()) {
    return InvalidArgumentError(
        "users file: expected {\"format\": \"deepool.users\", \"users\": [...]}");
  }
  UserTable table;
  for (const nlohmann::json& user : doc["users"]) {
    if (!user.is_object() || !user.contains("name") || !user["name"].is_string() ||
        !user.contains("role") || !user["role"].is_string() || !user.contains("token_sha256") ||
        !user["token_sha256"].is_string()) {
      return InvalidArgumentError(
          "users file: every user needs string fields name, role and token_sha256");
    }
    const std::optional<Role> role = RoleFromName(user["role"].get<std::string>());
    if (!role || *role == Role::kCoordinator) {
      return InvalidArgumentError("users file: user " + user["name"].get<std::string>() +
                                  ": role must be user, admin or worker");
    }
    RETURN_IF_ERROR(
        table.Add(user["name"].get<std::string>(), *role, user["token_sha256"].get<std::string>())
            .WithContext("users file"));
  }
  if (!doc.contains("revoked")) return table;
  if (!doc["revoked"].is_array()) {
    return InvalidArgumentError("users file: \"revoked\" must be a list of names");
  }
  for (const nlohmann::json& name : doc["revoked"]) {
    if (!name.is_string()) {
      return InvalidArgumentError("users file: \"revoked\" must be a list of names");
    }
    RETURN_IF_ERROR(CheckUserName(name.get<std::string>()).WithContext("users file: revoked"));
    if (table.IsRevoked(name.get<std::string>())) continue;
    for (const UserEntry& user : table.users_) {
      if (user.name == name.get<std::string>()) {
        return InvalidArgumentError("users file: user " + user.name +
                                    " has a token and is revoked; remove one of the two");
      }
    }
    table.revoked_.push_back(name.get<std::string>());
  }
  return table;
}

std::string UserTable::ToJson() const {
  nlohmann::json users = nlohmann::json::array();
  for (const UserEntry& user : users_) {
    users.push_back(
        {{"name", user.name}, {"role", RoleName(user.role)}, {"token_sha256", user.token_sha256}});
  }
  nlohmann::json doc{{"format", "deepool.users"}, {"users", users}};
  if (!revoked_.empty()) doc["revoked"] = revoked_;
  return doc.dump(2) + "\n";
}

std::optional<Identity> UserTable::Authenticate(const std::string& token) const {
  const std::string digest = TokenDigest(token);
  for (const UserEntry& user : users_) {
    if (CRYPTO_memcmp(digest.data(), user.token_sha256.data(), digest.size()) == 0) {
      return Identity{user.name, user.role, "token"};
    }
  }
  return std::nullopt;
}

Status UserTable::Add(const std::string& name, Role role, const std::string& token_sha256) {
  RETURN_IF_ERROR(CheckUserName(name));
  if (!IsDigest(token_sha256)) {
    return InvalidArgumentError("user " + name + ": token_sha256 must be 64 lower-case hex digits");
  }
  for (const UserEntry& user : users_) {
    if (user.name == name) {
      return AlreadyExistsError("user " + name + " already has a token (revoke it to rotate)");
    }
    if (user.token_sha256 == token_sha256) {
      return AlreadyExistsError("user " + name + ": the same token as user " + user.name);
    }
  }
  users_.push_back(UserEntry{name, role, token_sha256});
  revoked_.erase(std::remove(revoked_.begin(), revoked_.end(), name), revoked_.end());
  return Status::Ok();
}

StatusOr<bool> UserTable::Revoke(const std::string& name) {
  RETURN_IF_ERROR(CheckUserName(name));
  const bool had_token = Remove(name).ok();
  if (!IsRevoked(name)) revoked_.push_back(name);
  return had_token;
}

bool UserTable::IsRevoked(const std::string& name) const {
  return std::find(revoked_.begin(), revoked_.end(), name) != revoked_.end();
}

Status UserTable::Remove(const std::string& name) {
  for (auto it = users_.begin(); it != users_.end(); ++it) {
    if (it->name == name) {
      users_.erase(it);
      return Status::Ok();
    }
  }
  return NotFoundError("no user " + name);
}

StatusOr<UserTable> LoadUserTable(const std::filesystem::path& path) {
  // Readable by others is harmless (digests of 256-bit random tokens cannot be reversed);
  // writable by others is not: whoever may append a line may make themselves an admin.
  ASSIGN_OR_RETURN(const std::string text,
                   ReadSecretFile(path.string(), "the users file", FileTrust::kProtected));
  StatusOr<UserTable> table = UserTable::Parse(text);
  if (!table.ok()) return table.status().WithContext(path.string());
  return table;
}

Status SaveUserTable(const UserTable& table, const std::filesystem::path& path) {
  const std::filesystem::path temporary = path.string() + ".tmp";
  // Created with mode 0600 rather than chmod-ed after writing, so that it is never readable by
  // others, not even for a moment; a temporary left by a crash is replaced.
  std::error_code ec;
  std::filesystem::remove(temporary, ec);
  RETURN_IF_ERROR(WriteNewFile(temporary, table.ToJson(), 0600));
  std::filesystem::rename(temporary, path, ec);
  if (ec) return UnavailableError("cannot replace " + path.string() + ": " + ec.message());
  const std::string dir = path.parent_path().string();
  return SyncDirectory(dir.empty() ? "." : dir);
}

Status EditUserTable(const std::filesystem::path& path, bool missing_is_empty,
                     const std::function<Status(UserTable&)>& edit) {
  const std::string lock_path = path.string() + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return UnavailableError("cannot open the lock " + lock_path + ": " + std::strerror(errno));
  }
  int locked;
  while ((locked = ::flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
  }
  if (locked != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return UnavailableError("cannot lock " + lock_path + ": " + why);
  }
  Status done = [&]() -> Status {
    UserTable table;
    if (!missing_is_empty || std::filesystem::exists(path)) {
      ASSIGN_OR_RETURN(table, LoadUserTable(path));
    }
    RETURN_IF_ERROR(edit(table));
    return SaveUserTable(table, path);
  }();
  ::close(fd);  // releases the lock
  return done;
}

StatusOr<std::unique_ptr<UsersFile>> UsersFile::Open(const std::filesystem::path& path) {
  std::unique_ptr<UsersFile> file(new UsersFile(path));
  ASSIGN_OR_RETURN(file->table_, LoadUserTable(path));
  std::error_code ec;
  file->mtime_ = std::filesystem::last_write_time(path, ec);
  file->size_ = std::filesystem::file_size(path, ec);
  return file;
}

void UsersFile::ReloadIfChangedLocked() {
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(path_, ec);
  if (ec) return;  // gone for a moment (an editor's rename): keep the last good table
  const std::uintmax_t size = std::filesystem::file_size(path_, ec);
  if (ec || (mtime == mtime_ && size == size_)) return;
  StatusOr<UserTable> table = LoadUserTable(path_);
  mtime_ = mtime;
  size_ = size;
  if (!table.ok()) {
    DP_LOG_ERROR("keeping the previous users: {}", table.status().ToString());
    return;
  }
  table_ = *std::move(table);
  DP_LOG_INFO("users file {} reloaded: {} users", path_.string(), table_.users().size());
}

std::optional<Identity> UsersFile::Authenticate(const std::string& token) {
  std::lock_guard<std::mutex> lock(mu_);
  ReloadIfChangedLocked();
  return table_.Authenticate(token);
}

bool UsersFile::IsRevoked(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  ReloadIfChangedLocked();
  return table_.IsRevoked(name);
}

}  // namespace deepool::security

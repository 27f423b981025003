// Who a call comes from, and what that caller may do.
// Authentication: a certificate (mutual TLS) or a bearer token proves an Identity. A worker's or
// the coordinator's certificate is a daemon identity: tokens do not change it. A user's
// certificate names the user unless a token names another (one client certificate can then serve
// several people, each with their own token). A certificate whose name the users file lists as
// revoked is refused, whatever the token (revocation ends every way in). With neither TLS nor a
// users file configured the coordinator is "open": every caller is an anonymous admin, which is
// only allowed on loopback (or with --insecure).
// Authorization: client RPCs need a user or admin; another user's jobs and node drains need an
// admin; worker RPCs need a worker identity whose name is the node's.
// Threading: Authenticate may be called from any thread (UsersFile locks).
#pragma once

#include <string>

#include "common/status.h"
#include "security/identity.h"
#include "security/transport.h"
#include "security/users.h"

namespace deepool::security {

class Authenticator {
 public:
  // users may be null (no tokens accepted); tls: the server requires client certificates.
  Authenticator(bool tls, UsersFile* users) : tls_(tls), users_(users) {}

  bool open() const { return !tls_ && users_ == nullptr; }
  // UNAUTHENTICATED when the call proves nobody (or an unknown token); PERMISSION_DENIED for a
  // certificate that names no deepool role.
  StatusOr<Identity> Authenticate(const PeerCredentials& peer) const;

 private:
  bool tls_;
  UsersFile* users_;
};

// PERMISSION_DENIED unless a user or an admin.
Status RequireClient(const Identity& caller);
// PERMISSION_DENIED unless an admin; `action` completes "... needs the admin role to <action>".
Status RequireAdmin(const Identity& caller, const std::string& action);
// PERMISSION_DENIED unless a worker named node_name (anyone when the coordinator is open).
Status RequireWorker(const Identity& caller, const std::string& node_name, bool open);
// An admin sees every job; a user the jobs they own.
bool MayAccessJob(const Identity& caller, const std::string& owner);

}  // namespace deepool::security

// Who a call comes from, and what that caller may do.
// Authentication: a certificate (mutual TLS) or a bearer token proves an Identity. Over TLS every
// call must carry a client certificate, which is verified here against the cluster CA on each
// call (transport.h says why not in the handshake): signed by the CA, unexpired, a deepool role.
// A worker's or the coordinator's certificate is a daemon identity: tokens do not change it. A
// user's certificate names the user unless a token names another (one client certificate can
// then serve several people, each with their own token). A certificate whose name the users
// file lists as revoked is refused, whatever the token (revocation ends every way in). With
// neither TLS nor a users file the coordinator is "open": every caller is an anonymous admin,
// which the coordinator allows only with --insecure (coordinator/server.h).
// Authorization: client RPCs need a user or admin; another user's jobs and node drains need an
// admin; worker RPCs need a worker identity whose name is the node's.
// Refusals are logged with the caller's address by LogRefusal, rate-limited.
// Threading: Authenticate and LogRefusal may be called from any thread (UsersFile, the
// certificate cache and the limiter lock).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "common/log_limiter.h"
#include "common/status.h"
#include "security/certificates.h"
#include "security/identity.h"
#include "security/transport.h"
#include "security/users.h"

namespace deepool::security {

class Authenticator {
 public:
  // client_ca_pem: the CA that signs clients' certificates when the server speaks TLS ("" for
  // plain TCP). users may be null (no tokens accepted). no_credentials_hint ends the message of
  // a call that carries nothing (where this coordinator's token is, say). The clock gives the
  // time certificates are checked at and paces LogRefusal.
  Authenticator(std::string client_ca_pem, UsersFile* users, std::string no_credentials_hint = "",
                const Clock* clock = SystemClock::Get());
  // With the CA of `tls` read from its file when TLS is configured.
  static StatusOr<std::unique_ptr<Authenticator>> ForServer(const TlsFiles& tls, UsersFile* users,
                                                            std::string no_credentials_hint = "");

  bool open() const { return !tls() && users_ == nullptr; }
  // UNAUTHENTICATED when the call proves nobody: no credentials, an unknown token, no client
  // certificate over TLS, or one the CA did not sign or that expired (the message says which);
  // PERMISSION_DENIED for a certificate that names no deepool role.
  StatusOr<Identity> Authenticate(const PeerCredentials& peer) const;
  // Logs "<what> from <peer> refused: <why>" at warning level: at most 20 lines a minute, the
  // next line saying how many were left out, so a flood of refused calls cannot fill the log.
  void LogRefusal(const std::string& what, const std::string& peer, const Status& why) const;

 private:
  bool tls() const { return !client_ca_pem_.empty(); }
  // VerifyCertificate for a client, remembered until the certificate expires: a worker calls
  // several times a second with the same one.
  StatusOr<CertificateIdentity> VerifyClientCertificate(const PeerCredentials& peer) const;

  const std::string client_ca_pem_;
  UsersFile* users_;
  const std::string no_credentials_hint_;
  const Clock* clock_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, CertificateIdentity> verified_;  // by PEM; guarded
  mutable LogLimiter refusals_;
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

#include "security/authenticator.h"

#include "common/logging.h"

namespace deepool::security {
namespace {

// Verified certificates remembered at most; past it the cache starts again (a flood of distinct
// certificates costs verifications, never memory).
constexpr size_t kMaxVerifiedCertificates = 4096;

}  // namespace

Authenticator::Authenticator(std::string client_ca_pem, UsersFile* users,
                             std::string no_credentials_hint, const Clock* clock)
    : client_ca_pem_(std::move(client_ca_pem)),
      users_(users),
      no_credentials_hint_(std::move(no_credentials_hint)),
      clock_(clock),
      refusals_(clock, 20, std::chrono::minutes(1)) {}

StatusOr<std::unique_ptr<Authenticator>> Authenticator::ForServer(const TlsFiles& tls,
                                                                  UsersFile* users,
                                                                  std::string no_credentials_hint) {
  std::string ca;
  if (tls.configured()) {
    ASSIGN_OR_RETURN(ca, ReadCaCertificates(tls));
  }
  return std::make_unique<Authenticator>(std::move(ca), users, std::move(no_credentials_hint));
}

StatusOr<CertificateIdentity> Authenticator::VerifyClientCertificate(
    const PeerCredentials& peer) const {
  const int64_t now_s = clock_->WallMillis() / 1000;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto known = verified_.find(*peer.certificate_pem);
    if (known != verified_.end() && now_s < known->second.not_after_unix_s) return known->second;
  }
  StatusOr<CertificateIdentity> checked =
      VerifyCertificate(client_ca_pem_, *peer.certificate_pem, CertificateUse::kClient, now_s,
                        peer.certificate_chain_pem);
  if (!checked.ok()) {
    if (checked.status().code() == StatusCode::kPermissionDenied) return checked.status();
    return UnauthenticatedError("your client certificate: " + checked.status().message());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (verified_.size() >= kMaxVerifiedCertificates) verified_.clear();
  verified_[*peer.certificate_pem] = *checked;
  return checked;
}

void Authenticator::LogRefusal(const std::string& what, const std::string& peer,
                               const Status& why) const {
  int64_t held_back = 0;
  if (!refusals_.Allow(&held_back)) return;
  if (held_back > 0) {
    DP_LOG_WARN("{} from {} refused: {} ({} more refusals were not logged)", what, peer,
                why.ToString(), held_back);
  } else {
    DP_LOG_WARN("{} from {} refused: {}", what, peer, why.ToString());
  }
}

StatusOr<Identity> Authenticator::Authenticate(const PeerCredentials& peer) const {
  if (peer.malformed_authorization) {
    return UnauthenticatedError("the authorization header must be 'Bearer <token>'");
  }
  if (tls() && !peer.certificate_pem) {
    return UnauthenticatedError(
        "this coordinator speaks mutual TLS and the call came without a client certificate: give "
        "one its CA signed (DEEPOOL_TLS_CERT/DEEPOOL_TLS_KEY, \"tls\" in "
        "~/.config/deepool/config.json, or a worker's --tls-cert/--tls-key)");
  }
  std::optional<Identity> from_certificate;
  if (peer.certificate_pem) {
    // Without TLS there is no certificate to see; over TLS it is verified before it is believed.
    if (!tls()) return UnauthenticatedError("a client certificate outside TLS");
    ASSIGN_OR_RETURN(const CertificateIdentity cert, VerifyClientCertificate(peer));
    from_certificate = Identity{cert.common_name, cert.role, "certificate"};
    // A certificate cannot be withdrawn from its holder, so revoking a user (or a node) lists
    // the name in the users file and every certificate bearing it is refused from then on.
    if (cert.role != Role::kCoordinator && users_ != nullptr &&
        users_->IsRevoked(cert.common_name)) {
      return UnauthenticatedError(std::string(RoleName(cert.role)) + " " + cert.common_name +
                                  " is revoked (`deepool token revoke`): their certificate is "
                                  "no longer accepted");
    }
    if (cert.role == Role::kWorker || cert.role == Role::kCoordinator) return *from_certificate;
  }
  if (!peer.bearer_token.empty()) {
    if (users_ == nullptr) {
      return UnauthenticatedError(
          "this coordinator accepts no tokens (it was started without --users)");
    }
    std::optional<Identity> user = users_->Authenticate(peer.bearer_token);
    if (!user) return UnauthenticatedError("unknown or revoked token");
    return *user;
  }
  if (from_certificate) return *from_certificate;
  if (open()) return Identity{"", Role::kAdmin, "open"};
  return UnauthenticatedError(
      "no credentials: give a token ($DEEPOOL_TOKEN, $DEEPOOL_TOKEN_FILE, \"token_file\" in "
      "~/.config/deepool/config.json, or ~/.config/deepool/token)" +
      (no_credentials_hint_.empty() ? std::string() : "; " + no_credentials_hint_));
}

namespace {

// "a user certificate (alice)", "an admin token (root)".
std::string Described(const Identity& caller) {
  const std::string role = RoleName(caller.role);
  return std::string(role[0] == 'a' ? "an " : "a ") + role + " " + caller.via + " (" + caller.name +
         ")";
}

}  // namespace

Status RequireClient(const Identity& caller) {
  if (caller.role == Role::kUser || caller.role == Role::kAdmin) return Status::Ok();
  return PermissionDeniedError(Described(caller) +
                               " may not call the client API; use a user's token or certificate");
}

Status RequireAdmin(const Identity& caller, const std::string& action) {
  RETURN_IF_ERROR(RequireClient(caller));
  if (caller.role == Role::kAdmin) return Status::Ok();
  return PermissionDeniedError("user " + caller.name + " needs the admin role to " + action);
}

Status RequireWorker(const Identity& caller, const std::string& node_name, bool open) {
  if (open) return Status::Ok();
  if (caller.role != Role::kWorker) {
    return PermissionDeniedError(
        "the worker API needs a worker's certificate or token; this call came with " +
        Described(caller));
  }
  if (caller.name != node_name) {
    return PermissionDeniedError("worker " + caller.name + " may not act for node " + node_name);
  }
  return Status::Ok();
}

bool MayAccessJob(const Identity& caller, const std::string& owner) {
  return caller.role == Role::kAdmin || (caller.role == Role::kUser && caller.name == owner);
}

}  // namespace deepool::security

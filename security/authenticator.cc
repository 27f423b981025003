#include "security/authenticator.h"

#include "security/certificates.h"

namespace deepool::security {

StatusOr<Identity> Authenticator::Authenticate(const PeerCredentials& peer) const {
  if (peer.malformed_authorization) {
    return UnauthenticatedError("the authorization header must be 'Bearer <token>'");
  }
  std::optional<Identity> from_certificate;
  if (peer.certificate_pem) {
    ASSIGN_OR_RETURN(const CertificateIdentity cert,
                     ReadCertificateIdentity(*peer.certificate_pem));
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
      "no credentials: give a token ($DEEPOOL_TOKEN, $DEEPOOL_TOKEN_FILE, or \"token_file\" in "
      "~/.config/deepool/config.json)" +
      std::string(tls_ ? " or a user's client certificate" : ""));
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

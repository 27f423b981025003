// A small cluster's public-key infrastructure, without the openssl tool: a CA, and certificates
// it signs for the coordinator, for each worker node and for users. The role travels in the
// subject's OU ("deepool-worker", "deepool-admin", ...), the name in its CN. Every certificate
// carries the DNS name kCoordinatorTlsName when issued to the coordinator, which is the name
// clients check the server against (so one certificate serves whatever address clients dial).
// Keys are ECDSA P-256; signatures SHA-256. Pure functions over PEM text; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "security/identity.h"

namespace deepool::security {

inline constexpr const char* kCoordinatorTlsName = "deepool-coordinator";

struct KeyAndCertificate {
  std::string certificate_pem;
  std::string private_key_pem;
};

struct CertificateRequest {
  std::string common_name;  // a node's or user's name; "deepool-coordinator" for the coordinator
  Role role = Role::kUser;
  std::vector<std::string> dns_names;     // extra subjectAltName DNS entries
  std::vector<std::string> ip_addresses;  // subjectAltName IP entries
  // Validity: from not_before_offset (relative to now; negative = in the past) for valid_for.
  std::chrono::seconds not_before_offset{-300};
  std::chrono::seconds valid_for{std::chrono::hours(24 * 365)};
};

// A self-signed CA certificate "deepool CA <name>" valid for valid_for.
StatusOr<KeyAndCertificate> IssueCertificateAuthority(const std::string& name,
                                                      std::chrono::seconds valid_for);
// A leaf certificate signed by the CA (both PEM). Usable for TLS servers and clients alike.
StatusOr<KeyAndCertificate> IssueCertificate(const KeyAndCertificate& ca,
                                             const CertificateRequest& request);

// What a certificate says about its holder.
struct CertificateIdentity {
  std::string common_name;
  Role role = Role::kUser;
  int64_t not_after_unix_s = 0;
};
// Reads CN, OU (must be one of the deepool roles) and expiry from a PEM certificate.
StatusOr<CertificateIdentity> ReadCertificateIdentity(const std::string& certificate_pem);

// The OU text of a role: "deepool-user", "deepool-admin", ...
std::string RoleUnit(Role role);

// What a certificate is checked for: a TLS client (a user, admin or worker calling the
// coordinator) or a TLS server (the coordinator, as its clients check it).
enum class CertificateUse { kClient, kServer };

// Checks that the certificate was signed by a CA in ca_pem (one or more PEM certificates),
// was valid at now_unix_s and may serve `use`, then reads it as ReadCertificateIdentity does.
// UNAUTHENTICATED with the reason people need ("is not signed by this cluster's CA (issuer:
// ...)", "expired at 2025-01-31 12:00:00 UTC", "is not valid before ..."), naming the holder
// (its CN) when it can; `chain_pem` may add intermediate certificates the peer sent. The time
// is a parameter so tests need no clock of their own; callers pass the wall clock.
StatusOr<CertificateIdentity> VerifyCertificate(const std::string& ca_pem,
                                                const std::string& certificate_pem,
                                                CertificateUse use, int64_t now_unix_s,
                                                const std::string& chain_pem = "");

// What a client checks before it trusts a server to be the coordinator: VerifyCertificate for
// a TLS server, the role kCoordinator (the OU deepool-coordinator, which only `deepool certs
// init` issues) and the name kCoordinatorTlsName. A user's or node's certificate from the same
// CA is refused whatever its name: its holder could otherwise collect every client's token.
StatusOr<CertificateIdentity> VerifyCoordinatorCertificate(const std::string& ca_pem,
                                                           const std::string& certificate_pem,
                                                           int64_t now_unix_s,
                                                           const std::string& chain_pem = "");

}  // namespace deepool::security

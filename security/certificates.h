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

}  // namespace deepool::security

// A cluster's certificates as files in one directory, as `deepool certs` and `deepool up` write
// them:
//   DIR/ca.pem, DIR/ca-key.pem                      the cluster CA (keep ca-key.pem offline)
//   DIR/coordinator.pem, DIR/coordinator-key.pem    the coordinator
//   DIR/nodes/NAME.pem, DIR/nodes/NAME-key.pem      a worker node (CN = its --name)
//   DIR/users/NAME.pem, DIR/users/NAME-key.pem      a user (role user or admin)
// Keys are written with mode 0600, certificates 0644; an existing file is never overwritten
// (ALREADY_EXISTS), so a second `init` cannot silently replace a cluster's CA.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"
#include "security/identity.h"
#include "security/transport.h"

namespace deepool::security {

// Creates the CA and the coordinator's certificate; hosts are extra DNS names or IP addresses
// for the coordinator's certificate (clients check the name deepool-coordinator either way).
Status InitClusterCertificates(const std::filesystem::path& dir,
                               const std::vector<std::string>& hosts,
                               std::chrono::seconds valid_for);

// Issues a certificate from DIR's CA for a worker node (role kWorker; its name is also the
// certificate's DNS name) or a user (kUser, kAdmin); returns the files to pass as
// --tls-ca/--tls-cert/--tls-key.
StatusOr<TlsFiles> IssueClusterCertificate(const std::filesystem::path& dir, Role role,
                                           const std::string& name, std::chrono::seconds valid_for);

// The coordinator's files in DIR.
TlsFiles CoordinatorTlsFiles(const std::filesystem::path& dir);

// Writes text to path with the mode, refusing to replace an existing file.
Status WriteNewFile(const std::filesystem::path& path, const std::string& text, int mode);

}  // namespace deepool::security

#include "security/cert_files.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "security/certificates.h"
#include "security/secret_files.h"

namespace deepool::security {
namespace {

namespace fs = std::filesystem;

StatusOr<std::string> ReadText(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot read " + path.string());
  return std::string{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool IsIpAddress(const std::string& host) {
  unsigned char buffer[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

Status WritePair(const fs::path& cert, const fs::path& key, const KeyAndCertificate& pair) {
  // The key first: a certificate without its key is useless, a key alone is harmless to retry.
  RETURN_IF_ERROR(WriteNewFile(key, pair.private_key_pem, 0600));
  return WriteNewFile(cert, pair.certificate_pem, 0644);
}

Status MakeDirectory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return UnavailableError("cannot create " + dir.string() + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

Status WriteNewFile(const fs::path& path, const std::string& text, int mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST) {
      return AlreadyExistsError(path.string() + " exists; remove it first to replace it");
    }
    return UnavailableError("cannot create " + path.string() + ": " + std::strerror(errno));
  }
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return UnavailableError("cannot write " + path.string() + ": " + std::strerror(errno));
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    return UnavailableError("cannot write " + path.string() + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

TlsFiles CoordinatorTlsFiles(const fs::path& dir) {
  return TlsFiles{(dir / "ca.pem").string(), (dir / "coordinator.pem").string(),
                  (dir / "coordinator-key.pem").string()};
}

Status InitClusterCertificates(const fs::path& dir, const std::vector<std::string>& hosts,
                               std::chrono::seconds valid_for) {
  RETURN_IF_ERROR(MakeDirectory(dir));
  if (fs::exists(dir / "ca.pem") || fs::exists(dir / "ca-key.pem")) {
    return AlreadyExistsError(dir.string() +
                              " already holds a CA; issue certificates from it, or use another "
                              "directory");
  }
  ASSIGN_OR_RETURN(const KeyAndCertificate ca, IssueCertificateAuthority("cluster", valid_for));
  RETURN_IF_ERROR(WritePair(dir / "ca.pem", dir / "ca-key.pem", ca));
  CertificateRequest request;
  request.common_name = kCoordinatorTlsName;
  request.role = Role::kCoordinator;
  request.valid_for = valid_for;
  for (const std::string& host : hosts) {
    (IsIpAddress(host) ? request.ip_addresses : request.dns_names).push_back(host);
  }
  ASSIGN_OR_RETURN(const KeyAndCertificate coordinator, IssueCertificate(ca, request));
  return WritePair(dir / "coordinator.pem", dir / "coordinator-key.pem", coordinator);
}

StatusOr<TlsFiles> IssueClusterCertificate(const fs::path& dir, Role role, const std::string& name,
                                           std::chrono::seconds valid_for) {
  if (role == Role::kCoordinator) {
    return InvalidArgumentError("the coordinator's certificate comes from `deepool certs init`");
  }
  KeyAndCertificate ca;
  ASSIGN_OR_RETURN(ca.certificate_pem, ReadText(dir / "ca.pem"));
  StatusOr<std::string> ca_key = ReadSecretFile((dir / "ca-key.pem").string(), "the CA's key");
  if (ca_key.status().code() == StatusCode::kNotFound) {
    return NotFoundError(ca_key.status().message() +
                         " (issue certificates where `deepool certs init` ran)");
  }
  RETURN_IF_ERROR(ca_key.status());
  ca.private_key_pem = *ca_key;
  CertificateRequest request;
  request.common_name = name;
  request.role = role;
  request.valid_for = valid_for;
  // A node's name is also a DNS name of its certificate, so that a scraper of the node's HTTPS
  // metrics endpoint can verify it by that name (its server_name).
  if (role == Role::kWorker) request.dns_names.push_back(name);
  ASSIGN_OR_RETURN(const KeyAndCertificate pair, IssueCertificate(ca, request));
  const fs::path folder = dir / (role == Role::kWorker ? "nodes" : "users");
  RETURN_IF_ERROR(MakeDirectory(folder));
  const fs::path cert = folder / (name + ".pem");
  const fs::path key = folder / (name + "-key.pem");
  RETURN_IF_ERROR(WritePair(cert, key, pair));
  return TlsFiles{(dir / "ca.pem").string(), cert.string(), key.string()};
}

}  // namespace deepool::security

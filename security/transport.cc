#include "security/transport.h"

#include <arpa/inet.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/client_interceptor.h>
#include <netdb.h>
#include <netinet/in.h>

#include <chrono>
#include <fstream>
#include <optional>

#include "common/host_port.h"
#include "security/certificates.h"
#include "security/secret_files.h"

namespace deepool::security {
namespace {

// `secret`: the file is a private key, which only its owner may read (secret_files.h).
StatusOr<std::string> ReadPem(const std::string& what, const std::string& path,
                              bool secret = false) {
  if (path.empty()) {
    return InvalidArgumentError("TLS needs --tls-ca, --tls-cert and --tls-key together; " + what +
                                " is missing");
  }
  std::string text;
  if (secret) {
    ASSIGN_OR_RETURN(text, ReadSecretFile(path, what));
  } else {
    std::ifstream in(path);
    if (!in) return NotFoundError(what + ": cannot read " + path);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (text.find("-----BEGIN") == std::string::npos) {
    return InvalidArgumentError(what + ": " + path + " is not a PEM file");
  }
  return text;
}

struct PemFiles {
  std::string ca, cert, key;
};

StatusOr<PemFiles> ReadPems(const TlsFiles& files) {
  PemFiles pems;
  ASSIGN_OR_RETURN(pems.ca, ReadPem("the CA certificate (--tls-ca)", files.ca));
  ASSIGN_OR_RETURN(pems.cert, ReadPem("the certificate (--tls-cert)", files.cert));
  ASSIGN_OR_RETURN(pems.key, ReadPem("the private key (--tls-key)", files.key, /*secret=*/true));
  return pems;
}

// Adds the bearer token to every call's initial metadata.
class BearerToken final : public grpc::experimental::Interceptor {
 public:
  explicit BearerToken(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerTokenFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(const std::string& token) : header_("Bearer " + token) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerToken(&header_);
  }

 private:
  const std::string header_;
};

// The client's check of the server: VerifyCoordinatorCertificate at the time of the handshake.
// Synchronous; gRPC calls it from its own threads, and it keeps no state but the CA.
class CoordinatorCertificateCheck final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit CoordinatorCertificateCheck(std::string ca_pem) : ca_pem_(std::move(ca_pem)) {}
  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> /*callback*/, grpc::Status* sync_status) override {
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    const grpc::string_ref cert = request->peer_cert();
    const grpc::string_ref chain = request->peer_cert_full_chain();
    const StatusOr<CertificateIdentity> checked =
        VerifyCoordinatorCertificate(ca_pem_, std::string(cert.data(), cert.size()), now,
                                     std::string(chain.data(), chain.size()));
    *sync_status =
        checked.ok() ? grpc::Status::OK
                     : grpc::Status(grpc::StatusCode::UNAUTHENTICATED, checked.status().message());
    return true;  // done: the answer is in sync_status
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest*) override {}

 private:
  const std::string ca_pem_;
};

// The host a gRPC target names: "HOST:PORT", "[V6]:PORT", or either after a "dns:", "dns:///",
// "ipv4:" or "ipv6:" scheme. nullopt for a Unix socket (it never leaves this machine).
StatusOr<std::optional<std::string>> TargetHost(std::string target) {
  if (target.rfind("unix:", 0) == 0 || target.rfind("unix-abstract:", 0) == 0) {
    return std::optional<std::string>();
  }
  for (const char* scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (target.rfind(scheme, 0) == 0) {
      target = target.substr(std::string(scheme).size());
      break;
    }
  }
  ASSIGN_OR_RETURN(const HostPort address, ParseHostOptionalPort(target));
  return std::optional<std::string>(address.host);
}

}  // namespace

Status CheckTokenTransport(const std::string& address, const ClientSecurity& security) {
  if (security.token.empty() || security.tls.configured()) return Status::Ok();
  if (address.find(',') != std::string::npos) {  // a list: every one of them
    ASSIGN_OR_RETURN(const std::vector<HostPort> list, ParseHostPortList(address));
    for (const HostPort& one : list) {
      RETURN_IF_ERROR(CheckTokenTransport(FormatHostPort(one), security));
    }
    return Status::Ok();
  }
  StatusOr<std::optional<std::string>> host = TargetHost(address);
  if (host.ok() && (!host->has_value() || IsLoopbackHost(**host))) return Status::Ok();
  // An address we cannot read is treated as remote: the token stays here.
  const std::string shown = host.ok() ? **host : address;
  return FailedPreconditionError(
      "refusing to send the token in plaintext to " + shown +
      ": give --tls-ca/--tls-cert/--tls-key (the CLI: DEEPOOL_TLS_CA/_CERT/_KEY or \"tls\" in "
      "~/.config/deepool/config.json), or use a loopback address");
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& files) {
  if (!files.configured()) return grpc::InsecureServerCredentials();
  ASSIGN_OR_RETURN(PemFiles pems, ReadPems(files));
  // The Authenticator verifies the certificate on every call (the header says why); a client
  // without one still completes the handshake, and its calls are refused.
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_BUT_DONT_VERIFY);
  options.pem_root_certs = pems.ca;
  options.pem_key_cert_pairs.push_back({pems.key, pems.cert});
  return grpc::SslServerCredentials(options);
}

StatusOr<std::string> ReadCaCertificates(const TlsFiles& files) {
  return ReadPem("the CA certificate (--tls-ca)", files.ca);
}

StatusOr<std::string> CoordinatorTarget(const std::string& address) {
  if (address.find(',') == std::string::npos) return address;
  ASSIGN_OR_RETURN(const std::vector<HostPort> list, ParseHostPortList(address));
  std::string target = "ipv4:";
  for (const HostPort& one : list) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int error = getaddrinfo(one.host.c_str(), nullptr, &hints, &found);
    if (error != 0 || found == nullptr) {
      return UnavailableError("coordinator " + FormatHostPort(one) + ": cannot resolve " +
                              one.host + " to an IPv4 address (" + gai_strerror(error) +
                              "); a list of coordinators takes IPv4 hosts");
    }
    char ip[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, ip, sizeof(ip));
    freeaddrinfo(found);
    if (target.size() > 5) target += ",";
    target += std::string(ip) + ":" + std::to_string(one.port);
  }
  return target;
}

StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address,
                                                     const ClientSecurity& security,
                                                     grpc::ChannelArguments args) {
  RETURN_IF_ERROR(CheckTokenTransport(address, security));
  ASSIGN_OR_RETURN(const std::string target, CoordinatorTarget(address));
  if (target != address) args.SetLoadBalancingPolicyName("round_robin");
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (security.tls.configured()) {
    ASSIGN_OR_RETURN(PemFiles pems, ReadPems(security.tls));
    grpc::experimental::TlsChannelCredentialsOptions options;
    options.set_certificate_provider(
        std::make_shared<grpc::experimental::StaticDataCertificateProvider>(
            pems.ca, std::vector<grpc::experimental::IdentityKeyCertPair>{{pems.key, pems.cert}}));
    options.watch_root_certs();
    options.watch_identity_key_cert_pairs();
    // CoordinatorCertificateCheck verifies the chain itself, so that a refusal says why (another
    // CA, expired, not the coordinator's role) instead of OpenSSL's "certificate verify failed",
    // and checks the name (gRPC's own host check does not run beside a custom verifier).
    options.set_verify_server_certs(false);
    options.set_certificate_verifier(
        grpc::experimental::ExternalCertificateVerifier::Create<CoordinatorCertificateCheck>(
            pems.ca));
    options.set_check_call_host(false);
    credentials = grpc::experimental::TlsCredentials(options);
    // Whatever address is dialled, the server must prove it holds the coordinator's certificate.
    args.SetSslTargetNameOverride(kCoordinatorTlsName);
  }
  if (security.token.empty()) return grpc::CreateCustomChannel(target, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<BearerTokenFactory>(security.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, credentials, args,
                                                                 std::move(interceptors));
}

std::string DescribeTlsRefusal(const std::string& message) {
  const std::string prefix = "TLS handshake refused: ";
  // Our own check of the server (CoordinatorCertificateCheck) says exactly what was wrong.
  const std::string custom = "Custom verification check failed with error: ";
  if (size_t at = message.find(custom); at != std::string::npos) {
    std::string cause = message.substr(at + custom.size());
    const std::string code = "UNAUTHENTICATED: ";
    if (cause.rfind(code, 0) == 0) cause = cause.substr(code.size());
    return prefix + cause;
  }
  // OpenSSL's reason: "...SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version number".
  const bool handshake = message.find("andshake failed") != std::string::npos;
  if (!handshake) return "";
  std::string reason = message.substr(message.rfind(':') + 1);
  if (const size_t end = reason.find(" {"); end != std::string::npos) reason.resize(end);
  if (message.find("wrong version number") != std::string::npos) {
    return prefix +
           "the server does not speak TLS (a coordinator started without --tls-*? then leave "
           "out the TLS files; else check the address)";
  }
  if (message.find("certificate verify failed") != std::string::npos) {
    return prefix + "the server's certificate is not signed by your CA (DEEPOOL_TLS_CA) or has " +
           "expired";
  }
  if (message.find("alert") != std::string::npos) {
    return prefix + "the server refused this client's certificate (" + reason +
           "): it must come from the cluster's CA and be unexpired";
  }
  return prefix + reason;
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadSecretFile(path, "the token file"));
  const std::string line = text.substr(0, text.find('\n'));
  const size_t begin = line.find_first_not_of(" \t\r");
  const size_t end = line.find_last_not_of(" \t\r");
  if (begin == std::string::npos)
    return InvalidArgumentError("the token file " + path + " is empty");
  return line.substr(begin, end - begin + 1);
}

PeerCredentials PeerCredentialsOf(const grpc::ServerContext& context) {
  PeerCredentials peer;
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  // Present whether or not gRPC verified it: the Authenticator verifies it (MakeServerCredentials).
  if (auth) {
    const std::vector<grpc::string_ref> pems =
        auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
    if (!pems.empty()) peer.certificate_pem = std::string(pems.front().data(), pems.front().size());
    const std::vector<grpc::string_ref> chains =
        auth->FindPropertyValues(GRPC_X509_PEM_CERT_CHAIN_PROPERTY_NAME);
    if (!chains.empty()) {
      peer.certificate_chain_pem = std::string(chains.front().data(), chains.front().size());
    }
  }
  const auto& metadata = context.client_metadata();
  const auto header = metadata.find("authorization");
  if (header != metadata.end()) {
    const std::string value(header->second.data(), header->second.size());
    const std::string prefix = "Bearer ";
    if (value.rfind(prefix, 0) == 0 && value.size() > prefix.size()) {
      peer.bearer_token = value.substr(prefix.size());
    } else {
      peer.malformed_authorization = true;
    }
  }
  return peer;
}

}  // namespace deepool::security

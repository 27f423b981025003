#include "security/transport.h"

#include <grpcpp/support/client_interceptor.h>

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
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = pems.ca;
  options.pem_key_cert_pairs.push_back({pems.key, pems.cert});
  return grpc::SslServerCredentials(options);
}

StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address,
                                                     const ClientSecurity& security,
                                                     grpc::ChannelArguments args) {
  RETURN_IF_ERROR(CheckTokenTransport(address, security));
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (security.tls.configured()) {
    ASSIGN_OR_RETURN(PemFiles pems, ReadPems(security.tls));
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = pems.ca;
    options.pem_cert_chain = pems.cert;
    options.pem_private_key = pems.key;
    credentials = grpc::SslCredentials(options);
    // Whatever address is dialled, the server must prove it holds the coordinator's certificate.
    args.SetSslTargetNameOverride(kCoordinatorTlsName);
  }
  if (security.token.empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<BearerTokenFactory>(security.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(interceptors));
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
  if (auth && auth->IsPeerAuthenticated()) {
    const std::vector<grpc::string_ref> pems =
        auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
    if (!pems.empty()) peer.certificate_pem = std::string(pems.front().data(), pems.front().size());
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

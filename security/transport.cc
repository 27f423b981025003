#include "security/transport.h"

#include <grpcpp/support/client_interceptor.h>

#include <fstream>

#include "security/certificates.h"

namespace deepool::security {
namespace {

StatusOr<std::string> ReadPem(const std::string& what, const std::string& path) {
  if (path.empty()) {
    return InvalidArgumentError("TLS needs --tls-ca, --tls-cert and --tls-key together; " + what +
                                " is missing");
  }
  std::ifstream in(path);
  if (!in) return NotFoundError(what + ": cannot read " + path);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
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
  ASSIGN_OR_RETURN(pems.key, ReadPem("the private key (--tls-key)", files.key));
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

}  // namespace

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
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot read the token file " + path);
  std::string line;
  std::getline(in, line);
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

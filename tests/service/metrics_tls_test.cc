// The metrics endpoints over TLS (security/tls_stream.h): HTTPS with client certificates from
// the cluster CA, as on the gRPC port; everything else gets no answer. An OpenSSL client on
// loopback, certificates made for the test.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <memory>

#include "common/host_port.h"
#include "security/cert_files.h"
#include "security/certificates.h"
#include "security/tls_stream.h"
#include "tests/raw_http.h"

namespace deepool::security {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct TempDir {
  TempDir() {
    char pattern[] = "/tmp/dp-tls-metrics-XXXXXX";
    path = mkdtemp(pattern);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

int Connect(const std::string& host_port) {
  StatusOr<HostPort> where = ParseHostPort(host_port);
  REQUIRE(where.ok());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(where->port));
  inet_pton(AF_INET, where->host.c_str(), &address.sin_addr);
  timeval timeout{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  return fd;
}

// GET /metrics over TLS, verifying the server against `ca` and the coordinator's name and
// presenting `client` when given. The response, or "" when the handshake or the exchange failed.
std::string HttpsGet(const std::string& host_port, const std::string& ca, const TlsFiles* client,
                     const std::string& server_name = kCoordinatorTlsName) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_client_method()),
                                                            SSL_CTX_free);
  REQUIRE(SSL_CTX_load_verify_locations(context.get(), ca.c_str(), nullptr) == 1);
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
  if (client) {
    REQUIRE(SSL_CTX_use_certificate_chain_file(context.get(), client->cert.c_str()) == 1);
    REQUIRE(SSL_CTX_use_PrivateKey_file(context.get(), client->key.c_str(), SSL_FILETYPE_PEM) == 1);
  }
  const int fd = Connect(host_port);
  SSL* ssl = SSL_new(context.get());
  SSL_set_fd(ssl, fd);
  SSL_set_tlsext_host_name(ssl, server_name.c_str());
  SSL_set1_host(ssl, server_name.c_str());
  std::string response;
  if (SSL_connect(ssl) == 1) {
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    if (SSL_write(ssl, request.data(), static_cast<int>(request.size())) > 0) {
      char buffer[4096];
      int n;
      while ((n = SSL_read(ssl, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
    }
  }
  ERR_clear_error();
  SSL_free(ssl);
  close(fd);
  return response;
}

std::unique_ptr<HttpEndpoint> StartTls(const TlsFiles& files) {
  StatusOr<HttpStreamFactory> streams = MakeTlsHttpStreams(files);
  REQUIRE(streams.ok());
  HttpEndpoint::Routes routes;
  routes["/metrics"] = [] {
    HttpResponse response;
    response.body = "deepool_up 1\n";
    return response;
  };
  auto endpoint = HttpEndpoint::Start("127.0.0.1:0", std::move(routes), "test-tls", *streams);
  REQUIRE(endpoint.ok());
  return *std::move(endpoint);
}

}  // namespace

TEST_CASE("metrics over TLS answer a client with a cluster certificate, and nobody else",
          "[security][metrics]") {
  TempDir dir, other;
  REQUIRE(InitClusterCertificates(dir.path, {}, 24h).ok());
  REQUIRE(InitClusterCertificates(other.path, {}, 24h).ok());
  StatusOr<TlsFiles> scraper = IssueClusterCertificate(dir.path, Role::kUser, "prometheus", 24h);
  StatusOr<TlsFiles> stranger = IssueClusterCertificate(other.path, Role::kUser, "prometheus", 24h);
  REQUIRE(scraper.ok());
  REQUIRE(stranger.ok());
  auto endpoint = StartTls(CoordinatorTlsFiles(dir.path));

  const std::string ok = HttpsGet(endpoint->address(), dir.path + "/ca.pem", &*scraper);
  CHECK(ok.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(ok.find("deepool_up 1\n") != std::string::npos);
  // No client certificate, or one from another CA: the handshake fails, nothing is served.
  CHECK(HttpsGet(endpoint->address(), dir.path + "/ca.pem", nullptr).empty());
  CHECK(HttpsGet(endpoint->address(), dir.path + "/ca.pem", &*stranger).empty());
  // Plain HTTP to the TLS port gets no metrics.
  CHECK(testing::HttpGet(endpoint->address(), "/metrics").find("deepool_up") == std::string::npos);
  // The endpoint still serves after all that.
  CHECK(HttpsGet(endpoint->address(), dir.path + "/ca.pem", &*scraper).find("deepool_up 1") !=
        std::string::npos);
}

TEST_CASE("a worker's metrics over TLS are verified by the node's name", "[security][metrics]") {
  TempDir dir;
  REQUIRE(InitClusterCertificates(dir.path, {}, 24h).ok());
  StatusOr<TlsFiles> node = IssueClusterCertificate(dir.path, Role::kWorker, "node-7", 24h);
  StatusOr<TlsFiles> scraper = IssueClusterCertificate(dir.path, Role::kUser, "prometheus", 24h);
  REQUIRE(node.ok());
  REQUIRE(scraper.ok());
  auto endpoint = StartTls(*node);
  CHECK(HttpsGet(endpoint->address(), node->ca, &*scraper, "node-7").find("deepool_up 1") !=
        std::string::npos);
  CHECK(HttpsGet(endpoint->address(), node->ca, &*scraper, "node-8").empty());
}

TEST_CASE("a TLS client that never finishes its handshake does not hold up Stop",
          "[security][metrics]") {
  TempDir dir;
  REQUIRE(InitClusterCertificates(dir.path, {}, 24h).ok());
  auto endpoint = StartTls(CoordinatorTlsFiles(dir.path));
  const int silent = Connect(endpoint->address());  // connects, sends nothing
  const auto start = std::chrono::steady_clock::now();
  endpoint->Stop();
  CHECK(std::chrono::steady_clock::now() - start < 3s);  // the 5 s handshake limit not waited
  close(silent);
}

TEST_CASE("TLS files that cannot serve are refused naming the file", "[security][metrics]") {
  TempDir dir;
  REQUIRE(InitClusterCertificates(dir.path, {}, 24h).ok());
  TlsFiles files = CoordinatorTlsFiles(dir.path);
  TlsFiles missing = files;
  missing.cert = dir.path + "/nope.pem";
  CHECK_THAT(MakeTlsHttpStreams(missing).status().message(), Catch::Contains("nope.pem"));
  TlsFiles mismatched = files;
  mismatched.key = dir.path + "/ca-key.pem";
  CHECK_THAT(MakeTlsHttpStreams(mismatched).status().message(),
             Catch::Contains("ca-key.pem") && Catch::Contains("mismatch"));
  TlsFiles partial;
  partial.cert = files.cert;
  CHECK(MakeTlsHttpStreams(partial).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace deepool::security

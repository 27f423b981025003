// The metrics endpoints over TLS (security/tls_stream.h): HTTPS with client certificates from
// the cluster CA, as on the gRPC port; everything else gets no answer. An OpenSSL client on
// loopback, certificates made for the test.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/host_port.h"
#include "coordinator/server.h"
#include "security/cert_files.h"
#include "security/certificates.h"
#include "security/tls_stream.h"
#include "security/users.h"
#include "tests/raw_http.h"
#include "tests/temp_dir.h"

namespace deepool::security {
namespace {

using deepool::testing::TempDir;

namespace fs = std::filesystem;
using namespace std::chrono_literals;

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

std::unique_ptr<HttpEndpoint> StartTls(const TlsFiles& files, TlsClientCheck admit = nullptr) {
  StatusOr<HttpStreamFactory> streams = MakeTlsHttpStreams(files, std::move(admit));
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
  REQUIRE(InitClusterCertificates(dir.path(), {}, 24h).ok());
  REQUIRE(InitClusterCertificates(other.path(), {}, 24h).ok());
  StatusOr<TlsFiles> scraper = IssueClusterCertificate(dir.path(), Role::kUser, "prometheus", 24h);
  StatusOr<TlsFiles> stranger =
      IssueClusterCertificate(other.path(), Role::kUser, "prometheus", 24h);
  REQUIRE(scraper.ok());
  REQUIRE(stranger.ok());
  auto endpoint = StartTls(CoordinatorTlsFiles(dir.path()));

  const std::string ok = HttpsGet(endpoint->address(), dir.path() + "/ca.pem", &*scraper);
  CHECK(ok.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(ok.find("deepool_up 1\n") != std::string::npos);
  // No client certificate, or one from another CA: the handshake fails, nothing is served.
  CHECK(HttpsGet(endpoint->address(), dir.path() + "/ca.pem", nullptr).empty());
  CHECK(HttpsGet(endpoint->address(), dir.path() + "/ca.pem", &*stranger).empty());
  // Plain HTTP to the TLS port gets no metrics.
  CHECK(testing::HttpGet(endpoint->address(), "/metrics").find("deepool_up") == std::string::npos);
  // The endpoint still serves after all that.
  CHECK(HttpsGet(endpoint->address(), dir.path() + "/ca.pem", &*scraper).find("deepool_up 1") !=
        std::string::npos);
}

TEST_CASE("the coordinator's metrics over TLS: admins and named readers, never the revoked",
          "[security][metrics]") {
  TempDir dir;
  REQUIRE(InitClusterCertificates(dir.path(), {}, 24h).ok());
  std::map<std::string, TlsFiles> certs;
  for (const auto& [name, role] :
       std::vector<std::pair<std::string, Role>>{{"prometheus", Role::kUser},
                                                 {"alice", Role::kUser},
                                                 {"root", Role::kAdmin},
                                                 {"node-1", Role::kWorker},
                                                 {"mallory", Role::kUser}}) {
    StatusOr<TlsFiles> issued = IssueClusterCertificate(dir.path(), role, name, 24h);
    REQUIRE(issued.ok());
    certs[name] = *issued;
  }
  UserTable table;
  REQUIRE(table.Add("mallory", Role::kUser, TokenDigest("m")).ok());
  REQUIRE(table.Revoke("mallory").ok());
  REQUIRE(SaveUserTable(table, dir.File("users.json")).ok());
  StatusOr<std::unique_ptr<UsersFile>> users = UsersFile::Open(dir.File("users.json"));
  REQUIRE(users.ok());
  const TlsFiles coordinator = CoordinatorTlsFiles(dir.path());
  StatusOr<std::unique_ptr<Authenticator>> auth =
      Authenticator::ForServer(coordinator, users->get());
  REQUIRE(auth.ok());
  auto endpoint = StartTls(coordinator,
                           coordinator::MetricsReaderCheck(auth->get(), {"prometheus", "mallory"}));
  auto served = [&](const std::string& name) {
    return HttpsGet(endpoint->address(), dir.path() + "/ca.pem", &certs.at(name))
               .find("deepool_up 1") != std::string::npos;
  };
  CHECK(served("prometheus"));
  CHECK(served("root"));
  // Every user's jobs are in the metrics: not another user's to read, nor a node's.
  CHECK_FALSE(served("alice"));
  CHECK_FALSE(served("node-1"));
  // A revoked reader is refused though named.
  CHECK_FALSE(served("mallory"));
}

TEST_CASE("a worker's metrics over TLS are verified by the node's name", "[security][metrics]") {
  TempDir dir;
  REQUIRE(InitClusterCertificates(dir.path(), {}, 24h).ok());
  StatusOr<TlsFiles> node = IssueClusterCertificate(dir.path(), Role::kWorker, "node-7", 24h);
  StatusOr<TlsFiles> scraper = IssueClusterCertificate(dir.path(), Role::kUser, "prometheus", 24h);
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
  REQUIRE(InitClusterCertificates(dir.path(), {}, 24h).ok());
  auto endpoint = StartTls(CoordinatorTlsFiles(dir.path()));
  const int silent = Connect(endpoint->address());  // connects, sends nothing
  const auto start = std::chrono::steady_clock::now();
  endpoint->Stop();
  CHECK(std::chrono::steady_clock::now() - start < 3s);  // the 5 s handshake limit not waited
  close(silent);
}

TEST_CASE("TLS files that cannot serve are refused naming the file", "[security][metrics]") {
  TempDir dir;
  REQUIRE(InitClusterCertificates(dir.path(), {}, 24h).ok());
  TlsFiles files = CoordinatorTlsFiles(dir.path());
  TlsFiles missing = files;
  missing.cert = dir.path() + "/nope.pem";
  CHECK_THAT(MakeTlsHttpStreams(missing).status().message(), Catch::Contains("nope.pem"));
  TlsFiles mismatched = files;
  mismatched.key = dir.path() + "/ca-key.pem";
  CHECK_THAT(MakeTlsHttpStreams(mismatched).status().message(),
             Catch::Contains("ca-key.pem") && Catch::Contains("mismatch"));
  TlsFiles partial;
  partial.cert = files.cert;
  CHECK(MakeTlsHttpStreams(partial).status().code() == StatusCode::kInvalidArgument);
}

namespace {

// A client-side TLS context that trusts `ca` and presents `client`.
std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ClientContext(const std::string& ca,
                                                                const TlsFiles& client) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_client_method()),
                                                            SSL_CTX_free);
  REQUIRE(SSL_CTX_load_verify_locations(context.get(), ca.c_str(), nullptr) == 1);
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
  REQUIRE(SSL_CTX_use_certificate_chain_file(context.get(), client.cert.c_str()) == 1);
  REQUIRE(SSL_CTX_use_PrivateKey_file(context.get(), client.key.c_str(), SSL_FILETYPE_PEM) == 1);
  return context;
}

// The bytes a client sends first: its ClientHello, taken from an SSL object over memory BIOs.
std::string ClientHello(SSL_CTX* context) {
  SSL* ssl = SSL_new(context);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);  // ssl owns both
  SSL_set_tlsext_host_name(ssl, kCoordinatorTlsName);
  REQUIRE(SSL_connect(ssl) == -1);  // waits for the server's answer
  char* data = nullptr;
  const long size = BIO_get_mem_data(out, &data);
  std::string hello(data, static_cast<size_t>(size));
  SSL_free(ssl);
  ERR_clear_error();
  return hello;
}

// Closes fd with a reset (RST), or with an orderly end of stream (FIN): what was received and
// not read is dropped first (TLS 1.3 session tickets), since closing over unread bytes resets.
void Leave(int fd, bool reset) {
  if (reset) {
    const linger abort{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
  } else {
    char buffer[4096];
    while (recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT) > 0) {
    }
  }
  close(fd);
}

// A TLS client whose handshake is done; it owns its socket.
struct TlsClient {
  int fd = -1;
  SSL* ssl = nullptr;
  ~TlsClient() {
    if (ssl) SSL_free(ssl);
    if (fd >= 0) close(fd);
  }
};

std::unique_ptr<TlsClient> Handshake(const std::string& host_port, SSL_CTX* context) {
  auto client = std::make_unique<TlsClient>();
  client->fd = Connect(host_port);
  client->ssl = SSL_new(context);
  SSL_set_fd(client->ssl, client->fd);
  SSL_set_tlsext_host_name(client->ssl, kCoordinatorTlsName);
  SSL_set1_host(client->ssl, kCoordinatorTlsName);
  REQUIRE(SSL_connect(client->ssl) == 1);
  return client;
}

// Sends `request` over the client's TLS connection, then leaves without reading the answer.
void RequestAndLeave(std::unique_ptr<TlsClient> client, const std::string& request, bool reset) {
  CHECK(SSL_write(client->ssl, request.data(), static_cast<int>(request.size())) ==
        static_cast<int>(request.size()));
  Leave(client->fd, reset);
  client->fd = -1;
}

// Blocks SIGPIPE on the test's thread while it lives, so the clients' own writes never raise it:
// only the endpoint's thread (started before, with the default disposition) can die of one.
// A SIGPIPE left pending here is taken before the mask is restored.
class ClientSigpipeBlocked {
 public:
  ClientSigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~ClientSigpipeBlocked() {
    const timespec now{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
};

// A handler that waits, on the endpoint's thread, until the test lets each call return.
class Gate {
 public:
  HttpResponse Enter() {
    std::unique_lock<std::mutex> lock(mu_);
    const int me = ++entered_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return released_ >= me; });
    HttpResponse response;
    response.body = std::string(1 << 20, 'x');  // over the socket buffers: several writes
    return response;
  }
  // True once `calls` calls have entered (false after 20 s).
  bool WaitEntered(int calls) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(20), [&] { return entered_ >= calls; });
  }
  void Release(int calls) {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = calls;
    changed_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int entered_ = 0;
  int released_ = 0;
};

}  // namespace

TEST_CASE("idle connections do not hold up an HTTPS scrape", "[security][metrics]") {
  TempDir dir;
  REQUIRE(InitClusterCertificates(dir.path(), {}, 24h).ok());
  StatusOr<TlsFiles> scraper = IssueClusterCertificate(dir.path(), Role::kUser, "prometheus", 24h);
  REQUIRE(scraper.ok());
  auto endpoint = StartTls(CoordinatorTlsFiles(dir.path()));
  // No certificate needed to connect and say nothing; served one after another, each of these
  // would hold the endpoint for its whole 5 s handshake deadline.
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(Connect(endpoint->address()));
  const auto start = std::chrono::steady_clock::now();
  const std::string response = HttpsGet(endpoint->address(), dir.path() + "/ca.pem", &*scraper);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK(response.find("deepool_up 1") != std::string::npos);
  for (int fd : idle) close(fd);
}

TEST_CASE("half-open and reset TLS clients of a busy endpoint neither kill it nor hold it up",
          "[security][metrics]") {
  // The default action, as in a daemon that forgot to ignore SIGPIPE: the endpoint must not rely
  // on the process's disposition. A SIGPIPE raised on its thread ends this test process (141).
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  struct sigaction before {};
  sigaction(SIGPIPE, &default_action, &before);

  TempDir dir;
  REQUIRE(InitClusterCertificates(dir.path(), {}, 24h).ok());
  StatusOr<TlsFiles> scraper = IssueClusterCertificate(dir.path(), Role::kUser, "prometheus", 24h);
  REQUIRE(scraper.ok());
  StatusOr<HttpStreamFactory> streams = MakeTlsHttpStreams(CoordinatorTlsFiles(dir.path()));
  REQUIRE(streams.ok());
  Gate gate;
  HttpEndpoint::Routes routes;
  routes["/slow"] = [&gate] { return gate.Enter(); };
  routes["/metrics"] = [] {
    HttpResponse response;
    response.body = std::string(1 << 20, 'm');
    return response;
  };
  auto started = HttpEndpoint::Start("127.0.0.1:0", std::move(routes), "test-tls", *streams);
  REQUIRE(started.ok());
  const std::string address = (*started)->address();
  ClientSigpipeBlocked client_side;  // after Start: the endpoint's thread keeps the default

  const std::string ca = dir.path() + "/ca.pem";
  auto context = ClientContext(ca, *scraper);
  const std::string hello = ClientHello(context.get());
  const std::string get_slow = "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string get_metrics = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  constexpr int kRounds = 4;
  for (int round = 1; round <= kRounds; ++round) {
    INFO("round " << round);
    // Clients whose handshake is done before the endpoint gets busy.
    std::vector<std::unique_ptr<TlsClient>> ready;
    for (int i = 0; i < 2; ++i) ready.push_back(Handshake(address, context.get()));
    // One client's request holds the endpoint's thread in the handler ...
    std::unique_ptr<TlsClient> busy = Handshake(address, context.get());
    REQUIRE(SSL_write(busy->ssl, get_slow.data(), static_cast<int>(get_slow.size())) ==
            static_cast<int>(get_slow.size()));
    REQUIRE(gate.WaitEntered(round));
    // ... while strangers send a ClientHello, or half of one, and go (FIN or RST) ...
    for (int i = 0; i < 6; ++i) {
      const int fd = Connect(address);
      const size_t size = i % 3 == 2 ? hello.size() / 2 : hello.size();
      CHECK(send(fd, hello.data(), size, MSG_NOSIGNAL) == static_cast<ssize_t>(size));
      Leave(fd, /*reset=*/i % 2 == 1);
    }
    // ... the ready clients ask for the metrics and go at once ...
    RequestAndLeave(std::move(ready[0]), get_metrics, /*reset=*/true);
    RequestAndLeave(std::move(ready[1]), get_metrics, /*reset=*/false);
    // ... and the busy client goes before its answer is written.
    Leave(busy->fd, /*reset=*/round % 2 == 0);
    busy->fd = -1;
    busy.reset();
    gate.Release(round);
  }
  // A proper scraper is still answered, by an endpoint in a live process.
  const std::string response = HttpsGet(address, ca, &*scraper);
  CHECK(response.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(response.size() > (1 << 20));
  (*started)->Stop();
  sigaction(SIGPIPE, &before, nullptr);
}

}  // namespace deepool::security

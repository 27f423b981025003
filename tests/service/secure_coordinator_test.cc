// The coordinator with mutual TLS and a users file, in-process on port 0, called through real
// gRPC channels with each kind of credential: every refusal of issue "security" point 6 that
// concerns the API (no certificate, another CA's, an expired one, a worker's certificate on the
// client API, a user's token on the worker API, a user acting on another's job), and what each
// role may do.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/clock.h"
#include "coordinator/server.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "deepool/v1/node.grpc.pb.h"
#include "security/cert_files.h"
#include "security/certificates.h"
#include "security/transport.h"
#include "security/users.h"
#include "tests/node_registration.h"
#include "tests/service/forged_certificate.h"
#include "tests/service/service_test_util.h"
#include "tests/temp_dir.h"

namespace deepool::coordinator {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;
using security::ClientSecurity;
using security::Role;
using security::TlsFiles;
using std::chrono::seconds;

constexpr const char* kTinyJob =
    R"({"name":"t","model":"tiny","global_batch":8,"gpus":1,"iterations":2,"profile":"analytical"})";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The lines the default logger prints while it lives.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()), sink_(std::make_shared<Sink>()) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink_));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::vector<std::string> Lines() const { return sink_->Lines(); }

 private:
  class Sink final : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::vector<std::string> Lines() {
      std::lock_guard<std::mutex> lock(mutex_);
      return lines_;
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
      lines_.emplace_back(msg.payload.data(), msg.payload.size());
    }
    void flush_() override {}

   private:
    std::vector<std::string> lines_;
  };
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<Sink> sink_;
};

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + seconds(10));
  return ctx;
}

// A cluster CA with certificates for users alice and bob, admin root, worker node-a; tokens for
// alice (user), root (admin) and node-b (worker) in the users file; a coordinator serving mTLS,
// with `path_roots` (--path-roots) and the other options `configure` sets.
struct SecureCluster {
  explicit SecureCluster(std::vector<std::string> path_roots = {},
                         const std::function<void(CoordinatorOptions*)>& configure = {})
      : dir(temp.path()) {
    const seconds day = std::chrono::hours(24);
    REQUIRE(security::InitClusterCertificates(dir / "pki", {"127.0.0.1"}, day).ok());
    alice = Issue(Role::kUser, "alice");
    bob = Issue(Role::kUser, "bob");
    root = Issue(Role::kAdmin, "root");
    node_a = Issue(Role::kWorker, "node-a");
    security::UserTable users;
    alice_token = AddToken(users, "alice", Role::kUser);
    root_token = AddToken(users, "root", Role::kAdmin);
    node_b_token = AddToken(users, "node-b", Role::kWorker);
    REQUIRE(security::SaveUserTable(users, dir / "users.json").ok());

    CoordinatorOptions options;
    options.listen = "127.0.0.1:0";
    options.store = "memory";
    options.control_loop = false;
    options.tls = security::CoordinatorTlsFiles(dir / "pki");
    options.users_file = (dir / "users.json").string();
    options.path_roots = std::move(path_roots);
    if (configure) configure(&options);
    auto started =
        CoordinatorServer::Start(options, std::make_unique<InMemoryJobStore>(),
                                 std::make_unique<testing::FakePlanningBackend>(), &clock);
    REQUIRE(started.ok());
    server = std::move(*started);
  }
  ~SecureCluster() { server->Shutdown(); }

  TlsFiles Issue(Role role, const std::string& name) {
    auto files = security::IssueClusterCertificate(dir / "pki", role, name, std::chrono::hours(24));
    REQUIRE(files.ok());
    return *files;
  }
  std::string AddToken(security::UserTable& users, const std::string& name, Role role) {
    std::string token = security::NewToken().value();
    REQUIRE(users.Add(name, role, security::TokenDigest(token)).ok());
    return token;
  }

  std::shared_ptr<grpc::Channel> Channel(const ClientSecurity& who) {
    auto channel = security::OpenChannel(server->address(), who, grpc::ChannelArguments());
    REQUIRE(channel.ok());
    return *channel;
  }
  std::unique_ptr<v1::CoordinatorService::Stub> Client(const ClientSecurity& who) {
    return v1::CoordinatorService::NewStub(Channel(who));
  }
  std::unique_ptr<v1::NodeService::Stub> Worker(const ClientSecurity& who) {
    return v1::NodeService::NewStub(Channel(who));
  }

  // The tiny job, with `extra` fields (`"name":value,...`) when given.
  grpc::Status Submit(const ClientSecurity& who, std::string* job_id,
                      const std::string& extra = "") {
    v1::SubmitJobRequest req;
    std::string spec = kTinyJob;
    if (!extra.empty()) spec.insert(spec.size() - 1, "," + extra);
    req.set_spec_json(spec);
    v1::SubmitJobResponse resp;
    grpc::Status status = Client(who)->SubmitJob(Context().get(), req, &resp);
    if (status.ok()) *job_id = resp.job_id();
    return status;
  }
  grpc::Status Cancel(const ClientSecurity& who, const std::string& job_id) {
    v1::CancelJobRequest req;
    req.set_job_id(job_id);
    v1::Job job;
    return Client(who)->CancelJob(Context().get(), req, &job);
  }
  grpc::Status Register(const ClientSecurity& who, const std::string& name,
                        std::string* node_id = nullptr) {
    const v1::RegisterNodeRequest req = deepool::testing::CpuNodeRegistration(name, "127.0.0.1", 1);
    v1::RegisterNodeResponse resp;
    grpc::Status status = Worker(who)->RegisterNode(Context().get(), req, &resp);
    if (node_id) *node_id = resp.node_id();
    return status;
  }
  grpc::Status ListNodes(const ClientSecurity& who) {
    v1::ListNodesResponse resp;
    return Client(who)->ListNodes(Context().get(), v1::ListNodesRequest(), &resp);
  }

  FakeClock clock;
  TempDir temp;  // removed after the server is gone
  fs::path dir;  // temp.path()
  TlsFiles alice, bob, root, node_a;
  std::string alice_token, root_token, node_b_token;
  std::unique_ptr<CoordinatorServer> server;
};

TEST_CASE("mutual TLS: a client without a certificate, or with a stranger's, does not get in",
          "[service][security]") {
  SecureCluster c;
  REQUIRE(c.ListNodes(ClientSecurity{c.alice, ""}).ok());

  // The handshake asks for a certificate and the Authenticator checks it on every call, so each
  // refusal says why (UNAUTHENTICATED), where a refused handshake would say only UNAVAILABLE.
  SECTION("no client certificate") {
    grpc::SslCredentialsOptions only_ca;
    only_ca.pem_root_certs = ReadFile(c.alice.ca);
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride(security::kCoordinatorTlsName);
    auto stub = v1::CoordinatorService::NewStub(
        grpc::CreateCustomChannel(c.server->address(), grpc::SslCredentials(only_ca), args));
    v1::ListNodesResponse resp;
    grpc::Status status = stub->ListNodes(Context().get(), v1::ListNodesRequest(), &resp);
    CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK_THAT(status.error_message(), Catch::Contains("without a client certificate"));
    // Nor does a valid token stand in for the certificate.
    grpc::ClientContext with_token;
    with_token.set_deadline(std::chrono::system_clock::now() + seconds(10));
    with_token.AddMetadata("authorization", "Bearer " + c.root_token);
    CHECK(stub->ListNodes(&with_token, v1::ListNodesRequest(), &resp).error_code() ==
          grpc::StatusCode::UNAUTHENTICATED);
  }
  SECTION("plain TCP") {
    auto stub = v1::CoordinatorService::NewStub(
        grpc::CreateChannel(c.server->address(), grpc::InsecureChannelCredentials()));
    v1::ListNodesResponse resp;
    CHECK(stub->ListNodes(Context().get(), v1::ListNodesRequest(), &resp).error_code() ==
          grpc::StatusCode::UNAVAILABLE);
  }
  SECTION("a certificate from another CA, with a valid token") {
    const fs::path other = c.dir / "other-pki";
    REQUIRE(security::InitClusterCertificates(other, {}, std::chrono::hours(24)).ok());
    auto mallory =
        security::IssueClusterCertificate(other, Role::kAdmin, "mallory", std::chrono::hours(24));
    REQUIRE(mallory.ok());
    TlsFiles stranger = *mallory;
    stranger.ca = c.alice.ca;  // trusts our coordinator, but our coordinator does not trust it
    grpc::Status status = c.ListNodes(ClientSecurity{stranger, c.root_token});
    CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK_THAT(status.error_message(), Catch::Contains("is not signed by this cluster's CA"));
  }
  SECTION("an expired certificate from the right CA") {
    security::KeyAndCertificate ca{ReadFile(c.dir / "pki" / "ca.pem"),
                                   ReadFile(c.dir / "pki" / "ca-key.pem")};
    security::CertificateRequest request;
    request.common_name = "alice";
    request.role = Role::kUser;
    request.not_before_offset = -std::chrono::hours(48);
    request.valid_for = std::chrono::hours(24);
    auto expired = security::IssueCertificate(ca, request);
    REQUIRE(expired.ok());
    REQUIRE(security::WriteNewFile(c.dir / "expired.pem", expired->certificate_pem, 0644).ok());
    REQUIRE(security::WriteNewFile(c.dir / "expired-key.pem", expired->private_key_pem, 0600).ok());
    const TlsFiles files{c.alice.ca, (c.dir / "expired.pem").string(),
                         (c.dir / "expired-key.pem").string()};
    grpc::Status status = c.ListNodes(ClientSecurity{files, ""});
    CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK_THAT(status.error_message(), Catch::Contains("expired at"));
  }
  SECTION("a coordinator that is not ours: the client refuses it, and says why") {
    TlsFiles wrong_ca = c.alice;
    const fs::path other = c.dir / "other-pki";
    REQUIRE(security::InitClusterCertificates(other, {}, std::chrono::hours(24)).ok());
    wrong_ca.ca = (other / "ca.pem").string();
    grpc::Status status = c.ListNodes(ClientSecurity{wrong_ca, ""});
    CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
    CHECK_THAT(security::DescribeTlsRefusal(status.error_message()),
               Catch::StartsWith("TLS handshake refused: the server's certificate: the "
                                 "certificate") &&
                   Catch::Contains("is not signed by this cluster's CA"));
  }
}

TEST_CASE("a server with a user's or a node's certificate of the same CA is no coordinator",
          "[service][security]") {
  SecureCluster c;
  // Whoever holds a user's or node's certificate could serve with it and collect every client's
  // token, were clients to check only the CA (and the name, which a certificate from another
  // tool may bear); they check the coordinator's role too.
  const security::KeyAndCertificate forged = deepool::testing::ForgeCoordinatorNamed(
      {ReadFile(c.dir / "pki" / "ca.pem"), ReadFile(c.dir / "pki" / "ca-key.pem")}, Role::kUser);
  REQUIRE(security::WriteNewFile(c.dir / "forged.pem", forged.certificate_pem, 0644).ok());
  REQUIRE(security::WriteNewFile(c.dir / "forged-key.pem", forged.private_key_pem, 0600).ok());
  TlsFiles named_like_coordinator{c.alice.ca, (c.dir / "forged.pem").string(),
                                  (c.dir / "forged-key.pem").string()};
  for (const TlsFiles* held : {&c.node_a, &c.bob, &named_like_coordinator}) {
    CoordinatorOptions options;
    options.listen = "127.0.0.1:0";
    options.store = "memory";
    options.control_loop = false;
    options.tls = *held;
    auto impostor =
        CoordinatorServer::Start(options, std::make_unique<InMemoryJobStore>(),
                                 std::make_unique<testing::FakePlanningBackend>(), &c.clock);
    REQUIRE(impostor.ok());
    const std::string role = held == &c.node_a ? "worker" : "user";
    // The CLI's and the worker's channels (both security::OpenChannel) refuse it at the
    // handshake, before any token is sent.
    auto channel = security::OpenChannel(
        (*impostor)->address(), ClientSecurity{c.alice, c.root_token}, grpc::ChannelArguments());
    REQUIRE(channel.ok());
    v1::ListNodesResponse nodes;
    grpc::Status client = v1::CoordinatorService::NewStub(*channel)->ListNodes(
        Context().get(), v1::ListNodesRequest(), &nodes);
    CHECK(client.error_code() == grpc::StatusCode::UNAVAILABLE);
    const std::string why = security::DescribeTlsRefusal(client.error_message());
    CHECK_THAT(why, Catch::StartsWith("TLS handshake refused: the server presents a " + role +
                                      " certificate"));
    CHECK_THAT(why, Catch::Contains("not your coordinator"));
    CHECK(c.Register(ClientSecurity{c.node_a, ""}, "node-a").ok());  // the real one still works
    auto worker_channel = security::OpenChannel(
        (*impostor)->address(), ClientSecurity{c.node_a, ""}, grpc::ChannelArguments());
    REQUIRE(worker_channel.ok());
    v1::RegisterNodeRequest req;
    req.set_name("node-a");
    v1::RegisterNodeResponse resp;
    grpc::Status worker =
        v1::NodeService::NewStub(*worker_channel)->RegisterNode(Context().get(), req, &resp);
    CHECK(worker.error_code() == grpc::StatusCode::UNAVAILABLE);
    CHECK_THAT(security::DescribeTlsRefusal(worker.error_message()),
               Catch::Contains("presents a " + role + " certificate"));
    (*impostor)->Shutdown();
  }
}

TEST_CASE("a TLS client of a plaintext server says the server does not speak TLS",
          "[service][security]") {
  SecureCluster c;
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.store = "memory";
  options.control_loop = false;
  options.insecure = true;
  auto plain = CoordinatorServer::Start(options, std::make_unique<InMemoryJobStore>(),
                                        std::make_unique<testing::FakePlanningBackend>(), &c.clock);
  REQUIRE(plain.ok());
  auto channel = security::OpenChannel((*plain)->address(), ClientSecurity{c.alice, ""},
                                       grpc::ChannelArguments());
  REQUIRE(channel.ok());
  v1::ListNodesResponse nodes;
  grpc::Status status = v1::CoordinatorService::NewStub(*channel)->ListNodes(
      Context().get(), v1::ListNodesRequest(), &nodes);
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_THAT(security::DescribeTlsRefusal(status.error_message()),
             Catch::Contains("the server does not speak TLS"));
  (*plain)->Shutdown();
}

TEST_CASE("refused calls are logged with the caller's address, and a flood of them is not",
          "[service][security]") {
  SecureCluster c;
  CapturedLog log;
  grpc::SslCredentialsOptions only_ca;
  only_ca.pem_root_certs = ReadFile(c.alice.ca);
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(security::kCoordinatorTlsName);
  auto stub = v1::CoordinatorService::NewStub(
      grpc::CreateCustomChannel(c.server->address(), grpc::SslCredentials(only_ca), args));
  for (int i = 0; i < 200; ++i) {
    v1::ListNodesResponse resp;
    REQUIRE(stub->ListNodes(Context().get(), v1::ListNodesRequest(), &resp).error_code() ==
            grpc::StatusCode::UNAUTHENTICATED);
  }
  const std::vector<std::string> lines = log.Lines();
  int refusals = 0;
  for (const std::string& line : lines) {
    if (line.find("ListNodes from ipv4:127.0.0.1:") != std::string::npos &&
        line.find("without a client certificate") != std::string::npos) {
      ++refusals;
    }
  }
  CHECK(refusals >= 1);   // who knocked, and from where
  CHECK(refusals <= 20);  // at most 20 lines a minute, however many calls
}

TEST_CASE("daemon certificates and user tokens each stay on their own API", "[service][security]") {
  SecureCluster c;
  SECTION("a worker's certificate calling the client API is refused, token or not") {
    grpc::Status status = c.ListNodes(ClientSecurity{c.node_a, ""});
    CHECK(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(status.error_message(), Catch::Contains("may not call the client API"));
    std::string job;
    CHECK(c.Submit(ClientSecurity{c.node_a, c.root_token}, &job).error_code() ==
          grpc::StatusCode::PERMISSION_DENIED);
  }
  SECTION("a user's token or certificate calling the worker API is refused") {
    grpc::Status with_token = c.Register(ClientSecurity{c.alice, c.root_token}, "node-a");
    CHECK(with_token.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(with_token.error_message(), Catch::Contains("needs a worker's certificate"));
    CHECK(c.Register(ClientSecurity{c.alice, ""}, "node-a").error_code() ==
          grpc::StatusCode::PERMISSION_DENIED);
    v1::HeartbeatRequest beat;
    beat.set_node_id("anything");
    v1::HeartbeatResponse resp;
    CHECK(c.Worker(ClientSecurity{c.alice, ""})
              ->Heartbeat(Context().get(), beat, &resp)
              .error_code() == grpc::StatusCode::PERMISSION_DENIED);
  }
  SECTION("a worker acts only for the node its certificate names") {
    std::string node_a_id;
    REQUIRE(c.Register(ClientSecurity{c.node_a, ""}, "node-a", &node_a_id).ok());
    grpc::Status other = c.Register(ClientSecurity{c.node_a, ""}, "node-z");
    CHECK(other.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(other.error_message(), Catch::Contains("may not act for node node-z"));
    // node-b (a worker token over a user's TLS certificate) may not heartbeat for node-a.
    v1::HeartbeatRequest beat;
    beat.set_node_id(node_a_id);
    v1::HeartbeatResponse resp;
    grpc::Status stolen =
        c.Worker(ClientSecurity{c.alice, c.node_b_token})->Heartbeat(Context().get(), beat, &resp);
    CHECK(stolen.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK(c.Worker(ClientSecurity{c.node_a, ""})->Heartbeat(Context().get(), beat, &resp).ok());
    // A worker token names its node, as a worker certificate does.
    CHECK(c.Register(ClientSecurity{c.alice, c.node_b_token}, "node-b").ok());
  }
}

TEST_CASE("users own their jobs, admins may act on every job and on nodes", "[service][security]") {
  SecureCluster c;
  const ClientSecurity alice_by_cert{c.alice, ""};
  const ClientSecurity bob_by_cert{c.bob, ""};
  const ClientSecurity alice_by_token{c.bob, c.alice_token};  // a token names its user
  const ClientSecurity root{c.alice, c.root_token};
  std::string alices, bobs;
  REQUIRE(c.Submit(alice_by_cert, &alices).ok());
  REQUIRE(c.Submit(bob_by_cert, &bobs).ok());
  CHECK(c.server->jobs()->Get(alices)->owner == "alice");
  CHECK(c.server->jobs()->Get(bobs)->owner == "bob");

  SECTION("a user cancelling another's job is refused, and the job goes on") {
    grpc::Status status = c.Cancel(bob_by_cert, alices);
    CHECK(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(status.error_message(), Catch::Contains("needs the admin role"));
    CHECK(c.server->jobs()->Get(alices)->state == JobState::kPending);
    CHECK(c.Cancel(alice_by_token, alices).ok());
    CHECK(c.Cancel(root, bobs).ok());
  }
  SECTION("a user reads only their own jobs") {
    v1::GetJobRequest get;
    get.set_job_id(alices);
    v1::Job job;
    CHECK(c.Client(bob_by_cert)->GetJob(Context().get(), get, &job).error_code() ==
          grpc::StatusCode::PERMISSION_DENIED);
    REQUIRE(c.Client(alice_by_token)->GetJob(Context().get(), get, &job).ok());
    CHECK(job.owner() == "alice");
    v1::GetJobLogsRequest logs;
    logs.set_job_id(alices);
    grpc::ClientContext ctx;
    auto reader = c.Client(bob_by_cert)->GetJobLogs(&ctx, logs);
    v1::LogEntry entry;
    while (reader->Read(&entry)) {
    }
    CHECK(reader->Finish().error_code() == grpc::StatusCode::PERMISSION_DENIED);

    v1::ListJobsResponse mine, all;
    REQUIRE(c.Client(bob_by_cert)->ListJobs(Context().get(), v1::ListJobsRequest(), &mine).ok());
    REQUIRE(mine.jobs_size() == 1);
    CHECK(mine.jobs(0).job_id() == bobs);
    REQUIRE(c.Client(root)->ListJobs(Context().get(), v1::ListJobsRequest(), &all).ok());
    CHECK(all.jobs_size() == 2);
  }
  SECTION("draining a node needs the admin role") {
    REQUIRE(c.Register(ClientSecurity{c.node_a, ""}, "node-a").ok());
    v1::DrainNodeRequest drain;
    drain.set_node("node-a");
    v1::Node node;
    grpc::Status refused = c.Client(alice_by_cert)->DrainNode(Context().get(), drain, &node);
    CHECK(refused.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(refused.error_message(), Catch::Contains("admin role to drain a node"));
    CHECK(c.Client(ClientSecurity{c.root, ""})->DrainNode(Context().get(), drain, &node).ok());
  }
}

TEST_CASE("tokens: unknown ones are refused, and revoking one takes effect without a restart",
          "[service][security]") {
  SecureCluster c;
  const ClientSecurity alice{c.bob, c.alice_token};
  REQUIRE(c.ListNodes(alice).ok());
  grpc::Status unknown = c.ListNodes(ClientSecurity{c.bob, "dpt_not-a-token"});
  CHECK(unknown.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK_THAT(unknown.error_message(), Catch::Contains("unknown or revoked token"));

  auto users = security::LoadUserTable(c.dir / "users.json");
  REQUIRE(users.ok());
  REQUIRE(users->Remove("alice").ok());
  // Another size: the reload does not depend on the file system's timestamp granularity.
  REQUIRE(security::SaveUserTable(*users, c.dir / "users.json").ok());
  CHECK(c.ListNodes(alice).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(c.ListNodes(ClientSecurity{c.bob, ""}).ok());  // bob's certificate still names bob
}

TEST_CASE("revoking a user ends every way in: token, certificate and open streams",
          "[service][security]") {
  SecureCluster c;
  const ClientSecurity alice_by_cert{c.alice, ""};
  const ClientSecurity alice_by_token{c.bob, c.alice_token};
  std::string job_id;
  REQUIRE(c.Submit(alice_by_cert, &job_id).ok());  // stays PENDING: no control loop

  // Alice watches her job and follows its logs; both streams are open when she is revoked.
  grpc::ClientContext watch_ctx, logs_ctx;
  watch_ctx.set_deadline(std::chrono::system_clock::now() + seconds(30));
  logs_ctx.set_deadline(std::chrono::system_clock::now() + seconds(30));
  v1::WatchJobRequest watch;
  watch.set_job_id(job_id);
  auto watcher = c.Client(alice_by_cert)->WatchJob(&watch_ctx, watch);
  v1::Job seen;
  REQUIRE(watcher->Read(&seen));
  v1::GetJobLogsRequest logs;
  logs.set_job_id(job_id);
  logs.set_follow(true);
  // (The log stream has nothing to send: it is refused either when it starts or while it waits.)
  auto follower = c.Client(alice_by_token)->GetJobLogs(&logs_ctx, logs);
  REQUIRE(c.ListNodes(alice_by_token).ok());

  auto users = security::LoadUserTable(c.dir / "users.json");
  REQUIRE(users.ok());
  REQUIRE(*users->Revoke("alice"));
  REQUIRE(security::SaveUserTable(*users, c.dir / "users.json").ok());

  grpc::Status refused = c.ListNodes(alice_by_cert);
  CHECK(refused.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK_THAT(refused.error_message(), Catch::Contains("alice is revoked"));
  std::string other;
  CHECK(c.Submit(alice_by_cert, &other).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(c.Cancel(alice_by_cert, job_id).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(c.ListNodes(alice_by_token).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  // Alice's certificate with the admin's token: still alice's certificate.
  CHECK(c.ListNodes(ClientSecurity{c.alice, c.root_token}).error_code() ==
        grpc::StatusCode::UNAUTHENTICATED);
  CHECK(c.ListNodes(ClientSecurity{c.bob, ""}).ok());  // bob is not affected

  // The streams end by themselves, well before their deadline, as refused.
  while (watcher->Read(&seen)) {
  }
  const grpc::Status watch_end = watcher->Finish();
  CHECK(watch_end.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK_THAT(watch_end.error_message(), Catch::Contains("alice is revoked"));
  v1::LogEntry entry;
  while (follower->Read(&entry)) {
  }
  const grpc::Status logs_end = follower->Finish();
  CHECK(logs_end.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK_THAT(logs_end.error_message(), Catch::Contains("unknown or revoked token"));
  CHECK(c.server->jobs()->Get(job_id)->state == JobState::kPending);

  // A new token re-admits her, certificate included.
  users = security::LoadUserTable(c.dir / "users.json");
  REQUIRE(users->Add("alice", Role::kUser, security::TokenDigest("dpt_new")).ok());
  REQUIRE(security::SaveUserTable(*users, c.dir / "users.json").ok());
  CHECK(c.ListNodes(alice_by_cert).ok());
}

TEST_CASE("revoking a node ends its open task stream", "[service][security]") {
  SecureCluster c;
  const ClientSecurity node_a{c.node_a, ""};
  std::string node_id;
  REQUIRE(c.Register(node_a, "node-a", &node_id).ok());
  grpc::ClientContext stream_ctx;
  stream_ctx.set_deadline(std::chrono::system_clock::now() + seconds(30));
  v1::StreamTasksRequest req;
  req.set_node_id(node_id);
  auto worker = c.Worker(node_a);
  auto stream = worker->StreamTasks(&stream_ctx, req);

  REQUIRE(security::EditUserTable(c.dir / "users.json", false, [](security::UserTable& users) {
            return users.Revoke("node-a").status();
          }).ok());
  // The stream ends by itself, well before its deadline, as refused: a node the coordinator no
  // longer admits is sent no more tasks.
  const auto start = std::chrono::steady_clock::now();
  v1::TaskCommand command;
  while (stream->Read(&command)) {
  }
  const grpc::Status ended = stream->Finish();
  CHECK(ended.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK_THAT(ended.error_message(), Catch::Contains("node-a is revoked"));
  CHECK(std::chrono::steady_clock::now() - start < seconds(20));
}

TEST_CASE("one user's open streams stop at their own bound, and another user's watch gets in",
          "[service][security]") {
  SecureCluster c({}, [](CoordinatorOptions* options) {
    options->max_client_streams = 4;
    options->max_client_streams_per_user = 2;
  });
  const ClientSecurity alice{c.alice, ""};
  const ClientSecurity bob{c.bob, ""};
  std::string alices, bobs;
  REQUIRE(c.Submit(alice, &alices).ok());
  REQUIRE(c.Submit(bob, &bobs).ok());
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::Job>>> streams;
  v1::Job first;
  // A watch stream; OK once its first message came (the server holds it open).
  auto watch = [&](const ClientSecurity& who, const std::string& job_id) {
    contexts.push_back(Context());
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    streams.push_back(c.Client(who)->WatchJob(contexts.back().get(), req));
    return streams.back()->Read(&first) ? grpc::Status::OK : streams.back()->Finish();
  };
  REQUIRE(watch(alice, alices).ok());
  REQUIRE(watch(alice, alices).ok());
  const grpc::Status refused = watch(alice, alices);
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(refused.error_message(), Catch::Contains("user alice already has 2"));
  CHECK_THAT(refused.error_message(), Catch::Contains("--max-client-streams-per-user 2"));
  // Bob's `deepool status --watch` is not locked out by alice's streams.
  CHECK(watch(bob, bobs).ok());
  CHECK(first.job_id() == bobs);
  for (size_t i = 0; i < streams.size(); ++i) {
    if (i == 2) continue;  // the refused one has finished
    contexts[i]->TryCancel();
    while (streams[i]->Read(&first)) {
    }
    (void)streams[i]->Finish();
  }
}

TEST_CASE("a spec's checkpoint or data path outside the allowed roots is refused at submission",
          "[service][security]") {
  CoordinatorOptions options;
  options.store = "memory";
  options.control_loop = false;
  options.listen = "127.0.0.1:0";
  options.path_roots = {"/srv/deepool"};
  options.insecure = true;  // anonymous callers (an admin each): the path check is what is tested
  FakeClock clock;
  auto started = CoordinatorServer::Start(options, std::make_unique<InMemoryJobStore>(),
                                          std::make_unique<testing::FakePlanningBackend>(), &clock);
  REQUIRE(started.ok());
  auto stub = v1::CoordinatorService::NewStub(
      grpc::CreateChannel((*started)->address(), grpc::InsecureChannelCredentials()));
  auto submit = [&](const std::string& extra) {
    v1::SubmitJobRequest req;
    std::string spec = kTinyJob;
    spec.insert(spec.size() - 1, "," + extra);
    req.set_spec_json(spec);
    v1::SubmitJobResponse resp;
    return stub->SubmitJob(Context().get(), req, &resp);
  };
  CHECK(submit(R"("checkpoint":{"path":"/srv/deepool/ckpt/a.pt"})").ok());
  grpc::Status outside = submit(R"("checkpoint":{"path":"/srv/deepool/../../etc/a.pt"})");
  CHECK(outside.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(outside.error_message(), Catch::Contains("checkpoint.path"));
  CHECK_THAT(outside.error_message(), Catch::Contains("outside the allowed roots /srv/deepool"));
  CHECK(submit(R"("data":{"kind":"cifar10","path":"/home/alice/cifar"})").error_code() ==
        grpc::StatusCode::PERMISSION_DENIED);
  (*started)->Shutdown();
}

TEST_CASE("with a per-user path root, a user's job may not point into another user's folder",
          "[service][security]") {
  TempDir temp;
  const fs::path users = fs::canonical(temp.path());
  SecureCluster c({(users / "{user}").string()});
  const ClientSecurity alice{c.alice, ""};
  const ClientSecurity bob{c.bob, ""};
  auto checkpoint_dir = [](const fs::path& dir) {
    return R"("checkpoint":{"dir":")" + dir.string() + R"(","every_iterations":1})";
  };
  std::string id;
  CHECK(c.Submit(alice, &id, checkpoint_dir(users / "alice" / "ckpt")).ok());
  CHECK(c.Submit(bob, &id, checkpoint_dir(users / "bob" / "ckpt")).ok());
  const grpc::Status into_bob = c.Submit(alice, &id, checkpoint_dir(users / "bob" / "ckpt"));
  CHECK(into_bob.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(into_bob.error_message(), Catch::Contains("checkpoint.dir"));
  CHECK_THAT(into_bob.error_message(),
             Catch::Contains("outside the allowed roots " + (users / "alice").string()));
  // Her token names her too; an admin's jobs get the admin's own folder.
  CHECK(c.Submit(ClientSecurity{c.bob, c.alice_token}, &id,
                 R"("checkpoint":{"path":")" + (users / "bob" / "final.pt").string() + R"("})")
            .error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(c.Submit(ClientSecurity{c.root, ""}, &id, checkpoint_dir(users / "root" / "ckpt")).ok());
  // Nor evaluate on another user's held-out set.
  auto eval_data = [](const fs::path& dir) {
    return R"("eval":{"data":{"kind":"image_folder","path":")" + dir.string() + R"("}})";
  };
  CHECK(c.Submit(alice, &id, eval_data(users / "alice" / "val")).ok());
  const grpc::Status eval_in_bob = c.Submit(alice, &id, eval_data(users / "bob" / "val"));
  CHECK(eval_in_bob.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(eval_in_bob.error_message(), Catch::Contains("eval.data.path"));
}

}  // namespace
}  // namespace deepool::coordinator

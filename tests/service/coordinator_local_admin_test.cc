// The coordinator as the docs start it without TLS or a users file: callers need the admin token
// it keeps in --data-dir (private files, a private directory, the SQLite store's too), only
// --insecure lets anonymous callers in, and without TLS it serves loopback only.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>

#include "common/clock.h"
#include "coordinator/server.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "deepool/v1/node.grpc.pb.h"
#include "security/transport.h"
#include "security/users.h"
#include "tests/node_registration.h"
#include "tests/service/service_test_util.h"
#include "tests/temp_dir.h"

namespace deepool::coordinator {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;
using security::ClientSecurity;
using security::Role;
using security::TlsFiles;

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return ctx;
}

// A coordinator on loopback with no flags but --data-dir, as the docs start one.
StatusOr<std::unique_ptr<CoordinatorServer>> StartPlain(const std::string& data_dir, bool insecure,
                                                        FakeClock* clock) {
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.store = "memory";
  options.control_loop = false;
  options.data_dir = data_dir;
  options.insecure = insecure;
  return CoordinatorServer::Start(options, std::make_unique<InMemoryJobStore>(),
                                  std::make_unique<testing::FakePlanningBackend>(), clock);
}

TEST_CASE("the SQLite store's data directory is the coordinator's alone", "[service][security]") {
  TempDir temp;
  CoordinatorOptions options;
  options.store = "sqlite";
  // Made by the coordinator, and one an operator made open to everyone: both end 0700.
  for (const std::string name : {"made", "open"}) {
    options.data_dir = temp.File(name);
    if (name == "open") {
      fs::create_directories(options.data_dir);
      fs::permissions(options.data_dir, fs::perms::all);
    }
    StatusOr<std::unique_ptr<JobStore>> store = OpenJobStore(options);
    REQUIRE(store.ok());
    CHECK(fs::status(options.data_dir).permissions() == fs::perms::owner_all);
  }
}

grpc::Status ListJobsAt(const std::string& address, const std::string& token) {
  auto channel =
      security::OpenChannel(address, ClientSecurity{TlsFiles{}, token}, grpc::ChannelArguments());
  REQUIRE(channel.ok());
  v1::ListJobsResponse resp;
  return v1::CoordinatorService::NewStub(*channel)->ListJobs(Context().get(), v1::ListJobsRequest(),
                                                             &resp);
}

grpc::Status RegisterAt(const std::string& address, const std::string& token,
                        const std::string& name) {
  auto channel =
      security::OpenChannel(address, ClientSecurity{TlsFiles{}, token}, grpc::ChannelArguments());
  REQUIRE(channel.ok());
  const v1::RegisterNodeRequest req = deepool::testing::CpuNodeRegistration(name, "127.0.0.1", 1);
  v1::RegisterNodeResponse resp;
  return v1::NodeService::NewStub(*channel)->RegisterNode(Context().get(), req, &resp);
}

fs::perms PermissionsOf(const fs::path& path) { return fs::status(path).permissions(); }

TEST_CASE("with no credentials configured, callers need the token the coordinator keeps",
          "[service][security]") {
  TempDir temp;
  const fs::path top = temp.path();
  const fs::path data = top / "data";  // made by the coordinator
  FakeClock clock;
  auto started = StartPlain(data.string(), /*insecure=*/false, &clock);
  REQUIRE(started.ok());
  std::unique_ptr<CoordinatorServer> server = std::move(*started);
  const fs::path token_file = data / "admin.token";
  const fs::path users_file = data / "users.json";
  REQUIRE(fs::exists(token_file));
  // Only the coordinator's user may read them, or list the directory.
  CHECK(PermissionsOf(token_file) == (fs::perms::owner_read | fs::perms::owner_write));
  CHECK(PermissionsOf(users_file) == (fs::perms::owner_read | fs::perms::owner_write));
  CHECK(PermissionsOf(data) == fs::perms::owner_all);

  // Anonymous callers, any local user: refused, and told where the token is.
  const grpc::Status anonymous = ListJobsAt(server->address(), "");
  CHECK(anonymous.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK_THAT(anonymous.error_message(), Catch::Contains(token_file.string()));
  const grpc::Status anonymous_worker = RegisterAt(server->address(), "", "node-a");
  CHECK(anonymous_worker.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(server->nodes()->List().empty());  // the handler never ran

  // The admin token lets its reader in, on the client API only.
  auto admin = security::ReadTokenFile(token_file.string());
  REQUIRE(admin.ok());
  CHECK(ListJobsAt(server->address(), *admin).ok());
  CHECK(RegisterAt(server->address(), *admin, "node-a").error_code() ==
        grpc::StatusCode::PERMISSION_DENIED);
  // A worker on this host registers with a node token (`deepool token create node-a --role
  // worker --users DATA/users.json --out WORK_DIR/node.token`), for its own name only.
  auto users = security::LoadUserTable(users_file);
  REQUIRE(users.ok());
  const std::string node_token = security::NewToken().value();
  REQUIRE(users->Add("node-a", Role::kWorker, security::TokenDigest(node_token)).ok());
  REQUIRE(security::SaveUserTable(*users, users_file).ok());
  CHECK(RegisterAt(server->address(), node_token, "node-a").ok());
  CHECK(RegisterAt(server->address(), node_token, "node-b").error_code() ==
        grpc::StatusCode::PERMISSION_DENIED);
  CHECK(server->nodes()->List().size() == 1);

  // A restart keeps both: the same token still works.
  server->Shutdown();
  server.reset();
  started = StartPlain(data.string(), /*insecure=*/false, &clock);
  REQUIRE(started.ok());
  server = std::move(*started);
  CHECK(security::ReadTokenFile(token_file.string()).value() == *admin);
  CHECK(ListJobsAt(server->address(), *admin).ok());
  CHECK(RegisterAt(server->address(), node_token, "node-a").ok());
  CHECK(ListJobsAt(server->address(), "").error_code() == grpc::StatusCode::UNAUTHENTICATED);
  server->Shutdown();
  server.reset();

  // A token file others may read is refused at start, naming the fix.
  fs::permissions(token_file, fs::perms::group_read | fs::perms::others_read,
                  fs::perm_options::add);
  auto loose = StartPlain(data.string(), /*insecure=*/false, &clock);
  REQUIRE_FALSE(loose.ok());
  CHECK_THAT(loose.status().message(), Catch::Contains("chmod 600 " + token_file.string()));
}

TEST_CASE(
    "only --insecure lets anonymous callers in, and a coordinator needs a place for its "
    "token otherwise",
    "[service][security]") {
  FakeClock clock;
  auto refused = StartPlain("", /*insecure=*/false, &clock);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(refused.status().message(), Catch::Contains("--data-dir"));
  CHECK_THAT(refused.status().message(), Catch::Contains("--insecure"));

  auto open = StartPlain("", /*insecure=*/true, &clock);
  REQUIRE(open.ok());
  CHECK(ListJobsAt((*open)->address(), "").ok());
  CHECK(RegisterAt((*open)->address(), "", "node-a").ok());
  (*open)->Shutdown();
}

TEST_CASE("without TLS the coordinator serves loopback only, unless told --insecure",
          "[service][security]") {
  CoordinatorOptions options;
  options.store = "memory";
  options.control_loop = false;
  options.listen = "0.0.0.0:0";
  FakeClock clock;
  auto refused = CoordinatorServer::Start(options, std::make_unique<InMemoryJobStore>(),
                                          std::make_unique<testing::FakePlanningBackend>(), &clock);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(refused.status().message(), Catch::Contains("--insecure"));
  CHECK(CheckListenSafety(options).code() == StatusCode::kInvalidArgument);
  options.listen = "127.0.0.1:0";
  CHECK(CheckListenSafety(options).ok());
  options.listen = "10.1.2.3:7070";
  options.insecure = true;
  CHECK(CheckListenSafety(options).ok());
  options.insecure = false;
  options.tls = TlsFiles{"ca.pem", "cert.pem", "key.pem"};
  CHECK(CheckListenSafety(options).ok());
  CHECK(CoordinatorOptions().listen == "127.0.0.1:7070");
}

}  // namespace
}  // namespace deepool::coordinator

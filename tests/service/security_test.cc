// The security library on its own: certificates issued and read back, the users file, and the
// authenticator's decisions for each kind of caller.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "security/authenticator.h"
#include "security/cert_files.h"
#include "security/certificates.h"
#include "security/grpc_logs.h"
#include "security/secret_files.h"
#include "security/tls_stream.h"
#include "security/transport.h"
#include "security/users.h"
#include "tests/service/forged_certificate.h"
#include "tests/temp_dir.h"

namespace deepool::security {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;
using std::chrono::hours;

void SetMode(const fs::path& path, mode_t mode) { REQUIRE(::chmod(path.c_str(), mode) == 0); }

TEST_CASE("issued certificates carry their name, role and expiry", "[service][security]") {
  auto ca = IssueCertificateAuthority("test", hours(24));
  REQUIRE(ca.ok());
  CertificateRequest request;
  request.common_name = "gpu-node-07";
  request.role = Role::kWorker;
  request.valid_for = hours(2);
  auto leaf = IssueCertificate(*ca, request);
  REQUIRE(leaf.ok());
  auto identity = ReadCertificateIdentity(leaf->certificate_pem);
  REQUIRE(identity.ok());
  CHECK(identity->common_name == "gpu-node-07");
  CHECK(identity->role == Role::kWorker);
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  CHECK(identity->not_after_unix_s > now + 3600);
  CHECK(identity->not_after_unix_s < now + 3 * 3600);

  // The CA itself names no deepool role: it cannot call anything.
  CHECK(ReadCertificateIdentity(ca->certificate_pem).status().code() ==
        StatusCode::kPermissionDenied);
  CHECK(ReadCertificateIdentity("junk").status().code() == StatusCode::kInvalidArgument);
  request.common_name = "bad\nname";
  CHECK(IssueCertificate(*ca, request).status().code() == StatusCode::kInvalidArgument);
  auto other_ca = IssueCertificateAuthority("other", hours(24));
  REQUIRE(other_ca.ok());
  const KeyAndCertificate mismatched{ca->certificate_pem, other_ca->private_key_pem};
  request.common_name = "x";
  CHECK(IssueCertificate(mismatched, request).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("certs init never replaces a cluster's CA, and keys are private", "[service][security]") {
  TempDir temp;
  const fs::path dir = temp.path();
  REQUIRE(InitClusterCertificates(dir, {"10.0.0.1", "coord.example"}, hours(24)).ok());
  CHECK(InitClusterCertificates(dir, {}, hours(24)).code() == StatusCode::kAlreadyExists);
  CHECK((fs::status(dir / "ca-key.pem").permissions() & fs::perms::group_read) == fs::perms::none);
  CHECK((fs::status(dir / "ca-key.pem").permissions() & fs::perms::others_read) == fs::perms::none);
  auto node = IssueClusterCertificate(dir, Role::kWorker, "n1", hours(24));
  REQUIRE(node.ok());
  CHECK(node->cert == (dir / "nodes" / "n1.pem").string());
  CHECK(IssueClusterCertificate(dir, Role::kWorker, "n1", hours(24)).status().code() ==
        StatusCode::kAlreadyExists);
  CHECK(IssueClusterCertificate(dir / "missing", Role::kUser, "u", hours(24)).status().code() ==
        StatusCode::kNotFound);
}

TEST_CASE("the users file keeps digests, not tokens, and refuses what it cannot trust",
          "[service][security]") {
  UserTable table;
  const std::string token = NewToken().value();
  CHECK(token.rfind("dpt_", 0) == 0);
  CHECK(token.size() == 68);
  REQUIRE(table.Add("alice", Role::kAdmin, TokenDigest(token)).ok());
  const std::string json = table.ToJson();
  CHECK(json.find(token) == std::string::npos);
  auto parsed = UserTable::Parse(json);
  REQUIRE(parsed.ok());
  auto alice = parsed->Authenticate(token);
  REQUIRE(alice.has_value());
  CHECK(alice->name == "alice");
  CHECK(alice->role == Role::kAdmin);
  CHECK_FALSE(parsed->Authenticate(token + "x").has_value());
  CHECK(table.Add("alice", Role::kUser, TokenDigest("other")).code() == StatusCode::kAlreadyExists);
  CHECK(table.Add("bob", Role::kUser, TokenDigest(token)).code() == StatusCode::kAlreadyExists);
  CHECK(table.Add("carol", Role::kUser, "not-hex").code() == StatusCode::kInvalidArgument);
  CHECK(UserTable::Parse(R"({"format":"deepool.users","users":[{"name":"x","role":"coordinator",)"
                         R"("token_sha256":")" +
                         TokenDigest("t") + R"("}]})")
            .status()
            .code() == StatusCode::kInvalidArgument);
  CHECK(UserTable::Parse("{}").status().code() == StatusCode::kInvalidArgument);
  // Refused, not thrown: the coordinator re-reads the file on a call's thread.
  CHECK(UserTable::Parse(R"({"format": 881455})").status().code() == StatusCode::kInvalidArgument);
  CHECK(table.Remove("nobody").code() == StatusCode::kNotFound);
}

TEST_CASE("two edits of the users file at once both land", "[service][security]") {
  TempDir dir;
  const std::filesystem::path path = dir.File("users.json");
  REQUIRE(EditUserTable(path, /*missing_is_empty=*/true, [](UserTable& table) {
            return table.Add("alice", Role::kAdmin, TokenDigest("a"));
          }).ok());
  // A revoke that has read the table and has not saved yet; meanwhile another edit starts.
  std::promise<void> read;
  std::promise<void> go;
  std::shared_future<void> going = go.get_future().share();
  bool revoked = false;  // checked once the thread has joined (Catch is not thread-safe)
  std::thread revoke([&] {
    revoked = EditUserTable(path, /*missing_is_empty=*/false, [&](UserTable& table) -> Status {
                read.set_value();
                going.wait();
                return table.Revoke("alice").status();
              }).ok();
  });
  read.get_future().wait();
  std::future<Status> create = std::async(std::launch::async, [&] {
    return EditUserTable(path, /*missing_is_empty=*/true, [](UserTable& table) {
      return table.Add("bob", Role::kUser, TokenDigest("b"));
    });
  });
  // It waits for the revoke (without the lock it would save alice's table with bob in it, and
  // the revoke's save would then drop bob).
  CHECK(create.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
  go.set_value();
  revoke.join();
  CHECK(revoked);
  REQUIRE(create.get().ok());
  StatusOr<UserTable> table = LoadUserTable(path);
  REQUIRE(table.ok());
  CHECK(table->IsRevoked("alice"));
  CHECK(table->Authenticate("b").has_value());
  // An edit that fails saves nothing; a missing file is NOT_FOUND unless it may be empty.
  CHECK(EditUserTable(path, false, [](UserTable& t) { return t.Remove("nobody"); }).code() ==
        StatusCode::kNotFound);
  CHECK(EditUserTable(dir.File("none.json"), false, [](UserTable&) {
          return Status::Ok();
        }).code() == StatusCode::kNotFound);
}

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A leaf certificate of `ca` for `name` in `role`, valid from `from` (relative to now) for `valid`.
KeyAndCertificate Leaf(const KeyAndCertificate& ca, const std::string& name, Role role,
                       std::chrono::seconds from = std::chrono::seconds(-300),
                       std::chrono::seconds valid = hours(24)) {
  CertificateRequest request;
  request.common_name = name;
  request.role = role;
  request.not_before_offset = from;
  request.valid_for = valid;
  auto leaf = IssueCertificate(ca, request);
  REQUIRE(leaf.ok());
  return *leaf;
}

TEST_CASE("a certificate is verified against the CA and the time, and says why it is refused",
          "[service][security]") {
  const KeyAndCertificate ca = IssueCertificateAuthority("test", hours(24)).value();
  const KeyAndCertificate other_ca = IssueCertificateAuthority("other", hours(24)).value();
  const KeyAndCertificate alice = Leaf(ca, "alice", Role::kUser);
  const int64_t now = NowSeconds();

  auto ok =
      VerifyCertificate(ca.certificate_pem, alice.certificate_pem, CertificateUse::kClient, now);
  REQUIRE(ok.ok());
  CHECK(ok->common_name == "alice");
  CHECK(ok->role == Role::kUser);
  // A bundle of CAs (a rotation) verifies a certificate of either.
  CHECK(VerifyCertificate(other_ca.certificate_pem + ca.certificate_pem, alice.certificate_pem,
                          CertificateUse::kClient, now)
            .ok());

  auto stranger = VerifyCertificate(other_ca.certificate_pem, alice.certificate_pem,
                                    CertificateUse::kClient, now);
  CHECK(stranger.status().code() == StatusCode::kUnauthenticated);
  CHECK_THAT(stranger.status().message(), Catch::Contains("is not signed by this cluster's CA"));
  CHECK_THAT(stranger.status().message(), Catch::Contains("deepool CA test"));

  auto expired = VerifyCertificate(ca.certificate_pem, alice.certificate_pem,
                                   CertificateUse::kClient, now + 2 * 24 * 3600);
  CHECK(expired.status().code() == StatusCode::kUnauthenticated);
  CHECK_THAT(expired.status().message(), Catch::Contains("expired at"));
  CHECK_THAT(expired.status().message(), Catch::Contains("UTC"));

  auto early = VerifyCertificate(ca.certificate_pem, alice.certificate_pem, CertificateUse::kClient,
                                 now - 3600);
  CHECK(early.status().code() == StatusCode::kUnauthenticated);
  CHECK_THAT(early.status().message(), Catch::Contains("is not valid before"));

  // The CA itself is no client.
  CHECK_FALSE(
      VerifyCertificate(ca.certificate_pem, ca.certificate_pem, CertificateUse::kClient, now).ok());
  CHECK(VerifyCertificate("junk", alice.certificate_pem, CertificateUse::kClient, now)
            .status()
            .code() == StatusCode::kInvalidArgument);
}

TEST_CASE("only the coordinator's certificate passes a client's check of the server",
          "[service][security]") {
  TempDir temp;
  const fs::path dir = temp.path();
  REQUIRE(InitClusterCertificates(dir, {"127.0.0.1"}, hours(24)).ok());
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string ca = read((dir / "ca.pem").string());
  const int64_t now = NowSeconds();
  auto coordinator =
      VerifyCoordinatorCertificate(ca, read((dir / "coordinator.pem").string()), now);
  REQUIRE(coordinator.ok());
  CHECK(coordinator->role == Role::kCoordinator);

  // A user's and a node's certificate from the same CA, whatever their names, are not it.
  for (Role role : {Role::kUser, Role::kAdmin, Role::kWorker}) {
    auto files = IssueClusterCertificate(dir, role, std::string("x-") + RoleName(role), hours(24));
    REQUIRE(files.ok());
    auto refused = VerifyCoordinatorCertificate(ca, read(files->cert), now);
    CHECK(refused.status().code() == StatusCode::kUnauthenticated);
    CHECK_THAT(refused.status().message(),
               Catch::Contains(std::string("presents a ") + RoleName(role) + " certificate"));
    CHECK_THAT(refused.status().message(), Catch::Contains("not your coordinator"));
  }
  // Nor under the coordinator's name, should another tool have issued one: the role decides.
  const KeyAndCertificate ca_pair{ca, read((dir / "ca-key.pem").string())};
  for (Role role : {Role::kUser, Role::kWorker}) {
    const KeyAndCertificate forged = testing::ForgeCoordinatorNamed(ca_pair, role);
    // What the client checked before: the CA (and the name), which the forged one passes.
    REQUIRE(VerifyCertificate(ca, forged.certificate_pem, CertificateUse::kServer, now).ok());
    auto refused = VerifyCoordinatorCertificate(ca, forged.certificate_pem, now);
    CHECK(refused.status().code() == StatusCode::kUnauthenticated);
    CHECK_THAT(refused.status().message(),
               Catch::Contains(std::string("presents a ") + RoleName(role) +
                               " certificate (deepool-coordinator, OU " + RoleUnit(role) + ")"));
  }
  auto later = VerifyCoordinatorCertificate(ca, read((dir / "coordinator.pem").string()),
                                            now + 400 * 24 * 3600);
  CHECK_THAT(later.status().message(), Catch::Contains("the server's certificate: its CA's"));
  CHECK_THAT(later.status().message(), Catch::Contains("expired at"));
}

TEST_CASE("the authenticator: open, token and certificate callers", "[service][security]") {
  PeerCredentials nobody;
  SECTION("open: no TLS, no users file -> an anonymous admin") {
    Authenticator open("", nullptr);
    auto caller = open.Authenticate(nobody);
    REQUIRE(caller.ok());
    CHECK(caller->role == Role::kAdmin);
    CHECK(RequireWorker(*caller, "any", open.open()).ok());
    PeerCredentials with_token;
    with_token.bearer_token = "dpt_x";
    CHECK(open.Authenticate(with_token).status().code() == StatusCode::kUnauthenticated);
  }
  SECTION("TLS: a caller must prove who it is, with a certificate of the CA, unexpired") {
    const KeyAndCertificate ca = IssueCertificateAuthority("test", hours(24)).value();
    FakeClock clock(NowSeconds() * 1000);
    Authenticator tls(ca.certificate_pem, nullptr, "", &clock);
    const auto no_certificate = tls.Authenticate(nobody);
    CHECK(no_certificate.status().code() == StatusCode::kUnauthenticated);
    CHECK_THAT(no_certificate.status().message(), Catch::Contains("without a client certificate"));
    PeerCredentials malformed;
    malformed.malformed_authorization = true;
    CHECK(tls.Authenticate(malformed).status().code() == StatusCode::kUnauthenticated);

    PeerCredentials alice;
    alice.certificate_pem =
        Leaf(ca, "alice", Role::kUser, std::chrono::seconds(-300), std::chrono::seconds(3600))
            .certificate_pem;
    auto caller = tls.Authenticate(alice);
    REQUIRE(caller.ok());
    CHECK(caller->name == "alice");
    CHECK(caller->via == "certificate");
    // Remembered as verified, but only until it expires: an open connection does not outlive it.
    clock.Advance(std::chrono::hours(2));
    auto expired = tls.Authenticate(alice);
    CHECK(expired.status().code() == StatusCode::kUnauthenticated);
    CHECK_THAT(expired.status().message(), Catch::Contains("your client certificate"));
    CHECK_THAT(expired.status().message(), Catch::Contains("expired at"));

    const KeyAndCertificate other_ca = IssueCertificateAuthority("other", hours(24)).value();
    PeerCredentials mallory;
    mallory.certificate_pem = Leaf(other_ca, "root", Role::kAdmin).certificate_pem;
    auto stranger = tls.Authenticate(mallory);
    CHECK(stranger.status().code() == StatusCode::kUnauthenticated);
    CHECK_THAT(stranger.status().message(), Catch::Contains("not signed by this cluster's CA"));
  }
  SECTION("roles") {
    const Identity alice{"alice", Role::kUser, "token"};
    const Identity root{"root", Role::kAdmin, "token"};
    const Identity worker{"n1", Role::kWorker, "certificate"};
    CHECK(RequireClient(alice).ok());
    CHECK(RequireClient(worker).code() == StatusCode::kPermissionDenied);
    CHECK(RequireAdmin(alice, "drain").code() == StatusCode::kPermissionDenied);
    CHECK(RequireAdmin(root, "drain").ok());
    CHECK(RequireWorker(worker, "n1", false).ok());
    CHECK(RequireWorker(worker, "n2", false).code() == StatusCode::kPermissionDenied);
    CHECK(RequireWorker(root, "n1", false).code() == StatusCode::kPermissionDenied);
    CHECK(MayAccessJob(alice, "alice"));
    CHECK_FALSE(MayAccessJob(alice, "bob"));
    CHECK(MayAccessJob(root, "bob"));
    CHECK_FALSE(MayAccessJob(worker, "n1"));
  }
}

TEST_CASE("a key or token that group or others may read is refused, naming the fix",
          "[service][security]") {
  TempDir temp;
  const fs::path dir = temp.path();
  const fs::path token = dir / "token";
  REQUIRE(WriteNewFile(token, "dpt_secret\n", 0600).ok());
  REQUIRE(ReadTokenFile(token.string()).ok());
  CHECK(*ReadTokenFile(token.string()) == "dpt_secret");
  for (mode_t loose : {0640, 0604, 0644, 0620, 0660, 0602, 0610}) {
    SetMode(token, loose);
    const StatusOr<std::string> refused = ReadTokenFile(token.string());
    CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(loose));
    CHECK_THAT(refused.status().message(), Catch::Contains(token.string()) &&
                                               Catch::Contains(std::string("mode ") + mode) &&
                                               Catch::Contains("chmod 600 " + token.string()));
  }
  SetMode(token, 0400);
  CHECK(ReadTokenFile(token.string()).ok());

  // The private keys of both ends: the coordinator's (server) and a user's (client), and the
  // key of the HTTPS metrics endpoint; certificates and the CA may be public.
  const fs::path pki = dir / "pki";
  REQUIRE(InitClusterCertificates(pki, {}, hours(24)).ok());
  const TlsFiles server = CoordinatorTlsFiles(pki);
  SetMode(server.ca, 0644);
  SetMode(server.cert, 0644);
  CHECK(MakeServerCredentials(server).ok());
  CHECK(MakeTlsHttpStreams(server).ok());
  SetMode(server.key, 0640);
  const auto refused = MakeServerCredentials(server);
  CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(refused.status().message(), Catch::Contains("the private key (--tls-key)") &&
                                             Catch::Contains("chmod 600 " + server.key));
  CHECK(MakeTlsHttpStreams(server).status().code() == StatusCode::kFailedPrecondition);
  const auto user = IssueClusterCertificate(pki, Role::kUser, "alice", hours(24));
  REQUIRE(user.ok());
  CHECK(OpenChannel("127.0.0.1:1", ClientSecurity{*user, ""}, grpc::ChannelArguments()).ok());
  SetMode(user->key, 0644);
  CHECK(OpenChannel("127.0.0.1:1", ClientSecurity{*user, ""}, grpc::ChannelArguments())
            .status()
            .code() == StatusCode::kFailedPrecondition);
  // The CA's key too, when `deepool certs` issues from it.
  SetMode(pki / "ca-key.pem", 0644);
  CHECK(IssueClusterCertificate(pki, Role::kUser, "bob", hours(24)).status().code() ==
        StatusCode::kFailedPrecondition);
}

TEST_CASE("a users file that group or others may write is refused, at start and on reload",
          "[service][security]") {
  TempDir temp;
  const fs::path dir = temp.path();
  const fs::path path = dir / "users.json";
  UserTable table;
  const std::string admin = NewToken().value();
  REQUIRE(table.Add("root", Role::kAdmin, TokenDigest(admin)).ok());
  REQUIRE(SaveUserTable(table, path).ok());
  CHECK((fs::status(path).permissions() & (fs::perms::group_all | fs::perms::others_all)) ==
        fs::perms::none);
  SetMode(path, 0644);  // readable: digests only
  CHECK(LoadUserTable(path).ok());
  for (mode_t loose : {0664, 0646, 0666, 0624}) {
    SetMode(path, loose);
    const auto refused = LoadUserTable(path);
    CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(refused.status().message(), Catch::Contains("chmod 600 " + path.string()));
    CHECK(UsersFile::Open(path).status().code() == StatusCode::kFailedPrecondition);
  }

  // The break-in: someone appends their own admin token to a users file left writable. The
  // running coordinator keeps the table it had.
  SetMode(path, 0600);
  auto users = UsersFile::Open(path);
  REQUIRE(users.ok());
  SetMode(path, 0666);
  const std::string intruder = NewToken().value();
  REQUIRE(table.Add("mallory", Role::kAdmin, TokenDigest(intruder)).ok());
  std::ofstream(path, std::ios::trunc) << table.ToJson();
  CHECK_FALSE((*users)->Authenticate(intruder).has_value());
  CHECK((*users)->Authenticate(admin).has_value());
}

TEST_CASE("a list of coordinators is one target gRPC tries in order", "[service][security]") {
  CHECK(*CoordinatorTarget("head:7070") == "head:7070");  // one: as it is
  CHECK(*CoordinatorTarget("127.0.0.1:7070,localhost:7071") ==
        "ipv4:127.0.0.1:7070,127.0.0.1:7071");
  CHECK(CoordinatorTarget("127.0.0.1:7070,,b:1").status().code() == StatusCode::kInvalidArgument);
  const Status unknown = CoordinatorTarget("127.0.0.1:7070,no-such-host.invalid:7070").status();
  CHECK(unknown.code() == StatusCode::kUnavailable);
  CHECK_THAT(unknown.message(), Catch::Contains("no-such-host.invalid"));
}

TEST_CASE("a token goes in plaintext only to a loopback address", "[service][security]") {
  const ClientSecurity token_only{TlsFiles{}, "dpt_x"};
  for (const char* local :
       {"127.0.0.1:7070", "localhost:7070", "[::1]:7070", "127.1.2.3:1", "dns:///localhost:7070",
        "ipv4:127.0.0.1:7070", "unix:/tmp/s", "127.0.0.1:7070,localhost:7071"}) {
    INFO(local);
    CHECK(CheckTokenTransport(local, token_only).ok());
  }
  for (const char* remote :
       {"10.0.0.5:7070", "head:7070", "dns:///head.example:7070", "[2001:db8::1]:7070",
        "0.0.0.0:7070", "not an address", "127.0.0.1:7070,10.0.0.5:7070", "127.0.0.1.nip.io:7070",
        "127.evil.example:7070"}) {
    INFO(remote);
    const Status refused = CheckTokenTransport(remote, token_only);
    CHECK(refused.code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(refused.message(), Catch::Contains("refusing to send the token in plaintext") &&
                                      Catch::Contains("--tls-ca/--tls-cert/--tls-key"));
  }
  CHECK_THAT(CheckTokenTransport("10.0.0.5:7070", token_only).message(),
             Catch::Contains("plaintext to 10.0.0.5:"));
  // No token, or TLS: nothing to leak.
  CHECK(CheckTokenTransport("10.0.0.5:7070", ClientSecurity{}).ok());
  CHECK(CheckTokenTransport("10.0.0.5:7070",
                            ClientSecurity{TlsFiles{"ca.pem", "c.pem", "k.pem"}, "dpt_x"})
            .ok());
  // OpenChannel, which the CLI and the worker use, refuses before dialling.
  CHECK(OpenChannel("10.0.0.5:7070", token_only, grpc::ChannelArguments()).status().code() ==
        StatusCode::kFailedPrecondition);
  CHECK(OpenChannel("127.0.0.1:7070", token_only, grpc::ChannelArguments()).ok());
}

TEST_CASE("no user or node certificate may bear the coordinator's name", "[service][security]") {
  auto ca = IssueCertificateAuthority("test", hours(24));
  REQUIRE(ca.ok());
  for (Role role : {Role::kUser, Role::kAdmin, Role::kWorker}) {
    for (const char* name :
         {"deepool-coordinator", "Deepool-Coordinator", "deepool-coordinator."}) {
      INFO(RoleName(role) << " " << name);
      CertificateRequest by_cn;
      by_cn.common_name = name;
      by_cn.role = role;
      const auto refused = IssueCertificate(*ca, by_cn);
      CHECK(refused.status().code() == StatusCode::kInvalidArgument);
      CHECK_THAT(refused.status().message(), Catch::Contains("belongs to the coordinator"));
      CertificateRequest by_dns;
      by_dns.common_name = "n1";
      by_dns.role = role;
      by_dns.dns_names = {name};
      CHECK(IssueCertificate(*ca, by_dns).status().code() == StatusCode::kInvalidArgument);
    }
  }
  CertificateRequest coordinator;
  coordinator.common_name = kCoordinatorTlsName;
  coordinator.role = Role::kCoordinator;
  CHECK(IssueCertificate(*ca, coordinator).ok());
  CertificateRequest similar;
  similar.common_name = "deepool-coordinator-2";
  CHECK(IssueCertificate(*ca, similar).ok());

  // `deepool certs node deepool-coordinator` writes nothing.
  TempDir temp;
  const fs::path dir = temp.path();
  REQUIRE(InitClusterCertificates(dir, {}, hours(24)).ok());
  CHECK(
      IssueClusterCertificate(dir, Role::kWorker, kCoordinatorTlsName, hours(24)).status().code() ==
      StatusCode::kInvalidArgument);
  CHECK_FALSE(fs::exists(dir / "nodes" / "deepool-coordinator.pem"));
  CHECK(IssueClusterCertificate(dir, Role::kUser, kCoordinatorTlsName, hours(24)).status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("revoking a user lists their name, and their certificate is refused with it",
          "[service][security]") {
  UserTable table;
  const std::string alice_token = NewToken().value();
  REQUIRE(table.Add("alice", Role::kUser, TokenDigest(alice_token)).ok());
  CHECK(*table.Revoke("alice") == true);
  CHECK(*table.Revoke("bob") == false);  // a certificate-only user can be revoked too
  CHECK(*table.Revoke("bob") == false);  // idempotent
  CHECK(table.IsRevoked("alice"));
  CHECK_FALSE(table.Authenticate(alice_token).has_value());
  auto parsed = UserTable::Parse(table.ToJson());
  REQUIRE(parsed.ok());
  CHECK((parsed->revoked() == std::vector<std::string>{"alice", "bob"}));
  CHECK(
      UserTable::Parse(R"({"format":"deepool.users","users":[],"revoked":[1]})").status().code() ==
      StatusCode::kInvalidArgument);
  CHECK(UserTable::Parse(R"({"format":"deepool.users","users":[{"name":"x","role":"user",)"
                         R"("token_sha256":")" +
                         TokenDigest("t") + R"("}],"revoked":["x"]})")
            .status()
            .code() == StatusCode::kInvalidArgument);
  // A new token re-admits the user.
  REQUIRE(table.Add("bob", Role::kUser, TokenDigest("bob's new token")).ok());
  CHECK_FALSE(table.IsRevoked("bob"));

  TempDir temp;
  const fs::path dir = temp.path();
  REQUIRE(InitClusterCertificates(dir / "pki", {}, hours(24)).ok());
  const auto alice = IssueClusterCertificate(dir / "pki", Role::kUser, "alice", hours(24));
  const auto node = IssueClusterCertificate(dir / "pki", Role::kWorker, "n1", hours(24));
  REQUIRE(alice.ok());
  REQUIRE(node.ok());
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  };
  PeerCredentials alice_cert, node_cert;
  alice_cert.certificate_pem = read(alice->cert);
  node_cert.certificate_pem = read(node->cert);
  UserTable empty;
  REQUIRE(SaveUserTable(empty, dir / "users.json").ok());
  auto users = UsersFile::Open(dir / "users.json");
  REQUIRE(users.ok());
  Authenticator auth(read((dir / "pki" / "ca.pem").string()), users->get());
  REQUIRE(auth.Authenticate(alice_cert).ok());
  REQUIRE(auth.Authenticate(node_cert).ok());
  REQUIRE(empty.Revoke("alice").ok());
  REQUIRE(empty.Revoke("n1").ok());
  REQUIRE(SaveUserTable(empty, dir / "users.json").ok());
  const auto refused = auth.Authenticate(alice_cert);
  CHECK(refused.status().code() == StatusCode::kUnauthenticated);
  CHECK_THAT(refused.status().message(), Catch::Contains("alice is revoked"));
  CHECK(auth.Authenticate(node_cert).status().code() == StatusCode::kUnauthenticated);
  // Nor does a valid token make a revoked certificate acceptable.
  const std::string root_token = NewToken().value();
  REQUIRE(empty.Add("root", Role::kAdmin, TokenDigest(root_token)).ok());
  REQUIRE(SaveUserTable(empty, dir / "users.json").ok());
  alice_cert.bearer_token = root_token;
  CHECK(auth.Authenticate(alice_cert).status().code() == StatusCode::kUnauthenticated);
}

TEST_CASE("a refused TLS handshake is described for people, on both ends", "[service][security]") {
  // The server's log: gRPC's line for each failed handshake, as 1.51 writes it.
  CHECK(DescribeRefusedHandshake("Handshake failed with fatal error SSL_ERROR_SSL: "
                                 "error:0A00010B:SSL routines::wrong version number.") ==
        "refused a TLS handshake: the client does not speak TLS (a CLI or worker without TLS "
        "files?)");
  CHECK_THAT(DescribeRefusedHandshake("Handshake failed with fatal error SSL_ERROR_SSL: "
                                      "error:0A000418:SSL routines::tlsv1 alert unknown ca.")
                 .value_or(""),
             Catch::Contains("the client refused this coordinator's certificate (tlsv1 alert "
                             "unknown ca)"));
  CHECK_FALSE(DescribeRefusedHandshake("Synchronous server. Num CQs: 1").has_value());

  // The client's message, from the status of a failed call.
  CHECK(DescribeTlsRefusal("failed to connect to all addresses; last error: UNKNOWN: "
                           "ipv4:127.0.0.1:1: Custom verification check failed with error: "
                           "UNAUTHENTICATED: the server presents a user certificate (bob)") ==
        "TLS handshake refused: the server presents a user certificate (bob)");
  CHECK_THAT(DescribeTlsRefusal("failed to connect to all addresses; last error: UNKNOWN: "
                                "ipv4:127.0.0.1:1: Tls handshake failed: SSL_ERROR_SSL: "
                                "error:0A00010B:SSL routines::wrong version number"),
             Catch::StartsWith("TLS handshake refused: the server does not speak TLS"));
  CHECK_THAT(DescribeTlsRefusal("failed to connect to all addresses; last error: UNKNOWN: "
                                "ipv4:127.0.0.1:1: Tls handshake failed: SSL_ERROR_SSL: "
                                "error:0A00045C:SSL routines::tlsv13 alert certificate required"),
             Catch::Contains("the server refused this client's certificate (tlsv13 alert "
                             "certificate required)"));
  CHECK(DescribeTlsRefusal("failed to connect to all addresses; last error: UNAVAILABLE: "
                           "ipv4:127.0.0.1:1: Connection refused")
            .empty());
}

}  // namespace
}  // namespace deepool::security

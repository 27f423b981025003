// The security library on its own: certificates issued and read back, the users file, and the
// authenticator's decisions for each kind of caller.
#include <catch2/catch.hpp>
#include <filesystem>

#include "security/authenticator.h"
#include "security/cert_files.h"
#include "security/certificates.h"
#include "security/users.h"

namespace deepool::security {
namespace {

namespace fs = std::filesystem;
using std::chrono::hours;

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
  std::string pattern = (fs::temp_directory_path() / "dp-certs-XXXXXX").string();
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  const fs::path dir = pattern;
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
  fs::remove_all(dir);
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
  CHECK(table.Remove("nobody").code() == StatusCode::kNotFound);
}

TEST_CASE("the authenticator: open, token and certificate callers", "[service][security]") {
  PeerCredentials nobody;
  SECTION("open: no TLS, no users file -> an anonymous admin") {
    Authenticator open(false, nullptr);
    auto caller = open.Authenticate(nobody);
    REQUIRE(caller.ok());
    CHECK(caller->role == Role::kAdmin);
    CHECK(RequireWorker(*caller, "any", open.open()).ok());
    PeerCredentials with_token;
    with_token.bearer_token = "dpt_x";
    CHECK(open.Authenticate(with_token).status().code() == StatusCode::kUnauthenticated);
  }
  SECTION("TLS: a caller must prove who it is") {
    Authenticator tls(true, nullptr);
    CHECK(tls.Authenticate(nobody).status().code() == StatusCode::kUnauthenticated);
    PeerCredentials malformed;
    malformed.malformed_authorization = true;
    CHECK(tls.Authenticate(malformed).status().code() == StatusCode::kUnauthenticated);
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

}  // namespace
}  // namespace deepool::security

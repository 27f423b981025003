// End to end with security on, as `deepool up` and a real deployment run: a CA made for the test,
// mutual TLS between the CLI, the coordinator and two workers, an admin token. A FG job's
// ranks are dispatched over the TLS channels and train; the CLI authenticates from its
// environment; a user without the admin role is refused another's job with exit code 6.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "security/cert_files.h"
#include "tests/e2e/local_cluster.h"

using namespace deepool;
using namespace deepool::e2e;

TEST_CASE("a cluster with mutual TLS and tokens trains a FG job, and keeps users apart",
          "[e2e][security]") {
  ClusterOptions options;
  options.secure = true;
  LocalCluster cluster(options);
  const nlohmann::json spec = {{"name", "secure-fg"},
                               {"model", "small_cnn"},
                               {"role", "fg"},
                               {"global_batch", 16},
                               {"gpus", 4},
                               {"amplification_limit", 0},
                               {"iterations", 3},
                               {"profile", "analytical"},
                               {"optimizer", {{"name", "sgd"}, {"lr", 0.01}}},
                               {"data", {{"kind", "synthetic"}, {"seed", 7}}}};
  std::string id;
  REQUIRE(cluster.Submit(spec, &id).ok());
  const v1::Job job = cluster.WaitForTerminal(id);
  CHECK(job.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(job.owner() == "admin");  // the token's user
  CHECK(job.devices_size() == 4);

  std::string out, err;
  CHECK(cluster.RunCli({"status", id}, &out, &err) == 0);
  CHECK_THAT(out, Catch::Contains("SUCCEEDED"));

  // Plain TCP to a TLS coordinator: it cannot even connect (exit 4).
  const std::vector<std::string> no_credentials;
  out.clear();
  err.clear();
  CHECK(cluster.RunCli({"status"}, &out, &err, &no_credentials) == 4);

  // A user with a certificate of the cluster CA, but not the admin role.
  auto bob = security::IssueClusterCertificate(cluster.security_dir(), security::Role::kUser, "bob",
                                               std::chrono::hours(1));
  REQUIRE(bob.ok());
  const std::vector<std::string> as_bob = {
      "DEEPOOL_TLS_CA=" + bob->ca, "DEEPOOL_TLS_CERT=" + bob->cert, "DEEPOOL_TLS_KEY=" + bob->key};
  out.clear();
  err.clear();
  CHECK(cluster.RunCli({"status", id}, &out, &err, &as_bob) == 6);
  CHECK_THAT(err, Catch::Contains("belongs to another user"));
  out.clear();
  err.clear();
  CHECK(cluster.RunCli({"drain", "node-0"}, &out, &err, &as_bob) == 6);
  CHECK_THAT(err, Catch::Contains("admin role"));
}

// End to end with security on, as `deepool up` and a real deployment run: a CA made for the test,
// mutual TLS between the CLI, the coordinator and two workers, an admin token. A FG job's
// ranks are dispatched over the TLS channels and train for an epoch, reporting its iteration
// count and their evaluations back; the CLI authenticates from its
// environment; a user without the admin role is refused another's job with exit code 6.
// Also: a coordinator started with no credentials refuses anonymous callers and takes its own
// token; a server holding a user's or node's certificate of the cluster CA is refused by the CLI
// and by a worker, each saying "TLS handshake refused" and why.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "security/cert_files.h"
#include "tests/e2e/local_cluster.h"
#include "tests/service/forged_certificate.h"
#include "tests/temp_dir.h"

using namespace deepool;
using namespace deepool::e2e;

TEST_CASE("a cluster with mutual TLS and tokens trains a FG job, and keeps users apart",
          "[e2e][security]") {
  ClusterOptions options;
  options.secure = true;
  LocalCluster cluster(options);
  const nlohmann::json spec = {
      {"name", "secure-fg"},
      {"model", "small_cnn"},
      {"role", "fg"},
      {"global_batch", 128},
      {"gpus", 4},
      {"amplification_limit", 0},
      // One epoch of the synthetic set's 1,024 samples: 8 iterations,
      // counted by the executors and reported over TLS, as are the
      // evaluations (in passes of 64).
      {"epochs", 1},
      {"eval",
       {{"data", {{"kind", "synthetic"}, {"seed", 8}}}, {"every_iterations", 4}, {"batch", 64}}},
      {"profile", "analytical"},
      {"optimizer", {{"name", "sgd"}, {"lr", 0.01}}},
      {"data", {{"kind", "synthetic"}, {"seed", 7}}}};
  std::string id;
  REQUIRE(cluster.Submit(spec, &id).ok());
  const v1::Job job = cluster.WaitForTerminal(id);
  CHECK(job.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(job.progress().iterations() == 8);
  CHECK(job.progress().evaluations_size() == 2);
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

namespace {

// Runs the CLI with `args` and `env` only (added to this process's environment); its exit code.
int RunCliAt(const std::string& address, std::vector<std::string> args,
             const std::vector<std::string>& env, std::string* err) {
  args.insert(args.end(), {"--coordinator", address});
  ProcessSpec spec;
  spec.executable = BinDir() + "/deepool";
  spec.args = args;
  spec.extra_env = env;
  std::mutex mu;
  ChildCallbacks callbacks;
  callbacks.on_stderr_line = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    *err += line + "\n";
  };
  auto child = ChildProcess::Start(spec, callbacks);
  REQUIRE(child.ok());
  auto exit = (*child)->Wait(120s);
  REQUIRE(exit.has_value());
  return exit->exit_code;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("a coordinator started with no credentials refuses anonymous callers",
          "[e2e][security]") {
  ClusterOptions options;
  options.workers = 1;  // registered with the node token beside it (WORK_DIR/node.token)
  options.devices_per_worker = 1;
  LocalCluster cluster(options);
  const std::string home = cluster.dir() + "/home";  // a user with no deepool configuration
  fs::create_directories(home + "/.config/deepool");
  const std::string token_file = cluster.dir() + "/coordinator/admin.token";

  std::string err;
  CHECK(RunCliAt(cluster.address(), {"status"}, {"HOME=" + home}, &err) == 6);
  CHECK_THAT(err, Catch::Contains("not authenticated"));
  CHECK_THAT(err, Catch::Contains("DEEPOOL_TOKEN_FILE=" + token_file));
  err.clear();
  CHECK(RunCliAt(cluster.address(), {"nodes"}, {"HOME=" + home, "DEEPOOL_TOKEN_FILE=" + token_file},
                 &err) == 0);
  // The documented place for one's token: a copy of the admin's, mode 0600.
  fs::copy_file(token_file, home + "/.config/deepool/token");
  err.clear();
  CHECK(RunCliAt(cluster.address(), {"status"}, {"HOME=" + home}, &err) == 0);
  CHECK(err.empty());
}

TEST_CASE("a server with a user's or node's certificate of the cluster CA is not the coordinator",
          "[e2e][security]") {
  testing::TempDir dir;
  const std::string pki = dir.File("pki");
  REQUIRE(security::InitClusterCertificates(pki, {"127.0.0.1"}, std::chrono::hours(1)).ok());
  auto alice =
      security::IssueClusterCertificate(pki, security::Role::kUser, "alice", std::chrono::hours(1));
  auto node = security::IssueClusterCertificate(pki, security::Role::kWorker, "gpu-1",
                                                std::chrono::hours(1));
  REQUIRE(alice.ok());
  REQUIRE(node.ok());
  const std::vector<std::string> as_alice = {"DEEPOOL_TLS_CA=" + alice->ca,
                                             "DEEPOOL_TLS_CERT=" + alice->cert,
                                             "DEEPOOL_TLS_KEY=" + alice->key};
  // A user's certificate under the coordinator's name, as another tool could issue one.
  const security::KeyAndCertificate forged = testing::ForgeCoordinatorNamed(
      {ReadAll(pki + "/ca.pem"), ReadAll(pki + "/ca-key.pem")}, security::Role::kUser);
  REQUIRE(security::WriteNewFile(dir.File("forged.pem"), forged.certificate_pem, 0644).ok());
  REQUIRE(security::WriteNewFile(dir.File("forged-key.pem"), forged.private_key_pem, 0600).ok());
  security::TlsFiles named_like_coordinator{alice->ca, dir.File("forged.pem"),
                                            dir.File("forged-key.pem")};
  int round = 0;
  for (const security::TlsFiles* held : {&*node, &*alice, &named_like_coordinator}) {
    const std::string role = held == &*node ? "worker" : "user";
    const std::string tag = std::to_string(++round);
    INFO("the server holds a " << role << "'s certificate");
    auto server = TestProcess::Start("impostor", BinDir() + "/deepool-coordinator",
                                     {"--listen", "127.0.0.1:0", "--store", "memory", "--tls-ca",
                                      held->ca, "--tls-cert", held->cert, "--tls-key", held->key},
                                     dir.File("impostor-" + tag + ".log"));
    std::string line;
    REQUIRE(server->WaitForStdout(
        [](const std::string& l) { return l.find("\"listening\"") != std::string::npos; }, 60s,
        &line));
    const std::string address = nlohmann::json::parse(line).at("address").get<std::string>();

    std::string err;
    CHECK(RunCliAt(address, {"status"}, as_alice, &err) == 4);
    CHECK_THAT(err, Catch::Contains("cannot reach the coordinator at " + address));
    CHECK_THAT(err, Catch::Contains("TLS handshake refused: the server presents a " + role +
                                    " certificate"));
    CHECK_THAT(err, Catch::Contains("not your coordinator"));

    const std::string worker_log = dir.File("worker-" + tag + ".log");
    auto worker = TestProcess::Start("worker", BinDir() + "/deepool-worker",
                                     {"--coordinator", address, "--devices", "cpu:1", "--name",
                                      "gpu-1", "--work-dir", dir.File("gpu-1-" + tag), "--tls-ca",
                                      node->ca, "--tls-cert", node->cert, "--tls-key", node->key},
                                     worker_log);
    const bool said = PollUntil(
        [&] {
          return ReadAll(worker_log)
                     .find("TLS handshake refused: the server presents a " + role +
                           " certificate") != std::string::npos;
        },
        60s);
    if (!said) std::cerr << ReadAll(worker_log);
    CHECK(said);
    worker->Stop();
    server->Stop();
  }

  // And a CLI speaking TLS to a coordinator that does not.
  auto plain = TestProcess::Start("plain", BinDir() + "/deepool-coordinator",
                                  {"--listen", "127.0.0.1:0", "--store", "memory", "--insecure"},
                                  dir.File("plain.log"));
  std::string line;
  REQUIRE(plain->WaitForStdout(
      [](const std::string& l) { return l.find("\"listening\"") != std::string::npos; }, 60s,
      &line));
  std::string err;
  CHECK(RunCliAt(nlohmann::json::parse(line).at("address").get<std::string>(), {"status"}, as_alice,
                 &err) == 4);
  CHECK_THAT(err, Catch::Contains("TLS handshake refused: the server does not speak TLS"));
  plain->Stop();
}

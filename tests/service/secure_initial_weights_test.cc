// Weights to start from checked at submission, through a coordinator that serves mutual TLS: the
// check (coordinator/initial_weights_check.h) runs behind the same SubmitJob handler whatever the
// transport, so a user with a cluster certificate who submits an init file that does not fit the
// job's graph gets the INVALID_ARGUMENT naming the file and the first differing key over TLS,
// and a file that fits is accepted over the same channel (initial_weights_submission_test checks
// every kind of mismatch on the scheduler itself).
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "coordinator/in_process_planning.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "security/cert_files.h"
#include "security/transport.h"
#include "tests/service/in_process_coordinator.h"
#include "tests/source_dir.h"
#include "tests/temp_dir.h"

namespace deepool::coordinator::testing {
namespace {

namespace fs = std::filesystem;

// tiny_cnn as tests/data/weights/make_weights.py saved it, its head `out_features` wide.
std::string TinyCnnGraph(int out_features) {
  return R"({"format": "deepool.graph", "version": 1, "name": "tiny_cnn",
    "input": {"shape": [3, 3, 3]}, "layers": [
    {"name": "conv", "op": "conv2d", "inputs": ["input"], "out_channels": 4, "kernel_size": [3, 3]},
    {"name": "bn", "op": "batchnorm2d", "inputs": ["conv"]},
    {"name": "flatten", "op": "flatten", "inputs": ["bn"]},
    {"name": "fc", "op": "linear", "inputs": ["flatten"], "out_features": )" +
         std::to_string(out_features) + "}]}";
}

// A cluster CA in a temp dir, a coordinator serving mTLS with it and the real planning backend
// (whose CheckModel reads init files), init paths confined to tests/data/weights, and user
// alice's certificate.
struct TlsCoordinator {
  TlsCoordinator()
      : dir(temp.path()), weights(fs::path(DEEPOOL_SOURCE_DIR) / "tests/data/weights") {
    REQUIRE(
        security::InitClusterCertificates(dir / "pki", {"127.0.0.1"}, std::chrono::hours(24)).ok());
    auto issued = security::IssueClusterCertificate(dir / "pki", security::Role::kUser, "alice",
                                                    std::chrono::hours(24));
    REQUIRE(issued.ok());
    alice = security::ClientSecurity{*issued, ""};
    coordinator = std::make_unique<InProcessCoordinator>(
        [this](CoordinatorOptions* options) {
          options->insecure = false;
          options->tls = security::CoordinatorTlsFiles(dir / "pki");
          options->path_roots = {weights.string()};
        },
        std::make_unique<InMemoryJobStore>(), std::make_unique<InProcessPlanningBackend>());
    auto channel =
        security::OpenChannel(coordinator->server->address(), alice, grpc::ChannelArguments());
    REQUIRE(channel.ok());
    client = v1::CoordinatorService::NewStub(*channel);
  }
  ~TlsCoordinator() { coordinator.reset(); }

  // Submits, as alice, tiny_cnn with a head `out_features` wide starting from `init`.
  grpc::Status Submit(int out_features, const std::string& init) {
    v1::SubmitJobRequest req;
    req.set_spec_json(R"({"name":"tls-init","global_batch":8,"gpus":1,"iterations":2,)"
                      R"("profile":"analytical","graph":)" +
                      TinyCnnGraph(out_features) + R"(,"init":{"path":")" + init + R"("}})");
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return client->SubmitJob(&ctx, req, &resp);
  }

  deepool::testing::TempDir temp;  // removed after the coordinator is gone
  fs::path dir;                    // temp.path()
  fs::path weights;
  security::ClientSecurity alice;
  std::unique_ptr<InProcessCoordinator> coordinator;
  std::unique_ptr<v1::CoordinatorService::Stub> client;
};

TEST_CASE("over mutual TLS an init file that does not fit the graph is refused naming the key",
          "[service][security][init]") {
  TlsCoordinator c;
  const std::string file = (c.weights / "tiny_cnn_dict.pt").string();

  // The file fits the graph it was saved for: the channel and the check let it through.
  const grpc::Status fits = c.Submit(2, file);
  INFO(fits.error_message());
  CHECK(fits.ok());

  // A head one class wider: the refusal reaches the client with its code and the first key.
  const grpc::Status refused = c.Submit(3, file);
  CHECK(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(refused.error_message() ==
        "init.path: " + file +
            ": checkpoint tensor 'fc.weight' has shape [2,4], the model expects [3,4]");
}

}  // namespace
}  // namespace deepool::coordinator::testing

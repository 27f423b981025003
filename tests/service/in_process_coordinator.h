// InProcessCoordinator: the coordinator's gRPC services in-process on port 0 with a fake clock,
// called through real gRPC stubs, for the service tests of the client API
// (coordinator_service_test.cc) and of the node API (node_service_test.cc).
#pragma once

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "coordinator/job_store.h"
#include "coordinator/server.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "deepool/v1/node.grpc.pb.h"
#include "tests/node_registration.h"
#include "tests/service/service_test_util.h"

namespace deepool::coordinator::testing {

struct InProcessCoordinator {
  explicit InProcessCoordinator(
      std::unique_ptr<PlanningBackend> planner = std::make_unique<testing::FakePlanningBackend>(),
      int max_client_streams = 256, const std::string& metrics_listen = "")
      : InProcessCoordinator(
            [&](CoordinatorOptions* options) {
              options->max_client_streams = max_client_streams;
              options->metrics_listen = metrics_listen;
            },
            std::make_unique<InMemoryJobStore>(), std::move(planner)) {}
  // A coordinator over `store` with the options `configure` sets.
  InProcessCoordinator(
      const std::function<void(CoordinatorOptions*)>& configure, std::unique_ptr<JobStore> store,
      std::unique_ptr<PlanningBackend> planner = std::make_unique<testing::FakePlanningBackend>()) {
    CoordinatorOptions options;
    options.listen = "127.0.0.1:0";
    options.store = "memory";
    options.control_loop = false;  // the test ticks the scheduler itself
    // Anonymous callers, each an admin: the services are tested here, authentication in
    // secure_coordinator_test.
    options.insecure = true;
    configure(&options);
    auto started = CoordinatorServer::Start(options, std::move(store), std::move(planner), &clock);
    REQUIRE(started.ok());
    server = std::move(*started);
    auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
    client = v1::CoordinatorService::NewStub(channel);
    worker = v1::NodeService::NewStub(channel);
  }
  ~InProcessCoordinator() { server->Shutdown(); }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return ctx;
  }
  grpc::Status Submit(const std::string& json, v1::SubmitJobResponse* resp) {
    v1::SubmitJobRequest req;
    req.set_spec_json(json);
    return client->SubmitJob(Context().get(), req, resp);
  }
  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    REQUIRE(client->GetJob(Context().get(), req, &job).ok());
    return job;
  }
  // What a worker of this build sends.
  static v1::RegisterNodeRequest NodeRequest(const std::string& name, int devices) {
    return deepool::testing::CpuNodeRegistration(name, "127.0.0.1", devices);
  }
  v1::RegisterNodeResponse Register(const v1::RegisterNodeRequest& req) {
    v1::RegisterNodeResponse resp;
    grpc::Status status = worker->RegisterNode(Context().get(), req, &resp);
    INFO(status.error_message());
    REQUIRE(status.ok());
    CHECK(resp.heartbeat_interval_ms() > 0);
    return resp;
  }
  std::string Register(const std::string& name, int devices) {
    return Register(NodeRequest(name, devices)).node_id();
  }

  FakeClock clock;
  std::unique_ptr<CoordinatorServer> server;
  std::unique_ptr<v1::CoordinatorService::Stub> client;
  std::unique_ptr<v1::NodeService::Stub> worker;
};

constexpr const char* kTinyJob =
    R"({"name":"t","model":"tiny","global_batch":8,"gpus":1,"iterations":2,"profile":"analytical"})";

}  // namespace deepool::coordinator::testing

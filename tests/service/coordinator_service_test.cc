// The coordinator's gRPC services in-process on port 0, called through real gRPC stubs.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "coordinator/in_process_planning.h"
#include "coordinator/server.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "deepool/v1/node.grpc.pb.h"
#include "protocol/coordinator_status.h"
#include "protocol/version.h"
#include "tests/promtool.h"
#include "tests/raw_http.h"
#include "tests/service/failing_job_store.h"
#include "tests/service/service_test_util.h"

namespace deepool::coordinator {
namespace {

using std::chrono::seconds;

struct Cluster {
  explicit Cluster(
      std::unique_ptr<PlanningBackend> planner = std::make_unique<testing::FakePlanningBackend>(),
      int max_client_streams = 256, const std::string& metrics_listen = "")
      : Cluster(
            [&](CoordinatorOptions* options) {
              options->max_client_streams = max_client_streams;
              options->metrics_listen = metrics_listen;
            },
            std::make_unique<InMemoryJobStore>(), std::move(planner)) {}
  // A coordinator over `store` with the options `configure` sets.
  Cluster(
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
  ~Cluster() { server->Shutdown(); }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + seconds(30));
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
    v1::RegisterNodeRequest req;
    req.set_name(name);
    req.set_address("127.0.0.1");
    req.set_protocol_version(protocol::kProtocolVersion);
    req.set_oldest_protocol_version(protocol::kOldestProtocolVersion);
    for (int i = 0; i < devices; ++i) {
      v1::Device* d = req.add_devices();
      d->set_device("cpu:" + std::to_string(i));
      d->set_type("cpu");
    }
    return req;
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

TEST_CASE("a coordinator whose store cannot load says so and stops cleanly", "[service]") {
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.control_loop = false;
  options.insecure = true;
  auto store = std::make_unique<testing::FailingJobStore>();
  store->fail_loads = true;
  FakeClock clock;
  auto started = CoordinatorServer::Start(options, std::move(store),
                                          std::make_unique<testing::FakePlanningBackend>(), &clock);
  REQUIRE_FALSE(started.ok());
  CHECK(started.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(started.status().message(), Catch::Contains("loading the job store"));
}

TEST_CASE("while the store loads, the port answers every call 'starting', then serves",
          "[service]") {
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.control_loop = false;
  options.insecure = true;
  std::promise<std::string> starting_at;
  options.on_starting = [&](const std::string& address) { starting_at.set_value(address); };
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto store = std::make_unique<testing::FailingJobStore>();
  store->on_load = [released] { released.wait(); };  // a store that takes long to load
  FakeClock clock;
  auto starting = std::async(std::launch::async, [&] {
    return CoordinatorServer::Start(options, std::move(store),
                                    std::make_unique<testing::FakePlanningBackend>(), &clock);
  });
  struct Release {  // however the test ends, the load ends, so Start returns
    std::promise<void>* release;
    ~Release() {
      try {
        release->set_value();
      } catch (const std::future_error&) {  // released already
      }
    }
  } release_at_end{&release};
  std::future<std::string> answering = starting_at.get_future();
  REQUIRE(answering.wait_for(seconds(30)) == std::future_status::ready);
  const std::string address = answering.get();
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto client = v1::CoordinatorService::NewStub(channel);
  auto node = v1::NodeService::NewStub(channel);
  auto expect_starting = [](const grpc::ClientContext& context, const grpc::Status& status) {
    CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
    CHECK_THAT(status.error_message(), Catch::Contains("starting"));
    CHECK(context.GetServerTrailingMetadata().count(protocol::kCoordinatorStartingKey) == 1);
  };
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + seconds(10));
    v1::HeartbeatResponse response;
    v1::HeartbeatRequest request;
    request.set_node_id("node-a");
    expect_starting(context, node->Heartbeat(&context, request, &response));
  }
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + seconds(10));
    v1::ListJobsResponse response;
    expect_starting(context, client->ListJobs(&context, v1::ListJobsRequest(), &response));
  }
  release.set_value();
  auto started = starting.get();
  REQUIRE(started.ok());
  CHECK((*started)->address() == address);  // the same port
  // A new connection reaches the real services (the starting server has stopped).
  auto fresh = v1::CoordinatorService::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(10));
  v1::ListJobsResponse response;
  CHECK(fresh->ListJobs(&context, v1::ListJobsRequest(), &response).ok());
  (*started)->Shutdown();
}

TEST_CASE("watch and log streams past the limit are refused, and their slots come back",
          "[service]") {
  Cluster c(std::make_unique<testing::FakePlanningBackend>(), /*max_client_streams=*/2);
  v1::SubmitJobResponse submitted;
  REQUIRE(c.Submit(R"({"model":"tiny","global_batch":8,"iterations":1})", &submitted).ok());
  v1::WatchJobRequest watch;
  watch.set_job_id(submitted.job_id());
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::Job>>> streams;
  for (int i = 0; i < 2; ++i) {
    contexts.push_back(c.Context());
    streams.push_back(c.client->WatchJob(contexts.back().get(), watch));
    v1::Job first;
    REQUIRE(streams.back()->Read(&first));  // the server holds the stream open now
  }
  v1::GetJobLogsRequest logs;
  logs.set_job_id(submitted.job_id());
  logs.set_follow(true);
  auto refused_context = c.Context();
  auto refused = c.client->GetJobLogs(refused_context.get(), logs);
  v1::LogEntry entry;
  CHECK_FALSE(refused->Read(&entry));
  grpc::Status status = refused->Finish();
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(status.error_message(), Catch::Contains("--max-client-streams"));

  // The job ends, so both streams end; a stream's slot is free before its client hears OK.
  v1::CancelJobRequest cancel;
  cancel.set_job_id(submitted.job_id());
  v1::Job cancelled;
  REQUIRE(c.client->CancelJob(c.Context().get(), cancel, &cancelled).ok());
  for (auto& stream : streams) {
    v1::Job update;
    while (stream->Read(&update)) {
    }
    REQUIRE(stream->Finish().ok());
  }
  REQUIRE(c.Submit(R"({"model":"tiny","global_batch":8,"iterations":1})", &submitted).ok());
  watch.set_job_id(submitted.job_id());
  for (int i = 0; i < 2; ++i) {
    contexts.push_back(c.Context());
    streams.push_back(c.client->WatchJob(contexts.back().get(), watch));
    v1::Job job;
    REQUIRE(streams.back()->Read(&job));
    CHECK(job.spec().graph_json().empty());  // Job messages leave an inline graph out
  }
  for (auto& context : contexts) context->TryCancel();
}

TEST_CASE("a submission repeated with its request_id returns the first job", "[service]") {
  Cluster c;
  v1::SubmitJobRequest req;
  req.set_spec_json(R"({"model":"tiny","global_batch":8,"iterations":1})");
  req.set_request_id("retry-me-1");
  v1::SubmitJobResponse first, again, other;
  REQUIRE(c.client->SubmitJob(c.Context().get(), req, &first).ok());
  REQUIRE(c.client->SubmitJob(c.Context().get(), req, &again).ok());
  CHECK(again.job_id() == first.job_id());
  req.set_request_id("retry-me-2");
  REQUIRE(c.client->SubmitJob(c.Context().get(), req, &other).ok());
  CHECK(other.job_id() != first.job_id());
  v1::ListJobsResponse listed;
  REQUIRE(c.client->ListJobs(c.Context().get(), v1::ListJobsRequest(), &listed).ok());
  CHECK(listed.jobs_size() == 2);

  req.set_request_id("retry-me-1");  // the same key with another spec
  req.set_spec_json(R"({"model":"tiny","global_batch":8,"iterations":2})");
  grpc::Status reused = c.client->SubmitJob(c.Context().get(), req, &other);
  CHECK(reused.error_code() == grpc::StatusCode::ALREADY_EXISTS);
  CHECK_THAT(reused.error_message(), Catch::Contains(first.job_id()));
  req.set_request_id("has space");
  CHECK(c.client->SubmitJob(c.Context().get(), req, &other).error_code() ==
        grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("ListJobs pages: a token continues where the last page ended, a foreign one is refused",
          "[service]") {
  Cluster c;
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    v1::SubmitJobResponse submitted;
    REQUIRE(c.Submit(kTinyJob, &submitted).ok());
    ids.insert(ids.begin(), submitted.job_id());  // newest first
  }
  v1::ListJobsRequest list;
  list.set_limit(2);
  std::vector<std::string> seen;
  int pages = 0;
  while (true) {
    v1::ListJobsResponse page;
    REQUIRE(c.client->ListJobs(c.Context().get(), list, &page).ok());
    CHECK(page.jobs_size() <= 2);
    for (const v1::Job& job : page.jobs()) seen.push_back(job.job_id());
    ++pages;
    if (page.next_page_token().empty()) break;
    list.set_page_token(page.next_page_token());
  }
  CHECK(seen == ids);
  CHECK(pages == 3);

  v1::ListJobsResponse ignored;
  for (const std::string& bad : {std::string("job-000002"), std::string("before-seq-x"),
                                 std::string("before-seq-"), std::string("before-seq-0")}) {
    list.set_page_token(bad);
    CHECK(c.client->ListJobs(c.Context().get(), list, &ignored).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
  }
  // A page is at most 1,000 jobs whatever the limit asks (0 included).
  v1::ListJobsRequest big;
  big.set_limit(1'000'000);
  REQUIRE(c.client->ListJobs(c.Context().get(), big, &ignored).ok());
  CHECK(ignored.jobs_size() == 5);
  CHECK(ignored.next_page_token().empty());
}

TEST_CASE("submit, get, list and cancel a pending job over gRPC", "[service]") {
  Cluster c;
  v1::SubmitJobResponse submitted;
  REQUIRE(c.Submit(kTinyJob, &submitted).ok());
  CHECK(submitted.job().state() == v1::JOB_STATE_PENDING);
  const std::string id = submitted.job_id();

  v1::Job job = c.Get(id);
  CHECK(job.spec().model() == "tiny");
  CHECK(job.spec().global_batch() == 8);
  CHECK_FALSE(job.reason().empty());

  v1::SubmitJobRequest by_proto;
  by_proto.mutable_spec()->set_model("tiny");
  by_proto.mutable_spec()->set_global_batch(4);
  by_proto.mutable_spec()->set_iterations(1);
  v1::SubmitJobResponse second;
  REQUIRE(c.client->SubmitJob(c.Context().get(), by_proto, &second).ok());

  v1::ListJobsRequest list;
  v1::ListJobsResponse listed;
  REQUIRE(c.client->ListJobs(c.Context().get(), list, &listed).ok());
  REQUIRE(listed.jobs_size() == 2);
  CHECK(listed.jobs(0).job_id() == second.job_id());  // newest first
  // Both wait in the FG queue, in submission order (same priority).
  CHECK(submitted.job().queue_position() == 1);
  CHECK(listed.jobs(0).queue_position() == 2);
  CHECK(listed.jobs(1).queue_position() == 1);
  CHECK(c.Get(second.job_id()).queue_position() == 2);
  // The cluster summary comes along (nothing runs yet).
  CHECK(listed.has_summary());
  CHECK(listed.summary().fg_jobs_running() == 0);
  CHECK(listed.summary().devices_busy() == 0);

  v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  v1::Job cancelled;
  REQUIRE(c.client->CancelJob(c.Context().get(), cancel, &cancelled).ok());
  CHECK(cancelled.state() == v1::JOB_STATE_CANCELLED);
  grpc::Status again = c.client->CancelJob(c.Context().get(), cancel, &cancelled);
  CHECK(again.error_code() == grpc::StatusCode::FAILED_PRECONDITION);

  list.add_states(v1::JOB_STATE_PENDING);
  listed.Clear();
  REQUIRE(c.client->ListJobs(c.Context().get(), list, &listed).ok());
  REQUIRE(listed.jobs_size() == 1);
  CHECK(listed.jobs(0).job_id() == second.job_id());
  CHECK(listed.jobs(0).queue_position() == 1);  // the cancelled job left the queue
  CHECK(cancelled.queue_position() == 0);
}

TEST_CASE("malformed specs are INVALID_ARGUMENT naming the field, unknown jobs NOT_FOUND",
          "[service]") {
  Cluster c;
  v1::SubmitJobResponse resp;
  grpc::Status status = c.Submit(R"({"model":"tiny","global_batch":-3,"iterations":1})", &resp);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(status.error_message().rfind("global_batch", 0) == 0);
  status = c.Submit(R"({"model":"nope","global_batch":2,"iterations":1})", &resp);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(status.error_message().rfind("model", 0) == 0);
  status = c.Submit("{", &resp);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  v1::SubmitJobRequest empty;
  status = c.client->SubmitJob(c.Context().get(), empty, &resp);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  v1::SubmitJobRequest no_batch;
  no_batch.mutable_spec()->set_model("tiny");
  no_batch.mutable_spec()->set_iterations(1);
  status = c.client->SubmitJob(c.Context().get(), no_batch, &resp);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(status.error_message().rfind("global_batch", 0) == 0);

  v1::GetJobRequest get;
  get.set_job_id("job-999999");
  v1::Job job;
  CHECK(c.client->GetJob(c.Context().get(), get, &job).error_code() == grpc::StatusCode::NOT_FOUND);
  v1::CancelJobRequest cancel;
  cancel.set_job_id("job-999999");
  CHECK(c.client->CancelJob(c.Context().get(), cancel, &job).error_code() ==
        grpc::StatusCode::NOT_FOUND);
  v1::GetJobPlanRequest plan;
  plan.set_job_id("job-999999");
  v1::GetJobPlanResponse plan_resp;
  CHECK(c.client->GetJobPlan(c.Context().get(), plan, &plan_resp).error_code() ==
        grpc::StatusCode::NOT_FOUND);
  v1::DrainNodeRequest drain;
  drain.set_node("ghost");
  v1::Node node;
  CHECK(c.client->DrainNode(c.Context().get(), drain, &node).error_code() ==
        grpc::StatusCode::NOT_FOUND);
  v1::HeartbeatRequest beat;
  beat.set_node_id("node-ghost");
  v1::HeartbeatResponse beat_resp;
  CHECK(c.worker->Heartbeat(c.Context().get(), beat, &beat_resp).error_code() ==
        grpc::StatusCode::NOT_FOUND);
}

TEST_CASE("a spec whose strings are not UTF-8 is refused and not stored", "[service]") {
  Cluster c;
  v1::SubmitJobRequest request;
  request.mutable_spec()->set_model("tiny");
  request.mutable_spec()->set_global_batch(2);
  request.mutable_spec()->set_iterations(1);
  request.mutable_spec()->set_name("caf\xc3");  // cut short
  v1::SubmitJobResponse resp;
  grpc::Status status = c.client->SubmitJob(c.Context().get(), request, &resp);
  INFO(status.error_code() << ": " << status.error_message());
  // protobuf's parser in gRPC refuses the request before SubmitJob runs; the coordinator says
  // what was wrong (JobSpecFromProto's own check, job_spec_test, covers other callers).
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(
      status.error_message(),
      Catch::StartsWith("SubmitJob: the request is not a valid deepool.v1.SubmitJobRequest"));
  CHECK_THAT(status.error_message(), Catch::Contains("UTF-8"));
  v1::ListJobsResponse jobs;
  REQUIRE(c.client->ListJobs(c.Context().get(), v1::ListJobsRequest(), &jobs).ok());
  CHECK(jobs.jobs_size() == 0);
}

TEST_CASE("an unknown role and a worker of another protocol are refused", "[service]") {
  Cluster c;
  v1::SubmitJobRequest odd_role;
  odd_role.mutable_spec()->set_model("tiny");
  odd_role.mutable_spec()->set_global_batch(2);
  odd_role.mutable_spec()->set_iterations(1);
  odd_role.mutable_spec()->set_role(static_cast<v1::JobRole>(7));
  v1::SubmitJobResponse resp;
  grpc::Status status = c.client->SubmitJob(c.Context().get(), odd_role, &resp);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(status.error_message().rfind("role", 0) == 0);

  v1::RegisterNodeRequest old_worker;
  old_worker.set_name("old");
  old_worker.set_address("127.0.0.1");
  old_worker.add_devices()->set_device("cpu:0");
  v1::RegisterNodeResponse registered;
  status = c.worker->RegisterNode(c.Context().get(), old_worker, &registered);
  CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(status.error_message(), Catch::Contains("executor protocol 0"));
  CHECK_THAT(status.error_message(), Catch::Contains("the worker is older"));
  v1::ListNodesResponse nodes;
  REQUIRE(c.client->ListNodes(c.Context().get(), v1::ListNodesRequest(), &nodes).ok());
  CHECK(nodes.nodes_size() == 0);
}

TEST_CASE("a protocol 1 worker runs SGD jobs at version 1 and adamw jobs wait for a newer one",
          "[service][version]") {
  Cluster c;
  // A worker of the release before version ranges: protocol 1 only, no oldest.
  v1::RegisterNodeRequest old_worker = Cluster::NodeRequest("old", 1);
  old_worker.set_protocol_version(1);
  old_worker.clear_oldest_protocol_version();
  const v1::RegisterNodeResponse old_registered = c.Register(old_worker);
  REQUIRE(old_registered.protocol_version() == 1);
  grpc::ClientContext old_ctx;
  // A task that never comes ends the read at the deadline, failing the test instead of hanging.
  old_ctx.set_deadline(std::chrono::system_clock::now() + seconds(60));
  v1::StreamTasksRequest old_req;
  old_req.set_node_id(old_registered.node_id());
  auto old_stream = c.worker->StreamTasks(&old_ctx, old_req);

  v1::SubmitJobResponse sgd;
  REQUIRE(c.Submit(kTinyJob, &sgd).ok());
  c.server->scheduler()->Tick();
  v1::TaskCommand command;
  REQUIRE(old_stream->Read(&command));
  REQUIRE(command.assign().job_id() == sgd.job_id());
  const auto sgd_spec = nlohmann::json::parse(command.assign().train().run_spec_json());
  CHECK(sgd_spec["version"] == 1);  // what an executor of protocol 1 reads
  CHECK(sgd_spec["optimizer"]["name"] == "sgd");
  v1::ReportTaskExitRequest exit;
  exit.set_node_id(old_registered.node_id());
  exit.set_task_id(command.assign().task_id());
  exit.set_outcome(v1::TASK_OUTCOME_SUCCEEDED);
  v1::ReportTaskExitResponse exit_resp;
  REQUIRE(c.worker->ReportTaskExit(c.Context().get(), exit, &exit_resp).ok());
  REQUIRE(c.Get(sgd.job_id()).state() == v1::JOB_STATE_SUCCEEDED);

  // The old node is free, but cannot read an adamw run spec.
  v1::SubmitJobResponse adamw;
  REQUIRE(c.Submit(R"({"name":"w","model":"tiny","global_batch":8,"gpus":1,"iterations":2,
                       "profile":"analytical","optimizer":{"name":"adamw","lr":0.001}})",
                   &adamw)
              .ok());
  c.server->scheduler()->Tick();
  v1::Job waiting = c.Get(adamw.job_id());
  REQUIRE(waiting.state() == v1::JOB_STATE_PENDING);
  CHECK(waiting.reason_code() == v1::REASON_CODE_WORKER_PROTOCOL);
  CHECK(waiting.reason() ==
        "needs workers that speak executor protocol 2 (adamw); 1 of 1 nodes speak only 1: "
        "upgrade them");

  // A worker that speaks 1 and 2 joins: the adamw job goes there, at version 2.
  const v1::RegisterNodeResponse new_registered = c.Register(Cluster::NodeRequest("new", 1));
  REQUIRE(new_registered.protocol_version() == 2);
  grpc::ClientContext new_ctx;
  new_ctx.set_deadline(std::chrono::system_clock::now() + seconds(60));
  v1::StreamTasksRequest new_req;
  new_req.set_node_id(new_registered.node_id());
  auto new_stream = c.worker->StreamTasks(&new_ctx, new_req);
  c.server->scheduler()->Tick();
  REQUIRE(new_stream->Read(&command));
  REQUIRE(command.assign().job_id() == adamw.job_id());
  const auto adamw_spec = nlohmann::json::parse(command.assign().train().run_spec_json());
  CHECK(adamw_spec["version"] == 2);
  CHECK(adamw_spec["optimizer"]["name"] == "adamw");
  CHECK(adamw_spec["optimizer"]["weight_decay"] == 0.01);  // torch's default, as documented
  CHECK(c.Get(adamw.job_id()).state() == v1::JOB_STATE_RUNNING);

  v1::ListNodesResponse nodes;
  REQUIRE(c.client->ListNodes(c.Context().get(), v1::ListNodesRequest(), &nodes).ok());
  REQUIRE(nodes.nodes_size() == 2);
  CHECK(nodes.nodes(0).name() == "new");
  CHECK(nodes.nodes(0).protocol_version() == 2);
  CHECK(nodes.nodes(1).protocol_version() == 1);
  CHECK(nodes.nodes(1).task_ids_size() == 0);  // nothing of the adamw job on the old node

  for (grpc::ClientContext* ctx : {&old_ctx, &new_ctx}) ctx->TryCancel();
  v1::TaskCommand ignored;
  while (old_stream->Read(&ignored)) {
  }
  while (new_stream->Read(&ignored)) {
  }
}

TEST_CASE("a worker gets its task on the stream, reports, and the job succeeds", "[service]") {
  Cluster c;
  const std::string node_id = c.Register("w1", 1);

  // The worker's task stream, read on its own thread.
  grpc::ClientContext stream_ctx;
  v1::StreamTasksRequest stream_req;
  stream_req.set_node_id(node_id);
  auto stream = c.worker->StreamTasks(&stream_ctx, stream_req);

  v1::SubmitJobResponse submitted;
  REQUIRE(c.Submit(kTinyJob, &submitted).ok());
  const std::string id = submitted.job_id();

  // Watch the job from the start, collecting every state it streams.
  std::vector<v1::JobState> watched;
  std::promise<void> first_update;
  std::thread watcher([&] {
    auto ctx = c.Context();
    v1::WatchJobRequest req;
    req.set_job_id(id);
    auto reader = c.client->WatchJob(ctx.get(), req);
    v1::Job update;
    while (reader->Read(&update)) {
      if (watched.empty()) first_update.set_value();
      if (watched.empty() || watched.back() != update.state()) watched.push_back(update.state());
    }
  });
  first_update.get_future().wait();  // the watch has seen the job PENDING before it is scheduled

  c.server->scheduler()->Tick();
  v1::TaskCommand command;
  REQUIRE(stream->Read(&command));
  REQUIRE(command.has_assign());
  const v1::TaskAssignment& task = command.assign();
  CHECK(task.job_id() == id);
  CHECK(task.train().store_address() == "127.0.0.1:0");
  CHECK(c.Get(id).state() == v1::JOB_STATE_RUNNING);

  v1::ReportProgressRequest progress;
  progress.set_node_id(node_id);
  progress.set_task_id(task.task_id());
  v1::IterationEvent* e = progress.add_iterations();
  e->set_rank(0);
  e->set_iteration(0);
  e->set_samples_per_s(42);
  progress.add_logs()->set_line("hello from rank 0");
  v1::ReportProgressResponse progress_resp;
  REQUIRE(c.worker->ReportProgress(c.Context().get(), progress, &progress_resp).ok());
  CHECK_FALSE(progress_resp.cancel());
  CHECK(c.Get(id).progress().iteration() == 1);
  CHECK(c.Get(id).progress().samples_per_s() == 42);

  v1::ListNodesResponse nodes;
  REQUIRE(c.client->ListNodes(c.Context().get(), v1::ListNodesRequest(), &nodes).ok());
  REQUIRE(nodes.nodes_size() == 1);
  REQUIRE(nodes.nodes(0).device_uses_size() == nodes.nodes(0).devices_size());
  CHECK(nodes.nodes(0).device_uses(0).device() == nodes.nodes(0).devices(0).device());
  CHECK(nodes.nodes(0).device_uses(0).fg_job_id() == id);
  CHECK(nodes.nodes(0).task_ids_size() == 1);

  v1::GetJobPlanRequest plan_req;
  plan_req.set_job_id(id);
  v1::GetJobPlanResponse plan;
  REQUIRE(c.client->GetJobPlan(c.Context().get(), plan_req, &plan).ok());
  CHECK(plan.plan_json().find("deepool.plan") != std::string::npos);
  CHECK(plan.devices_size() == 1);

  v1::ReportTaskExitRequest exit;
  exit.set_node_id(node_id);
  exit.set_task_id(task.task_id());
  exit.set_outcome(v1::TASK_OUTCOME_SUCCEEDED);
  exit.set_checkpoint("/tmp/model.pt");
  v1::ReportTaskExitResponse exit_resp;
  REQUIRE(c.worker->ReportTaskExit(c.Context().get(), exit, &exit_resp).ok());
  watcher.join();  // WatchJob ends after the terminal state
  REQUIRE_FALSE(watched.empty());
  CHECK(watched.back() == v1::JOB_STATE_SUCCEEDED);
  CHECK(std::find(watched.begin(), watched.end(), v1::JOB_STATE_PENDING) != watched.end());
  CHECK(c.Get(id).checkpoint() == "/tmp/model.pt");

  v1::GetJobLogsRequest logs_req;
  logs_req.set_job_id(id);
  logs_req.set_follow(true);  // the job is over: follow ends after the stored lines
  auto logs_ctx = c.Context();
  auto logs = c.client->GetJobLogs(logs_ctx.get(), logs_req);
  v1::LogEntry entry;
  std::vector<std::string> lines;
  while (logs->Read(&entry)) lines.push_back(entry.line());
  CHECK(logs->Finish().ok());
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "hello from rank 0");

  // Finished: its documents left the coordinator's memory, and GetJobPlan reads them back.
  CHECK(c.server->jobs()->Get(id)->plan_json.empty());
  CHECK(c.Get(id).has_plan());
  v1::GetJobPlanResponse finished;
  REQUIRE(c.client->GetJobPlan(c.Context().get(), plan_req, &finished).ok());
  CHECK(finished.plan_json() == plan.plan_json());
  CHECK(finished.graph_json() == plan.graph_json());
  CHECK_FALSE(finished.graph_json().empty());

  stream_ctx.TryCancel();
  v1::TaskCommand ignored;
  while (stream->Read(&ignored)) {
  }
}

TEST_CASE("client calls past --max-client-calls are refused at once, and workers are answered",
          "[service]") {
  auto owned = std::make_unique<testing::FailingJobStore>();
  testing::FailingJobStore* store = owned.get();
  Cluster c([](CoordinatorOptions* options) { options->max_client_calls = 1; }, std::move(owned));
  // Another user's job runs on the worker: its heartbeats and reports name it.
  const std::string node_id = c.Register("w1", 1);
  grpc::ClientContext stream_ctx;
  v1::StreamTasksRequest stream_req;
  stream_req.set_node_id(node_id);
  auto stream = c.worker->StreamTasks(&stream_ctx, stream_req);
  v1::SubmitJobResponse running;
  REQUIRE(c.Submit(kTinyJob, &running).ok());
  c.server->scheduler()->Tick();
  v1::TaskCommand command;
  REQUIRE(stream->Read(&command));
  REQUIRE(command.has_assign());
  const std::string task_id = command.assign().task_id();

  // A submission held in its store write, as a large spec on a slow disk would hold it.
  std::mutex mu;
  std::condition_variable cv;
  bool in_write = false;
  bool released = false;
  store->SetOnSave([&](const JobRecord& job) {
    if (job.spec.name != "slow") return;
    std::unique_lock<std::mutex> lock(mu);
    in_write = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  });
  auto release = [&] {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  };
  struct Release {  // however the test ends, the writes end, so the server can stop
    std::function<void()> release;
    ~Release() { release(); }
  } release_at_exit{release};
  auto slow = std::async(std::launch::async, [&c] {
    v1::SubmitJobResponse resp;
    return c.Submit(R"({"name":"slow","model":"tiny","global_batch":8,"iterations":1})", &resp);
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return in_write; });
  }
  auto soon = [] {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + seconds(10));
    return ctx;
  };
  // A second client call is refused at once instead of waiting behind it.
  v1::ListJobsResponse listed;
  grpc::Status refused = c.client->ListJobs(soon().get(), v1::ListJobsRequest(), &listed);
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(refused.error_message(), Catch::Contains("--max-client-calls"));
  // The worker's calls are answered: before, they waited for the submission's write (it held
  // the job manager's lock) and timed out here.
  v1::HeartbeatRequest beat;
  beat.set_node_id(node_id);
  v1::RunningTask* listed_task = beat.add_running_tasks();
  listed_task->set_task_id(task_id);
  listed_task->set_job_id(running.job_id());
  listed_task->add_ranks(0);
  v1::HeartbeatResponse beat_resp;
  CHECK(c.worker->Heartbeat(soon().get(), beat, &beat_resp).ok());
  v1::ReportProgressRequest progress;
  progress.set_node_id(node_id);
  progress.set_task_id(task_id);
  progress.add_iterations()->set_iteration(0);
  v1::ReportProgressResponse progress_resp;
  CHECK(c.worker->ReportProgress(soon().get(), progress, &progress_resp).ok());
  CHECK_FALSE(progress_resp.cancel());

  release();
  CHECK(slow.get().ok());
  CHECK(c.client->ListJobs(soon().get(), v1::ListJobsRequest(), &listed).ok());  // slot back
  CHECK(listed.jobs_size() == 2);
  stream_ctx.TryCancel();
  v1::TaskCommand ignored;
  while (stream->Read(&ignored)) {
  }
}

TEST_CASE("a node silent past the timeout is DOWN and must register again", "[service]") {
  Cluster c;
  const std::string node_id = c.Register("w1", 2);
  v1::DrainNodeRequest drain;
  drain.set_node("w1");
  v1::Node node;
  REQUIRE(c.client->DrainNode(c.Context().get(), drain, &node).ok());
  CHECK(node.state() == v1::NODE_STATE_DRAINING);
  v1::UndrainNodeRequest undrain;
  undrain.set_node(node_id);
  REQUIRE(c.client->UndrainNode(c.Context().get(), undrain, &node).ok());
  CHECK(node.state() == v1::NODE_STATE_UP);

  c.clock.Advance(seconds(11));
  c.server->scheduler()->Tick();
  v1::ListNodesResponse nodes;
  REQUIRE(c.client->ListNodes(c.Context().get(), v1::ListNodesRequest(), &nodes).ok());
  CHECK(nodes.nodes(0).state() == v1::NODE_STATE_DOWN);
  v1::HeartbeatRequest beat;
  beat.set_node_id(node_id);
  v1::HeartbeatResponse beat_resp;
  auto down_context = c.Context();
  CHECK(c.worker->Heartbeat(down_context.get(), beat, &beat_resp).error_code() ==
        grpc::StatusCode::NOT_FOUND);
  CHECK(down_context->GetServerTrailingMetadata().count(protocol::kRegisterAgainKey) == 1);
  c.Register("w1", 2);
  auto known_context = c.Context();
  REQUIRE(c.worker->Heartbeat(known_context.get(), beat, &beat_resp).ok());
  CHECK(known_context->GetServerTrailingMetadata().count(protocol::kRegisterAgainKey) == 0);
}

TEST_CASE("with the real planner, small_cnn is planned over 2 CPU devices", "[service]") {
  Cluster c(std::make_unique<InProcessPlanningBackend>());
  c.Register("w1", 2);
  v1::SubmitJobResponse submitted;
  REQUIRE(c.Submit(R"({"model":"small_cnn","global_batch":8,"gpus":2,"iterations":2,
                      "profile":"analytical"})",
                   &submitted)
              .ok());
  c.server->scheduler()->Tick();
  v1::Job job = c.Get(submitted.job_id());
  INFO(job.reason());
  REQUIRE(job.state() == v1::JOB_STATE_RUNNING);
  CHECK(job.devices_size() == 2);
  CHECK(job.predicted_iteration_ms() > 0);
  v1::GetJobPlanRequest plan_req;
  plan_req.set_job_id(job.job_id());
  v1::GetJobPlanResponse plan;
  REQUIRE(c.client->GetJobPlan(c.Context().get(), plan_req, &plan).ok());
  auto doc = nlohmann::json::parse(plan.plan_json());
  CHECK(doc["format"] == "deepool.plan");
  CHECK(doc["num_devices"] == 2);
  CHECK(nlohmann::json::parse(plan.graph_json())["format"] == "deepool.graph");

  v1::SubmitJobResponse bad;
  grpc::Status status = c.Submit(R"({"model":"resnet51","global_batch":8,"iterations":1})", &bad);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(status.error_message().rfind("model: ", 0) == 0);
}

TEST_CASE("/metrics: jobs, queue wait, nodes and calls, in a form promtool accepts", "[service]") {
  Cluster c(std::make_unique<testing::FakePlanningBackend>(), 256, "127.0.0.1:0");
  const std::string metrics = c.server->metrics_address();
  REQUIRE_FALSE(metrics.empty());
  c.Register("w1", 1);
  v1::SubmitJobResponse fits, too_big;
  REQUIRE(c.Submit(kTinyJob, &fits).ok());
  REQUIRE(c.Submit(R"({"name":"big","model":"tiny","global_batch":8,"gpus":4,"iterations":2,)"
                   R"("profile":"analytical"})",
                   &too_big)
              .ok());
  c.clock.Advance(seconds(3));
  c.server->scheduler()->Tick();
  const std::string response = deepool::testing::HttpGet(metrics, "/metrics");
  REQUIRE(response.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK_THAT(response, Catch::Contains("Content-Type: text/plain; version=0.0.4"));
  const std::string body = deepool::testing::HttpBody(response);
  INFO(body);
  // The job that fit left PENDING after 3 s in the queue; the other waits.
  CHECK_THAT(body, Catch::Contains("deepool_job_state_duration_seconds_sum{state=\"PENDING\","
                                   "role=\"fg\"} 3\n"));
  CHECK_THAT(body, Catch::Contains("deepool_job_transitions_total{from=\"PENDING\",to=\"PLANNING\","
                                   "role=\"fg\"} 1\n"));
  CHECK_THAT(body, Catch::Contains("deepool_jobs{state=\"PENDING\",role=\"fg\"} 1\n"));
  CHECK_THAT(body, Catch::Contains("deepool_pending_jobs{reason=\"not_enough_devices\"} 1\n"));
  CHECK_THAT(body, Catch::Contains("deepool_pending_job_oldest_wait_seconds{role=\"fg\"} 3\n"));
  CHECK_THAT(body, Catch::Contains("deepool_nodes{state=\"UP\"} 1\n"));
  CHECK_THAT(body, Catch::Contains("deepool_node_heartbeat_age_seconds{node=\"w1\"} 3\n"));
  CHECK_THAT(body,
             Catch::Contains("deepool_rpc_calls_total{service=\"deepool.v1.CoordinatorService\","
                             "method=\"SubmitJob\",code=\"OK\"} 2\n"));
  CHECK_THAT(body, Catch::Contains("deepool_rpc_calls_total{service=\"deepool.v1.NodeService\","
                                   "method=\"RegisterNode\",code=\"OK\"} 1\n"));
  if (auto problems = deepool::testing::PromtoolProblems(body)) {
    CHECK(*problems == "");
  } else {
    WARN("promtool not installed: the text is not checked by it");
  }
}

TEST_CASE("/metrics is served on loopback only, unless TLS or insecure", "[service]") {
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "0.0.0.0:0";
  Status refused = CheckListenSafety(options);
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(refused.message(), Catch::Contains("without TLS files"));
  options.tls.ca = "ca.pem";  // with TLS files the endpoint serves HTTPS on any address
  options.tls.cert = "coordinator.pem";
  options.tls.key = "coordinator-key.pem";
  CHECK(CheckListenSafety(options).ok());
  options.tls = {};
  options.insecure = true;
  CHECK(CheckListenSafety(options).ok());
  options.metrics_listen = "nonsense";
  CHECK(CheckListenSafety(options).code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepool::coordinator

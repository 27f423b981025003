// The coordinator's node API (NodeService) in-process on port 0, called through real gRPC
// stubs: registration and protocol versions, task streams and reports, node timeouts, the call
// limits seen by workers, the real planner, and /metrics.
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
#include "common/limits.h"
#include "coordinator/in_process_planning.h"
#include "coordinator/server.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "deepool/v1/node.grpc.pb.h"
#include "protocol/coordinator_status.h"
#include "protocol/version.h"
#include "tests/promtool.h"
#include "tests/raw_http.h"
#include "tests/service/failing_job_store.h"
#include "tests/service/in_process_coordinator.h"
#include "tests/service/service_test_util.h"

namespace deepool::coordinator {
namespace {

using std::chrono::seconds;
using Cluster = testing::InProcessCoordinator;
using testing::kTinyJob;

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

  // A worker of this build (it speaks 1 to kProtocolVersion) joins: the adamw job goes there, at
  // version 2.
  const v1::RegisterNodeResponse new_registered = c.Register(Cluster::NodeRequest("new", 1));
  REQUIRE(new_registered.protocol_version() == protocol::kProtocolVersion);
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
  CHECK(nodes.nodes(0).protocol_version() == protocol::kProtocolVersion);
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
  v1::Evaluation* evaluation = progress.add_evaluations();
  evaluation->set_iteration(1);
  evaluation->set_samples(800);
  evaluation->set_loss(0.52);
  evaluation->set_top1(0.812);
  evaluation->set_top5(0.99);
  v1::ReportProgressResponse progress_resp;
  REQUIRE(c.worker->ReportProgress(c.Context().get(), progress, &progress_resp).ok());
  CHECK_FALSE(progress_resp.cancel());
  CHECK(c.Get(id).progress().iteration() == 1);
  CHECK(c.Get(id).progress().samples_per_s() == 42);
  REQUIRE(c.Get(id).progress().evaluations_size() == 1);
  CHECK(c.Get(id).progress().evaluations(0).top1() == 0.812);
  CHECK(c.Get(id).progress().evaluations(0).loss() == 0.52);
  // Sent again (a worker retrying a report): kept once, logged once.
  REQUIRE(c.worker->ReportProgress(c.Context().get(), progress, &progress_resp).ok());
  CHECK(c.Get(id).progress().evaluations_size() == 1);

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
  REQUIRE(lines.size() == 3);  // the retried report's log line came twice
  CHECK(lines[0] == "hello from rank 0");
  CHECK(lines[1] ==
        "evaluation after iteration 1: top-1 81.2 %, top-5 99.0 %, loss 0.520 (800 samples)");
  CHECK(lines[2] == "hello from rank 0");

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

TEST_CASE("a registration or heartbeat that lists too many tasks or devices is refused",
          "[service]") {
  Cluster c;
  const std::string node_id = c.Register("w1", 2);
  v1::HeartbeatRequest beat;
  beat.set_node_id(node_id);
  for (int i = 0; i <= kMaxListedTasks; ++i) beat.add_running_tasks()->set_task_id("stray");
  v1::HeartbeatResponse beat_resp;
  const grpc::Status beaten = c.worker->Heartbeat(c.Context().get(), beat, &beat_resp);
  CHECK(beaten.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(beaten.error_message(), Catch::Contains("running_tasks: 10001 listed"));

  v1::RegisterNodeRequest many = c.NodeRequest("w2", 1);
  *many.mutable_running_tasks() = beat.running_tasks();
  v1::RegisterNodeResponse registered;
  CHECK(c.worker->RegisterNode(c.Context().get(), many, &registered).error_code() ==
        grpc::StatusCode::INVALID_ARGUMENT);
  v1::RegisterNodeRequest huge = c.NodeRequest("w3", 1);
  for (int i = 0; i < kMaxNodeDevices; ++i) *huge.add_devices() = huge.devices(0);
  const grpc::Status refused = c.worker->RegisterNode(c.Context().get(), huge, &registered);
  CHECK(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(refused.error_message(), Catch::Contains("devices: at most 1024"));
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
  // A name that merely starts like a loopback address is not one.
  options = CoordinatorOptions();
  options.listen = "127.evil.example:0";
  CHECK(CheckListenSafety(options).code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepool::coordinator

// The coordinator's client API (CoordinatorService) in-process on port 0, called through real
// gRPC stubs: start-up, submissions, listings, limits and refusals.
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
#include "tests/service/in_process_coordinator.h"
#include "tests/service/service_test_util.h"

namespace deepool::coordinator {
namespace {

using std::chrono::seconds;
using Cluster = testing::InProcessCoordinator;
using testing::kTinyJob;

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
  // A state named twice is one state; a list of a million is refused before it is matched
  // against any job.
  v1::ListJobsRequest twice;
  twice.add_states(v1::JOB_STATE_PENDING);
  twice.add_states(v1::JOB_STATE_PENDING);
  REQUIRE(c.client->ListJobs(c.Context().get(), twice, &ignored).ok());
  CHECK(ignored.jobs_size() == 5);
  v1::ListJobsRequest flood;
  for (int i = 0; i < 1'000'000; ++i) flood.add_states(v1::JOB_STATE_PENDING);
  const grpc::Status flooded = c.client->ListJobs(c.Context().get(), flood, &ignored);
  CHECK(flooded.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(flooded.error_message(), Catch::Contains("states: at most 32"));
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

TEST_CASE("with a retention the control loop removes the jobs that ended before it", "[service]") {
  Cluster c(
      [](CoordinatorOptions* options) {
        options->control_loop = true;
        options->tick_interval = std::chrono::milliseconds(10);
        options->keep_finished = std::chrono::hours(24);
      },
      std::make_unique<InMemoryJobStore>());
  v1::SubmitJobResponse ended, waiting;
  REQUIRE(c.Submit(kTinyJob, &ended).ok());
  REQUIRE(c.Submit(kTinyJob, &waiting).ok());
  v1::CancelJobRequest cancel;
  cancel.set_job_id(ended.job_id());
  v1::Job cancelled;
  REQUIRE(c.client->CancelJob(c.Context().get(), cancel, &cancelled).ok());
  c.clock.Advance(std::chrono::hours(25));
  // Removed by a round of the control loop (every 10 ms): looked for until it is gone.
  v1::GetJobRequest get;
  get.set_job_id(ended.job_id());
  grpc::Status status;
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  do {
    v1::Job job;
    status = c.client->GetJob(c.Context().get(), get, &job);
  } while (status.ok() && std::chrono::steady_clock::now() < deadline);
  CHECK(status.error_code() == grpc::StatusCode::NOT_FOUND);
  // The unfinished job stays, however old.
  CHECK(c.Get(waiting.job_id()).state() == v1::JOB_STATE_PENDING);
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

}  // namespace
}  // namespace deepool::coordinator

// What the client views of jobs cost while other jobs hold large inline graphs: the bytes the
// process allocates (operator new, every thread, server and client) for one SubmitJob, GetJob,
// ListJobs and WatchJob update. Every one of them used to copy every active job's record with
// its graph (the queue positions, the list, the job itself); a view now copies no graph it does
// not show, so its cost does not grow with the graphs of other jobs.
#include <grpcpp/create_channel.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <new>

#include "common/clock.h"
#include "coordinator/server.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "tests/service/service_test_util.h"

// GCC sees the replaced new and delete inlined as malloc and free pairs it does not expect.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<uint64_t> g_allocated{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocated.fetch_add(size, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  g_allocated.fetch_add(size, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept {
  return operator new(size, tag);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace deepool::coordinator {
namespace {

constexpr int kJobs = 8;
constexpr size_t kGraphBytes = 2 << 20;
// Far below one graph, far above what a view of these jobs needs (a few KB).
constexpr uint64_t kMostPerCall = 1 << 20;

template <typename F>
uint64_t Allocated(F call) {
  const uint64_t before = g_allocated.load();
  call();
  return g_allocated.load() - before;
}

TEST_CASE("views of jobs copy none of the large graphs other jobs hold", "[service]") {
  FakeClock clock;
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.store = "memory";
  options.control_loop = false;  // no node either: the jobs stay PENDING
  options.insecure = true;       // anonymous callers
  auto started = CoordinatorServer::Start(options, std::make_unique<InMemoryJobStore>(),
                                          std::make_unique<testing::FakePlanningBackend>(), &clock);
  REQUIRE(started.ok());
  std::unique_ptr<CoordinatorServer> server = std::move(*started);
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto client = v1::CoordinatorService::NewStub(
      grpc::CreateCustomChannel(server->address(), grpc::InsecureChannelCredentials(), args));
  auto context = [] {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return ctx;
  };

  v1::SubmitJobRequest big;
  big.mutable_spec()->set_name("big");
  big.mutable_spec()->set_graph_json(std::string(kGraphBytes, ' '));
  big.mutable_spec()->set_global_batch(8);
  big.mutable_spec()->set_iterations(1);
  std::string job_id;
  for (int i = 0; i < kJobs; ++i) {
    v1::SubmitJobResponse resp;
    REQUIRE(client->SubmitJob(context().get(), big, &resp).ok());
    job_id = resp.job_id();
  }

  v1::SubmitJobRequest small;
  small.set_spec_json(R"({"name":"small","model":"tiny","global_batch":8,"iterations":1})");
  const uint64_t submit = Allocated([&] {
    v1::SubmitJobResponse resp;
    REQUIRE(client->SubmitJob(context().get(), small, &resp).ok());
    CHECK(resp.job().queue_position() == kJobs + 1);
  });
  const uint64_t get = Allocated([&] {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    v1::Job job;
    REQUIRE(client->GetJob(context().get(), req, &job).ok());
    CHECK(job.queue_position() == kJobs);
  });
  const uint64_t list = Allocated([&] {
    v1::ListJobsResponse resp;
    REQUIRE(client->ListJobs(context().get(), v1::ListJobsRequest(), &resp).ok());
    CHECK(resp.jobs_size() == kJobs + 1);
  });
  const uint64_t watch = Allocated([&] {
    auto ctx = context();
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    auto reader = client->WatchJob(ctx.get(), req);
    v1::Job first;
    REQUIRE(reader->Read(&first));
    ctx->TryCancel();
    while (reader->Read(&first)) {
    }
    (void)reader->Finish();
  });
  INFO("bytes allocated: SubmitJob " << submit << ", GetJob " << get << ", ListJobs " << list
                                     << ", WatchJob " << watch
                                     << " (each job's graph: " << kGraphBytes << ")");
  CHECK(submit < kMostPerCall);
  CHECK(get < kMostPerCall);
  CHECK(list < kMostPerCall);
  CHECK(watch < kMostPerCall);
  server->Shutdown();
}

}  // namespace
}  // namespace deepool::coordinator

// Speed-up curves in the coordinator's policy snapshots (SpeedCurveBook, PlanningBackend::
// SpeedupCurve): planned once per (job, device type) off the scheduler's lock and again only when
// their inputs change; under "deepool" jobs are sized by them and under "max-min" a job goes to
// the type its curve favours. With the FakePlanningBackend's curves and, last, with the real
// InProcessPlanningBackend on zoo models.
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/in_process_planning.h"
#include "coordinator/policy/policy.h"
#include "coordinator/profile_cache_key.h"
#include "coordinator/scheduler.h"
#include "coordinator/speed_curve_book.h"
#include "jobspec/job_spec.h"
#include "protocol/version.h"
#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator {
namespace {

using std::chrono::milliseconds;
using testing::FakePlanningBackend;
using testing::Fg;
using testing::Harness;

// Decides as `inner` does and keeps the last snapshot it was shown.
class RecordingPolicy final : public policy::Policy {
 public:
  explicit RecordingPolicy(std::string_view inner) : inner_(*policy::MakePolicy(inner)) {}
  std::string_view Name() const override { return inner_->Name(); }
  policy::Decisions Decide(const policy::PolicySnapshot& snapshot) const override {
    last = snapshot;
    return inner_->Decide(snapshot);
  }
  mutable policy::PolicySnapshot last;

 private:
  std::unique_ptr<policy::Policy> inner_;
};

SchedulerOptions WithPolicy(std::shared_ptr<const policy::Policy> policy) {
  SchedulerOptions options;
  options.policy = std::move(policy);
  return options;
}

SchedulerOptions WithPolicy(const std::string& name) {
  StatusOr<std::unique_ptr<policy::Policy>> made = policy::MakePolicy(name);
  REQUIRE(made.ok());
  return WithPolicy(std::shared_ptr<const policy::Policy>(std::move(*made)));
}

JobRecord SubmitAs(Harness& h, const JobSpec& spec, const std::string& user) {
  StatusOr<JobRecord> job = h.scheduler.Submit(spec, "", user);
  REQUIRE(job.ok());
  return *job;
}

JobSpec FgOf(const std::string& model, int gpus) {
  JobSpec spec = Fg(gpus);
  spec.model = model;
  return spec;
}

// FG devices each job holds.
std::map<std::string, int> DevicesHeld(Harness& h) {
  std::map<std::string, int> held;
  for (const auto& [key, use] : h.scheduler.DeviceUses()) {
    if (!use.fg_job.empty()) ++held[use.fg_job];
  }
  return held;
}

const policy::PolicyJob* FindJob(const policy::PolicySnapshot& snapshot, const std::string& id) {
  for (const policy::PolicyJob& job : snapshot.jobs) {
    if (job.id == id) return &job;
  }
  return nullptr;
}

TEST_CASE("deepool: a job whose curve scales gets the devices one that does not scale would",
          "[scheduler][policy][curves]") {
  Harness h(nullptr, nullptr, WithPolicy("deepool"));
  h.planner.curves[{"tiny", "cpu"}] = {1.0, 0.5, 0.34, 0.25};        // scales
  h.planner.curves[{"small_cnn", "cpu"}] = {1.0, 0.98, 0.97, 0.96};  // barely
  h.AddNode("a", 4);
  // The one that does not scale first: without curves the two would split the node 2 and 2.
  const JobRecord flat = h.Submit(FgOf("small_cnn", 4));
  const JobRecord scaling = h.Submit(FgOf("tiny", 4));
  h.scheduler.Tick();
  const std::map<std::string, int> held = DevicesHeld(h);
  CHECK(held.at(scaling.id) == 3);
  CHECK(held.at(flat.id) == 1);
  CHECK(h.planner.curve_plans == 2);  // one per (job, device type)
}

TEST_CASE("max-min: a job goes to the device type its curve favours relative to its best",
          "[scheduler][policy][curves]") {
  Harness h(nullptr, nullptr, WithPolicy("max-min"));
  h.planner.analytical_types = {"a100", "v100"};
  // small_cnn runs 1.2x as fast on a100 as on v100, tiny 4x: the a100s should go to tiny.
  h.planner.curves[{"small_cnn", "a100"}] = {1.0, 0.6};
  h.planner.curves[{"small_cnn", "v100"}] = {1.2, 0.72};
  h.planner.curves[{"tiny", "a100"}] = {1.0, 0.5};
  h.planner.curves[{"tiny", "v100"}] = {4.0, 2.0};
  h.AddNode("a", 2, "a100");
  h.AddNode("b", 2, "v100");
  // small_cnn's user comes first; without curves it would take the a100s (the first type).
  const JobRecord gains_little = SubmitAs(h, FgOf("small_cnn", 2), "bob");
  const JobRecord gains_much = SubmitAs(h, FgOf("tiny", 2), "alice");
  h.scheduler.Tick();
  CHECK(h.Get(gains_little.id).device_type == "v100");
  CHECK(h.Get(gains_much.id).device_type == "a100");
  CHECK(h.planner.curve_plans == 4);
}

TEST_CASE("fifo: a BG job takes the free device type its curve favours, and FG jobs get no curves",
          "[scheduler][policy][curves]") {
  Harness h;  // fifo
  h.planner.analytical_types = {"a100", "v100"};
  // The BG job's model trains twice as fast on v100 here; without its curve it would take the
  // first free device, an a100.
  h.planner.curves[{"tiny", "a100"}] = {2.0};
  h.planner.curves[{"tiny", "v100"}] = {1.0};
  h.planner.curves[{"small_cnn", "a100"}] = {1.0};
  h.planner.curves[{"small_cnn", "v100"}] = {1.0};
  h.AddNode("a", 2, "a100");
  h.AddNode("b", 1, "v100");
  const JobRecord fg = h.Submit(FgOf("small_cnn", 1));
  const JobRecord bg = h.Submit(testing::Bg());
  h.scheduler.Tick();
  CHECK(h.Get(fg.id).device_type == "a100");
  REQUIRE(h.Get(bg.id).state == JobState::kRunning);
  CHECK(h.Get(bg.id).devices.at(0).node_id == "node-b");  // the v100
  CHECK(h.planner.curve_plans == 2);  // the BG job's, one per type: fifo sizes no FG job by one
}

TEST_CASE("curves are planned once per job and device type, again for a new type",
          "[scheduler][policy][curves]") {
  auto recording = std::make_shared<RecordingPolicy>("deepool");
  Harness h(nullptr, nullptr, WithPolicy(recording));
  h.planner.analytical_types = {"cpu", "a100"};
  h.planner.curves[{"tiny", "cpu"}] = {1.0, 0.6, 0.5, 0.45};
  h.planner.curves[{"tiny", "a100"}] = {0.2, 0.1};
  h.AddNode("a", 2);
  const JobRecord big = h.Submit(Fg(8));  // waits for its curve's planning no longer than a round
  h.scheduler.Tick();
  CHECK(h.planner.curve_plans == 1);
  CHECK(h.planner.last_curve_pool.devices == 2);  // at most the type's devices
  const policy::PolicyJob* seen = FindJob(recording->last, big.id);
  REQUIRE(seen != nullptr);
  REQUIRE(seen->curves.count("cpu") == 1);
  CHECK(seen->curves.at("cpu").iteration_s == std::vector<double>{1.0, 0.6});
  for (int round = 0; round < 3; ++round) h.scheduler.Tick();
  CHECK(h.planner.curve_plans == 1);  // kept with the job

  // A second job waits (every device is held): its curve is planned, the first's is kept.
  const JobRecord waiting = h.Submit(Fg(2));
  h.scheduler.Tick();
  CHECK(h.planner.curve_plans == 2);
  // A new device type: each job's curve on it, once; the cpu curves are kept.
  h.AddNode("g", 2, "a100");
  h.scheduler.Tick();
  CHECK(h.planner.curve_plans == 4);
  h.scheduler.Tick();
  CHECK(h.planner.curve_plans == 4);
  // More cpu devices than the first job's curve covers: planned again for it only.
  h.AddNode("c", 2);
  h.scheduler.Tick();
  CHECK(h.planner.curve_plans == 5);
  CHECK(h.planner.last_curve_pool.devices == 4);
  (void)waiting;
}

// A fixed profile cache and a FakeClock for the book alone.
struct BookFixture {
  FakePlanningBackend planner;
  FakeClock clock;
  std::map<std::pair<std::string, std::string>, std::string> profiles;
  int profile_reads = 0;
  SpeedCurveBook book{&planner,
                      [this](const std::string& key,
                             const std::string& type) -> StatusOr<std::optional<std::string>> {
                        ++profile_reads;
                        auto found = profiles.find({key, type});
                        if (found == profiles.end()) return std::optional<std::string>();
                        return std::optional<std::string>(found->second);
                      },
                      &clock, milliseconds(100)};

  static JobSnapshot Job(const std::string& id, JobSpec spec, JobState state = JobState::kPending) {
    auto job = std::make_shared<JobRecord>();
    job->id = id;
    job->spec = std::move(spec);
    job->state = state;
    return job;
  }
};

TEST_CASE("a measured profile that arrives replaces the preset in the curves of its model",
          "[policy][curves]") {
  BookFixture f;
  f.planner.analytical_types = {};  // no preset: only a measured profile makes a curve
  f.planner.curves[{"tiny", "gpu"}] = {1.0, 0.5};
  JobSpec measured = Fg(2);
  measured.profile = "measured";
  const std::vector<JobSnapshot> jobs = {BookFixture::Job("j1", measured)};
  const std::vector<PoolDeviceType> pool = {{"gpu", 2, 2, true}};
  CHECK(f.book.Refresh(jobs, pool) == 1);  // nothing to plan from: no curve
  CHECK(f.planner.curve_plans == 0);
  CHECK(f.book.Curves().empty());
  CHECK(f.book.Refresh(jobs, pool) == 0);  // and no retry until the inputs change

  const std::string key = f.planner.ModelKey(measured);
  f.profiles[{key, "gpu"}] = R"({"format":"deepool.profile"})";
  f.book.ProfileChanged(key, "gpu");
  CHECK(f.book.Refresh(jobs, pool) == 1);
  CHECK(f.planner.curve_plans == 1);
  CHECK(f.planner.last_curve_profile_json == R"({"format":"deepool.profile"})");
  REQUIRE(f.book.Curves().count("j1") == 1);
  CHECK(f.book.Curves().at("j1")->at("gpu").iteration_s == std::vector<double>{1.0, 0.5});
  // Another model's profile changes nothing here.
  f.book.ProfileChanged("fake/small_cnn", "gpu");
  CHECK(f.book.Refresh(jobs, pool) == 0);
  // A job that ends is forgotten.
  CHECK(f.book.Refresh({}, pool) == 0);
  CHECK(f.book.Curves().empty());
}

TEST_CASE("a 16-bit job's curves use its model's profile at that precision", "[policy][curves]") {
  BookFixture f;
  f.planner.analytical_types = {};  // only a measured profile makes a curve
  f.planner.curves[{"tiny", "gpu"}] = {1.0, 0.5};
  JobSpec bf16 = Fg(2);
  bf16.profile = "measured";
  bf16.precision = planner::Precision::kBf16;
  const std::vector<JobSnapshot> jobs = {BookFixture::Job("j1", bf16)};
  const std::vector<PoolDeviceType> pool = {{"gpu", 2, 2, true}};
  const std::string fp32_key = f.planner.ModelKey(bf16);
  const std::string bf16_key = ProfileCacheKey(fp32_key, planner::Precision::kBf16);
  REQUIRE(bf16_key != fp32_key);
  f.profiles[{fp32_key, "gpu"}] = R"({"format":"deepool.profile","precision":"fp32"})";
  f.profiles[{bf16_key, "gpu"}] = R"({"format":"deepool.profile","precision":"bf16"})";
  CHECK(f.book.Refresh(jobs, pool) == 1);
  CHECK(f.planner.last_curve_profile_json == f.profiles[{bf16_key, "gpu"}]);
  // A new bf16 profile plans it again; a new fp32 one does not concern it.
  f.book.ProfileChanged(fp32_key, "gpu");
  CHECK(f.book.Refresh(jobs, pool) == 0);
  f.book.ProfileChanged(bf16_key, "gpu");
  CHECK(f.book.Refresh(jobs, pool) == 1);
}

TEST_CASE("one refresh plans curves for its budget and leaves the rest to the next",
          "[policy][curves]") {
  BookFixture f;
  f.planner.curves[{"tiny", "cpu"}] = {1.0, 0.5};
  f.planner.on_curve = [&f] { f.clock.Advance(milliseconds(40)); };  // each curve takes 40 ms
  std::vector<JobSnapshot> jobs;
  for (int i = 0; i < 5; ++i) jobs.push_back(BookFixture::Job("j" + std::to_string(i), Fg(2)));
  // A running job is planned after the waiting ones.
  jobs.insert(jobs.begin(), BookFixture::Job("running", Fg(2), JobState::kRunning));
  const std::vector<PoolDeviceType> pool = {{"cpu", 2, 2, true}};
  CHECK(f.book.Refresh(jobs, pool) == 3);  // 0, 40, 80 ms: the 100 ms budget is spent at 120
  CHECK(f.book.Curves().count("j0") == 1);
  CHECK(f.book.Curves().count("running") == 0);
  CHECK(f.book.Refresh(jobs, pool) == 3);
  CHECK(f.book.Curves().size() == 6);
  CHECK(f.book.Refresh(jobs, pool) == 0);
}

TEST_CASE("the pool's device types as curves are planned for them", "[policy][curves]") {
  NodeRecord a;
  a.id = "a";
  a.devices = {{"cuda:0", "a100", 0}, {"cuda:1", "a100", 0}, {"cpu:0", "cpu", 0}};
  NodeRecord b = a;
  b.id = "b";
  b.devices = {{"cuda:0", "a100", int64_t{16} << 30}};  // reports less than the preset's
  b.protocol = {1, protocol::kPrecisionProtocolVersion - 1};
  NodeRecord down = a;
  down.id = "down";
  down.state = NodeState::kDown;
  const std::vector<PoolDeviceType> types = PoolDeviceTypes({a, b, down});
  REQUIRE(types.size() == 2);
  CHECK(types[0].type == "a100");
  CHECK(types[0].devices == 3);
  CHECK(types[0].devices_per_node == 2);
  CHECK_FALSE(types[0].reads_precision);
  CHECK(types[0].device_memory_bytes == int64_t{16} << 30);  // the least of the type's
  CHECK(types[1].type == "cpu");
  CHECK(types[1].devices == 1);
  CHECK(types[1].reads_precision);
}

// The real planner: resnet50 and small_cnn on an analytical a100 node. Their curves reach the
// policy's snapshot, each point what PlanForeground predicts on that many devices.
TEST_CASE("the in-process planner's curves reach the policy's snapshot",
          "[scheduler][policy][curves]") {
  InProcessPlanningBackend backend;
  auto recording = std::make_shared<RecordingPolicy>("deepool");
  Harness h(nullptr, &backend, WithPolicy(recording));
  h.AddNode("a", 4, "a100");
  JobSpec resnet = FgOf("resnet50", 4);
  resnet.global_batch = 64;
  JobSpec small = FgOf("small_cnn", 4);
  small.global_batch = 64;
  const JobRecord big = h.Submit(resnet);
  const JobRecord little = h.Submit(small);
  h.scheduler.Tick();
  for (const auto& [record, spec] : {std::pair{big, resnet}, std::pair{little, small}}) {
    INFO(spec.model);
    const policy::PolicyJob* seen = FindJob(recording->last, record.id);
    REQUIRE(seen != nullptr);
    REQUIRE(seen->curves.count("a100") == 1);
    const policy::SpeedCurve& curve = seen->curves.at("a100");
    REQUIRE(curve.MaxDevices() == 4);
    // Planned as the scheduler plans the job on g devices of one node, at the precision it
    // trains at there (bf16 on a100 for workers that read it).
    JobSpec at = spec;
    at.precision = jobspec::TrainingPrecision(spec, "a100", true);
    for (int g = 1; g <= 4; ++g) {
      const StatusOr<PlannedJob> plan = backend.PlanForeground(at, {"a100", 1, g, g}, "");
      REQUIRE(plan.ok());
      CHECK(curve.IterationS(g) == Approx(plan->iteration_ms / 1000).epsilon(1e-9));
    }
  }
  // resnet50's larger layers gain more from a second device than small_cnn's.
  const policy::SpeedCurve& r = FindJob(recording->last, big.id)->curves.at("a100");
  const policy::SpeedCurve& s = FindJob(recording->last, little.id)->curves.at("a100");
  CHECK(r.IterationS(1) / r.IterationS(2) > s.IterationS(1) / s.IterationS(2));
}

// A curve holds the job to the type's device memory as its plans are: on too few devices to
// hold vgg16 at B = 64 it has no point (0), above them each point is PlanForeground's.
TEST_CASE("the in-process planner's curve starts at the fewest devices that hold the job",
          "[policy][curves][memory]") {
  InProcessPlanningBackend backend;
  JobSpec spec = FgOf("vgg16", 4);
  spec.global_batch = 64;
  spec.precision = planner::Precision::kTf32;
  const int64_t memory = int64_t{6} << 30;
  ClusterShape pool{"a100", 1, 4, 4};
  pool.device_memory_bytes = memory;
  const StatusOr<policy::SpeedCurve> curve = backend.SpeedupCurve(spec, pool, "");
  REQUIRE(curve.ok());
  REQUIRE(curve->MaxDevices() == 4);
  int fewest = 0;
  for (int g = 1; g <= 4; ++g) {
    ClusterShape shape{"a100", 1, g, g};
    shape.device_memory_bytes = memory;
    const StatusOr<PlannedJob> plan = backend.PlanForeground(spec, shape, "");
    INFO(g);
    if (!plan.ok()) {
      CHECK(plan.status().code() == StatusCode::kResourceExhausted);
      CHECK(curve->IterationS(g) == 0);
      continue;
    }
    if (fewest == 0) fewest = g;
    CHECK(curve->IterationS(g) == Approx(plan->iteration_ms / 1000).epsilon(1e-9));
  }
  CHECK(fewest > 1);  // one device does not hold it
  CHECK(fewest <= 4);
}

}  // namespace
}  // namespace deepool::coordinator

// The pool simulator against the real daemons (issue 44, point 6; docs/benchmarks.md, "Pool
// simulator against the real daemons"). A small trace of short jobs from several users is
// replayed on a real local cluster (tests/e2e/local_cluster.h: deepool-coordinator with its fifo
// policy and one deepool-worker with two CPU devices, one core each) and through the pool
// simulator with the coordinator's fifo policy on two "cpu" devices, every job kind's speed and
// per-job overhead measured alone on the same cluster before the replay and after it, and the
// node's contention (two jobs side by side against one alone) before it; the tables compare
// completion times and makespans with independent devices and with the measured contention
// (simulator/node_contention.h).
//
//   build/bin/deepool-bench-pool-validation "[full]"    # 40 jobs, about 11 minutes
//   build/bin/deepool-bench-pool-validation             # the quick check (6 short jobs)
//
// The quick check is registered with CTest (label e2e): it shows the harness works end to end,
// not the 20 % claim, which a shared 2-core machine makes noisy.
#include <catch2/catch.hpp>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "bench/pool_validation/validation_contention.h"
#include "bench/pool_validation/validation_replay.h"
#include "bench/pool_validation/validation_report.h"
#include "bench/pool_validation/validation_sim.h"
#include "bench/pool_validation/validation_trace.h"
#include "tests/e2e/local_cluster.h"

namespace deepool::bench {
namespace {

namespace fs = std::filesystem;

// Stubs that call as trace users: each user gets a token in the coordinator's users file (as
// `deepool token create USER --role user` makes one), so jobs carry their owners.
class UserStubs {
 public:
  explicit UserStubs(e2e::LocalCluster& cluster) : cluster_(cluster) {}

  v1::CoordinatorService::Stub& For(const std::string& user) {
    auto found = stubs_.find(user);
    if (found != stubs_.end()) return *found->second;
    const std::string users_file = cluster_.coordinator_data_dir() + "/users.json";
    auto users = security::LoadUserTable(users_file);
    REQUIRE(users.ok());
    const std::string token = security::NewToken().value();
    REQUIRE(users->Add(user, security::Role::kUser, security::TokenDigest(token)).ok());
    REQUIRE(security::SaveUserTable(*users, users_file).ok());
    security::ClientSecurity who;
    who.token = token;
    return *stubs_.emplace(user, cluster_.ConnectAs(who)).first->second;
  }

 private:
  e2e::LocalCluster& cluster_;
  std::map<std::string, std::unique_ptr<v1::CoordinatorService::Stub>> stubs_;
};

struct ValidationResult {
  std::vector<RealJobRecord> real;
  ContentionCalibration contention;
  // The simulation with the node's measured contention and the one with independent devices
  // (the simulator's default, the one the 20 % claim is about; docs/benchmarks.md, "Pool
  // simulator against the real daemons", says why).
  simulator::PoolRun simulated;
  ValidationComparison comparison;
  simulator::PoolRun independent;
  ValidationComparison independent_comparison;
  // Per kind: its median iteration time alone after the replay over before it.
  std::map<std::string, double> kind_drift;
  // MeanJctSensitivity at 5 % (independent devices): the simulated mean JCT's relative change.
  double jct_sensitivity = 0;
};

// Copies the daemons' binaries into a directory of their own and points the harness there
// (DEEPOOL_E2E_BIN_DIR): the machine's one build directory is shared, and a build that relinks
// build/bin/deepool-executor while the replay runs would make the worker's next start fail.
std::string PrivateBinaries() {
  std::string pattern = (fs::temp_directory_path() / "dp-pool-validation-bin-XXXXXX").string();
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  for (const char* tool :
       {"deepool", "deepool-coordinator", "deepool-worker", "deepool-executor"}) {
    fs::copy_file(fs::path(DEEPOOL_BIN_DIR) / tool, fs::path(pattern) / tool);
  }
  REQUIRE(setenv("DEEPOOL_E2E_BIN_DIR", pattern.c_str(), 1) == 0);
  return pattern;
}

// The machine's load averages (1, 5 and 15 minutes) as the kernel reports them: other processes
// on the machine slow the cluster's devices, and neither side of the comparison models them, so
// the harness prints them beside its numbers ("unknown" where /proc/loadavg is unreadable).
std::string LoadAverages() {
  std::ifstream file("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(file >> one >> five >> fifteen)) return "unknown";
  return one + " " + five + " " + fifteen;
}

// How many times the calibration runs each kind alone before the replay and after it
// (MeasureKinds), and its pairs (CalibrateContention); each kind keeps its median repetition.
struct CalibrationRepetitions {
  int kinds = 3;
  int kinds_after = 3;
  int pairs = 3;
};

// Prints each kind's calibration and the repetitions it was taken from.
void PrintKinds(const std::map<std::string, std::vector<KindCalibration>>& repetitions,
                const std::map<std::string, KindCalibration>& kinds) {
  for (const auto& [key, calibration] : kinds) {
    std::cout << "  " << key << ": " << calibration.iteration_s * 1000
              << " ms per iteration (last reported " << calibration.reported_iteration_s * 1000
              << " ms), busy " << calibration.busy_fraction << ", overhead "
              << calibration.overhead_s << " s; runs of " << calibration.iterations << " / "
              << 3 * calibration.iterations << " iterations (s):";
    for (const KindCalibration& repetition : repetitions.at(key)) {
      std::cout << " " << repetition.short_s << " / " << repetition.long_s;
    }
    std::cout << "\n";
  }
}

ValidationResult RunValidation(const ValidationTraceOptions& trace_options,
                               CalibrationRepetitions repetitions, double timeout_s) {
  const simulator::Workload workload = MakeValidationTrace(trace_options);
  const std::string binaries = PrivateBinaries();
  struct RemoveAtEnd {
    std::string dir;
    ~RemoveAtEnd() {
      std::error_code ignored;  // a temporary directory left behind is harmless
      fs::remove_all(dir, ignored);
    }
  } remove_binaries{binaries};
  e2e::ClusterOptions cluster_options;
  cluster_options.workers = 1;
  cluster_options.devices_per_worker = 2;  // one thread each on this 2-core machine
  e2e::LocalCluster cluster(cluster_options);
  UserStubs stubs(cluster);
  ReplayTarget target;
  target.stub_for = [&](const std::string& user) -> v1::CoordinatorService::Stub& {
    return stubs.For(user);
  };
  target.checkpoint_root = cluster.dir() + "/checkpoints";
  target.timeout_s = timeout_s;

  std::cout << "load average before the calibration: " << LoadAverages() << "\n";
  const std::vector<simulator::WorkloadJob> kind_jobs =
      OneJobPerKind(workload, trace_options.iteration_scale);
  auto measured_before = MeasureKinds(kind_jobs, target, repetitions.kinds, "calibrate-before-");
  if (!measured_before.ok()) cluster.DumpLogs();
  REQUIRE(measured_before.status().message() == "");
  auto kinds_before = MedianKinds(*measured_before);
  REQUIRE(kinds_before.status().message() == "");
  std::cout << "calibration before the replay (each kind alone; medians of " << repetitions.kinds
            << "):\n";
  PrintKinds(*measured_before, *kinds_before);

  ValidationResult result;
  auto contention = CalibrateContention(kind_jobs, *kinds_before, target, repetitions.pairs);
  if (!contention.ok()) cluster.DumpLogs();
  REQUIRE(contention.status().message() == "");
  result.contention = *contention;
  std::cout << "contention (iteration time, two copies side by side over one alone; median of "
            << repetitions.pairs << "):";
  for (const auto& [key, ratio] : contention->pair_ratio) {
    std::cout << " " << key << " " << ratio << " (";
    const std::vector<double>& samples = contention->pair_samples.at(key);
    for (size_t i = 0; i < samples.size(); ++i) std::cout << (i ? ", " : "") << samples[i];
    std::cout << ")";
  }
  std::cout << "; slowdown(2) " << contention->two_devices << "\n";

  std::cout << "load average before the replay: " << LoadAverages() << "\n";
  auto real = ReplayOnCluster(workload.jobs, target);
  if (!real.ok()) cluster.DumpLogs();
  REQUIRE(real.status().message() == "");
  result.real = std::move(real).value();
  std::cout << "load average after the replay: " << LoadAverages() << "\n";

  // The kinds again after the replay: the simulator is given the median of both sides, so a
  // machine whose speed drifts while the replay runs is not measured at its start alone.
  auto measured_after =
      MeasureKinds(kind_jobs, target, repetitions.kinds_after, "calibrate-after-");
  if (!measured_after.ok()) cluster.DumpLogs();
  REQUIRE(measured_after.status().message() == "");
  // A side that measured nothing for a kind (a busy machine: MedianKindCalibration) only loses
  // that kind's drift; the median of both sides still has the repetitions before the replay.
  std::cout << "drift (iteration time after the replay over before; median of "
            << repetitions.kinds_after << " after):";
  for (const auto& [key, after] : *measured_after) {
    const StatusOr<KindCalibration> median_after = MedianKindCalibration(after);
    if (!median_after.ok()) {
      std::cout << " " << key << " not measured";
      continue;
    }
    result.kind_drift[key] = median_after->iteration_s / kinds_before->at(key).iteration_s;
    std::cout << " " << key << " " << result.kind_drift[key];
  }
  std::cout << "\n";
  const auto measured = BothSides(*measured_before, *measured_after);
  auto kinds = MedianKinds(measured);
  REQUIRE(kinds.status().message() == "");
  std::cout << "the simulator's calibration (median of both sides):\n";
  PrintKinds(measured, *kinds);
  double overhead_sum = 0;
  for (const auto& [key, calibration] : *kinds) overhead_sum += calibration.overhead_s;

  ValidationSimOptions sim_options;
  sim_options.devices = cluster_options.workers * cluster_options.devices_per_worker;
  sim_options.restore_s = overhead_sum / static_cast<double>(kinds->size());
  auto sensitivity = MeanJctSensitivity(workload, *kinds, sim_options, 0.05);
  REQUIRE(sensitivity.status().message() == "");
  result.jct_sensitivity = *sensitivity;
  std::cout << "sensitivity: every kind 5 % slower makes the simulated mean JCT "
            << *sensitivity * 100 << " % longer\n";
  auto independent = SimulateValidation(workload, *kinds, sim_options);
  REQUIRE(independent.status().message() == "");
  result.independent = std::move(independent).value();
  auto independent_comparison = CompareRuns(result.real, result.independent);
  REQUIRE(independent_comparison.status().message() == "");
  result.independent_comparison = *independent_comparison;
  std::cout << "simulated with independent devices (no contention):\n"
            << FormatComparison(workload.jobs, result.real, result.independent,
                                result.independent_comparison);

  sim_options.node_contention = {
      ContentionModel(*contention, "cpu", cluster_options.devices_per_worker)};
  auto simulated = SimulateValidation(workload, *kinds, sim_options);
  REQUIRE(simulated.status().message() == "");
  result.simulated = std::move(simulated).value();
  auto comparison = CompareRuns(result.real, result.simulated);
  REQUIRE(comparison.status().message() == "");
  result.comparison = *comparison;
  std::cout << "simulated with the measured node contention:\n"
            << FormatComparison(workload.jobs, result.real, result.simulated, result.comparison);
  return result;
}

TEST_CASE("a short trace runs on the real daemons and through the simulator", "[e2e]") {
  ValidationTraceOptions options;
  options.jobs = 6;
  options.arrival_window_s = 20;
  options.iteration_scale = 0.25;
  // Three repetitions of each before the replay even here: its runs are short, and under a busy
  // machine's load one alone has measured a negative iteration time. One after it, to run that
  // path: the medians of four still come from runs before it where the one after is an outlier.
  CalibrationRepetitions repetitions;
  repetitions.kinds_after = 1;
  const ValidationResult result = RunValidation(options, repetitions, 300);
  REQUIRE(result.real.size() == 6);
  for (size_t i = 0; i < result.real.size(); ++i) {
    const RealJobRecord& real = result.real[i];
    CHECK(real.start_s >= real.submit_s);
    CHECK(real.finish_s > real.start_s);
    CHECK(result.simulated.jobs[i].finish_s > result.simulated.jobs[i].arrival_s);
  }
  // Both sides ran the same work: neither makespan is off by a factor of two or more.
  CHECK(std::abs(result.comparison.makespan_error) < 1.0);
  // The contention calibration measured the trace's one-device FG kinds, and the model built
  // from it only ever slows jobs down: no job finishes earlier than with independent devices.
  CHECK(!result.contention.pair_ratio.empty());
  CHECK(result.contention.two_devices >= 1);
  for (size_t i = 0; i < result.simulated.jobs.size(); ++i) {
    CHECK(result.simulated.jobs[i].finish_s >= result.independent.jobs[i].finish_s - 1e-9);
  }
  CHECK(result.comparison.simulated.mean_jct_s >=
        result.independent_comparison.simulated.mean_jct_s - 1e-9);
}

// `count` one-device small_cnn jobs of 100 iterations from one user, all arriving at 0.
simulator::Workload HundredIterationJobs(int count) {
  simulator::Workload workload;
  for (int64_t id = 0; id < count; ++id) {
    simulator::WorkloadJob job;
    job.id = id;
    job.user = "user1";
    job.model = "small_cnn";
    job.global_batch = 512;
    job.gpus = 1;
    job.iterations = 100;
    workload.jobs.push_back(job);
  }
  return workload;
}

// The harness's arithmetic without daemons: pairs whose iterations take twice as long as alone
// give slowdown(2) = 2, and the simulator given that model runs two such jobs side by side in
// twice their time alone, while with independent devices they take exactly their time alone.
TEST_CASE("the contention calibration and its simulation agree on a hand-made pair", "[e2e]") {
  const simulator::Workload workload = HundredIterationJobs(2);
  KindCalibration alone;
  alone.iteration_s = 0.1;
  alone.overhead_s = 1;  // alone: 1 + 100 x 0.1 = 11 s
  const std::map<std::string, KindCalibration> kinds = {{KindKey(workload.jobs[0]), alone}};
  // Side by side: 100 iterations end at 21 s, 300 at 61 s: 0.2 s each.
  std::vector<RealJobRecord> short_pair(2), long_pair(2);
  for (int64_t id = 0; id < 2; ++id) {
    short_pair[id].id = long_pair[id].id = id;
    short_pair[id].finish_s = 21;
    long_pair[id].finish_s = 61;
  }
  const StatusOr<double> ratio = PairRatio(short_pair, long_pair, alone, 100);
  REQUIRE(ratio.ok());
  CHECK(*ratio == Approx(2));
  std::vector<RealJobRecord> pair = short_pair;
  for (RealJobRecord& job : pair) {
    job.start_s = 0.5;
    job.finish_s = 22;
  }
  ContentionCalibration calibration;
  calibration.pair_ratio[KindKey(workload.jobs[0])] = *ratio;
  calibration.two_devices = *ratio;

  ValidationSimOptions options;
  const StatusOr<simulator::PoolRun> independent = SimulateValidation(workload, kinds, options);
  REQUIRE(independent.ok());
  options.node_contention = {ContentionModel(calibration, "cpu", 2)};
  const StatusOr<simulator::PoolRun> contended = SimulateValidation(workload, kinds, options);
  REQUIRE(contended.ok());
  for (int64_t id = 0; id < 2; ++id) {
    CHECK(independent->jobs[id].finish_s == Approx(11));
    CHECK(contended->jobs[id].finish_s == Approx(22));
  }
  // The comparison splits completion into wait and run: 0.5 s waited, 21.5 s run against the
  // simulation's 0 and 22.
  const StatusOr<ValidationComparison> comparison = CompareRuns(pair, *contended);
  REQUIRE(comparison.ok());
  CHECK(comparison->real.mean_wait_s == Approx(0.5));
  CHECK(comparison->real.mean_run_s == Approx(21.5));
  CHECK(comparison->simulated.mean_wait_s == Approx(0).margin(1e-9));
  CHECK(comparison->mean_jct_error == Approx(0).margin(1e-9));
  CHECK(comparison->mean_run_error == Approx(0.5 / 21.5));
}

// One disturbed repetition does not move a kind's contention: the median keeps the other two,
// a repetition that measured nothing is left out, and with none measured the error is the first.
TEST_CASE("the contention calibration keeps each kind's median repetition", "[e2e]") {
  CHECK(MedianPairRatio({1.02, 1.84, 0.98}).value() == Approx(1.02));
  CHECK(MedianPairRatio({1.84, InvalidArgumentError("noise"), 1.0, 1.1}).value() == Approx(1.1));
  CHECK(MedianPairRatio({1.3}).value() == Approx(1.3));
  const StatusOr<double> none =
      MedianPairRatio({InvalidArgumentError("first"), InvalidArgumentError("second")});
  REQUIRE(!none.ok());
  CHECK(none.status().message() == "first");
  CHECK(!MedianPairRatio({}).ok());
}

// A kind's runs of n and 3n iterations alone, n = 100.
KindCalibration Runs(double short_s, double long_s) {
  return KindFromDurations(100, short_s, long_s);
}

// A kind alone is measured by the median of its shorter runs and of its longer runs: one slow run
// is left out of both, where the repetition with the median iteration time, kept whole, would
// carry its slow shorter run into the overhead.
TEST_CASE("the kinds' calibration takes the medians of the shorter and of the longer runs",
          "[e2e]") {
  std::vector<KindCalibration> repetitions = {Runs(3.0, 7.0), Runs(4.0, 7.4), Runs(3.1, 8.0)};
  // The median longer run came with a slow shorter one: kept whole, 17 ms and 2.3 s; the median
  // iteration time's repetition, 20 ms and 1.0 s.
  CHECK(repetitions[1].overhead_s == Approx(2.3));
  repetitions[1].reported_iteration_s = 0.030;
  repetitions[1].busy_fraction = 0.5;
  const StatusOr<KindCalibration> median = MedianKindCalibration(repetitions);
  REQUIRE(median.ok());
  // Shorter runs 3.0, 3.1, 4.0 s; longer 7.0, 7.4, 8.0 s: (7.4 - 3.1) / 200 and 3.1 - 2.15.
  CHECK(median->iteration_s == Approx(0.0215));
  CHECK(median->overhead_s == Approx(0.95));
  CHECK(median->iterations == 100);
  // The executors' report comes with the median longer run.
  CHECK(median->reported_iteration_s == Approx(0.030));
  CHECK(median->busy_fraction == Approx(0.5));
  repetitions.push_back(Runs(2.9, 6.9));  // an even count: the upper of the middle two
  CHECK(MedianKindCalibration(repetitions)->iteration_s == Approx(0.0215));
  // A repetition whose longer run took no longer than its shorter is one more pair of samples.
  // Shorter 2.9 ... 4.0, 9.0 s; longer 6.9 ... 8.0, 8.5 s: the medians stay 3.1 and 7.4 s.
  repetitions.push_back(Runs(9.0, 8.5));
  CHECK(MedianKindCalibration(repetitions)->iteration_s == Approx(0.0215));
  CHECK(!MedianKindCalibration({Runs(6.0, 5.0)}).ok());
  CHECK(!MedianKindCalibration({Runs(3.0, 7.0), KindFromDurations(50, 2.0, 4.0)}).ok());
  CHECK(!MedianKindCalibration({}).ok());
}

// The simulator's calibration is the median over the repetitions on both sides of the replay: a
// machine that slowed down while the replay ran moves it, one disturbed run does not.
TEST_CASE("the kinds' calibration spans both sides of the replay", "[e2e]") {
  const std::map<std::string, std::vector<KindCalibration>> before = {
      {"small_cnn", {Runs(3.0, 7.0), Runs(3.1, 7.3), Runs(2.9, 6.9)}},
      {"vit_tiny", {Runs(12.0, 32.0)}}};
  const std::map<std::string, std::vector<KindCalibration>> after = {
      {"small_cnn", {Runs(3.5, 8.5), Runs(3.6, 8.8), Runs(5.0, 15.0)}}};
  const auto both = BothSides(before, after);
  REQUIRE(both.at("small_cnn").size() == 6);
  CHECK(both.at("vit_tiny").size() == 1);
  const StatusOr<std::map<std::string, KindCalibration>> kinds = MedianKinds(both);
  REQUIRE(kinds.ok());
  // Shorter 2.9 ... 5.0 s, longer 6.9 ... 15 s: the upper middles, 3.5 and 8.5 s.
  CHECK(kinds->at("small_cnn").iteration_s == Approx(0.025));
  CHECK(kinds->at("small_cnn").overhead_s == Approx(1.0));
  CHECK(kinds->at("vit_tiny").iteration_s == Approx(0.100));
  CHECK(MedianKinds(before)->at("small_cnn").iteration_s == Approx(0.020));
  // A kind none of whose medians measured is an error naming it.
  const StatusOr<std::map<std::string, KindCalibration>> none =
      MedianKinds({{"vit_tiny", {Runs(5.0, 4.0)}}});
  REQUIRE(!none.ok());
  CHECK(none.status().message().find("vit_tiny") != std::string::npos);
}

// Jobs that never wait move by exactly the slowdown; a job queued behind others by more: its
// wait grows with the whole of theirs.
TEST_CASE("the mean JCT's sensitivity counts the queue's amplification", "[e2e]") {
  simulator::Workload workload = HundredIterationJobs(3);
  workload.jobs[2].arrival_s = 9;  // the third arrives while both devices still run
  KindCalibration alone;
  alone.iteration_s = 0.1;  // 10 s a job
  const std::map<std::string, KindCalibration> kinds = {{KindKey(workload.jobs[0]), alone}};
  ValidationSimOptions options;
  // 10, 10 and 1 + 10 s; 5 % slower: 10.5, 10.5 and 1.5 + 10.5 s.
  const StatusOr<double> queued = MeanJctSensitivity(workload, kinds, options, 0.05);
  REQUIRE(queued.ok());
  CHECK(*queued == Approx(33.0 / 31.0 - 1));
  workload.jobs[2].arrival_s = 11;  // the third no longer waits, even 5 % slower
  const StatusOr<double> unqueued = MeanJctSensitivity(workload, kinds, options, 0.05);
  REQUIRE(unqueued.ok());
  CHECK(*unqueued == Approx(0.05));
  CHECK(!MeanJctSensitivity(workload, kinds, options, -1).ok());  // no time or less is no speed
}

TEST_CASE("40 jobs from 4 users on the real daemons and through the simulator", "[.full]") {
  ValidationTraceOptions options;  // 40 jobs over 300 s, seed 1
  const ValidationResult result = RunValidation(options, CalibrationRepetitions{}, 1800);
  // The simulator as it runs by default. With the measured contention it is printed beside:
  // on a quiet machine its calibration has missed by more than the contention it measures.
  CHECK(std::abs(result.independent_comparison.mean_jct_error) <= 0.2);
  CHECK(std::abs(result.independent_comparison.makespan_error) <= 0.2);
  // The comparison says something about the simulator only while the trace does not multiply
  // the calibration's own error: the kinds' repetitions spread by 10-40 % on this machine, and
  // at 180 s the mean JCT moved 22 % for 5 % slower kinds.
  CHECK(result.jct_sensitivity <= 0.10);
}

}  // namespace
}  // namespace deepool::bench

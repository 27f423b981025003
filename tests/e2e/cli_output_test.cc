// The deepool command's formatting and configuration pieces (cli/services/format.h, client.h),
// without processes. Lives with the e2e tests because it needs the gRPC client library.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/services/client.h"
#include "cli/services/format.h"
#include "cli/services/job_wait.h"
#include "cli/services/submit_retry.h"
#include "tests/temp_dir.h"

using namespace deepool;
using namespace deepool::cli;
namespace fs = std::filesystem;
using deepool::testing::TempDir;

TEST_CASE("tables pad columns, align numbers right and trim trailing spaces", "[cli]") {
  Table table({"ID", "NAME", "RATE"});
  table.AlignRight(2);
  table.AddRow({"job-1", "resnet50", "12.5"});
  table.AddRow({"job-10", "x", "1234.0"});
  CHECK(table.Render() ==
        "ID      NAME        RATE\n"
        "job-1   resnet50    12.5\n"
        "job-10  x         1234.0\n");
  Table short_rows({"A", "B"});
  short_rows.AddRow({"only-a"});
  CHECK(short_rows.Render() == "A       B\nonly-a\n");
}

TEST_CASE("progress bars, durations, rates and widths", "[cli]") {
  CHECK(ProgressBar(0.5, 10) == "[#####.....]  50%");
  CHECK(ProgressBar(1.5, 4) == "[####] 100%");
  CHECK(ProgressBar(-1, 4) == "[....]   0%");
  CHECK(ProgressBar(0.999, 10) == "[#########.]  99%");
  CHECK(FormatDuration(850) == "850ms");
  CHECK(FormatDuration(12'345) == "12.3s");
  CHECK(FormatDuration(245'000) == "4m05s");
  CHECK(FormatDuration(7'380'000) == "2h03m");
  CHECK(FormatRate(1234) == "1.23k");
  CHECK(FormatRate(45.62) == "45.6");
  CHECK(FormatRate(0.5) == "0.50");
  CHECK(FormatAgo(0, 5000) == "-");
  CHECK(FormatAgo(1000, 4500) == "3s ago");
  CHECK(FormatWallTime(0) == "-");
  CHECK(FormatWallTime(1'700'000'000'000) == "2023-11-14 22:13:20");
  CHECK(DisplayWidth("2\xC3\x97"
                     "cpu") == 5);
  CHECK(Truncate("abcdefgh", 5) == "abcd\xE2\x80\xA6");
  CHECK(Truncate("abc", 5) == "abc");
}

TEST_CASE("the coordinator address comes from flag, then env, then config file, then default",
          "[cli]") {
  TempDir temp;
  const std::string home = temp.path();
  CHECK(ResolveCoordinatorAddress("", nullptr, home) == "127.0.0.1:7070");
  fs::create_directories(home + "/.config/deepool");
  std::ofstream(home + "/.config/deepool/config.json") << R"({"coordinator": "head:9000"})";
  CHECK(ResolveCoordinatorAddress("", nullptr, home) == "head:9000");
  CHECK(ResolveCoordinatorAddress("", "env:1", home) == "env:1");
  CHECK(ResolveCoordinatorAddress("flag:2", "env:1", home) == "flag:2");
  std::ofstream(home + "/.config/deepool/config.json") << "not json";
  CHECK(ResolveCoordinatorAddress("", nullptr, home) == "127.0.0.1:7070");
}

TEST_CASE("a submission whose answer was lost is retried with the same request id", "[cli]") {
  std::vector<std::string> ids_seen;
  std::vector<std::chrono::milliseconds> pauses;
  SubmitRetry retry;
  auto fake_now = std::chrono::steady_clock::time_point();
  retry.now = [&] { return fake_now; };
  retry.sleep = [&](std::chrono::milliseconds pause) {
    pauses.push_back(pause);
    fake_now += pause;
  };
  std::ostringstream notes;
  v1::SubmitJobResponse response;
  SECTION("stored, answer lost, retried: one job") {
    const SubmitCall lost_once = [&](const v1::SubmitJobRequest& req, v1::SubmitJobResponse* r) {
      ids_seen.push_back(req.request_id());
      r->set_job_id("job-000007");
      if (ids_seen.size() == 1) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "lost");
      return grpc::Status::OK;
    };
    grpc::Status status =
        SubmitWithRetry(lost_once, v1::SubmitJobRequest(), &response, retry, notes);
    CHECK(status.ok());
    REQUIRE(ids_seen.size() == 2);
    CHECK(ids_seen[0].size() == 32);
    CHECK(ids_seen[0] == ids_seen[1]);
    CHECK(pauses == std::vector<std::chrono::milliseconds>{std::chrono::milliseconds(250)});
    CHECK_THAT(notes.str(), Catch::Contains("trying again in 250 ms"));
  }
  SECTION("a call the coordinator dropped unanswered (CANCELLED) is retried, and said so") {
    const SubmitCall dropped_once = [&](const v1::SubmitJobRequest& req, v1::SubmitJobResponse* r) {
      ids_seen.push_back(req.request_id());
      r->set_job_id("job-000008");
      if (ids_seen.size() == 1) return grpc::Status(grpc::StatusCode::CANCELLED, "CANCELLED");
      return grpc::Status::OK;
    };
    CHECK(SubmitWithRetry(dropped_once, v1::SubmitJobRequest(), &response, retry, notes).ok());
    CHECK(ids_seen.size() == 2);
    CHECK_THAT(notes.str(), Catch::Contains("the coordinator dropped the call unanswered"));
  }
  SECTION("a refused spec is not retried; an unreachable coordinator is, for the budget") {
    const SubmitCall refused = [&](const v1::SubmitJobRequest& req, v1::SubmitJobResponse*) {
      ids_seen.push_back(req.request_id());
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "gpus: must be in [1, 4096]");
    };
    CHECK(SubmitWithRetry(refused, v1::SubmitJobRequest(), &response, retry, notes).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(ids_seen.size() == 1);
    const SubmitCall down = [&](const v1::SubmitJobRequest&, v1::SubmitJobResponse*) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused");
    };
    CHECK(SubmitWithRetry(down, v1::SubmitJobRequest(), &response, retry, notes).error_code() ==
          grpc::StatusCode::UNAVAILABLE);
    // 250, 500, 1000, then 2000 ms pauses for as long as the 30 s budget allows.
    std::chrono::milliseconds waited{0};
    for (auto pause : pauses) waited += pause;
    CHECK(waited <= retry.budget);
    CHECK(waited > retry.budget - retry.max_pause);
    CHECK(pauses.at(2) == std::chrono::milliseconds(1000));
    CHECK(pauses.back() == std::chrono::milliseconds(2000));
  }
  CHECK(NewRequestId() != NewRequestId());
}

TEST_CASE("gRPC errors map to the documented exit codes", "[cli]") {
  CHECK(ExitCodeFor(grpc::Status::OK) == kExitOk);
  CHECK(ExitCodeFor(grpc::Status(grpc::StatusCode::UNAVAILABLE, "")) == kExitUnavailable);
  CHECK(ExitCodeFor(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "")) == kExitUnavailable);
  CHECK(ExitCodeFor(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "")) == kExitInvalidInput);
  CHECK(ExitCodeFor(grpc::Status(grpc::StatusCode::NOT_FOUND, "")) == kExitNotFound);
  CHECK(ExitCodeFor(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "")) == kExitFailure);
  CHECK(ExitCodeFor(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "")) == kExitDenied);
  CHECK(ExitCodeFor(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "")) == kExitDenied);
}

TEST_CASE(
    "credentials come from the environment, then the config file, then ~/.config/deepool/token",
    "[cli]") {
  TempDir temp;
  const std::string home = temp.path();
  auto no_env = [](const char*) -> const char* { return nullptr; };
  auto none = ResolveClientSecurity(no_env, home);
  REQUIRE(none.ok());
  CHECK(none->token.empty());
  CHECK_FALSE(none->tls.configured());

  fs::create_directories(home + "/.config/deepool");
  const std::string token_file = home + "/.config/deepool/token";
  std::ofstream(token_file) << "  dpt_from_file \n";
  std::ofstream(home + "/.config/deepool/config.json")
      << R"({"token_file": "~/.config/deepool/token", "tls": {"ca": "/c/ca.pem",)"
      << R"( "cert": "~/me.pem", "key": "~/me-key.pem"}})";
  // A token file others may read is refused, as ssh refuses such a private key.
  fs::permissions(token_file, fs::perms::owner_read | fs::perms::owner_write |
                                  fs::perms::group_read | fs::perms::others_read);
  const auto loose = ResolveClientSecurity(no_env, home);
  CHECK(loose.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(loose.status().message(), Catch::Contains("chmod 600 " + token_file));
  fs::permissions(token_file, fs::perms::owner_read | fs::perms::owner_write);
  auto from_config = ResolveClientSecurity(no_env, home);
  REQUIRE(from_config.ok());
  CHECK(from_config->token == "dpt_from_file");
  CHECK(from_config->tls.ca == "/c/ca.pem");
  CHECK(from_config->tls.cert == home + "/me.pem");
  auto env = [](const char* name) -> const char* {
    return std::string(name) == "DEEPOOL_TOKEN" ? "dpt_from_env" : nullptr;
  };
  CHECK(ResolveClientSecurity(env, home)->token == "dpt_from_env");
  auto missing = [](const char* name) -> const char* {
    return std::string(name) == "DEEPOOL_TOKEN_FILE" ? "/nonexistent/token" : nullptr;
  };
  CHECK(ResolveClientSecurity(missing, home).status().code() == StatusCode::kNotFound);
  // Without a config, ~/.config/deepool/token is the token (a local coordinator's admin.token).
  fs::remove(home + "/.config/deepool/config.json");
  auto by_default = ResolveClientSecurity(no_env, home);
  REQUIRE(by_default.ok());
  CHECK(by_default->token == "dpt_from_file");
}

TEST_CASE("text from the coordinator cannot drive the terminal", "[cli]") {
  CHECK(Printable("plain name") == "plain name");
  CHECK(Printable("\x1b[2Jfake\rline\n") == "\\x1b[2Jfake\\x0dline\\x0a");
  CHECK(Printable("csi\xc2\x9b"
                  "31m") == "csi\\x9b31m");  // U+009B, the 8-bit CSI
  CHECK(Printable("caf\xc3\xa9 \xe2\x96\x88") == "caf\xc3\xa9 \xe2\x96\x88");  // UTF-8 stays
  // Bidirectional overrides and isolates reorder what follows them ("Trojan Source" names).
  CHECK(Printable("job\xe2\x80\xaegnp.exe") == "job\\u202egnp.exe");  // U+202E RLO
  CHECK(Printable("\xe2\x80\xaa\xe2\x81\xa6x\xe2\x81\xa9") ==
        "\\u202a\\u2066x\\u2069");                                        // LRE LRI PDI
  CHECK(Printable("\xe2\x80\xa9\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa") ==  // neighbours stay
        "\xe2\x80\xa9\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa");
  CHECK(Printable("cut\xe2\x80") == "cut\xe2\x80");  // a truncated sequence is left as it is
  v1::Job job;
  job.set_job_id("job-1");
  job.mutable_spec()->set_name(
      "\x1b]0;owned\x07"
      "evil");
  job.set_state(v1::JOB_STATE_FAILED);
  job.set_reason("done\n\x1b[1A\x1b[2Kjob-2 SUCCEEDED");
  const std::string table = JobsTable({job});
  const std::string detail = JobDetail(job, nullptr, 0);
  for (const std::string& text : {table, detail}) {
    CHECK(text.find('\x1b') == std::string::npos);
    CHECK(text.find('\x07') == std::string::npos);
  }
  CHECK_THAT(detail, Catch::Contains("done\\x0a\\x1b[1A"));  // one line, shown as text
}

TEST_CASE("a job's detail says when its batch norm is per device", "[cli]") {
  v1::Job job;
  job.set_job_id("job-2");
  job.mutable_spec()->set_model("resnet50");
  job.mutable_spec()->set_role(v1::JOB_ROLE_FG);
  job.mutable_spec()->set_batch_norm("synchronized");
  CHECK_THAT(JobDetail(job, nullptr, 0), !Catch::Contains("batch norm"));
  job.mutable_spec()->set_batch_norm("per_device");
  CHECK_THAT(JobDetail(job, nullptr, 0), Catch::Contains(", batch norm per device\n"));
}

TEST_CASE("a job's detail says when its branches may run side by side", "[cli]") {
  v1::Job job;
  job.set_job_id("job-3");
  job.mutable_spec()->set_model("inception_v3");
  job.mutable_spec()->set_role(v1::JOB_ROLE_FG);
  CHECK_THAT(JobDetail(job, nullptr, 0), !Catch::Contains("concurrent"));
  job.mutable_spec()->set_concurrent_branches(true);
  CHECK_THAT(JobDetail(job, nullptr, 0), Catch::Contains(", concurrent branches\n"));
}

TEST_CASE("a job's detail says its accumulation passes and bf16 gradient sums", "[cli]") {
  v1::Job job;
  job.set_job_id("job-4");
  job.mutable_spec()->set_model("resnet50");
  job.mutable_spec()->set_role(v1::JOB_ROLE_FG);
  job.mutable_spec()->set_global_batch(1024);
  job.mutable_spec()->set_gpus(8);
  CHECK_THAT(JobDetail(job, nullptr, 0), Catch::Contains("global batch 1024, 8 device(s)"));
  CHECK_THAT(JobDetail(job, nullptr, 0), !Catch::Contains("gradient sums"));
  job.mutable_spec()->set_accumulation_steps(4);
  job.mutable_spec()->set_gradient_precision("bf16");
  CHECK_THAT(
      JobDetail(job, nullptr, 0),
      Catch::Contains("global batch 1024 (4 passes of 256), 8 device(s), bf16 gradient sums"));
}

TEST_CASE("jobs render as a table row with state, reason, bar and devices", "[cli]") {
  v1::Job job;
  job.set_job_id("job-7");
  job.mutable_spec()->set_name("resnet");
  job.mutable_spec()->set_role(v1::JOB_ROLE_FG);
  job.set_state(v1::JOB_STATE_RUNNING);
  job.mutable_progress()->set_iteration(5);
  job.mutable_progress()->set_iterations(10);
  job.mutable_progress()->set_samples_per_s(1500);
  for (int r = 0; r < 4; ++r) {
    auto* d = job.add_devices();
    d->set_rank(r);
    d->set_node_name(r < 2 ? "a" : "b");
    d->set_device("cpu:" + std::to_string(r % 2));
  }
  v1::Job pending;
  pending.set_job_id("job-8");
  pending.mutable_spec()->set_name("bg");
  pending.mutable_spec()->set_role(v1::JOB_ROLE_BG);
  pending.set_state(v1::JOB_STATE_PENDING);
  pending.set_reason("waiting for 1 free device");
  std::string table = JobsTable({job, pending});
  CHECK(table.find("job-7  resnet  fg    RUNNING") != std::string::npos);
  CHECK(table.find("[##########..........]  50%") != std::string::npos);
  CHECK(table.find("1.50k") != std::string::npos);
  CHECK(table.find("4 on a\xC3\x97"
                   "2,b\xC3\x97"
                   "2") != std::string::npos);
  CHECK(table.find("PENDING (waiting for 1 free device)") != std::string::npos);
  CHECK(JobsTable({}) == "no jobs\n");
  CHECK(JobProgressLine(job).find("it 5/10") != std::string::npos);
  CHECK(StateName(v1::JOB_STATE_CANCELLED) == "CANCELLED");
}

TEST_CASE("status shows per-device FG busy, BG busy, idle and the cluster summary", "[cli]") {
  v1::Job job;
  job.set_job_id("job-7");
  job.mutable_spec()->set_role(v1::JOB_ROLE_FG);
  job.set_state(v1::JOB_STATE_RUNNING);
  job.mutable_progress()->set_iteration_ms(85);
  for (int r = 0; r < 3; ++r) {
    auto* d = job.add_devices();
    d->set_rank(r);
    d->set_node_name("a");
    d->set_device("cpu:" + std::to_string(r));
  }
  auto* row = job.mutable_progress()->add_devices();
  row->set_rank(0);
  row->set_iteration(4);
  row->set_fg_busy_ms(70);
  row->set_idle_ms(15);
  row = job.mutable_progress()->add_devices();
  row->set_rank(1);
  row->set_iteration(4);
  row->set_fg_busy_ms(30);
  row->set_bg_busy_ms(40);
  row->set_idle_ms(15);
  row->set_bg_job_id("job-9");
  row->set_shared_executor(true);
  row->set_bg_samples_per_s(120);
  std::string table = DeviceUsageTable(job);
  INFO(table);
  CHECK(table.find("RANK  NODE  DEVICE  IT  FG BUSY  BG BUSY  IDLE  SHARED WITH") !=
        std::string::npos);
  CHECK(table.find("0     a     cpu:0    4     70ms        -  15ms  -") != std::string::npos);
  CHECK(table.find("job-9 (in executor, 120.0/s)") != std::string::npos);
  CHECK(table.find("2     a     cpu:2    -        -        -     -  -") != std::string::npos);
  CHECK(JobsTable({job}).find("85ms") != std::string::npos);

  // A BG job inside a FG executor: its rate, no iteration times of its own.
  v1::Job hosted;
  hosted.set_job_id("job-9");
  hosted.mutable_spec()->set_role(v1::JOB_ROLE_BG);
  hosted.set_state(v1::JOB_STATE_RUNNING);
  hosted.mutable_progress()->set_samples_per_s(34.6);
  hosted.mutable_progress()->set_updated_ms(1);
  auto* placed = hosted.add_devices();
  placed->set_node_name("a");
  placed->set_device("cpu:1");
  auto* hosted_row = hosted.mutable_progress()->add_devices();
  hosted_row->set_iteration(26);
  hosted_row->set_fg_job_id("job-7");
  hosted_row->set_shared_executor(true);
  std::string detail = JobDetail(hosted, nullptr, 1000);
  INFO(detail);
  CHECK(detail.find("           34.6 samples/s\n") != std::string::npos);
  CHECK(detail.find("iteration 0ms") == std::string::npos);
  CHECK(detail.find("cpu:1   26        -        -     -  job-7 (inside its executor)") !=
        std::string::npos);

  v1::ClusterSummary s;
  s.set_fg_jobs_running(1);
  s.set_bg_jobs_running(2);
  s.set_fg_samples_per_s(200);
  s.set_bg_samples_per_s(100);
  s.set_total_samples_per_s(300);
  s.set_fg_iteration_ms(85);
  s.set_devices(4);
  s.set_devices_busy(3);
  s.set_devices_idle(1);
  s.set_devices_fg(2);
  s.set_devices_bg(2);
  s.set_devices_shared(1);
  s.set_fg_busy_ms(50);
  s.set_bg_busy_ms(30);
  s.set_idle_ms(20);
  std::string summary = ClusterSummaryText(s);
  INFO(summary);
  CHECK(summary.find("FG 1 job 200.0 samples/s (iteration 85ms), BG 2 jobs 100.0 samples/s, "
                     "total 300.0 samples/s") != std::string::npos);
  CHECK(summary.find("3/4 busy (2 FG, 2 BG, 1 shared), 1 idle; device time FG 50%, BG 30%, "
                     "idle 20%") != std::string::npos);
}

TEST_CASE("the jobs summary says where each BG job ran", "[cli]") {
  auto bg = [](const std::string& id, const std::vector<std::string>& dispatches) {
    v1::Job job;
    job.set_job_id(id);
    job.mutable_spec()->set_role(v1::JOB_ROLE_BG);
    job.set_state(v1::JOB_STATE_SUCCEEDED);
    for (const std::string& reason : dispatches) {
      auto* h = job.add_history();
      h->set_state(v1::JOB_STATE_RUNNING);
      h->set_reason(reason);
    }
    return job;
  };
  v1::Job fg;
  fg.set_job_id("job-1");
  fg.mutable_spec()->set_role(v1::JOB_ROLE_FG);
  std::string summary =
      JobsSummary({fg,
                   bg("job-2", {"dispatched 1 ranks to 1 node(s)",
                                "dispatched inside the executor of job job-1 rank 3 (task t)"}),
                   bg("job-3", {"dispatched 1 ranks to 1 node(s)"}), bg("job-4", {})});
  CHECK(summary.find("job-2 (BG) ran as its own executor process; requeued, then ran inside the "
                     "executor of job job-1 rank 3 (task t)\n") != std::string::npos);
  CHECK(summary.find("job-3 (BG) ran as its own executor process\n") != std::string::npos);
  CHECK(summary.find("job-4 (BG)") == std::string::npos);  // never ran
  CHECK(summary.find("job-1 (") == std::string::npos);
}

namespace {

v1::Evaluation Evaluation(int64_t iteration, double top1, double top5, std::optional<double> loss) {
  v1::Evaluation e;
  e.set_iteration(iteration);
  e.set_samples(800);
  e.set_top1(top1);
  e.set_top5(top5);
  if (loss) e.set_loss(*loss);
  return e;
}

}  // namespace

TEST_CASE("status, progress lines and the summary show the job's evaluations", "[cli]") {
  v1::Job job;
  job.set_job_id("job-1");
  job.mutable_spec()->set_role(v1::JOB_ROLE_FG);
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.mutable_progress()->set_iteration(200);
  job.mutable_progress()->set_iterations(200);
  CHECK_THAT(JobDetail(job, nullptr, 0), !Catch::Contains("evaluation"));
  CHECK_THAT(JobProgressLine(job), !Catch::Contains("eval"));
  CHECK_THAT(JobsSummary({job}), !Catch::Contains("evaluation"));

  *job.mutable_progress()->add_evaluations() = Evaluation(100, 0.5, 0.875, std::nullopt);
  *job.mutable_progress()->add_evaluations() = Evaluation(200, 0.8125, 0.99, 0.52);
  CHECK(EvaluationText(job.progress().evaluations(1)) ==
        "iteration 200: top-1 81.2 %  top-5 99.0 %  loss 0.520  (800 samples)");
  const std::string detail = JobDetail(job, nullptr, 0);
  CHECK_THAT(detail, Catch::Contains(
                         "\nevaluation iteration 100: top-1 50.0 %  top-5 87.5 %  (800 samples)\n"
                         "           iteration 200: top-1 81.2 %  top-5 99.0 %  loss 0.520  "
                         "(800 samples)\n"));
  CHECK_THAT(JobProgressLine(job), Catch::EndsWith(" eval top-1 81.2 % top-5 99.0 %"));
  CHECK_THAT(JobsSummary({job}),
             Catch::Contains("job-1 last evaluation, iteration 200: top-1 81.2 %  top-5 99.0 %  "
                             "loss 0.520  (800 samples)\n"));
  CHECK_THAT(ToJson(job, false), Catch::Contains("\"evaluations\":[{\"iteration\":\"100\""));

  // Only the last few in the detail.
  for (int i = 3; i <= 9; ++i) {
    *job.mutable_progress()->add_evaluations() = Evaluation(100 * i, 0.25, 0.5, 1.0);
  }
  const std::string many = JobDetail(job, nullptr, 0);
  CHECK_THAT(many, Catch::Contains("\nevaluation 4 earlier not shown (--json lists them)\n"
                                   "           iteration 500: "));
  CHECK_THAT(many, Catch::Contains("           iteration 900: "));
  CHECK_THAT(many, !Catch::Contains("iteration 400:"));
}

TEST_CASE("plan summaries count layers per device count", "[cli]") {
  std::string plan = R"JSON({"format":"deepool.plan","version":1,"model":"vgg16","global_batch":64,
    "num_devices":8,"amplification_limit":2,"profile_source":"a100 (analytical)",
    "single_device_ms":100,"totals":{"iteration_ms":20,"amplification":1.6},
    "data_parallel":{"iteration_ms":25},
    "layers":[{"layer":"a","devices":[0,1,2,3,4,5,6,7]},{"layer":"b","devices":[0,1,2,3,4,5,6,7]},
              {"layer":"fc","devices":[0]}]})JSON";
  std::string summary = PlanSummary(plan);
  CHECK(summary.find("model vgg16, global batch 64, 8 devices, 3 layers") != std::string::npos);
  CHECK(summary.find("predicted iteration 20ms (data parallel 25ms, one device 100ms)") !=
        std::string::npos);
  CHECK(summary.find("amplification 1.60 (limit 2.00)") != std::string::npos);
  CHECK(summary.find("1 on 1, 2 on 8") != std::string::npos);
  CHECK(summary.find("measured on") == std::string::npos);  // an analytical profile
  CHECK(PlanSummary("{").find("not valid JSON") != std::string::npos);
  // A measured profile's plan names what measured it.
  auto measured = nlohmann::json::parse(plan);
  measured["profile_environment"] = {{"device_model", "AMD EPYC"},
                                     {"threads", 1},
                                     {"torch", "2.12.1"},
                                     {"deepool", "6a012d1c1b2e"}};
  CHECK(
      PlanSummary(measured.dump())
          .find(
              "\n  profile measured on AMD EPYC, 1 thread, torch 2.12.1, deepool 6a012d1c1b2e\n") !=
      std::string::npos);
}

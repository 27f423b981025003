// `deepool status` and `status JOB --why` under a scheduling policy: the text over hand-made
// answers (cli/services/why_policy.h), and a coordinator in-process on port 0 under max-min with
// two users, whose GetJob, ListJobs and ListNodes answers --why explains.
#include <catch2/catch.hpp>

#include "cli/services/client.h"
#include "cli/services/why.h"
#include "cli/services/why_policy.h"
#include "coordinator/policy/policy.h"
#include "jobspec/job_spec_json.h"
#include "tests/service/in_process_coordinator.h"

namespace deepool {
namespace {

constexpr int64_t kNowMs = 1'000'000'000;

v1::Job PendingUnderMaxMin() {
  v1::Job job;
  job.set_job_id("job-2");
  job.set_owner("bob");
  job.set_state(v1::JOB_STATE_PENDING);
  job.mutable_spec()->set_gpus(4);
  v1::PolicyStanding* standing = job.mutable_policy();
  standing->set_policy("max-min");
  standing->set_min_slice_s(300);
  v1::PolicyWait* wait = standing->mutable_wait();
  wait->set_code(v1::POLICY_WAIT_CODE_FAIR_SHARE);
  v1::PolicyHolder* holder = wait->add_holders();
  holder->set_job_id("job-1");
  holder->set_user("alice");
  holder->set_user_share(1);
  holder->set_device_type("cpu");
  holder->set_devices(4);
  holder->set_placed_at_ms(kNowMs - 100'000);
  holder->set_slice_ends_ms(kNowMs + 200'000);
  holder->set_preemptible(true);
  wait->set_due_ms(kNowMs + 200'000);
  return job;
}

v1::ClusterSummary Shares() {
  v1::ClusterSummary summary;
  summary.set_policy("max-min");
  v1::UserShare* alice = summary.add_user_shares();
  alice->set_user("alice");
  alice->set_share(1);
  alice->set_devices(4);
  v1::UserShare* bob = summary.add_user_shares();
  bob->set_user("bob");
  return summary;
}

TEST_CASE("why under max-min: the wait and the shares and the job in its way and when it is due",
          "[cli][policy]") {
  const std::string text = cli::PolicyWhyText(PendingUnderMaxMin(), Shares(), kNowMs);
  INFO(text);
  CHECK_THAT(text, Catch::StartsWith("policy         max-min: fair shares across users"));
  CHECK_THAT(text, Catch::Contains("keeps its devices for at least 300 s\n"));
  CHECK_THAT(text, Catch::Contains("wait           FAIR_SHARE: its user has had its share"));
  CHECK_THAT(text, Catch::Contains("shares         alice 1.00 on 4, bob 0.00 on 0 (its user)"));
  CHECK_THAT(text, Catch::Contains("in its way     job-1 of user alice (share 1.00): 4 cpu, "
                                   "placed 1m ago, its minimum slice ends in 3m20s\n"));
  CHECK_THAT(text, Catch::Contains("due            in 3m20s ("));
  CHECK_THAT(text, Catch::Contains("when the minimum slice of job-1 ends; it is placed once that "
                                   "job stops at its next checkpoint\n"));
}

TEST_CASE("why under max-min: a holder that cannot be preempted leaves the time unknown",
          "[cli][policy]") {
  v1::Job job = PendingUnderMaxMin();
  job.mutable_policy()->mutable_wait()->mutable_holders(0)->set_preemptible(false);
  job.mutable_policy()->mutable_wait()->set_due_ms(0);
  const std::string text = cli::PolicyWhyText(job, Shares(), kNowMs);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("not preemptible (no periodic checkpoints)"));
  CHECK_THAT(text, Catch::Contains("due            not known: none of the jobs in its way"));
}

TEST_CASE("why under fifo names the job it queues behind", "[cli][policy]") {
  v1::Job job;
  job.set_job_id("job-3");
  job.set_state(v1::JOB_STATE_PENDING);
  job.mutable_policy()->set_policy("fifo");
  job.mutable_policy()->mutable_wait()->set_code(v1::POLICY_WAIT_CODE_QUEUED_BEHIND);
  job.mutable_policy()->mutable_wait()->set_queued_behind("job-1");
  const std::string text = cli::PolicyWhyText(job, v1::ClusterSummary(), kNowMs);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("policy         fifo: priority, then submission order"));
  CHECK_THAT(text, Catch::Contains("wait           QUEUED_BEHIND"));
  CHECK_THAT(text, Catch::Contains("due            after job-1 is placed"));
}

TEST_CASE("why of a running job that was moved: its share and its last preemption",
          "[cli][policy]") {
  v1::Job job;
  job.set_job_id("job-1");
  job.set_owner("alice");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_device_type("a100");
  for (int rank = 0; rank < 2; ++rank) job.add_devices()->set_rank(rank);
  v1::PolicyStanding* standing = job.mutable_policy();
  standing->set_policy("max-min");
  standing->set_user_share(0.5);
  standing->set_user_devices(2);
  v1::PolicyPreemption* last = standing->mutable_last_preemption();
  last->set_policy("max-min");
  last->set_for_job("job-2");
  last->set_message("user bob is below its fair share");
  last->set_time_ms(kNowMs - 120'000);
  const std::string text = cli::PolicyWhyText(job, Shares(), kNowMs);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("share          user alice has share 0.50 on 2 device(s); "
                                   "this job holds 2 a100\n"));
  CHECK_THAT(text, Catch::Contains("(2m ago) by the max-min policy: user bob is below its fair "
                                   "share; for job job-2\n"));
  CHECK_THAT(text, !Catch::Contains("wait "));
  // An older coordinator sends no standing: nothing is said about a policy.
  CHECK(cli::PolicyWhyText(v1::Job(), Shares(), kNowMs).empty());
}

TEST_CASE("status lists a running job's device type and its user's share", "[cli][policy]") {
  v1::Job job;
  job.set_job_id("job-1");
  job.set_owner("alice");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_device_type("a100");
  job.add_devices()->set_node_name("a");
  job.mutable_policy()->set_policy("max-min");
  job.mutable_policy()->set_user_share(0.5);
  job.mutable_policy()->set_user_devices(1);
  const std::string table = cli::JobsTable({job});
  INFO(table);
  CHECK_THAT(table, Catch::Contains("TYPE  USER SHARE"));
  CHECK_THAT(table, Catch::Contains("1 on a   a100  alice 0.50 on 1"));
  // fifo weighs no users: its jobs show their type, no share.
  job.mutable_policy()->set_policy("fifo");
  CHECK_THAT(cli::JobsTable({job}), Catch::Contains("1 on a   a100  -\n"));
  const std::string summary = cli::ClusterSummaryText(Shares());
  CHECK_THAT(summary, Catch::Contains("policy     max-min; user shares alice 1.00 on 4, bob 0.00 "
                                      "on 0\n"));
}

// Submits `json` as `user` through the scheduler (the in-process coordinator is open: every
// caller is anonymous, so two users' jobs come in below the gRPC layer).
std::string SubmitAs(coordinator::testing::InProcessCoordinator& c, const std::string& json,
                     const std::string& user) {
  StatusOr<coordinator::JobSpec> spec = jobspec::ParseJobSpecJson(json);
  REQUIRE(spec.ok());
  StatusOr<coordinator::JobRecord> job = c.server->scheduler()->Submit(*spec, "", user);
  REQUIRE(job.ok());
  return job->id;
}

TEST_CASE("status JOB --why through a coordinator under max-min with two users",
          "[cli][policy][service]") {
  coordinator::testing::InProcessCoordinator c(
      [](coordinator::CoordinatorOptions* options) {
        options->scheduler.policy_options.min_slice_s = 300;
        auto policy = coordinator::policy::MakePolicy("max-min", options->scheduler.policy_options);
        REQUIRE(policy.ok());
        options->scheduler.policy = std::move(*policy);
      },
      std::make_unique<coordinator::InMemoryJobStore>());
  const std::string node_id = c.Register("a", 4);
  // Each user's job checkpoints into a directory of its own (one unfinished job per directory).
  auto checkpointed = [](const std::string& dir) {
    return R"({"name":"t","model":"tiny","global_batch":8,"gpus":4,"iterations":1000,)"
           R"("profile":"analytical","checkpoint":{"dir":")" +
           dir + R"(","every_iterations":5}})";
  };
  const std::string alice = SubmitAs(c, checkpointed("/ckpt/alice"), "alice");
  c.server->scheduler()->Tick();
  REQUIRE(c.Get(alice).state() == v1::JOB_STATE_RUNNING);
  const std::string bob = SubmitAs(c, checkpointed("/ckpt/bob"), "bob");
  c.server->scheduler()->Tick();

  const v1::Job waiting = c.Get(bob);
  REQUIRE(waiting.state() == v1::JOB_STATE_PENDING);
  v1::ListJobsRequest list;
  list.add_states(v1::JOB_STATE_PENDING);
  v1::ListJobsResponse pending;
  REQUIRE(c.client->ListJobs(c.Context().get(), list, &pending).ok());
  v1::ListNodesResponse nodes;
  REQUIRE(c.client->ListNodes(c.Context().get(), v1::ListNodesRequest(), &nodes).ok());
  const int64_t now_ms = c.clock.WallMillis();
  const std::string text =
      cli::WhyText(waiting, {pending.jobs().begin(), pending.jobs().end()},
                   {nodes.nodes().begin(), nodes.nodes().end()}, now_ms, pending.summary());
  INFO(text);
  CHECK_THAT(text, Catch::Contains("policy         max-min: fair shares across users"));
  CHECK_THAT(text, Catch::Contains("wait           FAIR_SHARE"));
  CHECK_THAT(text, Catch::Contains("shares         alice 1.00 on 4, bob 0.00 on 0 (its user)"));
  CHECK_THAT(text, Catch::Contains("in its way     " + alice +
                                   " of user alice (share 1.00): 4 cpu, placed now, its minimum "
                                   "slice ends in 5m00s\n"));
  CHECK_THAT(text, Catch::Contains("due            in 5m00s ("));
  CHECK_THAT(text, Catch::Contains("when the minimum slice of " + alice + " ends"));

  // The list: alice's job with its device type and share; the summary with both users.
  v1::ListJobsResponse all;
  REQUIRE(c.client->ListJobs(c.Context().get(), v1::ListJobsRequest(), &all).ok());
  const std::string table = cli::JobsTable({all.jobs().begin(), all.jobs().end()});
  INFO(table);
  CHECK_THAT(table, Catch::Contains("cpu   alice 1.00 on 4"));
  CHECK(all.summary().policy() == "max-min");
  REQUIRE(all.summary().user_shares_size() == 2);

  // After the slice, alice's job is preempted for bob's: --why of it says so. The node
  // heartbeats with alice's tasks every 5 s meanwhile.
  StatusOr<coordinator::JobRecord> running = c.server->jobs()->Get(alice);
  REQUIRE(running.ok());
  v1::HeartbeatRequest beat;
  beat.set_node_id(node_id);
  for (const std::string& task_id : running->task_ids) {
    v1::RunningTask* task = beat.add_running_tasks();
    task->set_task_id(task_id);
    task->set_job_id(alice);
  }
  for (int passed = 0; passed <= 300; passed += 5) {
    c.clock.Advance(std::chrono::seconds(5));
    v1::HeartbeatResponse response;
    REQUIRE(c.worker->Heartbeat(c.Context().get(), beat, &response).ok());
  }
  c.server->scheduler()->Tick();
  const v1::Job moved = c.Get(alice);
  REQUIRE(moved.policy().has_last_preemption());
  CHECK(moved.policy().last_preemption().for_job() == bob);
  const std::string moved_text = cli::WhyText(moved, {}, {}, c.clock.WallMillis(), all.summary());
  INFO(moved_text);
  CHECK_THAT(moved_text, Catch::Contains("by the max-min policy: "));
  CHECK_THAT(moved_text, Catch::Contains("; for job " + bob + "\n"));
  CHECK_THAT(c.Get(bob).policy().wait().making_way(0), Catch::Equals(alice));

  // Each decision is counted.
  const coordinator::Scheduler::PolicyView view = c.server->scheduler()->LastPolicyView();
  CHECK(view.decisions.at({"wait", "fair_share"}) >= 1);
  CHECK(view.decisions.at({"grant", "fg"}) == 1);
  CHECK(view.decisions.at({"preemption", "fg"}) == 1);
}

}  // namespace
}  // namespace deepool

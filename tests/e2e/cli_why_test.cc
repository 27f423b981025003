// `deepool status JOB --why` (cli/services/why.h) over hand-made coordinator answers, without
// processes. Lives with the e2e tests because it needs the gRPC client library.
#include <catch2/catch.hpp>

#include "cli/services/why.h"

using namespace deepool;
using namespace deepool::cli;

namespace {

v1::Job Pending(const std::string& id, int gpus, int position, v1::JobRole role = v1::JOB_ROLE_FG,
                int priority = 0) {
  v1::Job job;
  job.set_job_id(id);
  job.set_state(v1::JOB_STATE_PENDING);
  job.set_queue_position(position);
  job.mutable_spec()->set_name(id + "-name");
  job.mutable_spec()->set_gpus(gpus);
  job.mutable_spec()->set_role(role);
  job.mutable_spec()->set_priority(priority);
  return job;
}

// A node of `devices` cpu devices; fg[i] / bg[i] hold device i ("" for none).
v1::Node Node(const std::string& name, v1::NodeState state, const std::vector<std::string>& fg,
              const std::vector<std::string>& bg = {}) {
  v1::Node node;
  node.set_node_id("id-" + name);
  node.set_name(name);
  node.set_state(state);
  node.set_last_heartbeat_ms(1'000);
  for (size_t i = 0; i < fg.size(); ++i) {
    v1::Device* device = node.add_devices();
    device->set_device("cpu:" + std::to_string(i));
    device->set_type("cpu");
    v1::DeviceUse* use = node.add_device_uses();
    use->set_device(device->device());
    use->set_fg_job_id(fg[i]);
    if (i < bg.size()) use->set_bg_job_id(bg[i]);
  }
  return node;
}

}  // namespace

TEST_CASE("status JOB --why: a FG job behind another, devices held, nodes out of service",
          "[cli]") {
  v1::Job job = Pending("job-3", 4, 2);
  job.set_reason_code(v1::REASON_CODE_QUEUED_BEHIND);
  job.set_reason("queued behind job-1");
  v1::Job ahead = Pending("job-1", 4, 1, v1::JOB_ROLE_FG, 5);
  ahead.set_reason("waiting for 4 free devices of one type (2 free)");
  const std::vector<v1::Node> nodes = {
      Node("a", v1::NODE_STATE_UP, {"job-2", "job-2", "", ""}, {"bg-1"}),
      Node("b", v1::NODE_STATE_DRAINING, {"", ""}), Node("c", v1::NODE_STATE_DOWN, {"", ""})};
  const std::string text =
      WhyText(job, {job, ahead, Pending("bg-9", 1, 1, v1::JOB_ROLE_BG)}, nodes, 36'000);
  INFO(text);
  CHECK(text.find("job-3 (job-3-name) is PENDING: a fg job, priority 0, needs 4 device(s)") == 0);
  CHECK(text.find("last decision  QUEUED_BEHIND: queued behind job-1\n") != std::string::npos);
  CHECK(text.find("#2 among the pending FG jobs") != std::string::npos);
  // The FG job ahead is listed with its priority and reason; the BG job is not in its queue.
  CHECK(text.find("#1 job-1  5") != std::string::npos);
  CHECK(text.find("(2 free)") != std::string::npos);
  CHECK(text.find("bg-9") == std::string::npos);
  // Only UP nodes count: 4 schedulable, 2 without a FG job, 3 without a BG job.
  CHECK(text.find("cpu             4          2          3  job-2\xC3\x97"
                  "2  bg-1") != std::string::npos);
  CHECK(text.find("b DRAINING, 2 device(s)") != std::string::npos);
  CHECK(text.find("c DOWN, 2 device(s), last heartbeat 35s ago") != std::string::npos);
}

TEST_CASE("status JOB --why: jobs ahead that the caller cannot see are counted", "[cli]") {
  const v1::Job job = Pending("mine", 1, 3, v1::JOB_ROLE_BG);
  const std::string text = WhyText(job, {job}, {}, 0);
  INFO(text);
  CHECK(text.find("needs one device without a BG job") != std::string::npos);
  CHECK(text.find("2 job(s) ahead of it are other users'") != std::string::npos);
  CHECK(text.find("devices now    none: no node is UP") != std::string::npos);
}

TEST_CASE("status JOB --why: a job past the queue says so", "[cli]") {
  v1::Job job = Pending("run", 2, 0);
  job.set_state(v1::JOB_STATE_RUNNING);
  v1::DeviceAssignment* d = job.add_devices();
  d->set_rank(0);
  d->set_node_name("a");
  d->set_device("cpu:1");
  const std::string text = WhyText(job, {}, {}, 0);
  CHECK(text.find("rank 0 a/cpu:1") != std::string::npos);
  CHECK(text.find("it has left the queue") != std::string::npos);
  job.set_state(v1::JOB_STATE_FAILED);
  CHECK(WhyText(job, {}, {}, 0).find("it has ended") != std::string::npos);
}

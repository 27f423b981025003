// The workload replay file: round trips, hand-written files, and errors that name the line and
// the field (docs/simulator.md, "Workload traces").
#include "simulator/workload_file.h"

#include <catch2/catch.hpp>
#include <string>

#include "simulator/workload_generator.h"

namespace deepool::simulator {
namespace {

constexpr const char* kHeader =
    R"({"format":"deepool.workload","version":1,"reference_device":"v100"})";
constexpr const char* kJob =
    R"({"id":0,"arrival_s":1.5,"user":"alice","role":"fg","model":"resnet50","global_batch":256,"gpus":4,"duration_s":600})";

std::string ErrorOf(const std::string& text) {
  StatusOr<Workload> workload = ParseWorkload(text);
  REQUIRE_FALSE(workload.ok());
  CHECK(workload.status().code() == StatusCode::kInvalidArgument);
  return workload.status().message();
}

// The file kHeader + kJob + `line` (as line 3).
std::string WithThirdLine(const std::string& line) {
  return std::string(kHeader) + "\n" + kJob + "\n" + line + "\n";
}

TEST_CASE("a generated workload reads back to the same jobs and the same bytes") {
  WorkloadOptions options;
  options.jobs = 300;
  options.durations = DurationDistribution::kBoundedPareto;
  options.models = {{"resnet50", 2, 256}, {"vit_b_16", 1, 128}};
  StatusOr<Workload> generated = GenerateWorkload(options);
  REQUIRE(generated.ok());
  const std::string text = WriteWorkload(*generated);
  StatusOr<Workload> read = ParseWorkload(text);
  REQUIRE(read.ok());
  CHECK(WriteWorkload(*read) == text);
  REQUIRE(read->jobs.size() == 300);
  for (size_t i = 0; i < read->jobs.size(); ++i) {
    const WorkloadJob& a = generated->jobs[i];
    const WorkloadJob& b = read->jobs[i];
    REQUIRE(b.id == a.id);
    REQUIRE(b.arrival_s == a.arrival_s);
    REQUIRE(b.user == a.user);
    REQUIRE(b.role == a.role);
    REQUIRE(b.model == a.model);
    REQUIRE(b.global_batch == a.global_batch);
    REQUIRE(b.gpus == a.gpus);
    REQUIRE(b.priority == a.priority);
    REQUIRE(b.duration_s == a.duration_s);
    REQUIRE(b.device_type == a.device_type);
  }
  REQUIRE(read->header.generator.has_value());
  CHECK(read->header.generator->seed == options.seed);
  CHECK(read->header.generator->durations == DurationDistribution::kBoundedPareto);
  CHECK(read->header.generator->models.size() == 2);
  CHECK(read->header.devices == 4096);
  // Regenerating from the header's options gives the file again.
  StatusOr<Workload> again = GenerateWorkload(*read->header.generator);
  REQUIRE(again.ok());
  CHECK(WriteWorkload(*again) == text);
}

TEST_CASE("a hand-written workload gives iterations and takes the job spec's defaults") {
  const std::string text =
      std::string(kHeader) + "\n" +
      R"({"id":7,"arrival_s":0,"user":"bob","role":"bg","model":"small_cnn","global_batch":32,"iterations":200})";
  StatusOr<Workload> read = ParseWorkload(text);
  REQUIRE(read.ok());
  REQUIRE(read->jobs.size() == 1);
  const WorkloadJob& job = read->jobs[0];
  CHECK(job.iterations == 200);
  CHECK(job.gpus == 1);
  CHECK(job.priority == 0);
  CHECK(job.amplification_limit == 2.0);
  CHECK(job.device_type.empty());
  CHECK_FALSE(read->header.generator.has_value());
  CHECK(read->header.devices == 0);
  CHECK(IterationsFor(job, 0.5) == 200);
}

TEST_CASE("a duration becomes iterations at the reference iteration time") {
  WorkloadJob job;
  job.duration_s = 100;
  CHECK(IterationsFor(job, 0.3) == 334);
  CHECK(IterationsFor(job, 1000) == 1);
  CHECK(OfferedDeviceSeconds(job) == 100);
}

TEST_CASE("job errors name the line and the field") {
  CHECK(
      ErrorOf(WithThirdLine(
          R"({"id":1,"arrival_s":2,"user":"a","role":"fg","model":"m","global_batch":8,"gpus":5000,"duration_s":1})")) ==
      "line 3: gpus: must be in [1, 4096]");
  CHECK(ErrorOf(WithThirdLine(
            R"({"id":1,"arrival_s":2,"user":"a","role":"fg","global_batch":8,"duration_s":1})")) ==
        "line 3: missing field model");
  CHECK(
      ErrorOf(WithThirdLine(
          R"({"id":1,"arrival_s":2,"user":"a","role":"fg","model":"m","global_batch":8,"gpu":2,"duration_s":1})")) ==
      "line 3: unknown field gpu");
  CHECK(
      ErrorOf(WithThirdLine(
          R"({"id":1,"arrival_s":2,"user":"a","role":"fg","model":"m","global_batch":8,"gpus":"2","duration_s":1})")) ==
      "line 3: field gpus must be an integer");
  CHECK(
      ErrorOf(WithThirdLine(
          R"({"id":1,"arrival_s":2,"user":"a","role":"xg","model":"m","global_batch":8,"duration_s":1})")) ==
      "line 3: role: must be fg or bg");
  CHECK(
      ErrorOf(WithThirdLine(
          R"({"id":1,"arrival_s":2,"user":"a","role":"bg","model":"m","global_batch":8,"gpus":2,"duration_s":1})")) ==
      "line 3: gpus: a bg job runs on exactly 1 device");
  CHECK(
      ErrorOf(WithThirdLine(
          R"({"id":1,"arrival_s":2,"user":"a","role":"fg","model":"m","global_batch":8,"iterations":5,"duration_s":1})")) ==
      "line 3: iterations: give exactly one of \"iterations\" and \"duration_s\"");
  CHECK(
      ErrorOf(WithThirdLine(
          R"({"id":1,"arrival_s":2,"user":"","role":"fg","model":"m","global_batch":8,"duration_s":1})")) ==
      "line 3: user: must not be empty");
  CHECK(
      ErrorOf(WithThirdLine(
          R"({"id":1,"arrival_s":2,"user":"a","role":"fg","model":"m","global_batch":8,"amplification_limit":0.5,"duration_s":1})")) ==
      "line 3: amplification_limit: must be 0 (unconstrained) or >= 1");
}

TEST_CASE("ids must be unique and jobs in arrival order") {
  CHECK(
      ErrorOf(WithThirdLine(
          R"({"id":0,"arrival_s":2,"user":"a","role":"fg","model":"m","global_batch":8,"duration_s":1})")) ==
      "line 3: id: 0 is already the id on line 2");
  CHECK(
      ErrorOf(WithThirdLine(
          R"({"id":1,"arrival_s":1,"user":"a","role":"fg","model":"m","global_batch":8,"duration_s":1})")) ==
      "line 3: arrival_s: is before the previous job's (jobs must be in arrival order)");
}

TEST_CASE("header errors name line 1") {
  CHECK(ErrorOf("") == "line 1: missing header (the file is empty)");
  CHECK(ErrorOf(std::string("\n") + kJob) == "line 1: empty line");
  CHECK(ErrorOf(std::string(kHeader) + "\n\n" + kJob) == "line 2: empty line");
  CHECK(ErrorOf(R"({"format":"deepool.workload","version":1,"reference_device":"v100","jobs":2})"
                "\n" +
                std::string(kJob)) ==
        "line 1: jobs: the header states 2 jobs but the file has 1 (cut short?)");
  CHECK(ErrorOf(R"({"format":"deepool.workload","version":1})") ==
        "line 1: missing field reference_device");
  const std::string wrong_version =
      ErrorOf(R"({"format":"deepool.workload","version":2,"reference_device":"v100"})");
  CHECK(wrong_version.rfind("line 1: ", 0) == 0);
  CHECK(wrong_version.find("version") != std::string::npos);
  CHECK(ErrorOf("{\"format\":").rfind("line 1: header: not valid JSON", 0) == 0);
}

TEST_CASE("a header's generator options are checked as the generator checks them") {
  WorkloadOptions options;
  options.jobs = 1;
  StatusOr<Workload> generated = GenerateWorkload(options);
  REQUIRE(generated.ok());
  std::string text = WriteWorkload(*generated);
  const std::string load = "\"load\":0.8";
  REQUIRE(text.find(load) != std::string::npos);
  text.replace(text.find(load), load.size(), "\"load\":-1");
  CHECK(ErrorOf(text) == "line 1: generator.load: must be in (0, 10]");
}

}  // namespace
}  // namespace deepool::simulator

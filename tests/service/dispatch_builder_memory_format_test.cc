// The job spec's memory_format reaches the run spec the coordinator writes (DispatchBuilder): an
// explicit format is written (executor protocol 9), auto is left out for each rank to resolve.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "coordinator/dispatch_builder.h"
#include "protocol/version.h"

namespace deepool::coordinator {
namespace {

using nlohmann::json;

JobRecord Job(planner::MemoryFormat format) {
  JobRecord job;
  job.id = "j";
  job.owner = "ana";
  job.spec.model = "mlp";
  job.spec.global_batch = 64;
  job.spec.gpus = 2;
  job.spec.iterations = 10;
  job.spec.memory_format = format;
  return job;
}

TEST_CASE("the run spec carries an explicit memory format and leaves auto out",
          "[dispatch_builder][memory_format]") {
  FakeClock clock;
  NodeRegistry nodes{&clock, std::chrono::seconds(30)};
  DispatchBuilder builder(&nodes, {0, "", 60});
  const json channels_last = json::parse(builder.RunSpecJson(
      Job(planner::MemoryFormat::kChannelsLast), planner::Precision::kBf16, "{}", "{}"));
  CHECK(channels_last["memory_format"] == "channels_last");
  CHECK(channels_last["version"] == protocol::kMemoryFormatProtocolVersion);
  const json contiguous = json::parse(builder.RunSpecJson(Job(planner::MemoryFormat::kContiguous),
                                                          planner::Precision::kBf16, "{}", "{}"));
  CHECK(contiguous["memory_format"] == "contiguous");
  const json automatic = json::parse(builder.RunSpecJson(Job(planner::MemoryFormat::kAuto),
                                                         planner::Precision::kBf16, "{}", "{}"));
  CHECK_FALSE(automatic.contains("memory_format"));
  CHECK(automatic["version"] < protocol::kMemoryFormatProtocolVersion);
}

}  // namespace
}  // namespace deepool::coordinator

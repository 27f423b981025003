// PolicyRecord alone: a round's decisions counted by kind, the last round and shares kept, and
// moves noted copy-on-write so a view handed out keeps what it was given; a growth counted as a
// resize, not as a preemption.
#include "coordinator/policy_record.h"

#include <catch2/catch.hpp>

namespace deepool::coordinator {
namespace {

std::shared_ptr<const policy::Policy> MaxMin() {
  StatusOr<std::unique_ptr<policy::Policy>> made = policy::MakePolicy("max-min");
  REQUIRE(made.ok());
  return std::shared_ptr<const policy::Policy>(std::move(*made));
}

const auto kNoneEnded = [](const std::string&) { return false; };

TEST_CASE("fifo's record names fifo and counts its grants", "[policy_record]") {
  PolicyRecord record(nullptr, {});
  Admission admission;
  admission.background.resize(2);
  admission.displaced.resize(1);
  record.RecordRound(admission, 3);
  record.RecordRound(admission, 1);
  const PolicyView view = record.View();
  CHECK(view.policy == "fifo");
  CHECK(view.min_slice_s == 0);
  CHECK(view.round == nullptr);
  using Key = std::pair<std::string, std::string>;
  CHECK(view.decisions.at(Key{"grant", "fg"}) == 4);
  CHECK(view.decisions.at(Key{"grant", "bg"}) == 4);
  CHECK(view.decisions.at(Key{"preemption", "fg"}) == 0);
  CHECK(view.decisions.at(Key{"preemption", "bg"}) == 2);
}

TEST_CASE("a round's waits are counted by code and its round and shares kept", "[policy_record]") {
  PolicyRecord record(MaxMin(), {/*min_slice_s=*/42});
  auto round = std::make_shared<PolicyRound>();
  round->waits = {{"a", policy::WaitCode::kFairShare}, {"b", policy::WaitCode::kFairShare}};
  Admission admission;
  admission.round = round;
  admission.shares.resize(1);
  admission.shares[0].user = "ana";
  record.RecordRound(admission, 0);
  const PolicyView view = record.View();
  CHECK(view.policy == "max-min");
  CHECK(view.min_slice_s == 42);
  CHECK(view.round == round);
  REQUIRE(view.shares.size() == 1);
  CHECK(view.shares[0].user == "ana");
  CHECK(view.decisions.at({"wait", std::string(WaitCodeName(policy::WaitCode::kFairShare))}) == 2);
}

TEST_CASE("preemptions are noted without changing a view already handed out", "[policy_record]") {
  PolicyRecord record(MaxMin(), {});
  record.RecordMove({"j1", "j9", "over its share"}, 1000, kNoneEnded);
  const PolicyView before = record.View();
  record.RecordMove({"j2", "", "over its share"}, 2000, kNoneEnded);
  const PolicyView after = record.View();
  CHECK(before.preemptions == 1);
  REQUIRE(before.preempted != nullptr);
  CHECK(before.preempted->size() == 1);
  CHECK(after.preemptions == 2);
  CHECK(after.preempted->size() == 2);
  const PreemptionNote& note = after.preempted->at("j1");
  CHECK(note.policy == "max-min");
  CHECK(note.for_job == "j9");
  CHECK(note.time_ms == 1000);
}

std::shared_ptr<const policy::Policy> Deepool() {
  StatusOr<std::unique_ptr<policy::Policy>> made = policy::MakePolicy("deepool");
  REQUIRE(made.ok());
  return std::shared_ptr<const policy::Policy>(std::move(*made));
}

TEST_CASE("a growth is counted as a resize and not as a preemption", "[policy_record]") {
  PolicyRecord record(Deepool(), {});
  Admission admission;
  FgPreemption grown{"g", "", "grows from 1 to 4 cpu devices"};
  grown.from_devices = 1;
  grown.grow_to = 4;
  admission.preempted = {grown, {"p", "j9", "over its share"}};
  record.RecordRound(admission, 0);
  for (const FgPreemption& moved : admission.preempted) record.RecordMove(moved, 1000, kNoneEnded);
  const PolicyView view = record.View();
  using Key = std::pair<std::string, std::string>;
  CHECK(view.decisions.at(Key{"resize", "fg"}) == 1);
  CHECK(view.decisions.at(Key{"preemption", "fg"}) == 1);
  CHECK(view.preemptions == 1);
  // Both are noted as the job's last move; the growth with its sizes.
  REQUIRE(view.preempted != nullptr);
  const PreemptionNote& note = view.preempted->at("g");
  CHECK(note.policy == "deepool");
  CHECK(note.from_devices == 1);
  CHECK(note.grow_to == 4);
  CHECK(view.preempted->at("p").grow_to == 0);
}

TEST_CASE("the notes of ended jobs go at the next move", "[policy_record]") {
  PolicyRecord record(MaxMin(), {});
  for (int i = 0; i < 100; ++i) {
    record.RecordMove({"j" + std::to_string(i), "", "over its share"}, i, kNoneEnded);
  }
  const PolicyView all = record.View();
  record.RecordMove({"last", "", "over its share"}, 100,
                    [](const std::string& job_id) { return job_id != "j7"; });
  const PolicyView view = record.View();
  REQUIRE(view.preempted != nullptr);
  CHECK(view.preempted->size() == 2);  // j7, still live, and the new one
  CHECK(view.preempted->count("j7") == 1);
  CHECK(view.preempted->count("last") == 1);
  CHECK(view.preemptions == 101);
  CHECK(all.preempted->size() == 100);  // a view handed out keeps what it was given
}

}  // namespace
}  // namespace deepool::coordinator

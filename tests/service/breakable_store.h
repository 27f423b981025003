// BreakableStore: a job store a test can make fail and then mend, to check that no store error is
// dropped. Two kinds, so the same test runs against both: the fake (FailingJobStore: writes fail
// with UNAVAILABLE, reads work) and the real PostgreSQL store on a server of the test's own,
// which Break() stops and Mend() starts again (every call fails meanwhile, as on a lost
// database).
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "coordinator/job_store.h"
#include "tests/postgres_server.h"
#include "tests/service/failing_job_store.h"

namespace deepool::coordinator::testing {

class BreakableStore {
 public:
  virtual ~BreakableStore() = default;
  virtual JobStore* get() = 0;
  virtual void Break() = 0;
  virtual void Mend() = 0;
  virtual std::string name() const = 0;

  static std::unique_ptr<BreakableStore> Fake();
  // nullptr (the test says why it is skipped) where no PostgreSQL server can start here.
  static std::unique_ptr<BreakableStore> Postgres();
};

class FakeBreakableStore final : public BreakableStore {
 public:
  JobStore* get() override { return &store_; }
  void Break() override { store_.fail_writes = true; }
  void Mend() override { store_.fail_writes = false; }
  std::string name() const override { return "the fake failing store"; }

 private:
  FailingJobStore store_;
};

class PostgresBreakableStore final : public BreakableStore {
 public:
  PostgresBreakableStore() {
    StatusOr<std::unique_ptr<JobStore>> opened = OpenPostgresJobStore(server_.Uri());
    INFO(opened.status().ToString());
    REQUIRE(opened.ok());
    store_ = std::move(*opened);
  }
  JobStore* get() override { return store_.get(); }
  void Break() override { server_.Stop(); }
  void Mend() override { server_.Start(); }
  std::string name() const override { return "the PostgreSQL store, its server stopped"; }

 private:
  deepool::testing::PostgresServer server_;
  std::unique_ptr<JobStore> store_;
};

inline std::unique_ptr<BreakableStore> BreakableStore::Fake() {
  return std::make_unique<FakeBreakableStore>();
}

inline std::unique_ptr<BreakableStore> BreakableStore::Postgres() {
  if (auto missing = deepool::testing::PostgresServer::MissingReason()) {
    WARN("the PostgreSQL run is skipped: " << *missing);
    return nullptr;
  }
  return std::make_unique<PostgresBreakableStore>();
}

}  // namespace deepool::coordinator::testing

// In a test case: `store`, the fake on one run of the test and PostgreSQL on another; the run
// ends at once where PostgreSQL cannot start (saying so).
#define DEEPOOL_BREAKABLE_STORE(store)                                                  \
  const bool store##_on_postgres = GENERATE(false, true);                               \
  std::unique_ptr<::deepool::coordinator::testing::BreakableStore> store =              \
      store##_on_postgres ? ::deepool::coordinator::testing::BreakableStore::Postgres() \
                          : ::deepool::coordinator::testing::BreakableStore::Fake();    \
  if (!store) return;                                                                   \
  INFO(store->name())

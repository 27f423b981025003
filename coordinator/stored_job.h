// How the SQL job stores (SQLite, PostgreSQL) lay a JobRecord out in rows, one copy for both:
// the record as JSON without its documents; the job's inline graph (its spec's) in a table of
// its own; the planned graph and plan in another, rewritten only when they change, so the
// frequent progress updates stay small writes. Also the versioned schema steps' runner.
// Threading: WrittenDocuments is not synchronised (each store guards it with its own lock).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/job.h"

namespace deepool::coordinator {

// The `record` column: the job without its plan and without its inline graph.
std::string StoredRecordText(const JobRecord& job);

// How the stores write a batch of progress (JobStore::SaveProgress of many jobs): the records
// serialized first, without the store's lock, then kProgressJobsPerTransaction to a transaction,
// the lock released in between, so that another write waits for one such transaction at most.
constexpr size_t kProgressJobsPerTransaction = 32;
std::vector<std::string> StoredRecordTexts(const std::vector<JobSnapshot>& jobs);
// Calls write(begin, end) for consecutive ranges of [0, count) of at most `batch` each, in
// order, until one fails; its error.
Status InBatches(size_t count, size_t batch, const std::function<Status(size_t, size_t)>& write);

// A job's row and its documents as read back. `spec_graph` is nullopt when the job has no row
// in the inline graph table (records written before that table hold it themselves).
struct StoredJobRow {
  std::string id;
  std::string record;
  std::string graph;
  std::string plan;
  std::optional<std::string> spec_graph;
};

// The job a row holds; DATA_LOSS naming the job when the record is not a readable one.
StatusOr<JobRecord> JobFromStoredRow(const StoredJobRow& row);

// Per unfinished job, the documents last written (sharing the JobManager's buffers, so they cost
// no memory of their own), to skip rewriting unchanged ones.
class WrittenDocuments {
 public:
  struct Needed {
    bool plan = true;        // the graph and plan rows
    bool spec_graph = true;  // the inline graph row (deleted when the job has none)
  };
  // What saving `job` must write.
  Needed ForSave(const JobRecord& job) const;
  // `job` was saved (or loaded, with `spec_graph_stored` false for a record that holds its own
  // inline graph): remembered while it runs, forgotten once it ended.
  void Remember(const JobRecord& job, bool spec_graph_stored = true);

 private:
  struct Written {
    SharedText spec_graph;
    bool spec_graph_stored = false;
    SharedText graph;
    SharedText plan;
  };
  std::map<std::string, Written> written_;
};

// One versioned change of a store's schema. Steps are numbered 1, 2, ... in the order they
// apply; a database records the number of the last one applied (0: none, as in SQLite files
// written before schema versions, whose tables step 1 creates only where missing).
struct SchemaStep {
  int version = 0;
  const char* what = "";  // for the log
  const char* sql = "";
};

// The steps a database at `current` lacks, in order. FAILED_PRECONDITION when it is newer than
// every step this binary knows (a coordinator must not write a schema it does not understand),
// INTERNAL when `steps` are not numbered 1..n.
StatusOr<std::vector<SchemaStep>> SchemaStepsToApply(const std::string& store, int64_t current,
                                                     const std::vector<SchemaStep>& steps);

}  // namespace deepool::coordinator

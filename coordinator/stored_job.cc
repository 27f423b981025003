#include "coordinator/stored_job.h"

#include <algorithm>

namespace deepool::coordinator {

std::string StoredRecordText(const JobRecord& job) {
  JobRecord record = job;                 // shares the documents
  record.spec.graph_json = SharedText();  // kept in its own table
  return JobRecordToJson(record, /*include_plan=*/false).dump();
}

std::vector<std::string> StoredRecordTexts(const std::vector<JobSnapshot>& jobs) {
  std::vector<std::string> texts;
  texts.reserve(jobs.size());
  for (const JobSnapshot& job : jobs) texts.push_back(StoredRecordText(*job));
  return texts;
}

Status InBatches(size_t count, size_t batch, const std::function<Status(size_t, size_t)>& write) {
  for (size_t begin = 0; begin < count; begin += batch) {
    RETURN_IF_ERROR(write(begin, std::min(count, begin + batch)));
  }
  return Status::Ok();
}

StatusOr<JobRecord> JobFromStoredRow(const StoredJobRow& row) {
  auto doc = nlohmann::json::parse(row.record, nullptr, false);
  if (doc.is_discarded()) return DataLossError("the stored record of " + row.id + " is not JSON");
  if (row.spec_graph && doc.contains("spec") && doc["spec"].is_object()) {
    doc["spec"]["graph"] = *row.spec_graph;  // back into the spec as its text
  }
  StatusOr<JobRecord> loaded = JobRecordFromJson(doc);
  if (!loaded.ok()) {
    return DataLossError("the stored record of " + row.id +
                         " is damaged: " + loaded.status().message());
  }
  loaded->graph_json = row.graph;
  loaded->plan_json = row.plan;
  return loaded;
}

WrittenDocuments::Needed WrittenDocuments::ForSave(const JobRecord& job) const {
  // Most often one comparison of two pointers: a copy of the record shares its documents.
  auto last = written_.find(job.id);
  if (last == written_.end()) return {};
  Needed needed;
  needed.plan = last->second.graph != job.graph_json || last->second.plan != job.plan_json;
  needed.spec_graph =
      !last->second.spec_graph_stored || last->second.spec_graph != job.spec.graph_json;
  return needed;
}

void WrittenDocuments::Remember(const JobRecord& job, bool spec_graph_stored) {
  if (IsTerminal(job.state)) {
    written_.erase(job.id);  // no more writes; the JobManager lets go of them too
    return;
  }
  written_[job.id] = {job.spec.graph_json, spec_graph_stored, job.graph_json, job.plan_json};
}

StatusOr<std::vector<SchemaStep>> SchemaStepsToApply(const std::string& store, int64_t current,
                                                     const std::vector<SchemaStep>& steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].version != static_cast<int>(i) + 1) {
      return InternalError(store + ": schema step " + std::to_string(i) + " is numbered " +
                           std::to_string(steps[i].version));
    }
  }
  const int64_t known = static_cast<int64_t>(steps.size());
  if (current > known) {
    return FailedPreconditionError(
        store + " has schema version " + std::to_string(current) + ", newer than the " +
        std::to_string(known) +
        " this coordinator knows: a newer coordinator wrote it. Run that version (or newer); an "
        "older one must not write a schema it does not understand");
  }
  if (current < 0) {
    return DataLossError(store + " records schema version " + std::to_string(current));
  }
  return std::vector<SchemaStep>(steps.begin() + current, steps.end());
}

}  // namespace deepool::coordinator

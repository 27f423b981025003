#include "cli/services/job_wait.h"

#include <unistd.h>

#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include "cli/command_registry.h"
#include "cli/services/client.h"
#include "cli/services/format.h"

namespace deepool::cli {

namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

// Asks for every job once; keeps the answers in `last`. Returns the last failed call's status
// (OK when all answered); *all_terminal is true when every job answered and has ended.
grpc::Status PollJobs(v1::CoordinatorService::Stub& stub, const std::vector<std::string>& job_ids,
                      std::map<std::string, v1::Job>& last, bool* all_terminal) {
  *all_terminal = true;
  grpc::Status failure;
  for (const auto& id : job_ids) {
    v1::GetJobRequest request;
    request.set_job_id(id);
    v1::Job job;
    auto context = UnaryContext(std::chrono::seconds(5));
    grpc::Status status = stub.GetJob(context.get(), request, &job);
    if (!status.ok()) {
      failure = status;
      *all_terminal = false;
      continue;
    }
    last[id] = job;
    *all_terminal &= IsTerminal(job.state());
  }
  return failure;
}

// Shows the jobs after each poll: on a terminal, one line per job redrawn in place; otherwise a
// line per job when it changed state, every 2 s while it changes, or (JSON) on every change.
class ProgressPrinter {
 public:
  ProgressPrinter(std::ostream& out, bool tty, bool json) : out_(out), tty_(tty), json_(json) {}

  void Show(const std::vector<std::string>& job_ids, const std::map<std::string, v1::Job>& last,
            SteadyTime now) {
    if (tty_) {
      DrawFrame(job_ids, last);
    } else {
      PrintChanges(job_ids, last, now);
    }
  }

 private:
  void DrawFrame(const std::vector<std::string>& job_ids,
                 const std::map<std::string, v1::Job>& last) {
    std::string frame;
    for (const auto& id : job_ids) {
      auto it = last.find(id);
      if (it != last.end()) frame += "\x1b[2K" + JobProgressLine(it->second) + "\n";
    }
    if (drawn_lines_ > 0) out_ << "\x1b[" << drawn_lines_ << "A";
    out_ << frame << std::flush;
    drawn_lines_ = 0;
    for (char c : frame) drawn_lines_ += c == '\n';
  }

  void PrintChanges(const std::vector<std::string>& job_ids,
                    const std::map<std::string, v1::Job>& last, SteadyTime now) {
    for (const auto& id : job_ids) {
      auto it = last.find(id);
      if (it == last.end()) continue;
      const v1::Job& job = it->second;
      std::string line = json_ ? ToJson(job, false) : JobProgressLine(job);
      bool state_changed =
          !last_line_.count(id) || last_line_[id].find(StateName(job.state())) == std::string::npos;
      bool stale = !last_print_.count(id) || now - last_print_[id] >= std::chrono::seconds(2);
      if (line != last_line_[id] && (state_changed || stale || IsTerminal(job.state()) || json_)) {
        out_ << line << std::endl;
        last_line_[id] = line;
        last_print_[id] = now;
      }
    }
  }

  std::ostream& out_;
  const bool tty_;
  const bool json_;
  std::map<std::string, std::string> last_line_;
  std::map<std::string, SteadyTime> last_print_;
  size_t drawn_lines_ = 0;
};

}  // namespace

int WaitForJobs(v1::CoordinatorService::Stub& stub, const std::string& address,
                const std::vector<std::string>& job_ids, const WaitOptions& options,
                std::ostream& out, std::vector<v1::Job>* final_jobs) {
  const bool tty = &out == &std::cout && isatty(STDOUT_FILENO) && !options.json;
  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, v1::Job> last;
  ProgressPrinter printer(out, tty, options.json);
  std::optional<SteadyTime> unreachable_since;
  while (true) {
    bool all_terminal = true;
    grpc::Status failure = PollJobs(stub, job_ids, last, &all_terminal);
    const auto now = std::chrono::steady_clock::now();
    if (!failure.ok()) {
      int code = ExitCodeFor(failure);
      if (code != kExitUnavailable) return ReportRpcError(failure, "waiting for jobs", address);
      if (!unreachable_since) {
        unreachable_since = now;
        std::cerr << "deepool: coordinator at " << address << " unreachable ("
                  << failure.error_message() << "); retrying\n";
      } else if (now - *unreachable_since > options.unavailable_grace) {
        return ReportRpcError(failure, "waiting for jobs", address);
      }
    } else {
      if (unreachable_since) std::cerr << "deepool: coordinator reachable again\n";
      unreachable_since.reset();
    }
    if (options.on_poll) options.on_poll(now, last);
    printer.Show(job_ids, last, now);
    if (all_terminal && failure.ok()) break;
    const bool interrupted = options.interrupted && options.interrupted();
    if (interrupted || (options.timeout.count() > 0 && now - start > options.timeout)) {
      if (interrupted) {
        std::cerr << "deepool: interrupted; stopped waiting\n";
      } else {
        std::cerr << "deepool: gave up waiting after " << options.timeout.count() << "s\n";
      }
      if (final_jobs) {
        for (const auto& id : job_ids) final_jobs->push_back(last[id]);
      }
      return kExitFailure;
    }
    std::this_thread::sleep_for(options.poll_interval);
  }
  int code = kExitOk;
  for (const auto& id : job_ids) {
    const v1::Job& job = last[id];
    if (final_jobs) final_jobs->push_back(job);
    if (job.state() != v1::JOB_STATE_SUCCEEDED) {
      code = kExitFailure;
      if (!options.json) {
        std::cerr << "deepool: " << id << " " << StateName(job.state())
                  << (job.reason().empty() ? "" : ": " + Printable(job.reason())) << "\n";
      }
    }
  }
  return code;
}

std::string JobsSummary(const std::vector<v1::Job>& jobs) {
  Table table({"JOB", "NAME", "ROLE", "STATE", "ITERATIONS", "SAMPLES/S", "WALL", "DEVICES"});
  table.AlignRight(4);
  table.AlignRight(5);
  for (const auto& job : jobs) {
    int64_t started = job.submitted_ms();
    for (const auto& h : job.history()) {
      if (h.state() == v1::JOB_STATE_RUNNING) {
        started = h.time_ms();
        break;
      }
    }
    std::string devices;
    for (const auto& d : job.devices()) {
      devices += (devices.empty() ? "" : " ") + std::to_string(d.rank()) + ":" +
                 (d.node_name().empty() ? d.node_id() : d.node_name()) + "/" + d.device();
    }
    std::string state = StateName(job.state());
    if (!job.reason().empty() && job.state() != v1::JOB_STATE_SUCCEEDED) {
      state += " (" + Truncate(job.reason(), 60) + ")";
    }
    table.AddRow(
        {job.job_id(), job.spec().name(), RoleName(job.spec().role()), state, IterationsDone(job),
         job.progress().samples_per_s() > 0 ? FormatRate(job.progress().samples_per_s()) : "-",
         FormatDuration(static_cast<double>(job.updated_ms() - started)),
         devices.empty() ? "-" : devices});
  }
  std::string out = table.Render();
  // Where each BG job ran, every dispatch in order: inside a FG executor (sharing its device
  // through the gate) or as its own process. The DEVICES column alone does not tell, and a BG job
  // requeued when its host ended ran in both ways.
  const std::string inside = "dispatched inside the executor of ";
  for (const auto& job : jobs) {
    if (job.spec().role() != v1::JOB_ROLE_BG) continue;
    std::string where;
    for (const auto& h : job.history()) {
      if (h.state() != v1::JOB_STATE_RUNNING) continue;
      where += where.empty() ? "ran " : "; requeued, then ran ";
      where += h.reason().rfind(inside, 0) == 0
                   ? "inside the executor of " + h.reason().substr(inside.size())
                   : "as its own executor process";
    }
    if (!where.empty()) out += job.job_id() + " (BG) " + where + "\n";
  }
  for (const auto& job : jobs) {
    const auto& evaluations = job.progress().evaluations();
    if (evaluations.empty()) continue;
    out += job.job_id() + " last evaluation, " + EvaluationText(*evaluations.rbegin()) + "\n";
  }
  return out;
}

}  // namespace deepool::cli

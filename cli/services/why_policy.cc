#include "cli/services/why_policy.h"

#include <cstdio>
#include <sstream>

#include "cli/services/client.h"
#include "cli/services/format.h"

namespace deepool::cli {
namespace {

constexpr const char* kIndent = "               ";

std::string UserName(const std::string& user) {
  return user.empty() ? "(anonymous)" : Printable(user);
}

std::string Fixed2(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", value);
  return text;
}

// "in 3m20s" / "now": how far ahead `at_ms` lies.
std::string Until(int64_t at_ms, int64_t now_ms) {
  if (at_ms <= now_ms) return "now";
  return "in " + FormatDuration(static_cast<double>(at_ms - now_ms));
}

std::string PolicyLine(const v1::PolicyStanding& standing) {
  const std::string& name = standing.policy();
  std::string what;
  char slice[64];
  std::snprintf(slice, sizeof(slice), "%.0f s", standing.min_slice_s());
  if (name == "max-min") {
    what =
        "fair shares across users: the user with the least share is served first, and a "
        "placed job keeps its devices for at least " +
        std::string(slice);
  } else if (name == "deepool") {
    what =
        "devices go where they shorten jobs most; a running job with many hours left may grow, "
        "at its next checkpoint, once it has run " +
        std::string(slice) + " on its devices";
  } else if (name == "fifo") {
    what =
        "priority, then submission order; a job that fits the pool but not now blocks those "
        "behind it; nobody is preempted";
  }
  return std::string("policy         ") + Printable(name) + (what.empty() ? "" : ": " + what) +
         "\n";
}

std::string WaitCodeWords(v1::PolicyWaitCode code) {
  switch (code) {
    case v1::POLICY_WAIT_CODE_QUEUED_BEHIND:
      return "QUEUED_BEHIND: a FG job ahead of it in the queue waits for devices, and nothing "
             "passes it";
    case v1::POLICY_WAIT_CODE_WAITING_FOR_DEVICES:
      return "WAITING_FOR_DEVICES: enough devices of one type exist, too few are free now";
    case v1::POLICY_WAIT_CODE_NOT_ENOUGH_DEVICES:
      return "NOT_ENOUGH_DEVICES: no device type has as many schedulable devices as it needs";
    case v1::POLICY_WAIT_CODE_WORKER_PROTOCOL:
      return "WORKER_PROTOCOL: too few devices on workers that speak the executor protocol its "
             "run spec needs";
    case v1::POLICY_WAIT_CODE_WAITING_FOR_BG_SLOT:
      return "WAITING_FOR_BG_SLOT: every schedulable device already has a BG job or runs a FG "
             "rank its plan keeps busy";
    case v1::POLICY_WAIT_CODE_WAITING_FOR_FG_RANK:
      return "WAITING_FOR_FG_RANK: it runs inside the FG rank of the idlest device, which has "
             "not started, or waits for a device reserved for a FG job's growth (the reason "
             "names it)";
    case v1::POLICY_WAIT_CODE_FAIR_SHARE:
      return "FAIR_SHARE: its user has had its share for now; the devices go to users with a "
             "smaller share first";
    default:
      return "";
  }
}

std::string Shares(const v1::Job& job, const v1::ClusterSummary& summary) {
  if (summary.user_shares_size() == 0) return "";  // fifo, which weighs no users
  std::ostringstream out;
  out << "shares         ";
  bool first = true;
  bool listed = false;
  for (const v1::UserShare& share : summary.user_shares()) {
    const bool own = share.user() == job.owner();
    listed |= own;
    out << (first ? "" : ", ") << ShareText(share.user(), share.share(), share.devices())
        << (own ? " (its user)" : "");
    first = false;
  }
  if (!listed) out << ", " << ShareText(job.owner(), 0, 0) << " (its user)";
  out << "   (share: its FG jobs' throughput over what they would get on their fastest type)\n";
  return out.str();
}

std::string Holder(const v1::PolicyHolder& holder, int64_t now_ms) {
  std::ostringstream out;
  out << Printable(holder.job_id()) << " of user " << UserName(holder.user()) << " (share "
      << Fixed2(holder.user_share()) << "): " << holder.devices() << " "
      << Printable(holder.device_type());
  if (holder.placed_at_ms() > 0) out << ", placed " << FormatAgo(holder.placed_at_ms(), now_ms);
  if (holder.slice_ends_ms() > 0) {
    out << (holder.slice_ends_ms() > now_ms ? ", its minimum slice ends "
                                            : ", its minimum slice ended ");
    out << (holder.slice_ends_ms() > now_ms ? Until(holder.slice_ends_ms(), now_ms)
                                            : FormatAgo(holder.slice_ends_ms(), now_ms));
    out << (holder.preemptible() ? "" : ", not preemptible (no periodic checkpoints)");
  }
  return out.str();
}

// When the job is due, in the policy's terms.
std::string Due(const v1::PolicyStanding& standing, int64_t now_ms) {
  const v1::PolicyWait& wait = standing.wait();
  const bool held_up = wait.code() == v1::POLICY_WAIT_CODE_WAITING_FOR_DEVICES ||
                       wait.code() == v1::POLICY_WAIT_CODE_FAIR_SHARE;
  if (wait.making_way_size() > 0) {
    std::string ids;
    for (const std::string& id : wait.making_way())
      ids += (ids.empty() ? "" : ", ") + Printable(id);
    return "due            once " + ids +
           " stop(s) at the next checkpoint: the policy preempted them for this job\n";
  }
  if (!wait.queued_behind().empty()) {
    return "due            after " + Printable(wait.queued_behind()) +
           " is placed: it heads the queue and waits for devices\n";
  }
  if (!held_up) return "";
  if (standing.policy() == "max-min") {
    if (wait.due_ms() <= 0) {
      return "due            not known: none of the jobs in its way keeps periodic checkpoints, "
             "so none is preempted; it waits for one to end\n";
    }
    const std::string holder =
        wait.holders_size() > 0 ? Printable(wait.holders(0).job_id()) : "the first job";
    if (wait.due_ms() <= now_ms) {
      return "due            now: the minimum slice in its way has ended; the next round "
             "preempts a job and places this one once it stops at its next checkpoint\n";
    }
    return "due            " + Until(wait.due_ms(), now_ms) + " (" + FormatWallTime(wait.due_ms()) +
           " UTC), when the minimum slice of " + holder +
           " ends; it is placed once that job stops at its next checkpoint\n";
  }
  return "due            when enough of these end: " + Printable(standing.policy()) +
         " preempts no running job\n";
}

std::string Pending(const v1::Job& job, const v1::ClusterSummary& summary, int64_t now_ms) {
  const v1::PolicyStanding& standing = job.policy();
  std::ostringstream out;
  const std::string words = WaitCodeWords(standing.wait().code());
  if (!words.empty()) out << "wait           " << words << "\n";
  out << Shares(job, summary);
  const v1::PolicyWait& wait = standing.wait();
  for (int i = 0; i < wait.holders_size(); ++i) {
    out << (i == 0 ? "in its way     " : kIndent) << Holder(wait.holders(i), now_ms) << "\n";
  }
  if (wait.holders_not_shown() > 0) {
    out << kIndent << "and " << wait.holders_not_shown() << " more\n";
  }
  out << Due(standing, now_ms);
  return out.str();
}

std::string Placed(const v1::Job& job) {
  const v1::PolicyStanding& standing = job.policy();
  std::ostringstream out;
  if (job.devices_size() == 0 || job.spec().role() == v1::JOB_ROLE_BG) return "";
  out << "share          ";
  if (standing.policy() != "fifo") {  // fifo weighs no users
    out << "user " << UserName(job.owner()) << " has share " << Fixed2(standing.user_share())
        << " on " << standing.user_devices() << " device(s); ";
  }
  out << "this job holds " << job.devices_size() << " " << Printable(job.device_type()) << "\n";
  return out.str();
}

std::string LastMove(const v1::PolicyStanding& standing, int64_t now_ms) {
  if (!standing.has_last_preemption()) return "";
  const v1::PolicyPreemption& last = standing.last_preemption();
  std::ostringstream out;
  out << "last moved     " << FormatWallTime(last.time_ms()) << " UTC ("
      << FormatAgo(last.time_ms(), now_ms) << ") by the " << Printable(last.policy())
      << " policy: " << Printable(last.message());
  if (!last.for_job().empty()) out << "; for job " << Printable(last.for_job());
  out << "\n";
  return out.str();
}

}  // namespace

std::string ShareText(const std::string& user, double share, int devices) {
  return UserName(user) + " " + Fixed2(share) + " on " + std::to_string(devices);
}

std::string PolicyWhyText(const v1::Job& job, const v1::ClusterSummary& summary, int64_t now_ms) {
  if (!job.has_policy() || job.policy().policy().empty()) return "";
  std::string out = PolicyLine(job.policy());
  if (job.state() == v1::JOB_STATE_PENDING) {
    out += Pending(job, summary, now_ms);
  } else if (!IsTerminal(job.state())) {
    out += Placed(job);
  }
  return out + LastMove(job.policy(), now_ms);
}

}  // namespace deepool::cli

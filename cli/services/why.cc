#include "cli/services/why.h"

#include <map>
#include <sstream>

#include "cli/services/client.h"
#include "cli/services/format.h"
#include "cli/services/why_policy.h"

namespace deepool::cli {
namespace {

std::string ReasonCodeName(v1::ReasonCode code) {
  std::string name = v1::ReasonCode_Name(code);
  const std::string prefix = "REASON_CODE_";
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  return name.empty() ? "UNSPECIFIED" : name;
}

std::string NodeStateName(v1::NodeState state) {
  std::string name = v1::NodeState_Name(state);
  if (name.rfind("NODE_STATE_", 0) == 0) name = name.substr(11);
  return name;
}

std::string NodeLabel(const v1::Node& node) {
  return Printable(node.name().empty() ? node.node_id() : node.name());
}

// "job-1 ×4, job-2": job ids with their device counts, in first-seen order.
class Holders {
 public:
  void Add(const std::string& job_id) {
    if (job_id.empty()) return;
    if (counts_[job_id]++ == 0) order_.push_back(job_id);
  }
  std::string Text() const {
    if (order_.empty()) return "-";
    std::string out;
    for (const std::string& id : order_) {
      out += (out.empty() ? "" : ", ") + Printable(id);
      if (counts_.at(id) > 1) out += "\xC3\x97" + std::to_string(counts_.at(id));  // ×
    }
    return out;
  }

 private:
  std::map<std::string, int> counts_;
  std::vector<std::string> order_;
};

struct TypeUse {
  int schedulable = 0;
  int without_fg = 0;  // free for a FG job
  int without_bg = 0;  // free for a BG job
  Holders fg;
  Holders bg;
};

std::string Header(const v1::Job& job) {
  std::ostringstream out;
  const auto& spec = job.spec();
  out << Printable(job.job_id()) << " (" << Printable(spec.name()) << ") is "
      << StateName(job.state()) << ": a " << RoleName(spec.role()) << " job, priority "
      << spec.priority() << ", ";
  if (spec.role() == v1::JOB_ROLE_BG) {
    out << "needs one device without a BG job";
  } else {
    out << "needs " << spec.gpus() << " device(s) of one type, none held by another FG job";
  }
  out << "\n";
  if (!job.reason().empty() || job.reason_code() != v1::REASON_CODE_UNSPECIFIED) {
    out << "last decision  " << ReasonCodeName(job.reason_code());
    if (!job.reason().empty()) out << ": " << Printable(job.reason());
    out << "\n";
  }
  return out.str();
}

std::string Queue(const v1::Job& job, const std::vector<v1::Job>& pending) {
  if (job.queue_position() <= 0) return "";
  const bool bg = job.spec().role() == v1::JOB_ROLE_BG;
  std::ostringstream out;
  out << "queue          #" << job.queue_position() << " among the pending " << (bg ? "BG" : "FG")
      << " jobs (highest priority first, then submission order)\n";
  Table ahead({"", "AHEAD", "PRIORITY", "DEVICES", "REASON"});
  int shown = 0;
  for (const v1::Job& other : pending) {
    if (other.job_id() == job.job_id() || other.queue_position() <= 0 ||
        other.queue_position() >= job.queue_position() ||
        (other.spec().role() == v1::JOB_ROLE_BG) != bg) {
      continue;
    }
    ahead.AddRow({"", "#" + std::to_string(other.queue_position()) + " " + other.job_id(),
                  std::to_string(other.spec().priority()), std::to_string(other.spec().gpus()),
                  Truncate(other.reason(), 60)});
    ++shown;
  }
  if (shown > 0) out << ahead.Render();
  if (shown < job.queue_position() - 1) {
    out << "               " << (job.queue_position() - 1 - shown)
        << " job(s) ahead of it are other users'\n";
  }
  return out.str();
}

std::string Devices(const std::vector<v1::Node>& nodes) {
  std::map<std::string, TypeUse> types;
  for (const v1::Node& node : nodes) {
    if (node.state() != v1::NODE_STATE_UP) continue;
    std::map<std::string, const v1::DeviceUse*> uses;
    for (const auto& use : node.device_uses()) uses[use.device()] = &use;
    for (const auto& device : node.devices()) {
      TypeUse& type = types[device.type()];
      ++type.schedulable;
      auto it = uses.find(device.device());
      const std::string fg = it == uses.end() ? "" : it->second->fg_job_id();
      const std::string bg = it == uses.end() ? "" : it->second->bg_job_id();
      type.without_fg += fg.empty();
      type.without_bg += bg.empty();
      type.fg.Add(fg);
      type.bg.Add(bg);
    }
  }
  if (types.empty()) return "devices now    none: no node is UP\n";
  Table table({"", "TYPE", "SCHEDULABLE", "NO FG JOB", "NO BG JOB", "FG JOBS", "BG JOBS"});
  for (int column : {2, 3, 4}) table.AlignRight(column);
  for (const auto& [name, use] : types) {
    table.AddRow({"", name, std::to_string(use.schedulable), std::to_string(use.without_fg),
                  std::to_string(use.without_bg), use.fg.Text(), use.bg.Text()});
  }
  return "devices now    on UP nodes (DRAINING and DOWN nodes take no new work)\n" + table.Render();
}

std::string IdleNodes(const std::vector<v1::Node>& nodes, int64_t now_ms) {
  std::ostringstream out;
  for (const v1::Node& node : nodes) {
    if (node.state() == v1::NODE_STATE_UP) continue;
    out << "               " << NodeLabel(node) << " " << NodeStateName(node.state()) << ", "
        << node.devices_size() << " device(s)";
    if (node.state() == v1::NODE_STATE_DOWN) {
      out << ", last heartbeat " << FormatAgo(node.last_heartbeat_ms(), now_ms);
    } else if (node.state() == v1::NODE_STATE_DRAINING) {
      out << ": its running tasks finish, it takes no new ones (deepool undrain)";
    }
    out << "\n";
  }
  const std::string lines = out.str();
  return lines.empty() ? "" : "not taking work\n" + lines;
}

std::string Placement(const v1::Job& job) {
  if (job.devices_size() == 0) return "";
  std::ostringstream out;
  out << "devices        ";
  for (int i = 0; i < job.devices_size(); ++i) {
    const auto& d = job.devices(i);
    out << (i ? ", " : "") << "rank " << d.rank() << " "
        << Printable(d.node_name().empty() ? d.node_id() : d.node_name()) << "/"
        << Printable(d.device());
  }
  out << "\n";
  return out.str();
}

}  // namespace

std::string WhyText(const v1::Job& job, const std::vector<v1::Job>& pending,
                    const std::vector<v1::Node>& nodes, int64_t now_ms,
                    const v1::ClusterSummary& summary) {
  std::string out = Header(job) + PolicyWhyText(job, summary, now_ms);
  if (job.state() != v1::JOB_STATE_PENDING) {
    if (IsTerminal(job.state())) return out + "nothing holds it back: it has ended\n";
    return out + Placement(job) + "it has left the queue: its state above says what it does now\n";
  }
  return out + Queue(job, pending) + Devices(nodes) + IdleNodes(nodes, now_ms);
}

}  // namespace deepool::cli

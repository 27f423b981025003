// How jobs use their devices, for `deepool status`: the per-device table of one job and the
// cluster summary under the jobs table.
#include <cstdio>
#include <sstream>

#include "cli/services/client.h"
#include "cli/services/format.h"
#include "cli/services/why_policy.h"

namespace deepool::cli {
namespace {

std::string Percent(double part, double whole) {
  if (whole <= 0) return "-";
  char text[16];
  std::snprintf(text, sizeof(text), "%.0f%%", 100.0 * part / whole);
  return text;
}

std::string Plural(int n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace

std::string DeviceUsageTable(const v1::Job& job) {
  const auto& rows = job.progress().devices();
  Table table({"  RANK", "NODE", "DEVICE", "IT", "FG BUSY", "BG BUSY", "IDLE", "SHARED WITH"});
  for (size_t c = 3; c <= 6; ++c) table.AlignRight(c);
  for (const auto& d : job.devices()) {
    const v1::DeviceProgress* row = nullptr;
    for (const auto& r : rows) {
      if (r.rank() == d.rank()) row = &r;
    }
    std::vector<std::string> cells = {"  " + std::to_string(d.rank()),
                                      d.node_name().empty() ? d.node_id() : d.node_name(),
                                      d.device()};
    if (!row) {
      cells.insert(cells.end(), {"-", "-", "-", "-", "-"});
      table.AddRow(std::move(cells));
      continue;
    }
    // The other job on the device: the BG job beside a FG rank (and whether it runs inside the
    // FG rank's executor), or the FG job whose device a BG job uses.
    std::string other = job.spec().role() == v1::JOB_ROLE_BG ? row->fg_job_id() : row->bg_job_id();
    if (other.empty()) {
      other = "-";
    } else if (row->shared_executor() && job.spec().role() == v1::JOB_ROLE_BG) {
      other += " (inside its executor)";
    } else if (row->shared_executor()) {
      other += " (in executor";
      if (row->bg_samples_per_s() > 0) other += ", " + FormatRate(row->bg_samples_per_s()) + "/s";
      other += ")";
    }
    const bool bg = job.spec().role() == v1::JOB_ROLE_BG;
    if (bg && row->shared_executor()) {
      // Inside a FG executor: the device's times are in that FG job's table.
      cells.insert(cells.end(), {std::to_string(row->iteration()), "-", "-", "-", other});
      table.AddRow(std::move(cells));
      continue;
    }
    const bool measured_bg = bg || row->shared_executor();
    cells.insert(cells.end(), {std::to_string(row->iteration()), FormatDuration(row->fg_busy_ms()),
                               measured_bg ? FormatDuration(row->bg_busy_ms()) : std::string("-"),
                               FormatDuration(row->idle_ms()), other});
    table.AddRow(std::move(cells));
  }
  return table.Render();
}

std::string ClusterSummaryText(const v1::ClusterSummary& s) {
  std::ostringstream out;
  out << "cluster    FG " << Plural(s.fg_jobs_running(), "job") << " "
      << FormatRate(s.fg_samples_per_s()) << " samples/s";
  if (s.fg_iteration_ms() > 0) out << " (iteration " << FormatDuration(s.fg_iteration_ms()) << ")";
  out << ", BG " << Plural(s.bg_jobs_running(), "job") << " " << FormatRate(s.bg_samples_per_s())
      << " samples/s, total " << FormatRate(s.total_samples_per_s()) << " samples/s\n";
  out << "devices    " << s.devices_busy() << "/" << s.devices() << " busy (" << s.devices_fg()
      << " FG, " << s.devices_bg() << " BG, " << s.devices_shared() << " shared), "
      << s.devices_idle() << " idle";
  const double window = s.fg_busy_ms() + s.bg_busy_ms() + s.idle_ms();
  if (window > 0) {
    out << "; device time FG " << Percent(s.fg_busy_ms(), window) << ", BG "
        << Percent(s.bg_busy_ms(), window) << ", idle " << Percent(s.idle_ms(), window);
  }
  out << "\n";
  if (!s.policy().empty()) {
    out << "policy     " << Printable(s.policy());
    // Each user's share and devices after the policy's last round with waiting jobs.
    for (int i = 0; i < s.user_shares_size(); ++i) {
      const v1::UserShare& share = s.user_shares(i);
      out << (i == 0 ? "; user shares " : ", ")
          << ShareText(share.user(), share.share(), share.devices());
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace deepool::cli

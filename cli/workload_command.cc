// `deepool workload generate` and `deepool workload show`: workload traces for the pool
// simulator (simulator/workload_generator.h, simulator/workload_file.h; docs/simulator.md,
// "Workload traces"), and `simulate` (workload_simulate.h). None needs a coordinator, so all run
// in the light `deepool`.
#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "cli/command_support.h"
#include "cli/workload_simulate.h"
#include "common/closest_match.h"
#include "planner/device_model.h"
#include "planner/zoo/zoo.h"
#include "simulator/workload_file.h"
#include "simulator/workload_generator.h"
#include "simulator/workload_summary.h"

namespace deepool::cli {
namespace {

namespace sim = deepool::simulator;

struct GenerateFlags {
  sim::WorkloadOptions options;
  std::vector<std::string> models;    // name[:weight[:global_batch]]
  std::vector<std::string> gpus_mix;  // gpus:weight
  std::string durations = "gavel";
  std::string output;  // empty or "-": stdout
};

std::vector<std::string> Split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, separator)) parts.push_back(part);
  return parts;
}

// A decimal number that is the whole text.
bool ParseNumber(const std::string& text, double* out) {
  try {
    size_t used = 0;
    *out = std::stod(text, &used);
    return used == text.size();
  } catch (const std::exception&) {
    return false;
  }
}

Status CheckKnownName(const std::string& flag, const std::string& name,
                      const std::vector<std::string>& known, const std::string& listing) {
  if (std::find(known.begin(), known.end(), name) != known.end()) return Status::Ok();
  std::string message = flag + ": no " + listing + " named " + name;
  if (std::optional<std::string> match = ClosestMatch(name, known)) {
    message += " (did you mean " + *match + "?)";
  }
  return NotFoundError(message);
}

StatusOr<std::vector<sim::ModelShare>> ParseModels(const std::vector<std::string>& entries) {
  const std::vector<sim::ModelShare> defaults = sim::DefaultModelMix();
  const std::vector<std::string> zoo_names = planner::zoo::ModelNames();
  std::vector<sim::ModelShare> models;
  for (const std::string& entry : entries) {
    const std::vector<std::string> parts = Split(entry, ':');
    if (parts.empty() || parts.size() > 3) {
      return InvalidArgumentError("--models: " + entry + " is not name[:weight[:global_batch]]");
    }
    sim::ModelShare share;
    share.model = parts[0];
    RETURN_IF_ERROR(CheckKnownName("--models", share.model, zoo_names, "zoo model"));
    double number = 0;
    if (parts.size() >= 2) {
      if (!ParseNumber(parts[1], &number)) {
        return InvalidArgumentError("--models: " + entry + ": the weight must be a number");
      }
      share.weight = number;
    }
    auto known = std::find_if(defaults.begin(), defaults.end(),
                              [&](const sim::ModelShare& d) { return d.model == share.model; });
    if (parts.size() == 3) {
      if (!ParseNumber(parts[2], &number) || number != static_cast<int64_t>(number)) {
        return InvalidArgumentError("--models: " + entry + ": the global batch must be an integer");
      }
      share.global_batch = static_cast<int64_t>(number);
    } else if (known != defaults.end()) {
      share.global_batch = known->global_batch;
    } else {
      return InvalidArgumentError("--models: " + entry + ": give " + share.model +
                                  "'s global batch (name:weight:global_batch)");
    }
    models.push_back(std::move(share));
  }
  return models;
}

StatusOr<std::vector<sim::GpuShare>> ParseGpusMix(const std::vector<std::string>& entries) {
  std::vector<sim::GpuShare> gpus;
  for (const std::string& entry : entries) {
    const std::vector<std::string> parts = Split(entry, ':');
    double count = 0;
    double weight = 0;
    if (parts.size() != 2 || !ParseNumber(parts[0], &count) || !ParseNumber(parts[1], &weight) ||
        count != static_cast<int>(count)) {
      return InvalidArgumentError("--gpus-mix: " + entry + " is not gpus:weight (e.g. 4:15)");
    }
    gpus.push_back({static_cast<int>(count), weight});
  }
  return gpus;
}

StatusOr<sim::WorkloadOptions> OptionsFromFlags(const GenerateFlags& flags) {
  sim::WorkloadOptions options = flags.options;
  if (!flags.models.empty()) {
    ASSIGN_OR_RETURN(options.models, ParseModels(flags.models));
  } else {
    // The default mix, less any model this build's zoo lacks.
    const std::vector<std::string> zoo_names = planner::zoo::ModelNames();
    for (const sim::ModelShare& share : sim::DefaultModelMix()) {
      if (std::count(zoo_names.begin(), zoo_names.end(), share.model)) {
        options.models.push_back(share);
      }
    }
  }
  if (!flags.gpus_mix.empty()) {
    ASSIGN_OR_RETURN(options.gpus, ParseGpusMix(flags.gpus_mix));
  }
  ASSIGN_OR_RETURN(options.durations, sim::ParseDurationDistribution(flags.durations));
  const std::vector<std::string> devices = planner::DevicePresetNames();
  for (const std::string& type : options.device_types) {
    RETURN_IF_ERROR(CheckKnownName("--device-types", type, devices, "device model"));
  }
  RETURN_IF_ERROR(
      CheckKnownName("--reference-device", options.reference_device, devices, "device model"));
  return options;
}

int RunGenerate(const GenerateFlags& flags) {
  StatusOr<sim::WorkloadOptions> options = OptionsFromFlags(flags);
  if (!options.ok()) return Fail(options.status());
  StatusOr<sim::Workload> workload = sim::GenerateWorkload(*options);
  if (!workload.ok()) return Fail(workload.status());
  const std::string text = sim::WriteWorkload(*workload);
  if (flags.output.empty() || flags.output == "-") {
    std::cout << text;
    return kExitOk;
  }
  if (Status written = WriteTextFile(flags.output, text); !written.ok()) return Fail(written);
  const sim::WorkloadSummary summary = sim::SummarizeWorkload(*workload);
  std::cout << "wrote " << summary.jobs << " jobs to " << flags.output << ": arrivals over "
            << Fixed(summary.last_arrival_s / 3600, 1) << " h, offered load "
            << Fixed(summary.offered_load, 2) << " of " << workload->header.devices << " devices\n";
  return kExitOk;
}

std::string Percent(int64_t part, int64_t whole) {
  return Fixed(whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0, 1) +
         " %";
}

// A table of job counts, largest first; at most `limit` rows (a trace may have many users).
template <typename Key>
void PrintShares(const std::string& title, const std::map<Key, int64_t>& counts, int64_t jobs,
                 const std::function<std::string(const Key&)>& name, std::ostream& out,
                 size_t limit = 20) {
  std::vector<std::pair<Key, int64_t>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::vector<std::string>> rows = {{title, "JOBS", "SHARE"}};
  for (size_t i = 0; i < sorted.size() && i < limit; ++i) {
    rows.push_back(
        {name(sorted[i].first), std::to_string(sorted[i].second), Percent(sorted[i].second, jobs)});
  }
  out << '\n';
  PrintTable(rows, out);
  if (sorted.size() > limit) out << "(and " << sorted.size() - limit << " more)\n";
}

void PrintSummary(const sim::Workload& workload, std::ostream& out) {
  const sim::WorkloadSummary s = sim::SummarizeWorkload(workload);
  out << "jobs: " << s.jobs << " (" << s.fg_jobs << " fg, " << s.bg_jobs << " bg; "
      << s.prioritised_jobs << " with priority > 0), " << s.jobs_per_user.size() << " users\n";
  out << "arrivals: over " << Fixed(s.last_arrival_s / 3600, 2) << " h, one every "
      << Fixed(s.mean_interarrival_s, 1) << " s on average\n";
  if (s.jobs_with_duration > 0) {
    out << "durations (min, at " << workload.header.reference_device << " speed, "
        << s.jobs_with_duration << " jobs): mean " << Fixed(s.duration_mean_s / 60, 1) << ", p50 "
        << Fixed(s.duration_p50_s / 60, 1) << ", p90 " << Fixed(s.duration_p90_s / 60, 1)
        << ", p99 " << Fixed(s.duration_p99_s / 60, 1) << ", max "
        << Fixed(s.duration_max_s / 60, 1) << '\n';
  }
  if (s.jobs_with_duration < s.jobs) {
    out << (s.jobs - s.jobs_with_duration) << " jobs are given in iterations\n";
  }
  out << "offered: " << Fixed(s.offered_device_s / 3600, 1) << " device-hours";
  if (workload.header.devices > 0) {
    out << ", load " << Fixed(s.offered_load, 3) << " of " << workload.header.devices << " devices";
  }
  out << '\n';
  if (const auto& generator = workload.header.generator) {
    out << "generated: seed " << generator->seed << ", "
        << sim::DurationDistributionName(generator->durations) << " durations\n";
  }
  const std::function<std::string(const std::string&)> same = [](const std::string& key) {
    return key;
  };
  PrintShares<std::string>("MODEL", s.jobs_per_model, s.jobs, same, out);
  PrintShares<int>(
      "GPUS", s.jobs_per_gpus, s.jobs, [](const int& g) { return std::to_string(g); }, out);
  PrintShares<std::string>(
      "DEVICE TYPE", s.jobs_per_device_type, s.jobs,
      [](const std::string& type) { return type.empty() ? std::string("any") : type; }, out);
  PrintShares<std::string>("USER", s.jobs_per_user, s.jobs, same, out);
}

int RunShow(const std::string& path) {
  StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return Fail(text.status());
  StatusOr<sim::Workload> workload = sim::ParseWorkload(*text);
  if (!workload.ok()) return Fail(workload.status().WithContext(path));
  PrintSummary(*workload, std::cout);
  return kExitOk;
}

void AddGenerateOptions(CLI::App* generate, GenerateFlags& flags) {
  sim::WorkloadOptions& o = flags.options;
  generate->add_option("-o,--output", flags.output, "Write the trace here (default: stdout)");
  generate->add_option("--jobs", o.jobs, "Number of jobs")->capture_default_str();
  generate->add_option("--seed", o.seed, "Random seed: the same seed, the same file")
      ->capture_default_str();
  generate
      ->add_option("--load", o.load,
                   "Offered load: device-seconds asked per second over --devices (sets the "
                   "arrival rate unless --jobs-per-hour is given)")
      ->capture_default_str();
  generate->add_option("--jobs-per-hour", o.jobs_per_hour, "Arrival rate (instead of --load)");
  generate->add_option("--devices", o.devices, "Pool capacity the load is computed against")
      ->capture_default_str();
  generate
      ->add_option("--models", flags.models,
                   "Model mix: name[:weight[:global_batch]],... (default: resnet50, vgg16, "
                   "inception_v3, wide_resnet101_2, vit_b_16, gpt_tiny, equally weighted)")
      ->delimiter(',');
  generate
      ->add_option("--gpus-mix", flags.gpus_mix,
                   "FG device counts: gpus:weight,... (default Gavel's 1:70,2:10,4:15,8:5)")
      ->delimiter(',');
  generate->add_option("--bg-fraction", o.bg_fraction, "Share of BG jobs (1 device each)")
      ->capture_default_str();
  generate->add_option("--users", o.users, "Number of users")->capture_default_str();
  generate->add_option("--user-skew", o.user_skew, "Zipf exponent of the users' activity")
      ->capture_default_str();
  generate->add_option("--device-types", o.device_types, "The pool's device types")
      ->delimiter(',')
      ->capture_default_str();
  generate
      ->add_option("--constrained-fraction", o.constrained_fraction,
                   "Share of jobs that must run on one (uniformly drawn) device type")
      ->capture_default_str();
  generate->add_option("--reference-device", o.reference_device, "Durations are timed on this")
      ->capture_default_str();
  generate
      ->add_option("--durations", flags.durations,
                   "Duration distribution: gavel (Gavel's two log-uniform ranges) or pareto")
      ->capture_default_str();
  generate->add_option("--pareto-alpha", o.pareto_alpha, "Pareto shape")->capture_default_str();
  generate->add_option("--pareto-min-minutes", o.pareto_min_minutes, "Pareto's shortest")
      ->capture_default_str();
  generate->add_option("--pareto-max-minutes", o.pareto_max_minutes, "Pareto's longest")
      ->capture_default_str();
  generate->add_option("--priority-fraction", o.priority_fraction, "Share of jobs at priority 1")
      ->capture_default_str();
  generate->add_option("--amplification-limit", o.amplification_limit, "Every job's limit")
      ->capture_default_str();
}

void RegisterWorkloadCommands(CLI::App& app, CommandResult& result) {
  CLI::App* workload = app.add_subcommand(
      "workload", "Generate, inspect and simulate workload traces for the pool simulator");
  workload->require_subcommand(1);

  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* generate = workload->add_subcommand(
      "generate",
      "Draw a trace as Gavel does: Poisson arrivals, heavy-tailed durations, a model mix");
  AddGenerateOptions(generate, *flags);
  generate->footer(
      "Example:\n"
      "  deepool workload generate --jobs 10000 --load 0.8 --devices 4096 --seed 1 -o "
      "trace.jsonl");
  generate->callback([&result, flags] { result.exit_code = RunGenerate(*flags); });

  auto path = std::make_shared<std::string>();
  CLI::App* show = workload->add_subcommand(
      "show", "Summarise a trace: jobs, users, model mix, durations, offered load");
  show->add_option("file", *path, "A deepool.workload file")->required();
  show->callback([&result, path] { result.exit_code = RunShow(*path); });

  AddWorkloadSimulate(workload, result);
}

const RegisterCommand kRegisterWorkloadCommands(RegisterWorkloadCommands);

}  // namespace
}  // namespace deepool::cli

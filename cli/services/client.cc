#include "cli/services/client.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/services/format.h"
#include "cli/services/why_policy.h"
#include "common/json_fields.h"
#include "common/limits.h"
#include "planner/profile_environment.h"

namespace deepool::cli {

void AddClientOptions(CLI::App* command, ClientOptions* options, bool with_json) {
  command->add_option("--coordinator", options->coordinator,
                      "Coordinator HOST:PORT, or several comma-separated (active and standby "
                      "coordinators: the leader is found) (default: $DEEPOOL_COORDINATOR, then "
                      "~/.config/deepool/config.json, then 127.0.0.1:7070)");
  if (with_json) command->add_flag("--json", options->json, "Machine-readable JSON output");
}

std::string ResolveCoordinatorAddress(const std::string& flag, const char* env_value,
                                      const std::string& home) {
  if (!flag.empty()) return flag;
  if (env_value && *env_value) return env_value;
  if (!home.empty()) {
    std::ifstream in(home + "/.config/deepool/config.json");
    if (in) {
      const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      const nlohmann::json config = ParseJson(text, "config").value_or(nlohmann::json());
      if (config.is_object() && config.contains("coordinator") &&
          config["coordinator"].is_string() && !config["coordinator"].get<std::string>().empty()) {
        return config["coordinator"].get<std::string>();
      }
    }
  }
  return kDefaultCoordinator;
}

std::string ResolveCoordinatorAddress(const std::string& flag) {
  const char* home = std::getenv("HOME");
  return ResolveCoordinatorAddress(flag, std::getenv("DEEPOOL_COORDINATOR"), home ? home : "");
}

namespace {

nlohmann::json ReadClientConfig(const std::string& home) {
  if (home.empty()) return nlohmann::json();
  std::ifstream in(home + "/.config/deepool/config.json");
  if (!in) return nlohmann::json();
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  nlohmann::json config = ParseJson(text, "config").value_or(nlohmann::json());
  return config.is_object() ? config : nlohmann::json();
}

std::string ConfigString(const nlohmann::json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_string()) return "";
  return object[key].get<std::string>();
}

std::string FirstSet(EnvLookup env, const char* variable, const std::string& fallback) {
  const char* value = env(variable);
  return value && *value ? std::string(value) : fallback;
}

// "~/x" in the config file means the home directory's x.
std::string ConfigPath(const nlohmann::json& object, const char* key, const std::string& home) {
  std::string path = ConfigString(object, key);
  if (path.rfind("~/", 0) == 0 && !home.empty()) path = home + path.substr(1);
  return path;
}

}  // namespace

StatusOr<security::ClientSecurity> ResolveClientSecurity(EnvLookup env, const std::string& home) {
  const nlohmann::json config = ReadClientConfig(home);
  security::ClientSecurity security;
  security.token = FirstSet(env, "DEEPOOL_TOKEN", "");
  if (security.token.empty()) {
    std::string file = FirstSet(env, "DEEPOOL_TOKEN_FILE", ConfigPath(config, "token_file", home));
    // The documented place for one's token, taken when it is there (a copy of a local
    // coordinator's admin.token, say).
    std::error_code ec;
    if (file.empty() && !home.empty() &&
        std::filesystem::exists(home + "/.config/deepool/token", ec)) {
      file = home + "/.config/deepool/token";
    }
    if (!file.empty()) {
      ASSIGN_OR_RETURN(security.token, security::ReadTokenFile(file));
    }
  }
  const nlohmann::json tls =
      config.is_object() ? config.value("tls", nlohmann::json()) : nlohmann::json();
  security.tls.ca = FirstSet(env, "DEEPOOL_TLS_CA", ConfigPath(tls, "ca", home));
  security.tls.cert = FirstSet(env, "DEEPOOL_TLS_CERT", ConfigPath(tls, "cert", home));
  security.tls.key = FirstSet(env, "DEEPOOL_TLS_KEY", ConfigPath(tls, "key", home));
  return security;
}

StatusOr<std::unique_ptr<v1::CoordinatorService::Stub>> ConnectCoordinator(
    const std::string& address, const security::ClientSecurity& security) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(kMaxRpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxRpcMessageBytes);
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   security::OpenChannel(address, security, args));
  return v1::CoordinatorService::NewStub(channel);
}

StatusOr<CoordinatorConnection> ConnectCoordinator(const ClientOptions& options) {
  CoordinatorConnection connection;
  connection.address = ResolveCoordinatorAddress(options.coordinator);
  const char* home = std::getenv("HOME");
  ASSIGN_OR_RETURN(
      const security::ClientSecurity security,
      ResolveClientSecurity([](const char* name) -> const char* { return std::getenv(name); },
                            home ? home : ""));
  ASSIGN_OR_RETURN(connection.stub, ConnectCoordinator(connection.address, security));
  return connection;
}

int ReportClientSetupError(const Status& status) {
  std::cerr << "deepool: client credentials: " << status.message()
            << "\n(see `deepool --help` and docs/operations.md, Security)\n";
  return kExitInvalidInput;
}

std::unique_ptr<grpc::ClientContext> UnaryContext(std::chrono::milliseconds timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  return context;
}

int ExitCodeFor(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return kExitOk;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return kExitUnavailable;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return kExitInvalidInput;
    case grpc::StatusCode::NOT_FOUND:
      return kExitNotFound;
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return kExitDenied;
    default:
      return kExitFailure;
  }
}

int ReportRpcError(const grpc::Status& status, const std::string& what,
                   const std::string& address) {
  int code = ExitCodeFor(status);
  const std::string message = status.error_message();
  const std::string refusal = security::DescribeTlsRefusal(message);
  if (code == kExitUnavailable && !refusal.empty()) {
    std::cerr << "deepool: cannot reach the coordinator at " << address << " (" << what
              << "): " << refusal
              << ".\nCheck DEEPOOL_TLS_CA/_CERT/_KEY or \"tls\" in ~/.config/deepool/config.json "
                 "(the certificates must come from the cluster's CA and be unexpired), and that "
              << address << " is your coordinator.\n";
  } else if (code == kExitUnavailable) {
    std::cerr << "deepool: cannot reach the coordinator at " << address << " (" << what << ": "
              << message
              << ").\nIs deepool-coordinator running? Set the address with --coordinator, "
                 "DEEPOOL_COORDINATOR or ~/.config/deepool/config.json.\n";
    // A plaintext client's connection to a TLS coordinator is simply closed.
    if (message.find("Socket closed") != std::string::npos ||
        message.find("reset by peer") != std::string::npos) {
      std::cerr << "If it speaks TLS, so must this client: set DEEPOOL_TLS_CA, DEEPOOL_TLS_CERT "
                   "and DEEPOOL_TLS_KEY.\n";
    }
  } else if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    std::cerr << "deepool: " << what << ": not authenticated: " << message << "\n"
              << (message.find("certificate") != std::string::npos
                      ? "(check DEEPOOL_TLS_CERT and DEEPOOL_TLS_KEY, or \"tls\" in "
                        "~/.config/deepool/config.json)\n"
                      : "(set DEEPOOL_TOKEN or DEEPOOL_TOKEN_FILE, or \"token_file\" in "
                        "~/.config/deepool/config.json)\n");
  } else {
    std::cerr << "deepool: " << what << ": " << message << "\n";
  }
  return code;
}

std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  const std::string prefix = "JOB_STATE_";
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  return name.empty() ? "UNKNOWN" : name;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string RoleName(v1::JobRole role) { return role == v1::JOB_ROLE_BG ? "bg" : "fg"; }

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

namespace {

double Fraction(const v1::Job& job) {
  const auto& p = job.progress();
  if (job.state() == v1::JOB_STATE_SUCCEEDED) return 1.0;
  if (p.iterations() <= 0) return 0.0;
  return static_cast<double>(p.iteration()) / static_cast<double>(p.iterations());
}

std::string StateWithReason(const v1::Job& job, size_t reason_width) {
  std::string s = StateName(job.state());
  if (job.queue_position() > 0) s += " #" + std::to_string(job.queue_position());
  if (!job.reason().empty() && job.state() != v1::JOB_STATE_RUNNING &&
      job.state() != v1::JOB_STATE_SUCCEEDED) {
    s += " (" + Truncate(Printable(job.reason()), reason_width) + ")";
  }
  return s;
}

std::string DevicesSummary(const v1::Job& job) {
  if (job.devices_size() == 0) return "-";
  std::map<std::string, int> per_node;
  std::vector<std::string> order;
  for (const auto& d : job.devices()) {
    std::string node = d.node_name().empty() ? d.node_id() : d.node_name();
    if (per_node[node]++ == 0) order.push_back(node);
  }
  std::string out = std::to_string(job.devices_size()) + " on ";
  for (size_t i = 0; i < order.size(); ++i) {
    out += (i ? "," : "") + order[i];
    if (per_node[order[i]] > 1 || order.size() > 1) {
      out += "\xC3\x97" + std::to_string(per_node[order[i]]);  // ×
    }
  }
  return out;
}

}  // namespace

std::string JobsTable(const std::vector<v1::Job>& jobs) {
  Table table({"ID", "NAME", "ROLE", "STATE", "PROGRESS", "SAMPLES/S", "ITERATION", "DEVICES",
               "TYPE", "USER SHARE"});
  table.AlignRight(5);
  table.AlignRight(6);
  for (const auto& job : jobs) {
    const auto& p = job.progress();
    std::string rate = p.samples_per_s() > 0 ? FormatRate(p.samples_per_s()) : "-";
    // A BG job's iterations are its own, unrelated to any FG job's pace: only its rate counts.
    std::string iteration = job.spec().role() != v1::JOB_ROLE_BG && p.iteration_ms() > 0
                                ? FormatDuration(p.iteration_ms())
                                : "-";
    // A placed job's device type and, for a FG job, its user's share and devices under the
    // scheduling policy (Job.policy; absent from a coordinator that predates it; not under fifo,
    // which weighs no users).
    const bool placed = job.devices_size() > 0 && !job.device_type().empty();
    const bool shared = placed && job.spec().role() != v1::JOB_ROLE_BG && job.has_policy() &&
                        !job.policy().policy().empty() && job.policy().policy() != "fifo";
    table.AddRow(
        {job.job_id(), Truncate(job.spec().name(), 24), RoleName(job.spec().role()),
         StateWithReason(job, 48), ProgressBar(Fraction(job), 20), rate, iteration,
         DevicesSummary(job), placed ? Printable(job.device_type()) : "-",
         shared ? ShareText(job.owner(), job.policy().user_share(), job.policy().user_devices())
                : "-"});
  }
  if (jobs.empty()) return "no jobs\n";
  return table.Render();
}

std::string EvaluationText(const v1::Evaluation& e) {
  char text[128];
  std::snprintf(text, sizeof(text), "iteration %lld: top-1 %.1f %%  top-5 %.1f %%",
                static_cast<long long>(e.iteration()), 100 * e.top1(), 100 * e.top5());
  std::string out = text;
  if (e.has_loss()) {
    std::snprintf(text, sizeof(text), "  loss %.3f", e.loss());
    out += text;
  }
  return out + "  (" + std::to_string(e.samples()) + " samples)";
}

std::string IterationsDone(const v1::Job& job) {
  const auto& p = job.progress();
  const int64_t total = p.iterations() > 0 ? p.iterations() : job.spec().iterations();
  const int64_t epochs = job.spec().epochs();
  std::string text = std::to_string(p.iteration()) + "/";
  if (epochs <= 0) return text + std::to_string(total);
  if (total <= 0) return text + "? (" + std::to_string(epochs) + " epochs)";
  // The epoch the next iteration starts in (iterations split the epochs evenly up to rounding).
  const int64_t epoch = std::min<int64_t>(epochs, p.iteration() * epochs / total + 1);
  return text + std::to_string(total) + " (epoch " + std::to_string(epoch) + " of " +
         std::to_string(epochs) + ")";
}

std::string JobProgressLine(const v1::Job& job) {
  const auto& p = job.progress();
  std::ostringstream out;
  out << job.job_id() << " " << Truncate(Printable(job.spec().name()), 20) << " "
      << StateWithReason(job, 60) << " " << ProgressBar(Fraction(job), 20) << " it "
      << IterationsDone(job);
  if (p.has_loss()) {
    char loss[32];
    std::snprintf(loss, sizeof(loss), "%.4f", p.loss());
    out << " loss " << loss;
  }
  if (p.samples_per_s() > 0) out << " " << FormatRate(p.samples_per_s()) << " samples/s";
  if (p.evaluations_size() > 0) {
    const v1::Evaluation& last = p.evaluations(p.evaluations_size() - 1);
    char eval[64];
    std::snprintf(eval, sizeof(eval), " eval top-1 %.1f %% top-5 %.1f %%", 100 * last.top1(),
                  100 * last.top5());
    out << eval;
  }
  return out.str();
}

std::string PlanSummary(const std::string& plan_json) {
  const nlohmann::json plan = ParseJson(plan_json, "plan").value_or(nlohmann::json());
  if (!plan.is_object()) return "  (plan is not valid JSON)\n";
  std::ostringstream out;
  auto number = [](const nlohmann::json& obj, const char* key) {
    return obj.is_object() && obj.contains(key) && obj[key].is_number() ? obj[key].get<double>()
                                                                        : 0.0;
  };
  const nlohmann::json layers = plan.value("layers", nlohmann::json::array());
  const nlohmann::json totals = plan.value("totals", nlohmann::json::object());
  const nlohmann::json dp = plan.value("data_parallel", nlohmann::json::object());
  out << "  model " << plan.value("model", std::string("?")) << ", global batch "
      << plan.value("global_batch", 0) << ", " << plan.value("num_devices", 0) << " devices, "
      << layers.size() << " layers";
  if (plan.contains("profile_source") && plan["profile_source"].is_string() &&
      !plan["profile_source"].get<std::string>().empty()) {
    out << ", profile " << plan["profile_source"].get<std::string>();
  }
  if (plan.contains("profile_environment")) {
    StatusOr<planner::ProfileEnvironment> environment =
        planner::EnvironmentFromJson(plan["profile_environment"], "profile_environment");
    if (environment.ok() && !environment->empty()) {
      out << "\n  profile measured on " << planner::EnvironmentSummary(*environment);
    }
  }
  out << "\n";
  char line[256];
  if (number(totals, "iteration_ms") > 0) {
    // A limit of 0 means the plan was made without one (only time mattered).
    const double limit = number(plan, "amplification_limit");
    char limit_text[32] = "no limit";
    if (limit > 0) std::snprintf(limit_text, sizeof(limit_text), "limit %.2f", limit);
    std::snprintf(line, sizeof(line),
                  "  predicted iteration %s (data parallel %s, one device %s); amplification "
                  "%.2f (%s)\n",
                  FormatDuration(number(totals, "iteration_ms")).c_str(),
                  FormatDuration(number(dp, "iteration_ms")).c_str(),
                  FormatDuration(number(plan, "single_device_ms")).c_str(),
                  number(totals, "amplification"), limit_text);
    out << line;
  }
  // How many layers run on how many devices: "1 dev: 3 layers, 4 dev: 9 layers".
  std::map<size_t, int> by_count;
  for (const auto& layer : layers) {
    if (layer.contains("devices") && layer["devices"].is_array()) {
      by_count[layer["devices"].size()]++;
    }
  }
  out << "  layers per device count:";
  bool first = true;
  for (const auto& [count, n] : by_count) {
    out << (first ? " " : ", ") << n << " on " << count;
    first = false;
  }
  out << "\n";
  return out.str();
}

std::string JobDetail(const v1::Job& job, const v1::GetJobPlanResponse* plan, int64_t now_ms) {
  std::ostringstream out;
  const auto& spec = job.spec();
  const auto& p = job.progress();
  out << "job        " << job.job_id() << "  (" << Printable(spec.name()) << ")\n";
  out << "state      " << StateName(job.state());
  if (!job.reason().empty()) out << ": " << Printable(job.reason());
  out << "\n";
  if (job.queue_position() > 0) {
    out << "queue      #" << job.queue_position() << " among the pending "
        << (spec.role() == v1::JOB_ROLE_BG ? "BG" : "FG") << " jobs (deepool status "
        << job.job_id() << " --why explains the wait)\n";
  }
  out << "role       " << RoleName(spec.role()) << ", priority " << spec.priority() << "\n";
  if (!job.owner().empty()) out << "owner      " << Printable(job.owner()) << "\n";
  out << "model      " << (spec.model().empty() ? std::string("(inline graph)") : spec.model())
      << ", global batch " << spec.global_batch();
  // The plan is for one pass: say so, or its batch looks like a quarter of the job's.
  if (spec.accumulation_steps() > 1) {
    out << " (" << spec.accumulation_steps() << " passes of "
        << spec.global_batch() / spec.accumulation_steps() << ")";
  }
  out << ", " << spec.gpus() << " device(s)";
  if (spec.gradient_precision() == "bf16") out << ", bf16 gradient sums";
  if (spec.role() != v1::JOB_ROLE_BG && spec.has_amplification_limit()) {
    out << ", amplification limit " << spec.amplification_limit();
  }
  if (spec.batch_norm() == "per_device") out << ", batch norm per device";
  if (spec.concurrent_branches()) out << ", concurrent branches";
  out << "\n";
  out << "submitted  " << FormatWallTime(job.submitted_ms()) << " UTC ("
      << FormatAgo(job.submitted_ms(), now_ms) << "), attempt " << job.attempt() << "\n";
  out << "progress   " << ProgressBar(Fraction(job), 30) << "  iteration " << IterationsDone(job)
      << "\n";
  if (p.updated_ms() > 0 && p.iteration_ms() <= 0) {
    // A BG job inside a FG executor reports only its rate (its times are the FG job's).
    out << "           " << FormatRate(p.samples_per_s()) << " samples/s"
        << (p.has_loss() ? ", loss " + std::to_string(p.loss()) : std::string()) << "\n";
  } else if (p.updated_ms() > 0) {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "           %s samples/s, iteration %s (busy %s, idle %s)%s\n",
                  FormatRate(p.samples_per_s()).c_str(), FormatDuration(p.iteration_ms()).c_str(),
                  FormatDuration(p.busy_ms()).c_str(), FormatDuration(p.idle_ms()).c_str(),
                  p.has_loss() ? (", loss " + std::to_string(p.loss())).c_str() : "");
    out << line;
  }
  if (job.predicted_iteration_ms() > 0) {
    out << "predicted  iteration " << FormatDuration(job.predicted_iteration_ms()) << "\n";
  }
  const int evaluations = p.evaluations_size();
  const int shown_from = std::max(0, evaluations - kDetailEvaluations);
  if (shown_from > 0) {
    out << "evaluation " << shown_from << " earlier not shown (--json lists them)\n";
  }
  for (int i = shown_from; i < evaluations; ++i) {
    out << (i == 0 ? "evaluation " : "           ") << EvaluationText(p.evaluations(i)) << "\n";
  }
  if (!job.checkpoint().empty()) out << "checkpoint " << job.checkpoint() << "\n";
  if (job.devices_size() > 0) {
    out << "devices    (last iteration of each rank)\n" << DeviceUsageTable(job);
  }
  if (plan && !plan->plan_json().empty()) {
    out << "plan\n" << PlanSummary(plan->plan_json());
  }
  if (job.history_size() > 0) {
    out << "history\n";
    for (const auto& h : job.history()) {
      out << "  " << FormatWallTime(h.time_ms()) << "  " << StateName(h.state());
      if (!h.reason().empty()) out << ": " << Printable(h.reason());
      out << "\n";
    }
  }
  return out.str();
}

std::string NodesTable(const std::vector<v1::Node>& nodes, int64_t now_ms) {
  if (nodes.empty()) return "no nodes\n";
  Table table(
      {"NAME", "ID", "STATE", "ADDRESS", "DEVICES", "FG", "BG", "TASKS", "PROTOCOL", "HEARTBEAT"});
  for (const auto& node : nodes) {
    std::map<std::string, int> types;
    for (const auto& d : node.devices()) types[d.type()]++;
    std::string devices;
    for (const auto& [type, n] : types) {
      devices += (devices.empty() ? "" : ",") + std::to_string(n) + "\xC3\x97" + type;
    }
    int fg = 0, bg = 0;
    for (const auto& use : node.device_uses()) {
      fg += !use.fg_job_id().empty();
      bg += !use.bg_job_id().empty();
    }
    std::string state = v1::NodeState_Name(node.state());
    if (state.rfind("NODE_STATE_", 0) == 0) state = state.substr(11);
    table.AddRow({node.name(), node.node_id(), state, node.address(),
                  devices.empty() ? "-" : devices,
                  std::to_string(fg) + "/" + std::to_string(node.devices_size()),
                  std::to_string(bg) + "/" + std::to_string(node.devices_size()),
                  std::to_string(node.task_ids_size()),
                  // 0: a coordinator from before it said.
                  node.protocol_version() > 0 ? std::to_string(node.protocol_version()) : "-",
                  FormatAgo(node.last_heartbeat_ms(), now_ms)});
  }
  return table.Render();
}

int64_t NowWallMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace deepool::cli

// deepool certs and deepool token: what an operator needs to secure a cluster, with no other
// tool. `certs` writes a CA and certificates into a directory (security/cert_files.h); `token`
// adds and revokes users' bearer tokens in the coordinator's users file (security/users.h).
// Main thread only.
#include <iostream>

#include "cli/command_registry.h"
#include "common/status.h"
#include "security/cert_files.h"
#include "security/users.h"

namespace deepool::cli {
namespace {

using security::Role;

struct CertFlags {
  std::string dir = "deepool-certs";
  std::vector<std::string> hosts;
  std::string name;
  bool admin = false;
  int valid_days = 365;
};

std::chrono::seconds Days(int days) { return std::chrono::hours(24) * days; }

int Report(const char* command, const Status& status) {
  if (status.ok()) return kExitOk;
  std::cerr << "deepool " << command << ": " << status.message() << "\n";
  return status.code() == StatusCode::kAlreadyExists || status.code() == StatusCode::kNotFound
             ? kExitInvalidInput
             : kExitFailure;
}

void PrintFiles(const security::TlsFiles& files, const char* flag_prefix) {
  std::cout << "  " << flag_prefix << "ca   " << files.ca << "\n"
            << "  " << flag_prefix << "cert " << files.cert << "\n"
            << "  " << flag_prefix << "key  " << files.key << "\n";
}

int RunCertsInit(const CertFlags& f) {
  Status made = security::InitClusterCertificates(f.dir, f.hosts, Days(f.valid_days));
  if (!made.ok()) return Report("certs init", made);
  std::cout << "created the cluster CA and the coordinator's certificate in " << f.dir << " (valid "
            << f.valid_days << " days); start the coordinator with\n";
  PrintFiles(security::CoordinatorTlsFiles(f.dir), "--tls-");
  std::cout << "keep " << f.dir << "/ca-key.pem secret: whoever holds it can join the cluster\n";
  return kExitOk;
}

int RunCertsIssue(const CertFlags& f, Role role) {
  StatusOr<security::TlsFiles> files =
      security::IssueClusterCertificate(f.dir, role, f.name, Days(f.valid_days));
  if (!files.ok()) return Report("certs", files.status());
  if (role == Role::kWorker) {
    std::cout << "certificate for node " << f.name << "; start its worker with --name " << f.name
              << " and\n";
    PrintFiles(*files, "--tls-");
  } else {
    std::cout << "certificate for " << RoleName(role) << " " << f.name
              << "; give the user these files, as DEEPOOL_TLS_CA/_CERT/_KEY or in "
                 "~/.config/deepool/config.json {\"tls\": {\"ca\", \"cert\", \"key\"}}:\n";
    PrintFiles(*files, "");
  }
  return kExitOk;
}

struct TokenFlags {
  std::string users_file;
  std::string name;
  std::string role = "user";
  std::string out;
};

int RunTokenCreate(const TokenFlags& f) {
  const std::optional<Role> role = security::RoleFromName(f.role);
  if (!role || *role == Role::kCoordinator) {
    std::cerr << "deepool token create: --role must be user, admin or worker\n";
    return kExitUsage;
  }
  StatusOr<std::string> token = security::NewToken();
  if (!token.ok()) return Report("token create", token.status());
  bool readmitted = false;
  Status saved = security::EditUserTable(
      f.users_file, /*missing_is_empty=*/true, [&](security::UserTable& table) -> Status {
        readmitted = table.IsRevoked(f.name);
        RETURN_IF_ERROR(table.Add(f.name, *role, security::TokenDigest(*token)));
        // The token file first: if the users file then cannot be written, no token works unseen.
        if (!f.out.empty()) RETURN_IF_ERROR(security::WriteNewFile(f.out, *token + "\n", 0600));
        return Status::Ok();
      });
  if (!saved.ok()) return Report("token create", saved);
  if (readmitted) {
    std::cerr << f.name << " was revoked and is now re-admitted: certificates named " << f.name
              << " work again (if one was lost, give the user a new name instead)\n";
  }
  if (f.out.empty()) {
    std::cout << *token << "\n";
    std::cerr << "token for " << f.role << " " << f.name << " added to " << f.users_file
              << "; it is shown only now (the file keeps its SHA-256)\n";
  } else {
    std::cerr << "token for " << f.role << " " << f.name << " written to " << f.out
              << " and added to " << f.users_file << "\n";
  }
  return kExitOk;
}

int RunTokenRevoke(const TokenFlags& f) {
  bool had_token = false;
  Status saved = security::EditUserTable(f.users_file, /*missing_is_empty=*/false,
                                         [&](security::UserTable& table) -> Status {
                                           ASSIGN_OR_RETURN(had_token, table.Revoke(f.name));
                                           return Status::Ok();
                                         });
  if (!saved.ok()) return Report("token revoke", saved);
  std::cerr << "revoked " << f.name
            << (had_token ? ": their token and every certificate named " + f.name + " are"
                          : " (who had no token): every certificate named " + f.name + " is")
            << " refused from the coordinator's next call, and their open streams end (it "
               "re-reads "
            << f.users_file << ")\n";
  return kExitOk;
}

int RunTokenList(const TokenFlags& f) {
  StatusOr<security::UserTable> table = security::LoadUserTable(f.users_file);
  if (!table.ok()) return Report("token list", table.status());
  for (const security::UserEntry& user : table->users()) {
    std::cout << user.name << "\t" << RoleName(user.role) << "\n";
  }
  for (const std::string& name : table->revoked()) std::cout << name << "\trevoked\n";
  return kExitOk;
}

RegisterCommand certs_command([](CLI::App& app, CommandResult& result) {
  auto f = std::make_shared<CertFlags>();
  CLI::App* certs = app.add_subcommand(
      "certs",
      "Create a cluster's CA and the certificates of its coordinator, nodes and users (mutual "
      "TLS)");
  certs->require_subcommand(1);
  auto add_common = [f](CLI::App* cmd) {
    cmd->add_option("--dir", f->dir, "The certificates' directory")->capture_default_str();
    cmd->add_option("--valid-days", f->valid_days, "Days the certificate is valid")
        ->check(CLI::Range(1, 3650))
        ->capture_default_str();
  };
  CLI::App* init = certs->add_subcommand(
      "init", "Create the CA and the coordinator's certificate (ca.pem, coordinator.pem, keys)");
  add_common(init);
  init->add_option("--host", f->hosts,
                   "A DNS name or IP address of the coordinator to put in its certificate "
                   "(repeatable; clients check the name deepool-coordinator in any case)");
  init->callback([f, &result] { result.exit_code = RunCertsInit(*f); });
  CLI::App* node = certs->add_subcommand(
      "node", "A worker node's certificate (nodes/NAME.pem); NAME is the worker's --name");
  add_common(node);
  node->add_option("name", f->name, "The node's name")->required();
  node->callback([f, &result] { result.exit_code = RunCertsIssue(*f, Role::kWorker); });
  CLI::App* user = certs->add_subcommand("user", "A user's certificate (users/NAME.pem)");
  add_common(user);
  user->add_option("name", f->name, "The user's name")->required();
  user->add_flag("--admin", f->admin, "The admin role: every job, and node drains");
  user->callback([f, &result] {
    result.exit_code = RunCertsIssue(*f, f->admin ? Role::kAdmin : Role::kUser);
  });
});

RegisterCommand token_command([](CLI::App& app, CommandResult& result) {
  auto f = std::make_shared<TokenFlags>();
  CLI::App* token = app.add_subcommand(
      "token", "Add, revoke and list users' bearer tokens in the coordinator's users file");
  token->require_subcommand(1);
  auto add_users = [f](CLI::App* cmd) {
    cmd->add_option("--users", f->users_file, "The users file the coordinator reads (--users)")
        ->required();
  };
  CLI::App* create = token->add_subcommand(
      "create", "A new token for a user (printed once; the file keeps its SHA-256)");
  add_users(create);
  create->add_option("name", f->name, "User name (for role worker: the node's --name)")->required();
  create->add_option("--role", f->role, "User, admin or worker")->capture_default_str();
  create->add_option("--out", f->out, "Write the token to this new file (mode 0600), not stdout");
  create->callback([f, &result] { result.exit_code = RunTokenCreate(*f); });
  CLI::App* revoke = token->add_subcommand(
      "revoke",
      "Remove a user's token and refuse their certificates too (to rotate the token: revoke, "
      "then create)");
  add_users(revoke);
  revoke->add_option("name", f->name, "User name")->required();
  revoke->callback([f, &result] { result.exit_code = RunTokenRevoke(*f); });
  CLI::App* list = token->add_subcommand("list", "The users and their roles");
  add_users(list);
  list->callback([f, &result] { result.exit_code = RunTokenList(*f); });
});

}  // namespace
}  // namespace deepool::cli

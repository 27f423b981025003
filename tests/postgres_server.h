// PostgresServer: a real PostgreSQL server of a test's own, in a temporary directory: made with
// initdb (trust authentication, UTF-8, superuser `deepool`), listening only on a Unix socket in
// that directory (no port to collide on: tests may run side by side), stopped and removed at the
// end. Where the test runs as root the server runs as the `postgres` user (PostgreSQL refuses to
// run as root). fsync is off: the tests kill coordinators, not this server's machine.
// MissingReason() says why none can start here (scripts/install-deps.sh installs the binaries);
// a test skips then, saying so.
#pragma once

#include <pwd.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "tests/shell_command.h"

namespace deepool::testing {

class PostgresServer {
 public:
  // The directory holding initdb, pg_ctl and createdb: $DEEPOOL_POSTGRES_BINDIR, else the newest
  // /usr/lib/postgresql/<version>/bin (Debian's layout); "" when there is none.
  static std::string BinDir() {
    if (const char* dir = std::getenv("DEEPOOL_POSTGRES_BINDIR"); dir && *dir) return dir;
    std::string best;
    int best_version = -1;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
      const std::string bin = (entry.path() / "bin").string();
      const int version = std::atoi(entry.path().filename().c_str());
      if (std::filesystem::exists(bin + "/initdb") && version > best_version) {
        best = bin;
        best_version = version;
      }
    }
    return best;
  }

  static std::optional<std::string> MissingReason() {
    const std::string bin = BinDir();
    if (bin.empty() || !std::filesystem::exists(bin + "/pg_ctl")) {
      return std::string(
          "no PostgreSQL server binaries (initdb, pg_ctl) in "
          "/usr/lib/postgresql/*/bin or $DEEPOOL_POSTGRES_BINDIR; "
          "scripts/install-deps.sh installs them");
    }
    if (::geteuid() == 0 && RunUser().empty()) {
      return std::string(
          "running as root, and there is no `postgres` or `nobody` user to run "
          "PostgreSQL as");
    }
    return std::nullopt;
  }

  // Makes and starts a server; REQUIREs that it does (call MissingReason() first).
  PostgresServer() : bin_(BinDir()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "deepool-pg-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
    if (::geteuid() == 0) {
      const passwd* user = ::getpwnam(RunUser().c_str());
      REQUIRE(user != nullptr);
      REQUIRE(::chown(dir_.c_str(), user->pw_uid, user->pw_gid) == 0);
    }
    const CommandOutput init =
        Run("initdb -D " + data() + " -U deepool --auth=trust -E UTF8 --locale=C -N > " + dir_ +
            "/initdb.log 2>&1");
    INFO(ReadFile(dir_ + "/initdb.log"));
    REQUIRE(init.exit_code == 0);
    Start();
  }
  ~PostgresServer() {
    if (paused_) Resume();
    Run("pg_ctl -D " + data() + " -m immediate -w stop > /dev/null 2>&1");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // A libpq URI for database `db` on this server (the socket's directory as its host).
  std::string Uri(const std::string& db = "postgres") const {
    return "postgresql:///" + db + "?host=" + dir_ + "&user=deepool";
  }
  // A new, empty database.
  void CreateDatabase(const std::string& db) {
    const CommandOutput made = Run("createdb -h " + dir_ + " -U deepool " + db + " 2>&1");
    INFO(made.out);
    REQUIRE(made.exit_code == 0);
  }
  // Runs SQL in database `db` with psql; its output (unaligned, tuples only).
  std::string Sql(const std::string& db, const std::string& sql) {
    const CommandOutput ran = Run(Psql(db) + " -c \"" + sql + "\" 2>&1");
    INFO(sql << ": " << ran.out);
    REQUIRE(ran.exit_code == 0);
    return ran.out;
  }
  // A psql session on database `db` that lasts until the object goes: Send writes SQL to it
  // (what holds a lock or a transaction open while the code under test runs).
  class Session {
   public:
    Session(const PostgresServer& server, const std::string& db)
        : psql_(::popen(
              (server.As() + server.bin_ + "/" + server.Psql(db) + " > /dev/null 2>&1").c_str(),
              "w")) {
      REQUIRE(psql_ != nullptr);
    }
    ~Session() { End(); }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
    void Send(const std::string& sql) {
      REQUIRE(psql_ != nullptr);
      REQUIRE(std::fputs((sql + "\n").c_str(), psql_) >= 0);
      REQUIRE(std::fflush(psql_) == 0);
    }
    // Closes psql's input and waits for it to finish what it was sent.
    void End() {
      if (psql_ != nullptr) ::pclose(psql_);
      psql_ = nullptr;
    }

   private:
    FILE* psql_;
  };
  // pg_ctl start and stop, each waiting until it is done. Stop is a fast shutdown: connected
  // clients are cut off, as a restart of the database's host does.
  void Start() {
    const CommandOutput started =
        Run("pg_ctl -D " + data() + " -l " + dir_ + "/server.log -w -t 60 -o \"-c " +
            "listen_addresses='' -k " + dir_ + " -c fsync=off\" start > /dev/null 2>&1");
    INFO(ReadFile(dir_ + "/server.log"));
    REQUIRE(started.exit_code == 0);
  }
  void Stop() {
    REQUIRE(Run("pg_ctl -D " + data() + " -m fast -w stop > /dev/null").exit_code == 0);
  }
  // SIGSTOP and SIGCONT to the server and its backends: a database gone silent, as on a frozen
  // or cut-off machine (its connections stay open; nothing answers on them).
  void Pause() { Signal("STOP", true); }
  void Resume() { Signal("CONT", false); }
  // The server's log, for a failing test's message.
  std::string Log() const { return ReadFile(dir_ + "/server.log"); }

 private:
  static std::string RunUser() {
    for (const char* name : {"postgres", "nobody"}) {
      if (::getpwnam(name) != nullptr) return name;
    }
    return "";
  }
  static std::string ReadFile(const std::string& path) {
    return RunShell("cat " + path + " 2>/dev/null").out;
  }
  std::string data() const { return dir_ + "/data"; }
  void Signal(const std::string& signal, bool paused) {
    const std::string pid = "$(head -n 1 " + data() + "/postmaster.pid)";
    REQUIRE(RunShell("kill -" + signal + " " + pid + " $(pgrep -P " + pid + ")").exit_code == 0);
    paused_ = paused;
  }
  // psql's command line for database `db`, without the path to bin_.
  std::string Psql(const std::string& db) const {
    return "psql -X -q -A -t -v ON_ERROR_STOP=1 -h " + dir_ + " -U deepool -d " + db;
  }
  // The prefix that runs a command as the server's user.
  static std::string As() { return ::geteuid() == 0 ? "runuser -u " + RunUser() + " -- " : ""; }
  // `command` (a tool of bin_ and its arguments), as the server's user.
  CommandOutput Run(const std::string& command) const {
    return RunShell(As() + bin_ + "/" + command);
  }

  std::string bin_;
  std::string dir_;
  bool paused_ = false;
};

}  // namespace deepool::testing

// deploy/grafana/deepool-dashboard.json: every query names only metrics that deepool exports
// (the families the coordinator's and the worker's /metrics documents declare), and promtool
// parses every query (where promtool is installed).
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "coordinator/coordinator_metrics.h"
#include "tests/promtool.h"
#include "tests/source_dir.h"
#include "worker/daemon/worker_metrics.h"

namespace deepool {
namespace {

// The family names a /metrics document declares ("# TYPE name type").
std::set<std::string> Families(const std::string& text) {
  std::set<std::string> names;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) == 0) names.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  return names;
}

}  // namespace

TEST_CASE("the Grafana dashboard queries only exported metrics, in valid PromQL", "[metrics]") {
  std::ifstream file(std::string(DEEPOOL_SOURCE_DIR) + "/deploy/grafana/deepool-dashboard.json");
  REQUIRE(file.good());
  const nlohmann::json dashboard = nlohmann::json::parse(file);
  std::set<std::string> exported =
      Families(coordinator::RenderCoordinatorMetrics(coordinator::CoordinatorMetrics(), {}));
  worker::daemon::WorkerMetrics worker;
  worker::daemon::TaskResult ended;
  worker.OnTaskFinished(ended);  // counters declare their family once they have a sample
  for (const std::string& name : Families(worker.Render(0, false))) exported.insert(name);
  REQUIRE(exported.count("deepool_jobs") == 1);
  REQUIRE(exported.count("deepool_worker_registered") == 1);

  const std::regex metric("deepool_[a-z_]+");
  std::ostringstream rules;
  rules << "groups:\n  - name: dashboard\n    rules:\n";
  int queries = 0;
  for (const auto& panel : dashboard.at("panels")) {
    for (const auto& target : panel.at("targets")) {
      const std::string expr = target.at("expr").get<std::string>();
      INFO(panel.at("title").get<std::string>() << ": " << expr);
      for (std::sregex_iterator it(expr.begin(), expr.end(), metric), end; it != end; ++it) {
        std::string name = it->str();
        for (const char* suffix : {"_bucket", "_sum", "_count"}) {
          const std::string s = suffix;
          if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
              exported.count(name) == 0) {
            name.resize(name.size() - s.size());
          }
        }
        CHECK(exported.count(name) == 1);
      }
      rules << "      - record: dashboard:query_" << queries++ << "\n        expr: '" << expr
            << "'\n";
    }
  }
  CHECK(queries >= 10);
  // promtool parses rule files; each query becomes a recording rule there.
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    WARN("promtool not installed: the queries' syntax is not checked");
    return;
  }
  char path[] = "/tmp/dp-dashboard-rules-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(path) << rules.str();
  const int status =
      std::system(("promtool check rules " + std::string(path) + " >/dev/null").c_str());
  unlink(path);
  CHECK(status == 0);
}

}  // namespace deepool

// Prometheus text format (common/metrics_text.h) and the HTTP endpoint that serves it
// (common/http_endpoint.h), with real sockets on port 0. promtool, where installed, checks the
// text as Prometheus will read it.
#include "common/metrics_text.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "common/http_endpoint.h"
#include "tests/promtool.h"
#include "tests/raw_http.h"

namespace deepool {

TEST_CASE("families, escaped labels and cumulative histogram buckets", "[metrics]") {
  MetricsText out;
  out.Family("deepool_jobs", "gauge", "Jobs by state.\nSecond line \\ with a backslash.");
  out.Sample("deepool_jobs", {{"state", "PENDING"}, {"name", "a \"quoted\"\nname\\"}}, 3);
  out.Sample("deepool_jobs", {}, 0.25);
  Histogram histogram({0.1, 1});
  histogram.Observe({{"role", "fg"}}, 0.05);
  histogram.Observe({{"role", "fg"}}, 0.5);
  histogram.Observe({{"role", "fg"}}, 7);
  histogram.Write(&out, "deepool_wait_seconds", "Waits.");
  CounterMap counter;
  counter.Add({{"code", "OK"}});
  counter.Add({{"code", "OK"}}, 2);
  counter.Write(&out, "deepool_calls_total", "Calls.");
  CHECK(out.text() ==
        "# HELP deepool_jobs Jobs by state.\\nSecond line \\\\ with a backslash.\n"
        "# TYPE deepool_jobs gauge\n"
        "deepool_jobs{state=\"PENDING\",name=\"a \\\"quoted\\\"\\nname\\\\\"} 3\n"
        "deepool_jobs 0.25\n"
        "# HELP deepool_wait_seconds Waits.\n"
        "# TYPE deepool_wait_seconds histogram\n"
        "deepool_wait_seconds_bucket{role=\"fg\",le=\"0.1\"} 1\n"
        "deepool_wait_seconds_bucket{role=\"fg\",le=\"1\"} 2\n"
        "deepool_wait_seconds_bucket{role=\"fg\",le=\"+Inf\"} 3\n"
        "deepool_wait_seconds_sum{role=\"fg\"} 7.55\n"
        "deepool_wait_seconds_count{role=\"fg\"} 3\n"
        "# HELP deepool_calls_total Calls.\n"
        "# TYPE deepool_calls_total counter\n"
        "deepool_calls_total{code=\"OK\"} 3\n");
  if (auto problems = deepool::testing::PromtoolProblems(out.text())) {
    CHECK(*problems == "");
  } else {
    WARN("promtool not installed: the format is checked against the expected text only");
  }
}

TEST_CASE("requests are answered by path and method, malformed ones are refused", "[metrics]") {
  const HttpEndpoint::Routes routes = {{"/metrics", [] {
                                          HttpResponse r;
                                          r.body = "x 1\n";
                                          return r;
                                        }}};
  CHECK(AnswerHttpRequest("GET /metrics HTTP/1.1\r\nHost: a", routes).body == "x 1\n");
  CHECK(AnswerHttpRequest("GET /metrics?x=1 HTTP/1.0", routes).status == 200);
  CHECK(AnswerHttpRequest("GET /other HTTP/1.1", routes).status == 404);
  CHECK(AnswerHttpRequest("POST /metrics HTTP/1.1", routes).status == 405);
  for (const char* bad : {"", "GET", "GET /metrics", "GET /metrics HTTP/2.0", "GET  HTTP/1.1x",
                          "\x01\x02\x03 / HTTP/1.1extra"}) {
    INFO(bad);
    CHECK(AnswerHttpRequest(bad, routes).status == 400);
  }
  CHECK(FormatHttpResponse(AnswerHttpRequest("HEAD /metrics HTTP/1.1", routes), true) ==
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 4\r\n"
        "Connection: close\r\n\r\n");
}

namespace {

// An endpoint whose /metrics answers how many scrapes it has served.
std::unique_ptr<HttpEndpoint> StartCounting(int& scrapes) {
  auto endpoint = HttpEndpoint::Start("127.0.0.1:0",
                                      {{"/metrics",
                                        [&scrapes] {
                                          HttpResponse r;
                                          r.body = "scrapes " + std::to_string(++scrapes) + "\n";
                                          return r;
                                        }}},
                                      "dp-test-http");
  REQUIRE(endpoint.ok());
  return *std::move(endpoint);
}

}  // namespace

TEST_CASE("the endpoint serves over TCP and survives hostile clients", "[metrics]") {
  int scrapes = 0;
  auto endpoint = StartCounting(scrapes);
  const std::string address = endpoint->address();
  const std::string first = testing::HttpGet(address, "/metrics");
  CHECK(first.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(testing::HttpBody(first) == "scrapes 1\n");
  CHECK(testing::HttpGet(address, "/").rfind("HTTP/1.1 404", 0) == 0);
  // A head larger than 8 KiB (small enough that the server reads all of it before answering, so
  // no reset can swallow the answer), and bytes that are no request: answered, and the next
  // scrape still works.
  CHECK(testing::RawHttp(address, "GET /metrics HTTP/1.1\r\nX: " + std::string(9000, 'a'))
            .rfind("HTTP/1.1 431", 0) == 0);
  CHECK(testing::RawHttp(address, std::string("\0\xff\r\n\r\n", 6)).rfind("HTTP/1.1 400", 0) == 0);
  CHECK(testing::HttpBody(testing::HttpGet(address, "/metrics")) == "scrapes 2\n");
  endpoint->Stop();
  endpoint->Stop();  // idempotent
  CHECK(testing::HttpGet(address, "/metrics").empty());
  CHECK(HttpEndpoint::Start("127.0.0.1:99999", {}, "dp-test-http").status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("a client that stops reading holds the endpoint at most a few seconds", "[metrics]") {
  auto endpoint = HttpEndpoint::Start("127.0.0.1:0",
                                      {{"/big",
                                        [] {
                                          HttpResponse r;
                                          r.body = std::string(64 << 20, 'x');  // > socket buffers
                                          return r;
                                        }}},
                                      "dp-test-http");
  REQUIRE(endpoint.ok());
  StatusOr<HostPort> where = ParseHostPort((*endpoint)->address());
  REQUIRE(where.ok());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(where->port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  const std::string request = "GET /big HTTP/1.1\r\n\r\n";
  REQUIRE(send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size()));
  // The answer has begun (so the endpoint is sending it), then the client stops reading: the
  // endpoint gives up on it, so Stop returns.
  char first[16];
  REQUIRE(recv(fd, first, sizeof(first), MSG_WAITALL) == static_cast<ssize_t>(sizeof(first)));
  CHECK(std::string(first, 9) == "HTTP/1.1 ");
  const auto start = std::chrono::steady_clock::now();
  (*endpoint)->Stop();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));
  close(fd);
}

namespace {

// A TCP connection to HOST:PORT that sends nothing; -1 when connect fails. connect and recv give
// up after 5 s (SO_SNDTIMEO bounds connect on Linux), so a server that stops accepting fails the
// test instead of hanging it.
int ConnectIdle(const std::string& host_port) {
  StatusOr<HostPort> where = ParseHostPort(host_port);
  if (!where.ok()) return -1;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(where->port));
  inet_pton(AF_INET, where->host.c_str(), &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}


}  // namespace

TEST_CASE("idle connections do not hold up a scrape", "[metrics]") {
  int scrapes = 0;
  auto endpoint = StartCounting(scrapes);
  // 16 clients that connect and say nothing: served one after another, each would hold the
  // endpoint for its whole 5 s head deadline.
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) {
    idle.push_back(ConnectIdle(endpoint->address()));
    REQUIRE(idle.back() >= 0);
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string response = testing::HttpGet(endpoint->address(), "/metrics");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  CHECK(testing::HttpBody(response) == "scrapes 1\n");
  for (int fd : idle) close(fd);
}

TEST_CASE("past its bound on connections the endpoint closes the oldest unanswered one",
          "[metrics]") {
  int scrapes = 0;
  auto endpoint = StartCounting(scrapes);
  constexpr size_t kExtra = 8;
  std::vector<int> idle;
  for (size_t i = 0; i < HttpEndpoint::kMaxConnections + kExtra; ++i) {
    idle.push_back(ConnectIdle(endpoint->address()));
    REQUIRE(idle.back() >= 0);
  }
  // Still answered at once: the scrape's connection is accepted after all the idle ones (the
  // listen queue is FIFO), pushing out one more of them.
  const auto start = std::chrono::steady_clock::now();
  CHECK(testing::HttpBody(testing::HttpGet(endpoint->address(), "/metrics")) == "scrapes 1\n");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  // The oldest kExtra + 1 were closed (end of stream, long before their 5 s deadline); the
  // newest is still open.
  char byte;
  for (size_t i = 0; i <= kExtra; ++i) {
    INFO("idle connection " << i);
    CHECK(recv(idle[i], &byte, 1, 0) == 0);
  }
  CHECK(recv(idle.back(), &byte, 1, MSG_DONTWAIT) < 0);
  CHECK(errno == EAGAIN);
  for (int fd : idle) close(fd);
}

}  // namespace deepool

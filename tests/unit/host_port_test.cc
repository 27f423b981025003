#include "common/host_port.h"

#include <catch2/catch.hpp>

namespace deepool {
namespace {

std::string ErrorOf(std::string_view text) {
  auto parsed = ParseHostPort(text);
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.status().code() == StatusCode::kInvalidArgument);
  return parsed.status().message();
}

TEST_CASE("ParseHostPort reads names, IPv4 and bracketed IPv6", "[host_port]") {
  auto name = ParseHostPort("node-3.example:7070");
  REQUIRE(name.ok());
  CHECK(name->host == "node-3.example");
  CHECK(name->port == 7070);

  auto v4 = ParseHostPort("10.0.0.5:0");
  REQUIRE(v4.ok());
  CHECK(v4->host == "10.0.0.5");
  CHECK(v4->port == 0);

  auto v6 = ParseHostPort("[fe80::1%eth0]:65535");
  REQUIRE(v6.ok());
  CHECK(v6->host == "fe80::1%eth0");
  CHECK(v6->port == 65535);
}

TEST_CASE("ParseHostPort refuses malformed addresses and says why", "[host_port]") {
  CHECK_THAT(ErrorOf(""), Catch::Contains("empty"));
  CHECK_THAT(ErrorOf("localhost"), Catch::Contains("port is missing"));
  CHECK_THAT(ErrorOf(":7070"), Catch::Contains("host is empty"));
  CHECK_THAT(ErrorOf("host:"), Catch::Contains("port is empty"));
  CHECK_THAT(ErrorOf("host:65536"), Catch::Contains("0..65535"));
  CHECK_THAT(ErrorOf("host:123456"), Catch::Contains("0..65535"));
  CHECK_THAT(ErrorOf("host:-1"), Catch::Contains("not a number"));
  CHECK_THAT(ErrorOf("host:+80"), Catch::Contains("not a number"));
  CHECK_THAT(ErrorOf("host:80x"), Catch::Contains("not a number"));
  CHECK_THAT(ErrorOf("host: 80"), Catch::Contains("not a number"));
  CHECK_THAT(ErrorOf("::1:7070"), Catch::Contains("brackets"));
  CHECK_THAT(ErrorOf("[::1]"), Catch::Contains("port is missing"));
  CHECK_THAT(ErrorOf("[::1"), Catch::Contains("']'"));
  CHECK_THAT(ErrorOf("[]:80"), Catch::Contains("host is empty"));
  CHECK_THAT(ErrorOf("[::1]7070"), Catch::Contains("':PORT'"));
  CHECK_THAT(ErrorOf("[::1]:"), Catch::Contains("port is empty"));
  // The text itself is quoted, so a flag's error shows what was given.
  CHECK_THAT(ErrorOf("host:99999"), Catch::Contains("'host:99999'"));
}

TEST_CASE("ParseHostOptionalPort takes a host with or without a port", "[host_port]") {
  struct Case {
    const char* text;
    const char* host;
    int port;
  };
  for (const Case& c : std::vector<Case>{{"10.0.0.5", "10.0.0.5", -1},
                                         {"10.0.0.5:7000", "10.0.0.5", 7000},
                                         {"::1", "::1", -1},
                                         {"fe80::1:7000", "fe80::1:7000", -1},
                                         {"[::1]", "::1", -1},
                                         {"[::1]:7000", "::1", 7000}}) {
    INFO(c.text);
    auto parsed = ParseHostOptionalPort(c.text);
    REQUIRE(parsed.ok());
    CHECK(parsed->host == c.host);
    CHECK(parsed->port == c.port);
  }
  CHECK_FALSE(ParseHostOptionalPort("").ok());
  CHECK_FALSE(ParseHostOptionalPort("host:x").ok());
  CHECK_FALSE(ParseHostOptionalPort("[::1]x").ok());
}

TEST_CASE("FormatHostPort brackets IPv6 and round-trips through the parser", "[host_port]") {
  CHECK(FormatHostPort("10.0.0.5", 7070) == "10.0.0.5:7070");
  CHECK(FormatHostPort("::1", 0) == "[::1]:0");
  CHECK(FormatHost("::1") == "[::1]");
  CHECK(FormatHost("node") == "node");
  for (const char* host : {"127.0.0.1", "::1", "fe80::1%eth0", "worker-7"}) {
    INFO(host);
    auto parsed = ParseHostPort(FormatHostPort(host, 29500));
    REQUIRE(parsed.ok());
    CHECK(parsed->host == host);
    CHECK(parsed->port == 29500);
    CHECK(FormatHostPort(*parsed) == FormatHostPort(host, 29500));
  }
}

TEST_CASE("ParseHostPortList reads the coordinators of one store, naming a bad item",
          "[host_port]") {
  auto list = ParseHostPortList("a:7070,[::1]:7071,10.0.0.2:7072");
  REQUIRE(list.ok());
  REQUIRE(list->size() == 3);
  CHECK((*list)[1].host == "::1");
  CHECK((*list)[2].port == 7072);
  CHECK(ParseHostPortList("a:7070")->size() == 1);
  auto bad = ParseHostPortList("a:7070,,b:1");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("address 2 of a:7070,,b:1"));
  CHECK_FALSE(ParseHostPortList("a:7070,b").ok());
}

TEST_CASE("loopback is localhost or a loopback address literal, never a name", "[host_port]") {
  for (const char* local : {"localhost", "127.0.0.1", "127.1.2.3", "::1", "0:0:0:0:0:0:0:1"}) {
    INFO(local);
    CHECK(IsLoopbackHost(local));
  }
  // Names that look like loopback resolve wherever their owner wants.
  for (const char* remote : {"127.0.0.1.nip.io", "127.evil.example", "localhost.example",
                             "10.0.0.1", "128.0.0.1", "::2", "", "0.0.0.0", "::ffff:10.0.0.1"}) {
    INFO(remote);
    CHECK_FALSE(IsLoopbackHost(remote));
  }
}

}  // namespace
}  // namespace deepool

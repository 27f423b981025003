// Network addresses as text: the one parser and formatter for every "HOST:PORT" that a flag, a
// registration or a store address carries. IPv6 hosts are written in brackets ("[::1]:7070"),
// because without them the last colon could belong to the address.
// Threading: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace deepool {

struct HostPort {
  std::string host;  // never bracketed: "10.0.0.5", "node-3", "::1"
  int port = 0;      // 0..65535; 0 asks the listener for a free port
};

// Parses "HOST:PORT" or "[IPV6]:PORT". INVALID_ARGUMENT, naming the text and what is wrong,
// for a missing or empty host or port, a port that is not 0..65535 in decimal digits, an
// unbracketed IPv6 address, or text after the closing bracket other than ":PORT".
StatusOr<HostPort> ParseHostPort(std::string_view text);

// Parses a host that may carry a port: "HOST", "HOST:PORT", "[IPV6]", "[IPV6]:PORT", or a bare
// IPv6 address (two or more colons, no brackets: all of it is the host). `port` is -1 when the
// text has none. INVALID_ARGUMENT as ParseHostPort.
StatusOr<HostPort> ParseHostOptionalPort(std::string_view text);

// Parses comma-separated "HOST:PORT"s (the coordinators sharing one store: "a:7070,b:7070"), at
// least one. INVALID_ARGUMENT as ParseHostPort, naming the item.
StatusOr<std::vector<HostPort>> ParseHostPortList(std::string_view text);

// Whether a host names this machine's loopback: "localhost", or an IP address literal in
// 127.0.0.0/8 or ::1. A name is not (127.0.0.1.example.com resolves wherever its owner wants).
bool IsLoopbackHost(std::string_view host);

// The host as written before ":PORT": bracketed when it is an IPv6 address ("[::1]").
std::string FormatHost(std::string_view host);
// "host:port", "[v6]:port".
std::string FormatHostPort(std::string_view host, int port);
inline std::string FormatHostPort(const HostPort& address) {
  return FormatHostPort(address.host, address.port);
}

}  // namespace deepool

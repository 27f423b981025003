#include "common/host_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cctype>

namespace deepool {
namespace {

Status Malformed(std::string_view text, const std::string& why) {
  return InvalidArgumentError("'" + std::string(text) + "' is not HOST:PORT: " + why);
}

StatusOr<int> ParsePort(std::string_view text, std::string_view port) {
  if (port.empty()) return Malformed(text, "the port is empty");
  // Digits only: std::stoi would accept "+80", " 80" and "80abc".
  if (port.size() > 5) return Malformed(text, "the port is not 0..65535");
  int value = 0;
  for (char c : port) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return Malformed(text, "the port '" + std::string(port) + "' is not a number");
    }
    value = value * 10 + (c - '0');
  }
  if (value > 65535) return Malformed(text, "the port is not 0..65535");
  return value;
}

// "[v6]" or "[v6]:port"; `text` starts with '['.
StatusOr<HostPort> ParseBracketed(std::string_view text, bool port_required) {
  const size_t close = text.find(']');
  if (close == std::string_view::npos) return Malformed(text, "'[' without ']'");
  HostPort out;
  out.host = std::string(text.substr(1, close - 1));
  if (out.host.empty()) return Malformed(text, "the host is empty");
  std::string_view rest = text.substr(close + 1);
  if (rest.empty()) {
    if (port_required) return Malformed(text, "the port is missing");
    out.port = -1;
    return out;
  }
  if (rest.front() != ':') return Malformed(text, "expected ':PORT' after ']'");
  ASSIGN_OR_RETURN(out.port, ParsePort(text, rest.substr(1)));
  return out;
}

}  // namespace

StatusOr<HostPort> ParseHostPort(std::string_view text) {
  if (text.empty()) return Malformed(text, "it is empty");
  if (text.front() == '[') return ParseBracketed(text, /*port_required=*/true);
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return Malformed(text, "the port is missing");
  if (text.find(':') != colon) {
    return Malformed(text, "an IPv6 address needs brackets, as in [::1]:7070");
  }
  if (colon == 0) return Malformed(text, "the host is empty");
  HostPort out;
  out.host = std::string(text.substr(0, colon));
  ASSIGN_OR_RETURN(out.port, ParsePort(text, text.substr(colon + 1)));
  return out;
}

StatusOr<HostPort> ParseHostOptionalPort(std::string_view text) {
  if (text.empty()) return InvalidArgumentError("the address is empty");
  if (text.front() == '[') return ParseBracketed(text, /*port_required=*/false);
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return HostPort{std::string(text), -1};
  if (text.find(':', colon + 1) != std::string_view::npos) {
    return HostPort{std::string(text), -1};  // a bare IPv6 address
  }
  return ParseHostPort(text);
}

std::string FormatHost(std::string_view host) {
  if (host.find(':') == std::string_view::npos) return std::string(host);
  return "[" + std::string(host) + "]";
}

std::string FormatHostPort(std::string_view host, int port) {
  return FormatHost(host) + ":" + std::to_string(port);
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost") return true;
  const std::string literal(host);
  in_addr v4{};
  if (::inet_pton(AF_INET, literal.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  return ::inet_pton(AF_INET6, literal.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

StatusOr<std::vector<HostPort>> ParseHostPortList(std::string_view text) {
  std::vector<HostPort> addresses;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    StatusOr<HostPort> address = ParseHostPort(item);
    if (!address.ok()) {
      return address.status().WithContext("address " + std::to_string(addresses.size() + 1) +
                                          " of " + std::string(text));
    }
    addresses.push_back(*address);
    if (comma == std::string_view::npos) return addresses;
    start = comma + 1;
  }
}

}  // namespace deepool

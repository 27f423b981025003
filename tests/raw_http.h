// A raw HTTP exchange for tests: connect to HOST:PORT (IPv4), send exactly the given bytes, read
// until the server closes (30 s at most). Only for talking to deepool's own endpoints and a local
// Prometheus.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "common/host_port.h"

namespace deepool::testing {

// The whole response ("" when the connection failed).
inline std::string RawHttp(const std::string& host_port, const std::string& request) {
  StatusOr<HostPort> where = ParseHostPort(host_port);
  if (!where.ok()) return "";
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(where->port));
  inet_pton(AF_INET, where->host.c_str(), &address.sin_addr);
  std::string response;
  timeval timeout{30, 0};  // a server that never closes fails the test instead of hanging it
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    char buffer[4096];
    ssize_t n;
    while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  }
  close(fd);
  return response;
}

// GET path; the whole response.
inline std::string HttpGet(const std::string& host_port, const std::string& path) {
  return RawHttp(host_port, "GET " + path + " HTTP/1.1\r\nHost: " + host_port +
                                "\r\nConnection: close\r\n\r\n");
}

// The body of a response (after the blank line).
inline std::string HttpBody(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

}  // namespace deepool::testing

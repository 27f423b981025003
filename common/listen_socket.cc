#include "common/listen_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/host_port.h"

namespace deepool {

StatusOr<ListeningSocket> ListenTcp(const std::string& listen, int backlog) {
  ASSIGN_OR_RETURN(const HostPort where, ParseHostPort(listen));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(where.port);
  if (int rc = getaddrinfo(where.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return InvalidArgumentError(listen + ": " + gai_strerror(rc));
  }
  ListeningSocket bound;
  std::string error = "no address";
  // IPv4 first: a name such as "localhost" that resolves to ::1 and 127.0.0.1 is then served
  // where clients that dial either the name or 127.0.0.1 reach it.
  std::vector<addrinfo*> candidates;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) candidates.push_back(a);
  }
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family != AF_INET) candidates.push_back(a);
  }
  for (addrinfo* a : candidates) {
    if (bound.fd >= 0) break;
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, backlog) == 0) {
      bound.fd = fd;
    } else {
      error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (bound.fd < 0) return UnavailableError("cannot listen on " + listen + ": " + error);
  sockaddr_storage name{};
  socklen_t length = sizeof(name);
  getsockname(bound.fd, reinterpret_cast<sockaddr*>(&name), &length);
  bound.port = name.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&name)->sin6_port)
                                          : ntohs(reinterpret_cast<sockaddr_in*>(&name)->sin_port);
  std::string host = where.host;
  if (host == "0.0.0.0" || host == "::") host = "127.0.0.1";
  bound.address = FormatHostPort(host, bound.port);
  return bound;
}

}  // namespace deepool

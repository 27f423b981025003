#include "common/http_endpoint.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/host_port.h"
#include "common/logging.h"
#include "common/thread_name.h"

namespace deepool {
namespace {

constexpr size_t kMaxHeadBytes = 8192;
constexpr int kHeadTimeoutMs = 5000;  // to send the head, and to take more of the answer

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Internal Server Error";
  }
}

// Plain TCP on a non-blocking socket.
class PlainStream final : public HttpStream {
 public:
  explicit PlainStream(int fd) : fd_(fd) {}
  Io Read(char* buffer, size_t size) override {
    const ssize_t n = recv(fd_, buffer, size, 0);
    return Result(n, Want::kRead);
  }
  Io Write(const char* data, size_t size) override {
    const ssize_t n = send(fd_, data, size, MSG_NOSIGNAL);
    return Result(n, Want::kWrite);
  }

 private:
  static Io Result(ssize_t n, Want blocked) {
    if (n > 0) return {static_cast<size_t>(n), Want::kNothing};
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return {0, blocked};
    return {0, Want::kClosed};
  }
  int fd_;
};

HttpResponse Error(int status, const std::string& message) {
  HttpResponse response;
  response.status = status;
  response.body = message + "\n";
  return response;
}

}  // namespace

HttpResponse AnswerHttpRequest(const std::string& head,
                               const std::map<std::string, std::function<HttpResponse()>>& routes) {
  const size_t line_end = head.find("\r\n");
  const std::string line = head.substr(0, line_end);
  const size_t first = line.find(' ');
  const size_t second = first == std::string::npos ? first : line.find(' ', first + 1);
  if (second == std::string::npos || line.compare(second + 1, 7, "HTTP/1.") != 0 ||
      line.size() != second + 9) {
    return Error(400, "expected a request line: METHOD PATH HTTP/1.x");
  }
  const std::string method = line.substr(0, first);
  std::string path = line.substr(first + 1, second - first - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD") return Error(405, "only GET and HEAD are served");
  auto route = routes.find(path);
  if (route == routes.end()) {
    std::string known;
    for (const auto& [name, handler] : routes) known += (known.empty() ? "" : ", ") + name;
    return Error(404, "no such path; served: " + known);
  }
  return route->second();
}

std::string FormatHttpResponse(const HttpResponse& response, bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " + Reason(response.status) +
                    "\r\nContent-Type: " + response.content_type +
                    "\r\nContent-Length: " + std::to_string(response.body.size()) +
                    "\r\nConnection: close\r\n\r\n";
  if (!head_only) out += response.body;
  return out;
}

StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& listen,
                                                            Routes routes,
                                                            const std::string& thread_name,
                                                            HttpStreamFactory streams) {
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
  std::unique_ptr<HttpEndpoint> endpoint(new HttpEndpoint());
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && endpoint->listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
      endpoint->listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (endpoint->listen_fd_ < 0)
    return UnavailableError("cannot listen on " + listen + ": " + error);
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(endpoint->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  const int bound_port = bound.ss_family == AF_INET6
                             ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  std::string host = where.host;
  if (host == "0.0.0.0" || host == "::") host = "127.0.0.1";
  endpoint->address_ = FormatHostPort(host, bound_port);
  if (pipe2(endpoint->stop_pipe_, O_CLOEXEC) != 0) {
    close(endpoint->listen_fd_);
    return InternalError(std::string("pipe: ") + std::strerror(errno));
  }
  endpoint->routes_ = std::move(routes);
  endpoint->streams_ = std::move(streams);
  endpoint->thread_ = std::thread([p = endpoint.get(), thread_name] { p->Serve(thread_name); });
  return endpoint;
}

void HttpEndpoint::Serve(const std::string& thread_name) {
  SetCurrentThreadName(thread_name);
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      DP_LOG_ERROR("http endpoint {}: poll: {}", address_, std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    ServeConnection(fd);
    close(fd);
  }
}

bool HttpEndpoint::WaitFor(int fd, HttpStream::Want want,
                           std::chrono::steady_clock::time_point deadline) {
  if (want == HttpStream::Want::kClosed) return false;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
  const short events = want == HttpStream::Want::kWrite ? POLLOUT : POLLIN;
  pollfd fds[2] = {{fd, events, 0}, {stop_pipe_[0], POLLIN, 0}};
  return left > 0 && poll(fds, 2, static_cast<int>(left)) > 0 && fds[1].revents == 0;
}

void HttpEndpoint::ServeConnection(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return;
  std::unique_ptr<HttpStream> stream;
  if (streams_) {
    StatusOr<std::unique_ptr<HttpStream>> made = streams_(fd);
    if (!made.ok()) {
      DP_LOG_WARN("http endpoint {}: {}", address_, made.status().ToString());
      return;
    }
    stream = *std::move(made);
  } else {
    stream = std::make_unique<PlainStream>(fd);
  }
  // The handshake and the head share one deadline, so a slow client holds the thread 5 s at most.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kHeadTimeoutMs);
  for (HttpStream::Io io = stream->Handshake(); io.want != HttpStream::Want::kNothing;
       io = stream->Handshake()) {
    if (!WaitFor(fd, io.want, deadline)) return;
  }
  std::string head;
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > kMaxHeadBytes) {
      Send(fd, *stream, FormatHttpResponse(Error(431, "request head over 8 KiB"), false));
      return;
    }
    char buffer[2048];
    const HttpStream::Io io = stream->Read(buffer, sizeof(buffer));
    if (io.bytes > 0) {
      head.append(buffer, io.bytes);
    } else if (!WaitFor(fd, io.want, deadline)) {
      return;
    }
  }
  const bool head_only = head.rfind("HEAD ", 0) == 0;
  Send(fd, *stream, FormatHttpResponse(AnswerHttpRequest(head, routes_), head_only));
}

void HttpEndpoint::Send(int fd, HttpStream& stream, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const HttpStream::Io io = stream.Write(data.data() + sent, data.size() - sent);
    sent += io.bytes;
    if (io.bytes > 0) continue;
    // Waits for room, for Stop, or gives up on a client that has read nothing for a while.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(kHeadTimeoutMs);
    if (!WaitFor(fd, io.want, deadline)) return;
  }
}

void HttpEndpoint::Stop() {
  if (stopped_.exchange(true)) return;
  if (stop_pipe_[1] >= 0) {
    const char byte = 1;
    ssize_t ignored = write(stop_pipe_[1], &byte, 1);
    static_cast<void>(ignored);  // the pipe is empty and ours: the write cannot block or fail
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, stop_pipe_[0], stop_pipe_[1]}) {
    if (fd >= 0) close(fd);
  }
}

HttpEndpoint::~HttpEndpoint() { Stop(); }

}  // namespace deepool

#include "common/http_endpoint.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/listen_socket.h"
#include "common/logging.h"
#include "common/sigpipe.h"
#include "common/thread_name.h"

namespace deepool {
namespace {

using Clock = std::chrono::steady_clock;
using Want = HttpStream::Want;

constexpr size_t kMaxHeadBytes = 8192;
// To finish the handshake and send the head, counted from the accept; and to take more of the
// answer, counted from the last progress.
constexpr auto kDeadline = std::chrono::seconds(5);
// Accepted per turn of the loop, so the open connections keep moving under a flood.
constexpr size_t kAcceptsPerTurn = 32;
// One connection's share of a turn, so one fast reader of a big answer does not hold the rest.
constexpr size_t kWriteBytesPerTurn = 256 << 10;
// Out of file descriptors or memory, accepting rests this long (a listening socket with a
// connection waiting would wake poll at once, again and again).
constexpr auto kAcceptPause = std::chrono::seconds(1);

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

// One accepted connection: where its exchange is, what it waits for, and until when.
struct Connection {
  enum class Phase { kHandshake, kHead, kAnswer };
  Connection(int fd_in, std::unique_ptr<HttpStream> stream_in)
      : fd(fd_in), stream(std::move(stream_in)), deadline(Clock::now() + kDeadline) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    stream.reset();  // first: a TLS stream says goodbye over the socket
    close(fd);
  }
  int fd;
  std::unique_ptr<HttpStream> stream;
  Clock::time_point deadline;
  Phase phase = Phase::kHandshake;
  Want want = Want::kRead;  // what poll waits for on fd
  std::string head;
  std::string answer;
  size_t sent = 0;
};
using Connections = std::vector<std::unique_ptr<Connection>>;  // oldest first

// The head is complete (or too big): the handler runs now, and the answer's deadline starts.
void BeginAnswer(Connection& c, const HttpEndpoint::Routes& routes) {
  if (c.head.find("\r\n\r\n") == std::string::npos) {
    c.answer = FormatHttpResponse(Error(431, "request head over 8 KiB"), false);
  } else {
    const bool head_only = c.head.rfind("HEAD ", 0) == 0;
    c.answer = FormatHttpResponse(AnswerHttpRequest(c.head, routes), head_only);
  }
  c.phase = Connection::Phase::kAnswer;
  c.deadline = Clock::now() + kDeadline;
}

// Moves the connection on as far as its socket allows without blocking. True while it waits
// (c.want says for what); false when it is done with: answered, or closed by the client.
bool Advance(Connection& c, const HttpEndpoint::Routes& routes) {
  size_t written = 0;
  while (true) {
    HttpStream::Io io;
    switch (c.phase) {
      case Connection::Phase::kHandshake:
        io = c.stream->Handshake();
        if (io.want == Want::kNothing) {
          c.phase = Connection::Phase::kHead;
          continue;
        }
        break;
      case Connection::Phase::kHead: {
        if (c.head.find("\r\n\r\n") != std::string::npos || c.head.size() > kMaxHeadBytes) {
          BeginAnswer(c, routes);
          continue;
        }
        char buffer[2048];
        io = c.stream->Read(buffer, sizeof(buffer));
        c.head.append(buffer, io.bytes);
        if (io.bytes > 0) continue;
        break;
      }
      case Connection::Phase::kAnswer:
        if (c.sent == c.answer.size()) return false;  // all sent; Connection: close
        if (written >= kWriteBytesPerTurn) {
          c.want = Want::kWrite;
          return true;
        }
        io = c.stream->Write(c.answer.data() + c.sent, c.answer.size() - c.sent);
        c.sent += io.bytes;
        written += io.bytes;
        if (io.bytes > 0) {
          c.deadline = Clock::now() + kDeadline;
          continue;
        }
        break;
    }
    // Nothing moved: wait for what the stream asks (kNothing here would be a stream that moved
    // nothing yet claims to be done: dropped rather than polled for ever).
    if (io.want != Want::kRead && io.want != Want::kWrite) return false;
    c.want = io.want;
    return true;
  }
}

// Past kMaxConnections: closes the oldest connection still in its handshake or head (there is
// one: the newest was just accepted). One being answered has shown its certificate, if any, and
// is about to finish.
void CloseOldestUnanswered(Connections& open) {
  auto oldest = std::find_if(open.begin(), open.end(),
                             [](const auto& c) { return c->phase != Connection::Phase::kAnswer; });
  if (oldest != open.end()) open.erase(oldest);
}

// Accepts what waits on the listening socket. False when accepting must pause: the process is
// out of file descriptors or memory.
bool AcceptSome(int listen_fd, const HttpStreamFactory& streams, const std::string& address,
                Connections& open) {
  for (size_t i = 0; i < kAcceptsPerTurn; ++i) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        DP_LOG_WARN("http endpoint {}: accept: {}; pausing", address, std::strerror(errno));
        return false;
      }
      if (errno == EAGAIN) return true;  // none left (EWOULDBLOCK is the same on Linux)
      continue;  // a connection that failed before it was taken (ECONNABORTED, EPROTO, ...)
    }
    std::unique_ptr<HttpStream> stream;
    if (streams) {
      StatusOr<std::unique_ptr<HttpStream>> made = streams(fd);
      if (!made.ok()) {
        DP_LOG_WARN("http endpoint {}: {}", address, made.status().ToString());
        close(fd);
        continue;
      }
      stream = *std::move(made);
    } else {
      stream = std::make_unique<PlainStream>(fd);
    }
    open.push_back(std::make_unique<Connection>(fd, std::move(stream)));
    if (open.size() > HttpEndpoint::kMaxConnections) {
      DP_LOG_DEBUG("http endpoint {}: {} connections open; closing the oldest unanswered", address,
                   open.size());
      CloseOldestUnanswered(open);
    }
  }
  return true;
}

// Milliseconds from now to `wake` for poll (rounded up, so a deadline is past when poll
// returns); -1 (no limit) for Clock::time_point::max().
int PollTimeoutMs(Clock::time_point now, Clock::time_point wake) {
  if (wake == Clock::time_point::max()) return -1;
  if (wake <= now) return 0;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
  return static_cast<int>(std::min<int64_t>(left, 60'000));
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
  ASSIGN_OR_RETURN(const ListeningSocket bound,
                   ListenTcp(listen, static_cast<int>(kMaxConnections)));
  std::unique_ptr<HttpEndpoint> endpoint(new HttpEndpoint());
  endpoint->listen_fd_ = bound.fd;
  endpoint->address_ = bound.address;
  ASSIGN_OR_RETURN(endpoint->stop_pipe_, WakePipe::Open());
  endpoint->routes_ = std::move(routes);
  endpoint->streams_ = std::move(streams);
  endpoint->thread_ = std::thread([p = endpoint.get(), thread_name] { p->Serve(thread_name); });
  return endpoint;
}

void HttpEndpoint::Serve(const std::string& thread_name) {
  SetCurrentThreadName(thread_name);
  BlockSigpipeOnThisThread();  // a client gone before its answer must not end the process
  Connections open;
  Clock::time_point accept_paused_until;
  std::vector<pollfd> fds;
  while (true) {
    // fds: the stop pipe, the listening socket (-1, ignored by poll, while accepting rests),
    // then each open connection, in the order of `open`.
    const Clock::time_point now = Clock::now();
    const bool accepting = now >= accept_paused_until;
    fds.assign({{stop_pipe_.read_fd(), POLLIN, 0}, {accepting ? listen_fd_ : -1, POLLIN, 0}});
    Clock::time_point wake = accepting ? Clock::time_point::max() : accept_paused_until;
    for (const auto& c : open) {
      fds.push_back({c->fd, static_cast<short>(c->want == Want::kWrite ? POLLOUT : POLLIN), 0});
      wake = std::min(wake, c->deadline);
    }
    if (poll(fds.data(), fds.size(), PollTimeoutMs(now, wake)) < 0) {
      if (errno == EINTR) continue;
      DP_LOG_ERROR("http endpoint {}: poll: {}", address_, std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;
    const Clock::time_point polled = Clock::now();
    for (size_t i = 0; i < open.size(); ++i) {
      if (fds[i + 2].revents != 0 && !Advance(*open[i], routes_)) open[i].reset();
    }
    // Deadlines are judged as of the poll, not after the handlers that ran since: a connection
    // whose deadline passed while a handler was slow gets one more poll to take what came.
    open.erase(std::remove_if(open.begin(), open.end(),
                              [polled](const auto& c) { return !c || c->deadline <= polled; }),
               open.end());
    if ((fds[1].revents & POLLIN) != 0 && !AcceptSome(listen_fd_, streams_, address_, open)) {
      accept_paused_until = Clock::now() + kAcceptPause;
    }
  }
}

void HttpEndpoint::Stop() {
  if (stopped_.exchange(true)) return;
  stop_pipe_.Wake();
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

HttpEndpoint::~HttpEndpoint() { Stop(); }

}  // namespace deepool

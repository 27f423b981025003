// HttpEndpoint: the smallest HTTP/1.1 server that a Prometheus scrape needs. GET (and HEAD) of a
// few fixed paths, each answered by a handler that returns a text body; one request per
// connection (Connection: close); connections served one after another on one named thread.
// Plain TCP, or TLS when Start is given a stream factory (security/tls_stream.h).
// Hostile input is answered, never trusted: a request head over 8 KiB is 431, a TLS handshake
// and head not done within 5 s are dropped, an answer the client stops reading for 5 s is dropped
// (Stop does not wait for it), anything but GET or HEAD is 405, an unknown path 404, a line that is
// not "METHOD PATH HTTP/1.x" 400. Threading: Start and Stop from the owner; handlers run on the
// endpoint's thread and must be thread-safe against the rest of the process.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace deepool {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// What a raw request head gets (pure; tested without sockets). `head` is everything up to the
// blank line.
HttpResponse AnswerHttpRequest(const std::string& head,
                               const std::map<std::string, std::function<HttpResponse()>>& routes);

// The response as sent: status line, Content-Type, Content-Length, Connection: close, body
// (omitted for HEAD).
std::string FormatHttpResponse(const HttpResponse& response, bool head_only);

// A connection's bytes, over a non-blocking socket: each call does what it can now and says
// what it waits for before it can do more.
class HttpStream {
 public:
  enum class Want { kNothing, kRead, kWrite, kClosed };
  struct Io {
    size_t bytes = 0;
    Want want = Want::kNothing;  // kNothing: done (Handshake) or bytes > 0 (Read, Write)
  };
  virtual ~HttpStream() = default;
  // Called until it wants nothing (TLS: the handshake; plain TCP has none).
  virtual Io Handshake() { return {}; }
  virtual Io Read(char* buffer, size_t size) = 0;
  virtual Io Write(const char* data, size_t size) = 0;
};
// Wraps an accepted socket (which it does not own or close); an error drops the connection.
using HttpStreamFactory = std::function<StatusOr<std::unique_ptr<HttpStream>>(int fd)>;

class HttpEndpoint {
 public:
  using Routes = std::map<std::string, std::function<HttpResponse()>>;

  // Binds listen ("HOST:PORT"; port 0 picks a free one) and starts serving on a thread named
  // thread_name (at most 15 characters). `streams` wraps each connection (TLS); empty: plain.
  static StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& listen, Routes routes,
                                                       const std::string& thread_name,
                                                       HttpStreamFactory streams = {});
  ~HttpEndpoint();

  // "HOST:PORT" bound (a wildcard host reported as 127.0.0.1).
  const std::string& address() const { return address_; }
  // Stops accepting and joins the thread; idempotent.
  void Stop();

 private:
  HttpEndpoint() = default;
  void Serve(const std::string& thread_name);
  void ServeConnection(int fd);
  // Writes all of data unless Stop is called or the client reads nothing for 5 s.
  void Send(int fd, HttpStream& stream, const std::string& data);
  // Waits until fd is ready for what `want` asks, up to `deadline`; false on timeout, Stop, or
  // a stream that is closed.
  bool WaitFor(int fd, HttpStream::Want want, std::chrono::steady_clock::time_point deadline);

  Routes routes_;
  HttpStreamFactory streams_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  std::string address_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
};

}  // namespace deepool

// HttpEndpoint: the smallest HTTP/1.1 server that a Prometheus scrape needs. GET (and HEAD) of a
// few fixed paths, each answered by a handler that returns a text body; one request per
// connection (Connection: close); connections served one after another on one named thread.
// Hostile input is answered, never trusted: a request head over 8 KiB is 431, a head not sent
// within 5 s is dropped, an answer the client stops reading for 5 s is dropped (Stop does not
// wait for it), anything but GET or HEAD is 405, an unknown path 404, a line that is not
// "METHOD PATH HTTP/1.x" 400.
// Threading: Start and Stop from the owner; handlers run on the endpoint's thread and must be
// thread-safe against the rest of the process.
#pragma once

#include <atomic>
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

class HttpEndpoint {
 public:
  using Routes = std::map<std::string, std::function<HttpResponse()>>;

  // Binds listen ("HOST:PORT"; port 0 picks a free one) and starts serving on a thread named
  // thread_name (at most 15 characters).
  static StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& listen, Routes routes,
                                                       const std::string& thread_name);
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
  void Send(int fd, const std::string& data);

  Routes routes_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  std::string address_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
};

}  // namespace deepool

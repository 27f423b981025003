// HttpEndpoint: the smallest HTTP/1.1 server that a Prometheus scrape needs. GET (and HEAD) of a
// few fixed paths, each answered by a handler that returns a text body; one request per
// connection (Connection: close). Plain TCP, or TLS when Start is given a stream factory
// (security/tls_stream.h).
// Connections are served concurrently by one named thread: a poll() loop over the listening
// socket and every open connection, each a small state machine (handshake, request head, answer)
// over a non-blocking HttpStream, so clients that connect and say nothing delay nobody.
// Hostile input is answered, never trusted: a request head over 8 KiB is 431, a TLS handshake
// and head not done within 5 s of the accept are dropped, an answer the client stops reading for
// 5 s is dropped (Stop does not wait for it), anything but GET or HEAD is 405, an unknown path
// 404, a line that is not "METHOD PATH HTTP/1.x" 400. At most kMaxConnections are open: past
// that, the oldest connection still in its handshake or head is closed (the new one itself when
// all others are being answered), so a flood of idle connections can neither exhaust file
// descriptors nor lock out a scraper, and cannot cut off an answer being written. A client that
// goes early never ends the process: the thread blocks SIGPIPE (common/sigpipe.h), so a write to
// it fails with EPIPE whatever the process's disposition.
// Threading: Start and Stop from the owner; handlers run one at a time on the endpoint's thread
// (a slow handler delays every connection, and deadlines keep running meanwhile) and must be
// thread-safe against the rest of the process.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "common/wake_pipe.h"

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
  // Connections open at once; see the top of this file for what a new one past it does.
  static constexpr size_t kMaxConnections = 128;

  // Binds listen ("HOST:PORT"; port 0 picks a free one) and starts serving on a thread named
  // thread_name (at most 15 characters). `streams` wraps each connection (TLS); empty: plain.
  static StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& listen, Routes routes,
                                                       const std::string& thread_name,
                                                       HttpStreamFactory streams = {});
  ~HttpEndpoint();

  // "HOST:PORT" bound (a wildcard host reported as 127.0.0.1).
  const std::string& address() const { return address_; }
  // Stops accepting, closes open connections and joins the thread (after a running handler
  // returns); idempotent.
  void Stop();

 private:
  HttpEndpoint() = default;
  // The event loop, until Stop; it owns the connections and closes them when it ends.
  void Serve(const std::string& thread_name);

  Routes routes_;
  HttpStreamFactory streams_;
  int listen_fd_ = -1;
  WakePipe stop_pipe_;
  std::string address_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
};

}  // namespace deepool

// gRPC's own log lines (gpr_log) through the process's log, and a refused TLS handshake made
// useful there. gRPC logs a failed handshake on the server as an error line of OpenSSL's words
// ("Handshake failed with fatal error SSL_ERROR_SSL: ... wrong version number"), once per
// attempt, so a client retrying in a loop, or a scanner, fills the log. While a GrpcLogRoute
// lives, such lines become one warning that says what happened, at most 20 a minute (the next
// says how many were left out), and other gRPC lines go to spdlog at their level. gRPC does not
// say who the peer was: a refused certificate reaches the Authenticator instead, whose refusal
// names the caller's address (transport.h).
// Threading: gRPC calls the route from its own threads; it keeps only a LogLimiter (locked).
// One GrpcLogRoute per process, made in main() before any server or channel.
#pragma once

#include <optional>
#include <string>

namespace deepool::security {

// "refused a TLS handshake: <why>" for a gRPC log line about a failed handshake; nullopt for
// any other line.
std::optional<std::string> DescribeRefusedHandshake(const std::string& grpc_log_line);

class GrpcLogRoute {
 public:
  GrpcLogRoute();
  // Back to plain stderr lines (errors only), so that gRPC threads logging during exit do not
  // reach a logger that is gone.
  ~GrpcLogRoute();
  GrpcLogRoute(const GrpcLogRoute&) = delete;
  GrpcLogRoute& operator=(const GrpcLogRoute&) = delete;
};

}  // namespace deepool::security

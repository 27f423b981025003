// TLS for the metrics endpoints (common/http_endpoint.h) with the cluster's TLS files: the
// server presents its certificate and, as on the gRPC port, requires a client certificate signed
// by the cluster CA (mutual TLS; a scraper such as Prometheus gets one from `deepool certs`).
// Threading: the factory may be called from any thread; each stream belongs to one connection.
#pragma once

#include <functional>
#include <string>

#include "common/http_endpoint.h"
#include "common/status.h"
#include "security/transport.h"

namespace deepool::security {

// A client's certificate (PEM) after the handshake: OK to serve it, else the reason it is refused
// (revoked, expired, a role or name not allowed); the connection is then closed unanswered.
using TlsClientCheck = std::function<Status(const std::string& certificate_pem)>;

// Reads and checks the files once (an error names the one that fails: missing, unreadable, a
// key that does not match the certificate, a key that group or others may read); the factory
// then wraps accepted sockets. TLS 1.2 at least. `admit` (optional) decides, once the handshake
// has verified the client's certificate against the CA, whether it is served.
StatusOr<HttpStreamFactory> MakeTlsHttpStreams(const TlsFiles& files,
                                               TlsClientCheck admit = nullptr);

}  // namespace deepool::security

// ListenTcp: binds and listens on a TCP port, the one way deepool's servers open theirs (the
// metrics endpoint, the coordinator's gRPC port). The socket is non-blocking and close-on-exec,
// with SO_REUSEADDR (a restarted daemon rebinds its port at once) but not SO_REUSEPORT (a second
// daemon on the same port is refused, not handed half the connections).
// Threading: pure function of its arguments and the system.
#pragma once

#include <string>

#include "common/status.h"

namespace deepool {

struct ListeningSocket {
  int fd = -1;  // the caller's to close
  int port = 0;
  // "HOST:PORT" as bound; a wildcard host ("0.0.0.0", "::") is reported as 127.0.0.1.
  std::string address;
};

// Binds listen ("HOST:PORT"; port 0: any free one) to the first address the host resolves to
// that can be bound, IPv4 addresses first. One address only: "0.0.0.0" serves IPv4, "::" both
// IPv6 and IPv4 (where the system's bindv6only is off, the Linux default). INVALID_ARGUMENT for
// text that is no address, UNAVAILABLE when none binds.
StatusOr<ListeningSocket> ListenTcp(const std::string& listen, int backlog);

}  // namespace deepool

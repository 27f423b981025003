// What the coordinator says beside a gRPC status, for the worker daemon and the CLI to act on
// without reading the message's text.
#pragma once

namespace deepool::protocol {

// Trailing metadata of an UNAVAILABLE answer from a coordinator that is still starting (loading
// its store and recovering): the port is open and the coordinator is there, so a worker's lease
// holds, and a client retries.
inline constexpr char kCoordinatorStartingKey[] = "deepool-coordinator-starting";

}  // namespace deepool::protocol

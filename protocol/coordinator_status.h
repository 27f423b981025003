// What the coordinator says beside a gRPC status, for the worker daemon and the CLI to act on
// without reading the message's text.
#pragma once

namespace deepool::protocol {

// Trailing metadata of an UNAVAILABLE answer from a coordinator that is still starting (loading
// its store and recovering): the port is open and the coordinator is there, so a worker's lease
// holds, and a client retries.
inline constexpr char kCoordinatorStartingKey[] = "deepool-coordinator-starting";

// Trailing metadata of a worker call refused because the coordinator does not know the calling
// node (it restarted, or marked the node down): the worker registers again. Other refusals of
// the same code (an unknown task, say) carry no such key.
inline constexpr char kRegisterAgainKey[] = "deepool-register-again";

}  // namespace deepool::protocol

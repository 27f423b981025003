// gRPC's locks without absl's deadlock detector. gRPC takes an absl::Mutex for nearly every step
// of a call; where absl was built without NDEBUG (Debian's package is), each of those locks also
// records lock order in a process-wide graph behind one global lock. At 1,000 nodes that was
// about 4% of the coordinator's CPU (GraphCycles in `perf`), all of it under that global lock.
// A release build of absl does none of it; this makes the daemons run as if on one. deepool's
// own locks are std::mutex, checked by the ThreadSanitizer build instead.
// Call once in main(), before any server or channel is made.
#pragma once

namespace deepool::security {

void TurnOffAbslDeadlockDetection();

}  // namespace deepool::security

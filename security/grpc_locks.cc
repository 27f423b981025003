#include "security/grpc_locks.h"

#include <absl/synchronization/mutex.h>

namespace deepool::security {

void TurnOffAbslDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace deepool::security

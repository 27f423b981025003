// The child-process runner moved to common/subprocess.h (one runner for every program deepool
// starts). These names keep the worker daemon's older includes compiling until they include
// common/subprocess.h themselves.
#pragma once

#include "common/subprocess.h"

namespace deepool::worker::daemon {

using ::deepool::ChildCallbacks;
using ::deepool::ChildProcess;
using ::deepool::LogTail;
using ::deepool::ProcessExit;
using ::deepool::ProcessSpec;

}  // namespace deepool::worker::daemon

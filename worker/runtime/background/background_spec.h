// The run spec's background part, as the runtime names it: the executor protocol's
// (protocol/background_spec.h, where its format, parser and writer live; docs/multiplexing.md).
#pragma once

#include "protocol/background_spec.h"
#include "worker/runtime/data/data.h"
#include "worker/runtime/background/multiplex_gate.h"
#include "worker/runtime/layers/optimizer.h"

namespace deepool::worker {

using protocol::BackgroundSpec;
using protocol::BackgroundToJson;
using protocol::ParseBackgroundJson;
using protocol::PeriodicCheckpoints;
using protocol::SharingOptions;
using protocol::ValidateBackgroundSpec;

}  // namespace deepool::worker

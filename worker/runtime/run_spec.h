// The run spec, as the runtime names it: the executor protocol's (protocol/run_spec.h, where its
// format, parser and writer live; docs/formats.md, "Run specs").
#pragma once

#include "protocol/run_spec.h"
#include "worker/runtime/background/background_spec.h"

namespace deepool::worker {

using protocol::ParseRunSpecJson;
using protocol::PeriodicCheckpoints;
using protocol::ReadRunSpecFile;
using protocol::RunSpec;
using protocol::RunSpecToJson;
using protocol::ValidateRunSpec;
using protocol::WriteRunSpecFile;

}  // namespace deepool::worker

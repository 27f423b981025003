// The loop behind NodeService.StreamTasks: a node's task commands, handed to the stream as the
// dispatcher queues them. Kept out of the gRPC handler so tests drive it with a Scheduler.
//
// Threading: runs on the caller's thread (one per open stream); `send` runs there too. The
// scheduler and job manager are thread-safe and must outlive the call.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"
#include "coordinator/follow_stop.h"
#include "coordinator/job_manager.h"
#include "coordinator/scheduler.h"

namespace deepool::coordinator {

// Sends each command queued for `node_id`, waking on the scheduler's notification. OK when
// `send` returns false (the stream closed; the command is lost there, and the next heartbeat
// re-sends what the worker lacks); CANCELLED when stop.cancelled(); UNAVAILABLE when the
// coordinator shuts down; NOT_FOUND for a node that is unknown or marked down.
Status StreamNodeCommands(Scheduler* scheduler, const JobManager* jobs, const std::string& node_id,
                          const std::function<bool(const v1::TaskCommand&)>& send,
                          const FollowStop& stop = {});

}  // namespace deepool::coordinator

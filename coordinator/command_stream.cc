#include "coordinator/command_stream.h"

namespace deepool::coordinator {

Status StreamNodeCommands(Scheduler* scheduler, const JobManager* jobs, const std::string& node_id,
                          const std::function<bool(const v1::TaskCommand&)>& send,
                          const FollowStop& stop) {
  while (true) {
    if (jobs->shutting_down()) return UnavailableError("coordinator is shutting down");
    if (stop.cancelled()) return CancelledError("the worker cancelled");
    ASSIGN_OR_RETURN(std::vector<v1::TaskCommand> commands,
                     scheduler->WaitForCommands(node_id, stop.cancel_probe));
    for (const v1::TaskCommand& command : commands) {
      if (!send(command)) return Status::Ok();
    }
  }
}

}  // namespace deepool::coordinator

#include "worker/runtime/devices/device_streams.h"

namespace deepool::worker {

std::string StreamPriorityName(StreamPriority priority) {
  switch (priority) {
    case StreamPriority::kDefault:
      return "default";
    case StreamPriority::kLow:
      return "low";
    case StreamPriority::kHigh:
      return "high";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<ScopedStream>> ScopedStream::Enter(std::shared_ptr<DeviceStreams> streams,
                                                            StreamPriority priority) {
  std::unique_ptr<ScopedStream> scoped(new ScopedStream());
  scoped->streams_ = std::move(streams);
  ASSIGN_OR_RETURN(scoped->stream_, scoped->streams_->CreateStream(priority));
  ASSIGN_OR_RETURN(scoped->scope_, scoped->streams_->MakeCurrent(*scoped->stream_));
  return scoped;
}

ScopedStream::~ScopedStream() {
  scope_.reset();  // leave before the stream goes
  stream_.reset();
}

}  // namespace deepool::worker

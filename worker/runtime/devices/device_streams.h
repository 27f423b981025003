// Streams, events and captured graphs of one device, behind one small interface, so that the
// logic that uses them (multiplex_device.h, background_graph_stepper.h) is tested on CPU with a
// fake (tests/runtime/fake_device_streams.h) and only a thin adapter needs a GPU
// (device_streams_cuda.cc, real only with DEEPOOL_HAVE_CUDA).
//
// Streams are dedicated: CreateStream makes a new stream at an explicit priority, never one from
// c10's stream pool, whose few round-robin streams ProcessGroupNCCL also draws from (a pool
// stream may be an NCCL stream, or the other job's).
//
// Threading: a DeviceStreams implementation is thread-safe. A StreamScope is destroyed on the
// thread that made it. A DeviceGraph is captured and ended on one thread (its stream's current
// thread); once ended it may be replayed from any one thread at a time.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace deepool::worker {

// kHigh and kLow are the device's greatest and least stream priorities; kDefault is the
// priority of streams made without one (on CUDA the least, 0, like c10's pool streams).
enum class StreamPriority { kDefault, kLow, kHigh };
std::string StreamPriorityName(StreamPriority priority);  // "default", "low", "high"

// A stream owned by its holder; destroying it lets the device finish the work already queued
// on it (CUDA semantics), so memory that work uses must outlive it: synchronise first.
class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  virtual StreamPriority priority() const = 0;
};

// A point in a stream's work, to order another stream after it without host synchronisation.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
};

// Work captured from a stream, replayable as a whole.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
};

// A stream made current on one thread; destroying it restores the thread's previous stream.
class StreamScope {
 public:
  virtual ~StreamScope() = default;
};

class DeviceStreams {
 public:
  virtual ~DeviceStreams() = default;

  virtual StatusOr<std::unique_ptr<DeviceStream>> CreateStream(StreamPriority priority) = 0;

  // Makes `stream` the calling thread's current stream until the scope is destroyed (scopes
  // nest, last in first out). Entering orders `stream` after the work already queued on the
  // thread's previous stream; leaving orders the previous stream after `stream`'s work (events,
  // no host synchronisation).
  virtual StatusOr<std::unique_ptr<StreamScope>> MakeCurrent(DeviceStream& stream) = 0;

  virtual StatusOr<std::unique_ptr<DeviceEvent>> RecordEvent(DeviceStream& stream) = 0;
  // Work queued on `stream` later waits for `event`; the host does not wait.
  virtual Status WaitEvent(DeviceStream& stream, const DeviceEvent& event) = 0;
  // Blocks the calling thread until the work queued on `stream` has finished.
  virtual Status Synchronize(DeviceStream& stream) = 0;

  // Starts capturing the work the calling thread queues on `stream`, which must be its current
  // stream (FAILED_PRECONDITION otherwise). Thread-local capture: other threads keep allocating
  // and synchronising meanwhile. On failure the capture is already undone.
  virtual StatusOr<std::unique_ptr<DeviceGraph>> BeginCapture(DeviceStream& stream) = 0;
  // Ends the capture of `graph`, on the thread that began it. OK: the graph is replayable.
  // Otherwise the capture is discarded and the stream, the memory allocator and the random
  // generators are out of capture state again; the error says why. Meant to be called after
  // anything failed inside the capture too (an exception, an invalidated capture). Destroying a
  // graph whose capture was never ended ends it the same way.
  virtual Status EndCapture(DeviceGraph& graph) = 0;
  // Launches the captured work on `stream` (FAILED_PRECONDITION if `graph` is not replayable).
  virtual Status Replay(DeviceGraph& graph, DeviceStream& stream) = 0;
};

// A dedicated stream made current on the thread that entered it, for this object's life.
// Destroyed on that thread: leaves the stream (restoring the previous one), then destroys it.
class ScopedStream {
 public:
  static StatusOr<std::unique_ptr<ScopedStream>> Enter(std::shared_ptr<DeviceStreams> streams,
                                                       StreamPriority priority);
  ~ScopedStream();
  DeviceStream& stream() { return *stream_; }

 private:
  ScopedStream() = default;
  std::shared_ptr<DeviceStreams> streams_;
  std::unique_ptr<DeviceStream> stream_;
  std::unique_ptr<StreamScope> scope_;
};

// The CUDA adapter for cuda:`device_index` (device_streams_cuda.cc); UNIMPLEMENTED in a build
// without CUDA, FAILED_PRECONDITION when the device is not visible.
StatusOr<std::shared_ptr<DeviceStreams>> MakeCudaDeviceStreams(int device_index);

}  // namespace deepool::worker

// FakeDeviceStreams: DeviceStreams (device_streams.h) for CPU tests. It runs nothing; it records
// what was asked — streams and their priorities, which thread made which stream current,
// events, synchronisations, captures and replays — as an ordered log, checks the rules a real
// device enforces (capture only on the thread's current stream, end only an open capture,
// replay only a captured graph, scopes left in order on their own thread, no stream destroyed
// while current or capturing) and lists every breach in violations(). A capture can be made to
// fail on demand, at its beginning or at its end, and hooks let a test act inside a capture.
//
// Threading: all state is guarded by one mutex; hooks run without it, on the calling thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "worker/runtime/devices/device_streams.h"

namespace deepool::worker::testing {

class FakeDeviceStreams final : public DeviceStreams {
 public:
  enum class CaptureFailure { kNone, kAtBegin, kAtEnd };
  struct StreamRecord {
    int id = 0;
    StreamPriority priority = StreamPriority::kDefault;
    bool destroyed = false;
  };

  // The next capture fails there (once): at its beginning, or at its end as an invalidated
  // capture would.
  void FailNextCapture(CaptureFailure where) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_next_ = where;
  }
  std::function<void()> on_capture_begin;  // after a capture began
  std::function<void()> on_capture_end;    // before a capture ends
  std::function<void(int stream)> on_synchronize;
  std::function<void()> on_replay;

  std::vector<StreamRecord> streams() const {
    std::lock_guard<std::mutex> lock(mu_);
    return streams_;
  }
  // "create 1 high", "enter 1", "leave 1", "record 1", "wait 1", "sync 1", "begin 1",
  // "end 1 ok", "end 1 failed", "replay 1", "drop 1" (a graph captured on stream 1 freed),
  // "discard 1" (one freed while still capturing), "destroy 1".
  std::vector<std::string> log() const {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  int Count(const std::string& entry) const {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& e : log_) n += e == entry ? 1 : 0;
    return n;
  }
  // Position of the first `entry` in the log at or after `from`; -1 if none.
  int Find(const std::string& entry, int from = 0) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = static_cast<size_t>(from); i < log_.size(); ++i) {
      if (log_[i] == entry) return static_cast<int>(i);
    }
    return -1;
  }
  std::vector<std::string> violations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }
  // The stream the calling thread has made current (0: none).
  int CurrentOnThisThread() const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = current_.find(std::this_thread::get_id());
    return it == current_.end() || it->second.empty() ? 0 : it->second.back();
  }
  static int IdOf(const DeviceStream& stream) { return static_cast<const Stream&>(stream).id; }

  StatusOr<std::unique_ptr<DeviceStream>> CreateStream(StreamPriority priority) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto stream = std::make_unique<Stream>(this, static_cast<int>(streams_.size()) + 1, priority);
    streams_.push_back(StreamRecord{stream->id, priority, false});
    log_.push_back("create " + std::to_string(stream->id) + " " + StreamPriorityName(priority));
    return std::unique_ptr<DeviceStream>(std::move(stream));
  }

  StatusOr<std::unique_ptr<StreamScope>> MakeCurrent(DeviceStream& stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int id = IdOf(stream);
    current_[std::this_thread::get_id()].push_back(id);
    log_.push_back("enter " + std::to_string(id));
    return std::unique_ptr<StreamScope>(std::make_unique<Scope>(this, id));
  }

  StatusOr<std::unique_ptr<DeviceEvent>> RecordEvent(DeviceStream& stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back("record " + std::to_string(IdOf(stream)));
    return std::unique_ptr<DeviceEvent>(std::make_unique<DeviceEvent>());
  }

  Status WaitEvent(DeviceStream& stream, const DeviceEvent&) override {
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back("wait " + std::to_string(IdOf(stream)));
    return Status::Ok();
  }

  Status Synchronize(DeviceStream& stream) override {
    const int id = IdOf(stream);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (capturing_ == id) violations_.push_back("sync of capturing stream " + std::to_string(id));
      log_.push_back("sync " + std::to_string(id));
    }
    if (on_synchronize) on_synchronize(id);
    return Status::Ok();
  }

  StatusOr<std::unique_ptr<DeviceGraph>> BeginCapture(DeviceStream& stream) override {
    const int id = IdOf(stream);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = current_.find(std::this_thread::get_id());
      if (it == current_.end() || it->second.empty() || it->second.back() != id) {
        return FailedPreconditionError("capture on a stream that is not the thread's current one");
      }
      if (capturing_ != 0) violations_.push_back("two captures at once");
      log_.push_back("begin " + std::to_string(id));
      if (fail_next_ == CaptureFailure::kAtBegin) {
        fail_next_ = CaptureFailure::kNone;
        log_.push_back("end " + std::to_string(id) + " failed");
        return InternalError("fake: capture could not begin");
      }
      capturing_ = id;
    }
    if (on_capture_begin) on_capture_begin();
    return std::unique_ptr<DeviceGraph>(std::make_unique<Graph>(this, id));
  }

  Status EndCapture(DeviceGraph& base) override {
    auto& graph = static_cast<Graph&>(base);
    if (on_capture_end) on_capture_end();
    std::lock_guard<std::mutex> lock(mu_);
    if (graph.state != Graph::kCapturing) return FailedPreconditionError("no capture in progress");
    capturing_ = 0;
    if (fail_next_ == CaptureFailure::kAtEnd) {
      fail_next_ = CaptureFailure::kNone;
      graph.state = Graph::kDiscarded;
      log_.push_back("end " + std::to_string(graph.stream) + " failed");
      return InternalError("fake: capture invalidated");
    }
    graph.state = Graph::kReady;
    log_.push_back("end " + std::to_string(graph.stream) + " ok");
    return Status::Ok();
  }

  Status Replay(DeviceGraph& base, DeviceStream& stream) override {
    auto& graph = static_cast<Graph&>(base);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (graph.state != Graph::kReady) return FailedPreconditionError("graph not replayable");
      log_.push_back("replay " + std::to_string(IdOf(stream)));
    }
    if (on_replay) on_replay();
    return Status::Ok();
  }

 private:
  struct Stream final : DeviceStream {
    Stream(FakeDeviceStreams* owner, int id, StreamPriority priority)
        : owner(owner), id(id), stream_priority(priority) {}
    ~Stream() override { owner->Destroyed(id); }
    StreamPriority priority() const override { return stream_priority; }
    FakeDeviceStreams* owner;
    int id;
    StreamPriority stream_priority;
  };
  struct Scope final : StreamScope {
    Scope(FakeDeviceStreams* owner, int id)
        : owner(owner), id(id), thread(std::this_thread::get_id()) {}
    ~Scope() override { owner->Left(id, thread); }
    FakeDeviceStreams* owner;
    int id;
    std::thread::id thread;
  };
  struct Graph final : DeviceGraph {
    enum State { kCapturing, kReady, kDiscarded };
    Graph(FakeDeviceStreams* owner, int stream) : owner(owner), stream(stream) {}
    ~Graph() override { owner->Dropped(stream, state == kCapturing); }
    FakeDeviceStreams* owner;
    int stream;
    State state = kCapturing;
  };

  void Destroyed(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    streams_[static_cast<size_t>(id - 1)].destroyed = true;
    if (capturing_ == id)
      violations_.push_back("stream " + std::to_string(id) + " destroyed capturing");
    for (const auto& [thread, stack] : current_) {
      for (int current : stack) {
        if (current == id)
          violations_.push_back("stream " + std::to_string(id) + " destroyed current");
      }
    }
    log_.push_back("destroy " + std::to_string(id));
  }
  void Left(int id, std::thread::id thread) {
    std::lock_guard<std::mutex> lock(mu_);
    if (thread != std::this_thread::get_id()) {
      violations_.push_back("stream " + std::to_string(id) + " left on another thread");
    }
    auto& stack = current_[thread];
    if (stack.empty() || stack.back() != id) {
      violations_.push_back("stream " + std::to_string(id) + " left out of order");
    } else {
      stack.pop_back();
    }
    log_.push_back("leave " + std::to_string(id));
  }
  void Dropped(int stream, bool capturing) {
    std::lock_guard<std::mutex> lock(mu_);
    if (capturing) capturing_ = 0;
    log_.push_back((capturing ? "discard " : "drop ") + std::to_string(stream));
  }

  mutable std::mutex mu_;
  std::vector<StreamRecord> streams_;
  std::vector<std::string> log_;
  std::vector<std::string> violations_;
  std::map<std::thread::id, std::vector<int>> current_;
  int capturing_ = 0;
  CaptureFailure fail_next_ = CaptureFailure::kNone;
};

}  // namespace deepool::worker::testing

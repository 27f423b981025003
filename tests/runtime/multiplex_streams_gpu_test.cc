// The CUDA adapter of DeviceStreams on a real GPU (skipped without one): dedicated streams at
// the device's greatest and least priorities, made current per thread and ordered by events; a
// graph captured and replayed on the BG stream; and a capture that fails inside (a host
// synchronisation) undone so completely that eager work, random numbers and a new capture work
// on the same stream afterwards. The CPU tests cover the logic above this adapter with a fake.
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <thread>

#include "worker/runtime/device_streams.h"
#include "worker/runtime/multiplex_device.h"

namespace deepool::worker {
namespace {

bool HaveGpu() {
  if (torch::cuda::is_available() && torch::cuda::device_count() > 0) return true;
  WARN("skipped: needs a CUDA device");
  return false;
}

std::shared_ptr<DeviceStreams> Streams() {
  auto streams = MakeSharingStreams(torch::Device(torch::kCUDA, 0));
  INFO(streams.status().ToString());
  REQUIRE(streams.ok());
  REQUIRE(*streams != nullptr);
  return *streams;
}

TEST_CASE("CUDA streams: dedicated, at the device's priorities, current per thread",
          "[gpu][multiplex]") {
  if (!HaveGpu()) return;
  auto streams = Streams();
  const auto [least, greatest] = c10::cuda::CUDAStream::priority_range();
  auto high = streams->CreateStream(StreamPriority::kHigh);
  auto low = streams->CreateStream(StreamPriority::kLow);
  REQUIRE(high.ok());
  REQUIRE(low.ok());
  const auto before = c10::cuda::getCurrentCUDAStream(0);

  auto fg = streams->MakeCurrent(**high);
  REQUIRE(fg.ok());
  const auto fg_stream = c10::cuda::getCurrentCUDAStream(0);
  REQUIRE(fg_stream.priority() == greatest);
  torch::Tensor x = torch::full({1 << 20}, 2.0f, torch::kCUDA);

  c10::cuda::CUDAStream bg_stream = before;
  std::thread bg([&] {
    auto scope = streams->MakeCurrent(**low);
    if (!scope.ok()) return;
    bg_stream = c10::cuda::getCurrentCUDAStream(0);
  });
  bg.join();
  REQUIRE(bg_stream.priority() == least);
  REQUIRE(bg_stream != fg_stream);
  REQUIRE(fg_stream != c10::cuda::getDefaultCUDAStream(0));
  REQUIRE(c10::cuda::getCurrentCUDAStream(0) == fg_stream);  // the other thread's scope is its own

  // An event orders the BG stream after the FG stream's work, without the host waiting.
  auto event = streams->RecordEvent(**high);
  REQUIRE(event.ok());
  REQUIRE(streams->WaitEvent(**low, **event).ok());
  REQUIRE(streams->Synchronize(**high).ok());
  REQUIRE(x.sum().item<float>() == Approx(2.0 * (1 << 20)));
  fg->reset();
  REQUIRE(c10::cuda::getCurrentCUDAStream(0) == before);
}

TEST_CASE("CUDA graphs: capture and replay; a failed capture is undone", "[gpu][multiplex]") {
  if (!HaveGpu()) return;
  auto streams = Streams();
  auto low = streams->CreateStream(StreamPriority::kLow);
  REQUIRE(low.ok());
  auto scope = streams->MakeCurrent(**low);
  REQUIRE(scope.ok());
  torch::Tensor x = torch::zeros({256}, torch::kCUDA);
  torch::Tensor y = x * 2 + 1;  // warm-up outside the capture

  auto graph = streams->BeginCapture(**low);
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  y = x * 2 + 1;
  REQUIRE(streams->EndCapture(**graph).ok());
  x.fill_(3);
  REQUIRE(streams->Replay(**graph, **low).ok());
  REQUIRE(streams->Synchronize(**low).ok());
  REQUIRE(torch::allclose(y.cpu(), torch::full({256}, 7.0f)));

  // A host synchronisation inside the capture throws (or invalidates it); EndCapture undoes it.
  auto failing = streams->BeginCapture(**low);
  REQUIRE(failing.ok());
  bool threw = false;
  try {
    torch::Tensor z = torch::rand({64}, torch::kCUDA) + x[0];
    (void)z.sum().item<float>();
  } catch (const std::exception&) {
    threw = true;
  }
  Status ended = streams->EndCapture(**failing);
  INFO(ended.ToString());
  REQUIRE((threw || !ended.ok()));
  failing->reset();

  // The stream, the allocator and the random generator work as before, eagerly and captured.
  torch::Tensor eager = x + torch::rand({256}, torch::kCUDA);
  REQUIRE(streams->Synchronize(**low).ok());
  REQUIRE(eager.min().item<float>() >= 3.0f);
  auto again = streams->BeginCapture(**low);
  INFO(again.status().ToString());
  REQUIRE(again.ok());
  torch::Tensor w = x * 3;
  REQUIRE(streams->EndCapture(**again).ok());
  REQUIRE(streams->Replay(**again, **low).ok());
  REQUIRE(torch::allclose(w.cpu(), torch::full({256}, 9.0f)));
  REQUIRE(streams->Replay(**graph, **low).ok());  // the first graph still replays
  REQUIRE(streams->Synchronize(**low).ok());
}

}  // namespace
}  // namespace deepool::worker

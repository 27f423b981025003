// Gloo backend of the c10d communicator. ProcessGroupGloo.hpp is guarded by USE_C10D_GLOO,
// which the torch target defines for everything that links it.
#include "worker/runtime/communication/communicator_gloo.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "worker/runtime/communication/communicator_c10d.h"

namespace deepool::worker {
namespace {

bool IsLoopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1";
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> ConnectGloo(
    const CommOptions& options, const std::function<void(int port)>& on_store_ready) {
  ASSIGN_OR_RETURN(auto store, internal::ConnectStore(options, on_store_ready));
  std::string bind_host = options.bind_host;
  if (bind_host.empty() && IsLoopback(options.store_host)) bind_host = "127.0.0.1";
  std::shared_ptr<::gloo::transport::Device> device;
  try {
    device = bind_host.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                               : c10d::ProcessGroupGloo::createDeviceForHostname(bind_host);
  } catch (const std::exception& e) {
    return UnavailableError(std::string("gloo device: ") + e.what());
  }
  auto timeout = options.timeout;
  internal::GroupFactory make_group =
      [device, timeout](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
        auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
        gloo_options->devices.push_back(device);
        gloo_options->threads = 2;
        return c10::intrusive_ptr<internal::C10dGroup>(
            c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, gloo_options));
      };
  return internal::C10dCommunicator::Create(options, std::move(store), std::move(make_group),
                                            "gloo");
}

}  // namespace deepool::worker

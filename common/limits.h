// Sizes and rates every deepool process agrees on, so that what one side may send the other may
// receive, and a spec that could never run is refused when it is submitted, not after dispatch.
// Threading: constants only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace deepool {

// The largest gRPC message any deepool server or channel accepts. A dispatched task carries its
// job's graph and plan, which the graph limits below keep well inside this.
inline constexpr int kMaxRpcMessageBytes = 64 << 20;

// gRPC keepalive from a worker to the coordinator: a ping every kKeepalivePingEveryMs, and a
// connection whose ping goes unanswered for kKeepaliveAnswerMs is dropped. A coordinator that
// froze, lost its machine or was cut off sends no reset; without the pings its workers would wait
// on the silent connection until their lease (9 s at the coordinator's defaults) stopped their
// tasks, instead of finding the standby that took over. The coordinator accepts pings this often.
inline constexpr int kKeepalivePingEveryMs = 1000;
inline constexpr int kKeepaliveAnswerMs = 2000;

// An inline layer graph in a job spec: at most this many bytes of JSON and this many layers.
inline constexpr size_t kMaxGraphJsonBytes = 8 << 20;
inline constexpr int kMaxGraphLayers = 5000;

// More memory than any one device deepool plans for has (CPU hosts included): a job whose
// weights, or whose activations at its smallest per-device batch, need more is refused.
inline constexpr int64_t kMaxDeviceMemoryBytes = int64_t{256} << 30;

// Open files (RLIMIT_NOFILE). deploy/deepool-*.service set LimitNOFILE to kOpenFilesWanted (a
// unit test reads them); a daemon started elsewhere raises its soft limit toward it, as far as
// the hard limit allows, and refuses to start below kMinOpenFiles (common/open_files.h).
inline constexpr uint64_t kOpenFilesWanted = 65536;
inline constexpr uint64_t kMinOpenFiles = 1024;
// Descriptors the coordinator keeps out of its connection bound: its store, gRPC's own, the
// metrics endpoint's connections (at most 128), logs and spares. Its port holds at most the
// open-file limit less these (so 768 connections at kMinOpenFiles).
inline constexpr uint64_t kReservedFds = 256;

// What one worker's registration or heartbeat may list: devices, and running tasks (a node runs
// a few per device; the rest would only be answered, stored or matched in vain).
inline constexpr int kMaxNodeDevices = 1024;
inline constexpr int kMaxListedTasks = 10000;

// Free-text fields a client sets (job names are shorter: 128) and file paths in a spec.
inline constexpr size_t kMaxReasonBytes = 1024;
inline constexpr size_t kMaxPathBytes = 4096;

}  // namespace deepool

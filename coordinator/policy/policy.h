// Scheduling policies (issue 44): which job gets how many devices of which type, and which running
// job makes way. A policy is a pure step, as Admit is: a snapshot of the pool in, decisions out;
// it reads no store, clock or lock, so the coordinator's Scheduler and the pool simulator
// (simulator/) run the same code, and every rule is tested by calling Decide. This library
// (deepool_policy) depends on deepool_common only: no gRPC, stores or libtorch.
//
// Policies (MakePolicy's names; docs/coordinator.md, "Scheduling policies"):
// - "fifo": today's admission (coordinator/admission.h): FG jobs in priority then submission
//   order, each onto its requested count of one device type, packed on as few nodes as possible;
//   a FG job that could fit the pool but does not fit now blocks those behind it; BG jobs on the
//   idlest device (never inside a FG rank predicted idle less than
//   PolicyOptions::min_bg_idle_fraction). Never preempts a FG job.
// - "max-min": max-min fairness across users, heterogeneity-aware as Gavel's: a user's share is
//   the sum over its FG jobs of the throughput they get over the throughput they would get on
//   their fastest device type; each round the user with the least share gets its next job
//   placed, on the device type where that job runs fastest relative to its best. A running job
//   the allocation no longer holds is preempted (through a checkpoint) once it has held its
//   devices for PolicyOptions::min_slice_s, never before, so jobs are not moved back and forth.
// - "deepool": FG jobs sized by their speed-up curves: each admitted job gets at least one device,
//   and each further device goes to the job whose remaining time it shortens most, within the
//   job's requested count and amplification limit. Devices still free after that (no waiting FG
//   job can use them) grow running jobs that keep checkpoints and have held their devices for
//   PolicyOptions::min_slice_s, where the time saved exceeds what the move costs by at least
//   PolicyOptions::min_growth_saving_s per added device (a Resize).
//   BG jobs as fifo: on the devices the FG plans leave idlest.
//
// Decisions are applied in this order: preemptions free their devices, then grants take free
// devices. A caller that cannot free a device at once (the coordinator waits for the preempted
// job's checkpoint) drops the grants that use it; the job stays pending and the next round decides
// again.
// Threading: policies are immutable after construction; Decide may run on any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace deepool::coordinator::policy {

using DeviceKey = std::pair<std::string, std::string>;  // (node id, device): DeviceLedger's key

enum class Role { kFg, kBg };

class DeviceIndex;  // device_index.h

// A job's planned iteration time against the device count on one device type: the planner's
// speed-up curve (planner/speedup_curve.h) reduced to what a policy needs.
struct SpeedCurve {
  // iteration_s[g - 1]: seconds per iteration on g devices; <= 0 where no plan fits g devices.
  std::vector<double> iteration_s;

  // Seconds per iteration on g devices; 0 when unknown or infeasible.
  double IterationS(int g) const;
  // The most devices the curve covers.
  int MaxDevices() const { return static_cast<int>(iteration_s.size()); }
};

struct PolicyJob {
  std::string id;
  std::string user;  // the submitter ("" for an open coordinator: one anonymous user)
  Role role = Role::kFg;
  int priority = 0;           // higher first
  int64_t seq = 0;            // submission order: lower first
  double arrival_s = 0;       // when submitted, on the caller's clock (seconds)
  int requested_devices = 1;  // JobSpec::gpus (BG: 1)
  // GPU-seconds per iteration over the single-device iteration time the job accepts
  // (JobSpec::amplification_limit); 0: no limit.
  double amplification_limit = 0;
  int64_t global_batch = 1;          // samples per iteration
  int64_t remaining_iterations = 0;  // 0: unknown (counted as 1)
  std::string required_device_type;  // "" : any type
  // The executor protocol version its run spec needs (jobspec::RequiredProtocolVersion); a device
  // whose node does not read it is not offered. 0: any.
  int protocol_version = 0;
  // Whether its next attempt may run on fewer devices than requested when the pool's largest
  // group of one type has fewer (a FG job that re-plans on node loss and ran before).
  bool shrinks_to_fit = false;
  // Whether it keeps periodic checkpoints: only such a job may be preempted (no work beyond the
  // last checkpoint is lost).
  bool preemptible = false;
  // What moving it costs, in seconds of its own time, for "deepool"'s growth: restart_s before it
  // trains again on its new devices (writing and restoring its checkpoint, rebuilding executors;
  // 60 s is an assumption, as the simulator's checkpoint_restore_s), and unsaved_s of training
  // since its last checkpoint that the move loses (0 for a job that stops at its next checkpoint,
  // as the coordinator's and the simulator's do).
  double restart_s = 60;
  double unsaved_s = 0;

  // Current placement: empty while waiting. FG: its devices in rank order; BG: one device.
  std::vector<DeviceKey> devices;
  std::string device_type;  // of `devices`
  double placed_at_s = 0;   // when the current placement began
  // Seconds it has held devices over all its placements, the current one included: max-min
  // serves first, among users of equal share, the user whose jobs have run least.
  double attained_s = 0;

  // Speed-up curve per device type. A job without one for a type is taken to scale perfectly
  // there, at the same speed as on every other type (a policy then cannot tell types apart).
  std::map<std::string, SpeedCurve> curves;

  bool placed() const { return !devices.empty(); }
};

struct PolicyDevice {
  DeviceKey key;
  std::string type;
  // The executor protocol versions its node reads (NodeRecord::protocol).
  int protocol_oldest = 1;
  int protocol_newest = 1 << 30;
  // Predicted idle fraction of the device's FG rank per iteration (DeviceLedger::IdleFraction):
  // 1 when no FG job holds it, 0 while its plan is unknown.
  double idle_fraction = 1.0;
  // Whether idle_fraction is the FG plan's prediction (or 1 for a device no FG job holds); false
  // while the holder's plan is unknown: a BG job may then wait for the rank, not rule it out.
  bool idle_known = true;
  // Whether the FG rank on it runs (has reported an iteration), so a BG job can run inside it.
  bool fg_rank_running = false;

  bool Reads(int version) const {
    return version <= 0 || (protocol_oldest <= version && version <= protocol_newest);
  }
};

struct PolicySnapshot {
  double now_s = 0;
  std::vector<PolicyDevice> devices;  // schedulable devices only, node by node
  std::vector<PolicyJob> jobs;        // pending and placed jobs, in submission order
  // Optional: an index of `devices` (device_index.h) that the caller keeps from round to round
  // while its devices (their keys, types and order) do not change, so that a round need not
  // build one. The caller vouches that it indexes `devices`; a round builds its own when it is
  // null or indexes a different number of devices.
  std::shared_ptr<const DeviceIndex> device_index;
};

// Why a job waits after a round; mirrors the coordinator's ReasonCode names.
enum class WaitCode {
  kQueuedBehind,       // behind a FG job that does not fit yet
  kWaitingForDevices,  // could fit the pool, not now
  kNotEnoughDevices,   // no group of one type is large enough
  kWorkerProtocol,     // too few devices on nodes that read its protocol version
  kWaitingForBgSlot,   // BG: every device has a BG job or a FG rank with no idle time to spare
  kWaitingForFgRank,   // BG: the idlest device's FG rank has not started
  kFairShare,          // max-min: other users' shares come first
};

struct Wait {
  std::string job_id;
  WaitCode code = WaitCode::kWaitingForDevices;
  std::string message;  // a sentence for people, e.g. "user bob holds its fair share (2 devices)"
  // kWaitingForFgRank: the device it waits for, so that a caller that knows more of the device's
  // holder than the snapshot says (the coordinator: a device reserved for a grown job that is
  // still stopping) can say so. Empty otherwise.
  DeviceKey device = {};
};

// A job placed this round: a FG job's devices in rank order (count may be below the request
// under "deepool"), or a BG job's one device.
struct Grant {
  std::string job_id;
  std::string device_type;
  std::vector<DeviceKey> devices;
  double idle_fraction = 1.0;  // BG: predicted idleness of its device when chosen
};

// A placed job that makes way: it stops (a FG job at its next checkpoint) and waits again.
struct Preemption {
  std::string job_id;
  std::string for_job;  // the job that takes its devices ("" when none in particular)
  std::string message;  // e.g. "user alice is below its fair share after 300 s on 4 devices"
};

// A placed FG job given more devices ("deepool"'s growth): `devices` is its whole new placement in
// rank order, its current devices first. The job is also listed in Decisions::preemptions, so a
// caller that moves a job only through a checkpoint (the coordinator: it stops at its next
// checkpoint, waits again with the added devices reserved for it, and a later round sizes it
// anew) carries it out through the same stop as a preemption, and counts and reports it as a
// resize; a caller that can move it at once (the pool simulator's adapter) places it on
// `devices`.
struct Resize {
  std::string job_id;
  std::string device_type;
  std::vector<DeviceKey> devices;
  int from_devices = 0;  // what it held before
};

// A user's share after the round: what its FG jobs get over what they would get alone on their
// fastest device type, summed (max-min's quantity; other policies report it too, for status).
struct UserShare {
  std::string user;
  double share = 0;
  int devices = 0;  // devices its FG jobs hold after the round
};

struct Decisions {
  std::vector<Grant> grants;  // in placement order
  std::vector<Preemption> preemptions;
  std::vector<Resize> resizes;  // "deepool" only; each also among the preemptions
  std::vector<Wait> waits;
  std::vector<UserShare> shares;  // by user name
};

struct PolicyOptions {
  // max-min: a placement is kept at least this long before it may be preempted; deepool: before
  // its job may be resized, so that jobs are not moved back and forth.
  double min_slice_s = 300;
  // deepool: a running job grows only where the growth saves at least this many seconds of its
  // remaining time per device it adds, net of the move's cost. A device a running job takes stays
  // with it, maybe to its end, and jobs that arrive meanwhile wait for others; so only jobs with
  // many hours left grow (20 h: tuned on the pool simulator's saturated 64- and 512-device traces,
  // docs/benchmarks.md, "Pool simulation"; 0 grows wherever the saving exceeds the cost).
  double min_growth_saving_s = 72000;
  // Every policy: a BG job is not placed inside a FG rank whose plan predicts less than this
  // fraction of each iteration idle (a one-device rank: none). It would hardly progress there, and
  // it would hold the device's one BG place while a free device went to a later BG job; it waits
  // for a device with idle time instead. 0 places BG jobs on every device, busy or not.
  double min_bg_idle_fraction = 0.05;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view Name() const = 0;
  virtual Decisions Decide(const PolicySnapshot& snapshot) const = 0;
  // Whether Decide may move running jobs when no job waits (deepool's growth): the scheduler then
  // asks it every round, not only in rounds with waiting jobs.
  virtual bool MovesRunningJobs() const { return false; }
};

// "fifo", "max-min" or "deepool"; INVALID_ARGUMENT naming the choices otherwise.
StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name, PolicyOptions options = {});

// The names MakePolicy takes, for --help.
const std::vector<std::string>& PolicyNames();

}  // namespace deepool::coordinator::policy

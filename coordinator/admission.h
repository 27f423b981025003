// Admission: which pending jobs get devices this round, and why the others wait. A pure step:
// pending jobs, the nodes and a device ledger in; reservations and pending reasons out. Nothing
// here reads the store, the clock or a lock, so every rule is tested by calling Admit. Admit turns
// its input into a policy snapshot (coordinator/policy/policy.h) and the policy's decisions back;
// the rules below are the "fifo" policy's (policy/fifo_policy.h), the coordinator's default.
//
// Rules:
// - FG jobs go in priority, then submission order, each onto `gpus` devices of one device type
//   that no other FG job holds, on schedulable nodes, on as few nodes as possible (the nodes with
//   the most free devices first; within a node, devices without a BG job first, then those with
//   the most memory, DeviceMemoryBytes). A FG job that could fit the cluster but does not fit
//   now blocks the FG jobs behind it, so big jobs do not starve. A BG job on a device a FG job
//   takes makes way (Admission::displaced).
// - BG jobs then take one device each, one BG job per device, preferring the device the FG plans
//   leave idlest (a device no FG job holds is idlest); at equal idleness a device it can use now
//   (no FG job, or a FG rank already running to train inside) first. A device whose FG rank has
//   not started yet is not taken: the BG job waits to run inside that rank's executor. Nor is a
//   device reserved for a grown job still stopping (AdmissionInput::growing): the BG job that
//   waits for it is told for which job, for what growth and until when.
// - Every job goes only onto nodes that read the executor protocol version its run spec is
//   written at (jobspec::RequiredProtocolVersion; NodeRecord::protocol): an adamw job needs
//   workers that speak protocol 2. When too few do, it waits with kWorkerProtocol, saying how
//   many nodes are too old, and blocks nobody.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "coordinator/device_ledger.h"
#include "coordinator/job.h"
#include "coordinator/node_registry.h"
#include "coordinator/planning.h"
#include "coordinator/policy/policy.h"
#include "coordinator/policy_standing.h"

namespace deepool::coordinator {

// Why a job is still PENDING after a round: kQueuedBehind, kWaitingForDevices,
// kNotEnoughDevices, kWorkerProtocol, kWaitingForBgSlot or kWaitingForFgRank.
struct PendingReason {
  std::string job_id;
  ReasonCode code = ReasonCode::kWaitingForDevices;
  std::string message;  // a sentence for people, e.g. "waiting for 4 free devices of one type"
};

struct ForegroundGrant {
  std::string job_id;
  std::vector<DeviceKey> devices;  // rank order: node by node
  ClusterShape shape;
};

struct BackgroundGrant {
  std::string job_id;
  DeviceKey device;
  double idle_fraction = 1.0;  // predicted idleness of the device when chosen
  ClusterShape shape;          // the one device, for its type and memory
};

// A BG job whose device a FG job took: it is stopped and goes back to PENDING.
struct Displacement {
  std::string bg_job;
  std::string fg_job;
  DeviceKey device;
};

// A placed FG job a policy moves: it stops at its next checkpoint and waits again. Either a
// preemption ("max-min"), or a growth ("deepool"'s policy::Resize), which the coordinator carries
// out the same way (a later round sizes the job anew from the devices then free) but which people
// and the metrics see as a resize, not as a preemption.
struct FgPreemption {
  std::string job_id;
  std::string for_job;  // the job that takes its devices ("" : none in particular)
  std::string message;  // the policy's reason, for the job's history
  // A growth: the devices it holds and those the policy grows it to (Resize::devices); both 0 for
  // a preemption. `added`: the devices it grows onto, beyond those it holds.
  int from_devices = 0;
  int grow_to = 0;
  std::vector<DeviceKey> added = {};

  bool growth() const { return grow_to > 0; }
};

struct Admission {
  std::vector<ForegroundGrant> foreground;  // in admission order
  std::vector<BackgroundGrant> background;
  std::vector<Displacement> displaced;
  std::vector<FgPreemption> preempted;
  std::vector<PendingReason> pending;
  std::vector<policy::UserShare> shares;  // each user's share after the round
  // What `deepool status` shows of the round (policy_standing.h): waits, holders, shares.
  std::shared_ptr<const PolicyRound> round;
};

// A job's speed-up curves by device type (policy::PolicyJob::curves).
using CurvesByType = std::map<std::string, policy::SpeedCurve>;

struct AdmissionInput {
  std::vector<JobSnapshot> pending;  // PENDING jobs in submission order
  std::vector<NodeRecord> nodes;
  DeviceLedger ledger;
  // Devices whose FG rank runs (has reported an iteration), so a BG job can run inside it.
  std::set<DeviceKey> running_fg_ranks;
  // For policies that weigh placed jobs ("max-min"): the jobs holding devices (their users,
  // since when, how long they have run), those that keep periodic checkpoints (only they may be
  // preempted), and the time now on the scheduler's clock (wall ms; 0: not given, and then the
  // policy sees no job's time run).
  std::vector<JobSnapshot> placed;
  std::set<std::string> preemptible;
  int64_t now_ms = 0;
  // Jobs' speed-up curves by job id (SpeedCurveBook), for the policy's snapshot (a BG job's
  // one-device times choose its type among equally idle devices): a job absent here, or without
  // a curve on a type, is seen to scale perfectly, alike on every type.
  std::map<std::string, std::shared_ptr<const CurvesByType>> curves;
  // Running FG jobs the policy grew that are still stopping at their checkpoint, with the devices
  // they grow onto (FgPreemption::added): the policy's snapshot shows those devices held by them
  // (where no FG job holds them and their node is schedulable), so that no other job is granted
  // them, or grown onto them, meanwhile; a BG job that waits for one is told that it is reserved.
  // Once the job waits again the next round sizes it anew.
  std::map<std::string, std::vector<DeviceKey>> growing;
};

// A round looks at PENDING jobs highest priority first, then in submission order. By value: move
// the input in when it is not needed afterwards.
Admission Admit(AdmissionInput input);
// The same round decided by `policy` (MakePolicy's). Placed jobs the policy preempts or grows come
// back in Admission::preempted (a growth with FgPreemption::grow_to set); shares in
// Admission::shares.
Admission Admit(const AdmissionInput& input, const policy::Policy& policy);

// Each PENDING job's place in its role's queue, 1 = looked at first (Admit's order). FG and BG jobs
// are counted apart: a BG job never waits for a FG job's turn. `pending` in submission order
// (JobManager::Queue()).
std::map<std::string, int> QueuePositions(std::vector<QueuedJob> pending);

// "37%": an idle fraction as people read it in reasons.
std::string IdlePercent(double fraction);

}  // namespace deepool::coordinator

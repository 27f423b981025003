// When an executor rank writes its periodic checkpoints: every N iterations (fixed by the
// count), every T seconds, or both, and always after the last iteration. Every rank of a job
// must decide the same at the same iteration, and their clocks differ, so a time-based
// checkpoint is decided at agreement points: the ranks all-reduce the seconds since the last
// checkpoint (the mean is the same number on every rank), write one when it is T or more, and
// otherwise predict from it the iteration at which T will have passed and meet again there.
// After a checkpoint they meet again after as many iterations as its interval had, so steady
// training needs one extra (one-number) all-reduce per checkpoint.
// Threading: the rank's training thread; a plain value.
#pragma once

#include <cstdint>

namespace deepool::worker {

class CheckpointSchedule {
 public:
  // What the ranks do after an iteration.
  enum class Step {
    kNothing,  // train on
    kAgree,    // all-reduce SecondsSinceLast and call Agreed with the mean
    kWrite,    // write a checkpoint (every_iterations reached, or the last iteration)
  };

  // every_iterations 0 / every_seconds 0: no checkpoint of that kind. Training runs iterations
  // first..total-1; now_s: a steady clock in seconds.
  CheckpointSchedule(int64_t every_iterations, double every_seconds, int64_t first, int64_t total,
                     double now_s);

  // After `done` iterations.
  Step After(int64_t done) const;
  // At a kAgree step: whether the mean elapsed time calls for a checkpoint now; if not, the
  // next agreement is planned from the iteration time it implies.
  bool Agreed(int64_t done, double mean_elapsed_s);
  // A checkpoint was written (or tried) after `done` iterations, at now_s. The next agreement
  // is as many iterations on as this interval had.
  void Written(int64_t done, double now_s);
  double SecondsSinceLast(double now_s) const { return now_s - last_s_; }
  int64_t next_agreement() const { return next_agree_; }

  // The first agreement comes this many iterations in, so the iteration time is measured
  // past the first (slow) one.
  static constexpr int64_t kFirstAgreementAfter = 3;

 private:
  // The next agreement after `done`, from the seconds per iteration seen since the last
  // checkpoint; at least one iteration on.
  void PlanNextAgreement(int64_t done, double mean_elapsed_s);

  int64_t every_iterations_;
  double every_seconds_;
  int64_t total_;
  int64_t last_done_;  // iterations done at the last checkpoint (or the start)
  double last_s_;
  int64_t next_agree_ = -1;  // -1: no time-based checkpoints
};

}  // namespace deepool::worker

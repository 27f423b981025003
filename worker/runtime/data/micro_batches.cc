#include "worker/runtime/data/micro_batches.h"

#include <string>
#include <utility>

namespace deepool::worker {
namespace {

class MicroBatchView : public DataSource {
 public:
  MicroBatchView(std::unique_ptr<DataSource> source, int64_t steps)
      : source_(std::move(source)), steps_(steps), micro_(source_->global_batch() / steps) {}

  int64_t global_batch() const override { return micro_; }
  int64_t num_samples() const override { return source_->num_samples(); }

 protected:
  StatusOr<Batch> ReadSamples(int64_t iteration, int64_t first, int64_t last) override {
    const int64_t offset = (iteration % steps_) * micro_;
    ASSIGN_OR_RETURN(Batch batch,
                     source_->Samples(iteration / steps_, offset + first, offset + last));
    batch.first -= offset;  // rows of the micro-batch
    return batch;
  }

 private:
  std::unique_ptr<DataSource> source_;
  const int64_t steps_;
  const int64_t micro_;
};

}  // namespace

StatusOr<std::unique_ptr<DataSource>> MicroBatches(std::unique_ptr<DataSource> source,
                                                   int64_t steps) {
  if (steps < 1) return InvalidArgumentError("accumulation steps must be >= 1");
  if (steps == 1) return source;
  const int64_t batch = source->global_batch();
  if (batch % steps != 0) {
    return InvalidArgumentError("a global batch of " + std::to_string(batch) +
                                " does not split into " + std::to_string(steps) +
                                " micro-batches of equal size");
  }
  return std::unique_ptr<DataSource>(new MicroBatchView(std::move(source), steps));
}

}  // namespace deepool::worker

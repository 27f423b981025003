#include "coordinator/stream_slots.h"

#include <string>

namespace deepool::coordinator {

StatusOr<StreamSlots::Slot> StreamSlots::Acquire() {
  int open = open_.load();
  do {
    if (open >= capacity_) {
      return ResourceExhaustedError("the coordinator already serves " + std::to_string(capacity_) +
                                    " watch and log streams (--max-client-streams); close some "
                                    "and try again");
    }
  } while (!open_.compare_exchange_weak(open, open + 1));
  return Slot(&open_);
}

}  // namespace deepool::coordinator

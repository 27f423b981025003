// JobPositions: where each job of a list is, by job id, for a list the pool simulator rebuilds at
// every decision (its active jobs, the policy's snapshot). A sorted vector found by binary search:
// filling it allocates nothing once its capacity is reached (a hash map allocated a node per job
// and decision, a tenth of a saturated simulation's time), and the list arrives already in id
// order when ids follow arrivals (a generated trace), so it is sorted only otherwise.
// Threading: a plain value; one thread at a time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace deepool::simulator {

class JobPositions {
 public:
  static constexpr size_t kAbsent = static_cast<size_t>(-1);

  // Starts a new list; Add its jobs, then Find.
  void Clear() {
    entries_.clear();
    sorted_ = true;
  }
  void Add(int64_t id, size_t position) {
    if (!entries_.empty() && entries_.back().first >= id) sorted_ = false;
    entries_.emplace_back(id, position);
  }
  // The position of `id`, or kAbsent.
  size_t Find(int64_t id) const {
    if (!sorted_) {
      std::sort(entries_.begin(), entries_.end());
      sorted_ = true;
    }
    const auto found =
        std::lower_bound(entries_.begin(), entries_.end(), std::pair<int64_t, size_t>(id, 0));
    return found != entries_.end() && found->first == id ? found->second : kAbsent;
  }

 private:
  mutable std::vector<std::pair<int64_t, size_t>> entries_;  // (id, position)
  mutable bool sorted_ = true;
};

}  // namespace deepool::simulator

#include "common/closest_match.h"

#include <algorithm>

namespace deepool {

size_t EditDistance(std::string_view a, std::string_view b) {
  // Optimal string alignment: three rows of the Levenshtein table, plus adjacent swaps.
  std::vector<size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t replace = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, replace});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    before.swap(previous);
    previous.swap(current);
  }
  return previous[b.size()];
}

std::optional<std::string> ClosestMatch(std::string_view word,
                                        const std::vector<std::string>& candidates) {
  const size_t allowed = word.size() <= 3 ? 1 : word.size() <= 6 ? 2 : 3;
  std::optional<std::string> best;
  size_t best_distance = allowed + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

}  // namespace deepool

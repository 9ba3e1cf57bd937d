#include "sim/config/did_you_mean.hpp"

#include <algorithm>
#include <array>
#include <limits>

namespace offsim::sim::config {

std::size_t edit_distance_below(std::string_view a, std::string_view b, std::size_t bound) {
  // Optimal string alignment distance, row by row over a (three rows: a transposition looks two
  // back). Every entry of a row is at least the smaller of the previous row's minimum and the
  // minimum of the row before it plus one, so once the last two rows cannot come under `bound`
  // no later one can: the rest is not computed.
  std::vector<std::size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  std::size_t previous_min = 0;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    std::size_t row_min = current[0];
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        current[j] = std::min(current[j], before[j - 2] + 1);
      row_min = std::min(row_min, current[j]);
    }
    if (row_min >= bound && previous_min + 1 >= bound) return bound;
    previous_min = row_min;
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return std::min(previous[b.size()], bound);
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  return edit_distance_below(a, b, std::numeric_limits<std::size_t>::max());
}

std::size_t bag_distance(std::string_view a, std::string_view b) {
  // An edit changes at most one character of each side's multiset of characters (a transposition
  // none), so the larger of the two multiset differences bounds the edit distance from below.
  std::array<int, 256> count{};
  for (const char ch : a) ++count[static_cast<unsigned char>(ch)];
  for (const char ch : b) --count[static_cast<unsigned char>(ch)];
  std::size_t only_a = 0, only_b = 0;
  for (const int n : count) {
    if (n > 0) only_a += static_cast<std::size_t>(n);
    if (n < 0) only_b += static_cast<std::size_t>(-n);
  }
  return std::max(only_a, only_b);
}

std::optional<std::string> did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    // Two lower bounds first, the difference in length and the bag distance: a candidate that
    // cannot be closer than the best so far is not measured, and one measured is given up as soon
    // as it cannot be closer (a long mistyped key against thousands of paths stays cheap).
    const std::size_t longer = std::max(word.size(), c.size());
    if (longer - std::min(word.size(), c.size()) >= best_distance) continue;
    if (bag_distance(word, c) >= best_distance) continue;
    const std::size_t dist = edit_distance_below(word, c, best_distance);
    if (dist < best_distance) {
      best_distance = dist;
      best = c;
    }
  }
  return best;
}

}  // namespace offsim::sim::config

#include "sim/config/did_you_mean.hpp"

#include <algorithm>

namespace offsim::sim::config {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment distance, O(|a||b|) with a full table: keys are short.
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::optional<std::string> did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    // The distance is at least the difference in length: a candidate that cannot be closer than
    // the best so far is not measured (a long mistyped key against every path read stays linear).
    const std::size_t longer = std::max(word.size(), c.size());
    if (longer - std::min(word.size(), c.size()) >= best_distance) continue;
    const std::size_t dist = edit_distance(word, c);
    if (dist < best_distance) {
      best_distance = dist;
      best = c;
    }
  }
  return best;
}

}  // namespace offsim::sim::config

#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace offsim::sim::config {

/// Edit distance (insertions, deletions, substitutions, adjacent transpositions).
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);
/// The same when it is below `bound`, else `bound` (computed only as far as needed to know).
[[nodiscard]] std::size_t edit_distance_below(std::string_view a, std::string_view b, std::size_t bound);
/// A lower bound of edit_distance in linear time: the larger multiset difference of the characters.
[[nodiscard]] std::size_t bag_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word`, if it is close enough to be a plausible misspelling
/// (distance at most max(2, |word| / 3)); ties go to the earlier candidate.
[[nodiscard]] std::optional<std::string> did_you_mean(std::string_view word,
                                                      const std::vector<std::string>& candidates);

}  // namespace offsim::sim::config

#pragma once

// The headline figures of an experiment's result, named once: summary.json, the sweep CSV,
// `offsim check`'s case files, validation ratios and the golden-figures test all read a figure's
// name and value here instead of listing them by hand.

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace offsim::models {

struct ExperimentResult;

enum class FigureKind {
  kReal,   // written as the shortest text that reads back to the same double
  kCount,  // a whole number (bytes), written as an integer
  kFlag,   // 1 or 0
};

struct Figure {
  std::string_view name;  // the key every output writes it under
  std::string_view unit;
  double (*get)(const ExperimentResult&);
  FigureKind kind = FigureKind::kReal;
  bool larger_is_better = false;  // how a sweep ranks its points by this figure

  /// The value as a CSV field: shortest round-trip text, or digits for a count.
  [[nodiscard]] std::string text(const ExperimentResult& r) const;
};

/// Every headline figure, in the order of the sweep CSV's columns (which write `feasible` as
/// their status column) and of `offsim check`'s case files (which leave out tokens_per_s).
[[nodiscard]] std::span<const Figure> headline_figures();

/// The figure called `name`; nullptr when there is none (for names a user gives).
[[nodiscard]] const Figure* find_figure(std::string_view name);

/// The figures called `names`, in that order; throws std::logic_error on a name not in the table
/// (for subsets the code lists, which must fit the table).
[[nodiscard]] std::vector<const Figure*> figures_named(std::initializer_list<std::string_view> names);

}  // namespace offsim::models

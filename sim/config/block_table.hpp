#pragma once
// Tables of numbers written as a block of text inside a YAML file: a literal block whose first line names the
// columns and whose every further line is one row.
//
//     efficiency_table: |
//       m      n      k      efficiency
//       1024   256    256    0.0092     # a comment
//       2048   256    256    0.0169
//
// Why: yaml-cpp reads a literal block as one scalar, about ten times faster than the same rows as a
// list of flow mappings (the 384-row H100 GEMM grid: 6.9 ms -> 0.6 ms), and that parse sits on the
// critical path of every process that prices a GEMM. The rows stay readable and diffable, and every
// cell keeps its own file:line:col for errors (the lines of a literal block are the file's lines).
//
// Fields are separated by spaces or tabs; `#` starts a comment; blank lines are skipped. The header
// may name the columns in any order; the cells come back in the order the reader asked for.

#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "sim/config/config_reader.hpp"

namespace offsim::sim::config {

struct BlockTableRow {
  std::vector<Located<double>> cells;  // in the order of the columns asked for; every one valid
  Location loc;                        // the row's first field
  std::string path;                    // key path of the row: "<table path>.<row index from 0>"
};

/// Reads `node` as a block table with exactly `columns` (each named once in the header). Errors
/// (not a literal block, an unknown, repeated or missing column, a row with too few or too many
/// fields, a field that is not a finite number) are recorded in the node's Context at the offending
/// line and column; a row with an error is left out. nullopt when the table cannot be read at all.
[[nodiscard]] std::optional<std::vector<BlockTableRow>> read_block_table(const Node& node,
                                                                         std::span<const std::string_view> columns);

}  // namespace offsim::sim::config

#pragma once
#include <string>
#include <vector>

namespace offsim::sim::report {

/// A plain-text table: a header row, then rows; columns are padded to their widest cell.
/// Columns after the first are right-aligned (they hold numbers).
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  [[nodiscard]] std::string str() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace offsim::sim::report

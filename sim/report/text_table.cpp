#include "sim/report/text_table.hpp"

#include <fmt/format.h>
#include <algorithm>

namespace offsim::sim::report {

std::string TextTable::str() const {
  std::vector<std::size_t> width(header_.size(), 0);
  const auto measure = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  };
  measure(header_);
  for (const auto& r : rows_) measure(r);
  const auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (std::size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      if (i > 0) out += "  ";
      out += i == 0 ? fmt::format("{:<{}}", cell, width[i]) : fmt::format("{:>{}}", cell, width[i]);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header_);
  std::size_t total = 0;
  for (const auto w : width) total += w;
  out += std::string(total + 2 * (width.size() - 1), '-') + "\n";
  for (const auto& r : rows_) out += line(r);
  return out;
}

}  // namespace offsim::sim::report

#include "sim/report/csv.hpp"

namespace offsim::sim::report {

std::vector<std::string> parse_csv_line(const std::string& line) {
  std::vector<std::string> out(1);
  const std::size_t end = !line.empty() && line.back() == '\r' ? line.size() - 1 : line.size();
  bool quoted = false;
  for (std::size_t i = 0; i < end; ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < end && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += '"';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

}  // namespace offsim::sim::report

#pragma once
// CSV as offsim writes and reads it (RFC 4180 quoting): one parser for every CSV it reads (sweep
// results, search results, the microbenchmark tables of `offsim calibrate`), one field writer.
#include <string>
#include <vector>

namespace offsim::sim::report {

/// The fields of one CSV line: a field in double quotes may hold commas and doubled quotes ("" for
/// "); a carriage return at the end of the line (a file written on Windows) is dropped.
[[nodiscard]] std::vector<std::string> parse_csv_line(const std::string& line);

/// `s` as one CSV field: quoted when it holds a comma, a quote or a newline (quotes doubled,
/// newlines written as spaces, so that a record stays on one line).
[[nodiscard]] std::string csv_field(const std::string& s);

}  // namespace offsim::sim::report

#include "sim/config/block_table.hpp"

#include "sim/config/did_you_mean.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <string>

namespace offsim::sim::config {

namespace {

struct Field {
  std::string_view text;
  std::size_t offset;  // in its line of the scalar
};

// The fields of one line, up to a `#` comment, split at spaces and tabs.
std::vector<Field> split_fields(std::string_view line) {
  if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
  std::vector<Field> fields;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) fields.push_back({line.substr(start, i - start), start});
  }
  return fields;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      if (start < text.size()) lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// Lines `first` .. `first + count - 1` (1-based) of `file`, fewer where the file is shorter or
// cannot be read.
std::vector<std::string> read_file_lines(const std::string& file, int first, std::size_t count) {
  std::vector<std::string> out;
  std::ifstream in(file, std::ios::binary);
  std::string line;
  for (int number = 1; out.size() < count && std::getline(in, line); ++number) {
    if (number >= first) out.push_back(line);
  }
  return out;
}

std::string column_list(std::span<const std::string_view> columns) {
  return fmt::format("{}", fmt::join(columns, " "));
}

}  // namespace

std::optional<std::vector<BlockTableRow>> read_block_table(const Node& node,
                                                           std::span<const std::string_view> columns) {
  if (node.broken()) return std::nullopt;
  Context& ctx = node.context();
  const Location& at = node.location();
  if (!node.is_scalar()) {
    ctx.error(at, node.path(),
              fmt::format("expected a table in a literal block (|) whose first line names the columns ({}) and "
                          "whose every further line is one row",
                          column_list(columns)));
    return std::nullopt;
  }
  const std::string& text = node.yaml().Scalar();
  ctx.record(node.path(), text);
  const std::vector<std::string_view> lines = split_lines(text);

  // Where each line of the block lies in the file. yaml-cpp marks a block scalar at its `|`, and the
  // block's lines are the file's following lines with their indentation taken off. A value given
  // by an override (line 0) has no lines of its own: its cells are located at the override.
  const bool in_file = at.line > 0;
  std::vector<int> indent(lines.size(), 0);
  if (in_file) {
    const auto raw = read_file_lines(at.file, at.line, lines.size() + 1);
    const bool literal = !raw.empty() && at.column >= 1 && static_cast<std::size_t>(at.column) <= raw[0].size() &&
                         raw[0][static_cast<std::size_t>(at.column) - 1] == '|';
    if (!literal) {
      ctx.error(at, node.path(),
                fmt::format("a table must be a literal block (write `{}: |`, then the header line {} and one row "
                            "per line, indented below it), so that its lines are the file's lines",
                            node.path().substr(node.path().rfind('.') + 1), column_list(columns)));
      return std::nullopt;
    }
    for (std::size_t i = 0; i < lines.size() && i + 1 < raw.size(); ++i) {
      std::string_view file_line = raw[i + 1];
      if (!file_line.empty() && file_line.back() == '\r') file_line.remove_suffix(1);
      if (file_line.size() >= lines[i].size() && file_line.ends_with(lines[i]))
        indent[i] = static_cast<int>(file_line.size() - lines[i].size());
    }
  }
  const auto locate = [&](std::size_t line, std::size_t offset) {
    if (!in_file) return at;
    return Location{at.file, at.line + 1 + static_cast<int>(line), indent[line] + static_cast<int>(offset) + 1};
  };

  // The header: the first line with a field. Cell j of a row goes to output position order[j].
  std::size_t line = 0;
  std::vector<Field> header;
  for (; line < lines.size() && header.empty(); ++line) header = split_fields(lines[line]);
  if (header.empty()) {
    ctx.error(at, node.path(),
              fmt::format("an empty table: expected a header line ({}), then rows", column_list(columns)));
    return std::nullopt;
  }
  const std::size_t header_line = line - 1;
  std::vector<std::size_t> order;
  std::vector<bool> named(columns.size(), false);
  bool header_ok = true;
  for (const auto& f : header) {
    const auto it = std::find(columns.begin(), columns.end(), f.text);
    if (it == columns.end()) {
      const auto hint = did_you_mean(f.text, std::vector<std::string>(columns.begin(), columns.end()));
      ctx.error(locate(header_line, f.offset), node.path(),
                hint ? fmt::format("unknown column '{}' (did you mean '{}'?)", f.text, *hint)
                     : fmt::format("unknown column '{}' (the columns are {})", f.text, column_list(columns)));
      header_ok = false;
      continue;
    }
    const auto index = static_cast<std::size_t>(it - columns.begin());
    if (named[index]) {
      ctx.error(locate(header_line, f.offset), node.path(), fmt::format("column '{}' is named twice", f.text));
      header_ok = false;
    }
    named[index] = true;
    order.push_back(index);
  }
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (!named[c]) {
      ctx.error(
          locate(header_line, header.front().offset), node.path(),
          fmt::format("missing column '{}' in the header (the columns are {})", columns[c], column_list(columns)));
      header_ok = false;
    }
  }
  if (!header_ok) return std::nullopt;

  std::vector<BlockTableRow> rows;
  std::size_t row_index = 0;
  for (; line < lines.size(); ++line) {
    const std::vector<Field> fields = split_fields(lines[line]);
    if (fields.empty()) continue;
    const std::string path = node.child_path(std::to_string(row_index++));
    const Location row_at = locate(line, fields.front().offset);
    if (fields.size() != header.size()) {
      ctx.error(row_at, path,
                fmt::format("expected {} fields ({}), got {}", header.size(), column_list(columns), fields.size()));
      continue;
    }
    BlockTableRow row{std::vector<Located<double>>(columns.size()), row_at, path};
    bool row_ok = true;
    for (std::size_t j = 0; j < fields.size(); ++j) {
      const std::string_view s = fields[j].text;
      double v = 0.0;
      const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      const Location cell_at = locate(line, fields[j].offset);
      if (ec != std::errc{} || ptr != s.data() + s.size() || !std::isfinite(v)) {
        ctx.error(cell_at, fmt::format("{}.{}", path, columns[order[j]]),
                  fmt::format("expected a number, got \"{}\"", s));
        row_ok = false;
        continue;
      }
      row.cells[order[j]] = Located<double>{v, cell_at, true};
    }
    if (row_ok) rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace offsim::sim::config

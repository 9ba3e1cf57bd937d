#include "sim/report/json_writer.hpp"

#include <fmt/format.h>
#include <cmath>
#include <stdexcept>

namespace offsim::sim::report {

std::string JsonWriter::escape(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<int>(ch));
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

void JsonWriter::newline() {
  out_ += '\n';
  out_.append(stack_.size() * 2, ' ');
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (stack_.empty()) return;
  if (stack_.back().is_object) throw std::logic_error("JsonWriter: value without key inside an object");
  if (!stack_.back().empty) out_ += ',';
  stack_.back().empty = false;
  newline();
}

JsonWriter& JsonWriter::key(std::string_view k) {
  if (stack_.empty() || !stack_.back().is_object || after_key_) throw std::logic_error("JsonWriter: misplaced key");
  if (!stack_.back().empty) out_ += ',';
  stack_.back().empty = false;
  newline();
  out_ += escape(k);
  out_ += ": ";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  stack_.push_back({true, true});
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  if (stack_.empty() || !stack_.back().is_object) throw std::logic_error("JsonWriter: end_object mismatch");
  const bool empty = stack_.back().empty;
  stack_.pop_back();
  if (!empty) newline();
  out_ += '}';
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  stack_.push_back({false, true});
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  if (stack_.empty() || stack_.back().is_object) throw std::logic_error("JsonWriter: end_array mismatch");
  const bool empty = stack_.back().empty;
  stack_.pop_back();
  if (!empty) newline();
  out_ += ']';
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view v) {
  before_value();
  out_ += escape(v);
  return *this;
}

JsonWriter& JsonWriter::value(double v) {
  before_value();
  out_ += std::isfinite(v) ? fmt::format("{}", v) : std::string("null");
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t v) {
  before_value();
  out_ += fmt::format("{}", v);
  return *this;
}

JsonWriter& JsonWriter::value(std::uint64_t v) {
  before_value();
  out_ += fmt::format("{}", v);
  return *this;
}

JsonWriter& JsonWriter::value(bool v) {
  before_value();
  out_ += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

std::string JsonWriter::str() const {
  if (!stack_.empty()) throw std::logic_error("JsonWriter: unclosed container");
  return out_ + "\n";
}

}  // namespace offsim::sim::report

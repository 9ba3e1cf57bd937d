#pragma once
// A small streaming JSON writer with deterministic output: keys in the order written, doubles in
// their shortest round-trip form (fmt's "{}"), non-finite numbers as null, two-space indentation.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace offsim::sim::report {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);
  JsonWriter& value(std::string_view v);
  JsonWriter& value(const char* v) { return value(std::string_view(v)); }
  JsonWriter& value(double v);
  JsonWriter& value(std::int64_t v);
  JsonWriter& value(std::uint64_t v);
  JsonWriter& value(int v) { return value(static_cast<std::int64_t>(v)); }
  JsonWriter& value(bool v);
  JsonWriter& null();
  template <class T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  /// The document, ending in a newline. Throws std::logic_error if a container is still open.
  [[nodiscard]] std::string str() const;

  static std::string escape(std::string_view s);

 private:
  void before_value();
  void newline();
  std::string out_;
  struct Level {
    bool is_object;
    bool empty;
  };
  std::vector<Level> stack_;
  bool after_key_ = false;
};

}  // namespace offsim::sim::report

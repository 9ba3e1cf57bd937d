#pragma once
// Text written as it is produced: into a string (tests, callers that want the whole text) or
// through a buffer flushed to a file descriptor every kFlushBytes, so that an output of hundreds
// of megabytes (trace.json of a full machine) never sits whole in memory.
#include <fmt/format.h>
#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>

namespace offsim::sim::report {

class TextSink {
 public:
  /// The buffer size at which a file sink writes its text out.
  static constexpr std::size_t kFlushBytes = std::size_t{1} << 20;

  /// Into a string, read by take().
  TextSink() = default;
  /// Into the open file `fd` (not closed here); `name` names it in errors (OutputError).
  TextSink(int fd, std::string name) : fd_(fd), name_(std::move(name)) { buffer_.reserve(2 * kFlushBytes); }

  void append(std::string_view text) {
    if (fd_ >= 0 && text.size() >= kFlushBytes) {
      flush();  // a large piece goes to the file as it is, not through the buffer
      write_out(text);
      return;
    }
    buffer_.append(text);
    if (fd_ >= 0 && buffer_.size() >= kFlushBytes) flush();
  }
  void append(char c) {
    buffer_.push_back(c);
    if (fd_ >= 0 && buffer_.size() >= kFlushBytes) flush();
  }
  template <class... T>
  void format(fmt::format_string<T...> f, T&&... args) {
    fmt::format_to(std::back_inserter(buffer_), f, std::forward<T>(args)...);
    if (fd_ >= 0 && buffer_.size() >= kFlushBytes) flush();
  }
  /// Writes the buffer to the file (nothing for a string sink). Throws OutputError.
  void flush();
  /// The text of a string sink (empty for a file sink, whose text is in the file).
  [[nodiscard]] std::string take() { return std::move(buffer_); }
  /// Bytes appended so far.
  [[nodiscard]] std::size_t bytes() const { return written_ + buffer_.size(); }

 private:
  void write_out(std::string_view text);

  int fd_ = -1;
  std::string name_;
  std::string buffer_;
  std::size_t written_ = 0;  // flushed to the file
};

}  // namespace offsim::sim::report

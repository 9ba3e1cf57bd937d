#include "sim/report/text_sink.hpp"

#include <cerrno>
#include <cstring>

#include <unistd.h>

#include "sim/report/atomic_file.hpp"

namespace offsim::sim::report {

void TextSink::flush() {
  if (fd_ < 0) return;
  write_out(buffer_);
  buffer_.clear();
}

void TextSink::write_out(std::string_view text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw OutputError(fmt::format("cannot write {}: {}", name_, std::strerror(errno)));
    }
    done += static_cast<std::size_t>(n);
  }
  written_ += done;
}

}  // namespace offsim::sim::report

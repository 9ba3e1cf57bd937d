#include "sim/report/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace offsim::sim::report {

void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  const std::filesystem::path tmp = path.string() + fmt::format(".tmp.{}", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  // Named by the file asked for: the temporary's name (with the process id) means nothing to a user.
  if (fd < 0) throw OutputError(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      std::filesystem::remove(tmp);
      throw OutputError(fmt::format("cannot write {}: {}", tmp.string(), std::strerror(err)));
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::filesystem::remove(tmp);
    throw OutputError(fmt::format("cannot flush {}: {}", tmp.string(), std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::filesystem::remove(tmp);
    throw OutputError(fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), std::strerror(err)));
  }
}

}  // namespace offsim::sim::report

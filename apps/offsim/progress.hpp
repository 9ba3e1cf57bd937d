#pragma once
// Progress of a sweep or search on stderr (apps/offsim).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

namespace offsim::app {

// A progress bar with ETA on a terminal; otherwise (logs, CI) a plain line at each tenth of the
// points and at the end, not one per point.
class Progress {
 public:
  Progress(std::string what, std::size_t already)
      : what_(std::move(what)),
        already_(already),
        start_(std::chrono::steady_clock::now()),
        terminal_(isatty(fileno(stderr)) != 0) {}
  void operator()(std::size_t done, std::size_t total) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const std::size_t ran = done - already_;
    const double eta = ran > 0 ? elapsed / static_cast<double>(ran) * static_cast<double>(total - done) : 0.0;
    if (terminal_) {
      constexpr int kWidth = 30;
      const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
      fmt::print(stderr, "\r[{:<{}}] {}/{} points, ETA {:.0f} s   ", std::string(filled, '#'), kWidth, done, total,
                 eta);
      if (done == total) fmt::print(stderr, "\n");
    } else {
      const std::size_t tenth = total * (reported_ + 1) / 10;
      if (done < total && done < tenth) return;
      while (reported_ < 10 && total * (reported_ + 1) / 10 <= done) ++reported_;
      fmt::print(stderr, "{}: {}/{} points done, ETA {:.0f} s\n", what_, done, total, eta);
    }
  }

 private:
  std::string what_;
  std::size_t reported_ = 0;  // tenths of the points already reported (plain lines)
  std::size_t already_;
  std::chrono::steady_clock::time_point start_;
  bool terminal_;  // stderr is a terminal: asked once, not at every point (a system call)
};

}  // namespace offsim::app

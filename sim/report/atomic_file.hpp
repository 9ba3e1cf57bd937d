#pragma once
// Outputs written atomically, alone or as a set, and what an interrupt (SIGINT, SIGTERM, SIGHUP)
// leaves of them (docs/extending.md, "An output"):
// - every file is written to a temporary next to it (NAME.tmp.<pid>), flushed, then renamed over
//   NAME: a reader sees the old file or the new one, never a partial one;
// - a set of files (run --out: summary.json, timeline.csv, trace.json, config.resolved.yaml) is
//   written to temporaries first, all of them, and renamed into place only then, with interrupts
//   held back during the renames (microseconds): the folder holds the previous complete set or the
//   new one, never a mix;
// - on an interrupt, the handler install_interrupt_cleanup() installs removes the temporaries
//   being written and a folder made for the set that is still empty, then ends the process by the
//   same signal (the shell sees 130 for SIGINT, 143 for SIGTERM);
// - a process killed outright (SIGKILL) runs no handler: its NAME.tmp.<pid> files stay until the
//   next set is written into that folder, which removes every temporary whose process is gone.
// The temporaries being written are the one piece of process-wide state here: a signal handler
// can reach no other. They are kept in a fixed table read by the handler with async-signal-safe
// calls only (unlink, rmdir).
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sim/report/text_sink.hpp"

namespace offsim::sim::report {

/// An output that cannot be written (a folder that is a file, no space, no permission): the
/// environment, not the input (the CLI exits 3).
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Whether write_file_atomically waits for the disk (fsync) before the rename. Either way a reader
/// and an interrupted process see the old file or the new one; without the wait a power cut just
/// after may leave neither (an empty file), so `os_cache` is for files that hold nothing to lose
/// yet: a sweep's CSV started with its header alone, whose rows are appended without a wait anyway.
/// The wait is 0.2-0.5 ms on this project's machines, a third of a search point.
enum class Sync { disk, os_cache };

/// Writes `content` to `path` atomically: into a temporary file in the same directory, flushed
/// (to the disk with Sync::disk), then renamed over the target. A reader sees the old file or the
/// new one, never a partial one. Throws OutputError naming the path on failure.
void write_file_atomically(const std::filesystem::path& path, std::string_view content, Sync sync = Sync::disk);

/// Files written together into one folder: add() writes each to its temporary, commit() renames
/// them all into place in the order added (put the file whose presence means "complete" last).
/// Destroyed without commit() (an error while writing), it removes its temporaries and the folder
/// if it made it and it is empty, so the previous set stays as it was.
class AtomicFileSet {
 public:
  /// Makes `dir` (and its parents) when missing; throws OutputError when it cannot.
  explicit AtomicFileSet(std::filesystem::path dir);
  ~AtomicFileSet();
  AtomicFileSet(const AtomicFileSet&) = delete;
  AtomicFileSet& operator=(const AtomicFileSet&) = delete;

  /// Writes `content` to the temporary of `dir / name` (flushed). Throws OutputError.
  void add(const std::string& name, std::string_view content);
  /// Writes the temporary of `dir / name` as `write` produces it, through a sink that flushes
  /// every TextSink::kFlushBytes (the file is never held whole in memory), then flushes it.
  /// Throws OutputError, or what `write` throws (the temporary is then removed).
  void add_streamed(const std::string& name, const std::function<void(TextSink&)>& write);
  /// Renames every temporary into place, interrupts held back until the last rename is done.
  void commit();

 private:
  struct Pending {
    std::filesystem::path tmp, target;
    int slot;
  };
  std::filesystem::path dir_;
  int dir_slot_ = -1;  // the folder, when this set made it (removed on an interrupt if empty)
  std::vector<Pending> pending_;
  bool committed_ = false;
};

/// Installs the SIGINT / SIGTERM / SIGHUP handler that removes the temporaries being written
/// before the process ends by the signal. Called once by main(); without it a signal ends the
/// process as the default action does (temporaries are then left behind).
void install_interrupt_cleanup();

}  // namespace offsim::sim::report

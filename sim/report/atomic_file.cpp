#include "sim/report/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace offsim::sim::report {

namespace {

namespace fs = std::filesystem;

// --- the paths an interrupt must remove, read by the signal handler ---
// A slot holds a NUL-terminated path; `state` says what the handler does with it. A slot is filled
// before it is marked, and unmarked before it is reused, so the handler never reads a path being
// written. Slots are taken under a mutex (writers on several threads: a sweep's workers); the
// handler takes no lock.
enum SlotState : int { kFree = 0, kUnlink = 1, kRmdir = 2 };
constexpr std::size_t kSlots = 64;        // temporaries alive at once: a set of 4, a sweep's workers' CSV rows
constexpr std::size_t kPathBytes = 4096;  // PATH_MAX on Linux
struct Slot {
  std::array<char, kPathBytes> path{};
  std::atomic<int> state{kFree};
};
std::array<Slot, kSlots> slots;
std::mutex slots_mutex;
static_assert(std::atomic<int>::is_always_lock_free, "the handler reads the slots' states");

// While a set's renames run, the handler only notes the signal; the renames then finish and the
// signal is raised again (commit()).
std::atomic<int> committing{0};
std::atomic<int> deferred_signal{0};

// Registers `path` for `state`; -1 when the path is too long or the table is full (then an
// interrupt leaves that temporary behind, as without the handler).
int take_slot(const fs::path& path, SlotState state) {
  const std::string& s = path.native();
  if (s.size() + 1 > kPathBytes) return -1;
  std::lock_guard lock(slots_mutex);
  for (std::size_t i = 0; i < kSlots; ++i) {
    if (slots[i].state.load() != kFree) continue;
    std::memcpy(slots[i].path.data(), s.c_str(), s.size() + 1);
    slots[i].state.store(state);
    return static_cast<int>(i);
  }
  return -1;
}

void release_slot(int slot) {
  if (slot < 0) return;
  std::lock_guard lock(slots_mutex);
  slots[static_cast<std::size_t>(slot)].state.store(kFree);
}

// Temporaries first, folders after (a folder is removed only once it is empty).
void remove_registered() {
  for (auto& s : slots) {
    if (s.state.load() == kUnlink) (void)::unlink(s.path.data());
  }
  for (auto& s : slots) {
    if (s.state.load() == kRmdir) (void)::rmdir(s.path.data());
  }
}

void end_by(int sig) {
  remove_registered();
  (void)std::signal(sig, SIG_DFL);
  (void)std::raise(sig);
}

extern "C" void on_interrupt(int sig) {
  if (committing.load() != 0) {
    deferred_signal.store(sig);
    return;
  }
  end_by(sig);
}

// Writes what `write` puts into a sink on `tmp`, flushed; removes it and throws OutputError (naming
// `path`) on failure, or rethrows what `write` threw.
void write_temporary_with(const fs::path& tmp, const fs::path& path, const std::function<void(TextSink&)>& write,
                          Sync sync = Sync::disk) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  // Named by the file asked for: the temporary's name (with the process id) means nothing to a user.
  if (fd < 0) throw OutputError(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
  try {
    TextSink sink(fd, path.string());
    write(sink);
    sink.flush();
  } catch (...) {
    ::close(fd);
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  if ((sync == Sync::disk && ::fsync(fd) != 0) || ::close(fd) != 0) {
    const int err = errno;
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw OutputError(fmt::format("cannot flush {}: {}", path.string(), std::strerror(err)));
  }
}

void write_temporary(const fs::path& tmp, const fs::path& path, std::string_view content, Sync sync = Sync::disk) {
  write_temporary_with(
      tmp, path, [&](TextSink& sink) { sink.append(content); }, sync);
}

fs::path temporary_of(const fs::path& path) {
  return path.string() + fmt::format(".tmp.{}", ::getpid());
}

void rename_into_place(const fs::path& tmp, const fs::path& path) {
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw OutputError(fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), std::strerror(err)));
  }
}

// A temporary's writer, from its name NAME.tmp.<pid>; 0 when the name is not one of ours.
pid_t writer_of_temporary(const std::string& name) {
  const auto dot = name.rfind(".tmp.");
  if (dot == std::string::npos || dot + 5 == name.size()) return 0;
  pid_t pid = 0;
  for (std::size_t i = dot + 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > 99'999'999) return 0;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

// Removes the temporaries a killed writer left in `dir` (SIGKILL, a power cut: no handler ran).
// Only those whose process no longer exists: kill(pid, 0) fails with ESRCH. A live process with
// that id, ours or another's (a reused id), keeps its files; so does a writer on another host
// sharing the folder only if its id is alive here (two hosts writing one --out folder at once is
// not supported anyway).
void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const pid_t pid = writer_of_temporary(it->path().filename().string());
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

}  // namespace

void write_file_atomically(const fs::path& path, std::string_view content, Sync sync) {
  const fs::path tmp = temporary_of(path);
  const int slot = take_slot(tmp, kUnlink);
  try {
    write_temporary(tmp, path, content, sync);
    rename_into_place(tmp, path);
  } catch (...) {
    release_slot(slot);
    throw;
  }
  release_slot(slot);
}

AtomicFileSet::AtomicFileSet(fs::path dir) : dir_(std::move(dir)) {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) {
    // Registered before it exists: an interrupt between the two removes it if it is empty.
    dir_slot_ = take_slot(dir_, kRmdir);
    fs::create_directories(dir_, ec);
    if (ec) {
      release_slot(dir_slot_);
      throw OutputError(fmt::format("cannot make the folder {}: {}", dir_.string(), ec.message()));
    }
  } else {
    remove_stale_temporaries(dir_);
  }
}

AtomicFileSet::~AtomicFileSet() {
  for (const auto& p : pending_) {
    if (!committed_) {
      std::error_code ignored;
      fs::remove(p.tmp, ignored);
    }
    release_slot(p.slot);
  }
  if (dir_slot_ >= 0) {
    if (!committed_) {
      std::error_code ignored;
      if (fs::is_empty(dir_, ignored)) fs::remove(dir_, ignored);
    }
    release_slot(dir_slot_);
  }
}

void AtomicFileSet::add(const std::string& name, std::string_view content) {
  add_streamed(name, [&](TextSink& sink) { sink.append(content); });
}

void AtomicFileSet::add_streamed(const std::string& name, const std::function<void(TextSink&)>& write) {
  const fs::path target = dir_ / name;
  const fs::path tmp = temporary_of(target);
  const int slot = take_slot(tmp, kUnlink);
  try {
    write_temporary_with(tmp, target, write);
  } catch (...) {
    release_slot(slot);
    throw;
  }
  pending_.push_back({tmp, target, slot});
}

void AtomicFileSet::commit() {
  committing.store(1);
  std::exception_ptr error;
  std::size_t done = 0;
  try {
    for (; done < pending_.size(); ++done) rename_into_place(pending_[done].tmp, pending_[done].target);
  } catch (...) {
    error = std::current_exception();
  }
  committed_ = error == nullptr;
  committing.store(0);
  if (const int sig = deferred_signal.exchange(0); sig != 0) {
    // The set is in place (or failed as a whole): the interrupt now ends the process.
    for (auto& p : pending_) release_slot(std::exchange(p.slot, -1));
    release_slot(std::exchange(dir_slot_, -1));
    end_by(sig);
  }
  if (error) std::rethrow_exception(error);
}

void install_interrupt_cleanup() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) (void)::sigaction(sig, &action, nullptr);
}

}  // namespace offsim::sim::report

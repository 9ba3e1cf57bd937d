// offsim's global operator new and delete: a per-thread cache of freed small blocks in front of
// malloc (docs/adr/0015-small-block-cache.md).
//
// Why: a search or sweep point builds and drops a task graph, a machine's routes, the Communicator's
// maps and a simulator's closures, hundreds of thousands of small blocks a second. glibc's
// per-thread cache keeps 7 freed blocks of a size; the rest go back to its bins, where blocks
// over 128 bytes are coalesced and split again at the next request (_int_malloc, _int_free,
// malloc_consolidate and unlink_chunk were 10% of the tp 8 search's cycles under perf). Measured
// on that search, one job, medians of 9 alternated runs: glibc's cache raised to 1,000 blocks a
// size (GLIBC_TUNABLES, which a program cannot set for itself) took it from 58.9 to 55.0 ms. This
// cache does the same for every offsim process.
//
// The model: blocks of up to kLargestCached bytes are served in classes of kGranule bytes; a freed
// block goes on its thread's list for its class unless the list holds kBlocksPerClass already,
// and a request takes the newest block of its class (LIFO, as glibc's cache). Any block may always
// go back to malloc (free is correct for every block), and a block may serve any class no larger
// than its usable size, so a block freed on another thread than the one that allocated it is
// simply kept by the thread that frees it. A thread's lists go back to malloc when it ends (a
// sweep worker's); the main thread's stay until the process exits. Outputs do not depend on it:
// nothing in offsim reads addresses for its results.
//
// Not under AddressSanitizer (a reused block would hide a use after free from it).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OFFSIM_UNDER_ASAN
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define OFFSIM_UNDER_ASAN
#endif

#if defined(__GLIBC__) && !defined(OFFSIM_UNDER_ASAN)
#include <malloc.h>
#include <unistd.h>

namespace {

constexpr std::size_t kGranule = 16;          // malloc's alignment on 64-bit glibc: every class keeps it
constexpr std::size_t kLargestCached = 1024;  // glibc's own per-thread cache stops at 1,032 bytes
constexpr std::size_t kClasses = kLargestCached / kGranule + 1;
// glibc's cache holds 7 a size; 1,000 measured best of 200 and 1,000 (above). The most a thread
// keeps is then kBlocksPerClass x (16 + 32 + ... + 1,024) bytes = 33 MB in the worst case; the
// runs measured keep about 1 MB (ADR 0015).
constexpr std::uint32_t kBlocksPerClass = 1000;

struct FreeBlock {
  FreeBlock* next;
};

// Trivially constructed and destroyed, so a thread reaches its lists without a guard.
struct Lists {
  FreeBlock* head[kClasses];
  std::uint32_t count[kClasses];
  bool drain_registered;  // the thread's Drain exists (it hands the lists back when the thread ends)
  bool retired;           // the thread is ending: blocks go straight back to malloc
};
constinit thread_local Lists lists{};

std::size_t class_of_request(std::size_t bytes) {
  return bytes == 0 ? 1 : (bytes + kGranule - 1) / kGranule;
}

// Hands a thread's cached blocks back to malloc when the thread ends. The main thread's lists are
// left to the process's exit (freeing them one by one would only cost time).
struct Drain {
  Drain(const Drain&) = delete;
  Drain& operator=(const Drain&) = delete;
  Drain() = default;
  ~Drain() {
    lists.retired = true;
    for (std::size_t c = 0; c < kClasses; ++c) {
      while (FreeBlock* b = lists.head[c]) {
        lists.head[c] = b->next;
        std::free(b);
      }
      lists.count[c] = 0;
    }
  }
};

void register_drain() {
  lists.drain_registered = true;
  if (gettid() == getpid()) return;  // the main thread: its lists end with the process
  static thread_local Drain drain;
  (void)&drain;
}

void keep_or_free(void* p, std::size_t cls) noexcept {
  Lists& l = lists;
  if (cls >= kClasses || l.count[cls] >= kBlocksPerClass || l.retired) {
    std::free(p);
    return;
  }
  if (!l.drain_registered) register_drain();
  auto* block = static_cast<FreeBlock*>(p);
  block->next = l.head[cls];
  l.head[cls] = block;
  ++l.count[cls];
}

void* allocate(std::size_t bytes) {
  if (bytes <= kLargestCached) {
    const std::size_t cls = class_of_request(bytes);
    Lists& l = lists;
    if (FreeBlock* b = l.head[cls]) {
      l.head[cls] = b->next;
      --l.count[cls];
      return b;
    }
    bytes = cls * kGranule;  // the whole class, so that the block serves any request of it later
  }
  for (;;) {
    if (void* p = std::malloc(bytes)) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

}  // namespace

void* operator new(std::size_t bytes) {
  return allocate(bytes);
}
void* operator new[](std::size_t bytes) {
  return allocate(bytes);
}

// Unsized: the block's usable size (at least its class's bytes) names a class it can serve.
void operator delete(void* p) noexcept {
  if (p != nullptr) keep_or_free(p, malloc_usable_size(p) / kGranule);
}
void operator delete[](void* p) noexcept {
  if (p != nullptr) keep_or_free(p, malloc_usable_size(p) / kGranule);
}
// Sized: the request's own class (new allocated the whole class).
void operator delete(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes > kLargestCached) {
    std::free(p);
    return;
  }
  keep_or_free(p, class_of_request(bytes));
}
void operator delete[](void* p, std::size_t bytes) noexcept {
  operator delete(p, bytes);
}

#endif

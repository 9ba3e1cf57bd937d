// The process heap's setup (docs/adr/0009-heap-on-transparent-huge-pages.md).
#include "apps/offsim/heap.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace offsim::app {

namespace {

// The block that covers the main heap's part below its first huge page (back_heap_with_huge_pages),
// kept to the end. Volatile: the compiler may drop an allocation whose pointer nobody reads.
void* volatile below_first_huge_page = nullptr;

// A transparent huge page on x86-64: 2 MiB.
constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;

bool huge_pages_off() {
  const char* choice = std::getenv("OFFSIM_HUGE_PAGES");
  return choice != nullptr && std::string_view(choice) == "0";
}

}  // namespace

// Keep freed memory in the process instead of handing it back to the kernel at every free: a
// sweep builds and drops one task graph per point, and glibc's defaults (trim above 128 KiB, mmap
// above 128 KiB, both adapting) returned each graph's memory and faulted it in again for the next
// point, which cost about half the time of a 384-GCD sweep point on the 2-core machine
// (bench/perf/scale.sh; measured 1.4 s -> 0.7 s for 180 points). Peak memory is unchanged: what
// is kept is reused.
void keep_freed_memory() {
#ifdef __GLIBC__
  constexpr int kTrimThreshold = 1 << 30;  // give memory back only past 1 GiB free at the top
  constexpr int kMmapThreshold = 1 << 28;  // blocks up to 256 MiB come from the reusable heap
  constexpr int kTopPad = 1 << 26;         // grow the heap 64 MiB at a time
  mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
  mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
  mallopt(M_TOP_PAD, kTopPad);
#endif
}

// Back the heap with transparent huge pages. The machine and the task graph of a large run are
// hundreds of megabytes touched once each, and on these virtual machines every 4 KiB page fault and
// TLB miss is expensive: GPT-1T on the full Frontier spent a quarter of its time faulting pages in
// and ran in 1.55 s with 4 KiB pages, 0.55-0.9 s with 2 MiB pages (bench/perf/scale.sh). The
// kernel's THP mode is `madvise`, and glibc advises its heap only under a tunable read at process
// start (ADR 0009). So the heap is grown once, at start, by address space that nothing has touched
// (blocks under the mmap threshold, freed at once and kept below the trim threshold, so they stay
// the heap's top), and that range is advised MADV_HUGEPAGE: what the run later allocates there
// faults in 2 MiB at a time. Untouched, the range costs no memory. Nothing else changes (same
// outputs); where THP is off the advice does nothing. OFFSIM_HUGE_PAGES=0 skips it.
//
// The heap starts where the program's data ends, not on a 2 MiB boundary, and its part below the
// first boundary (up to 2 MiB) can only have 4 KiB pages. The allocator takes fresh blocks from
// the lowest free address, so every run faulted that part in first, 4 KiB at a time: 400-450 of a
// 1-job search's 660 page faults. A block from the heap's free top up to the boundary, never
// freed and never written (but for its header), keeps the run's blocks on huge pages from the
// start: 660 -> 220 page faults.
void back_heap_with_huge_pages() {
#if defined(__GLIBC__) && defined(__linux__)
  if (huge_pages_off()) return;
  constexpr std::size_t kBlock = std::size_t{240} << 20;  // under keep_freed_memory's mmap threshold
  constexpr int kBlocks = 3;                              // 720 MiB (+ the top pad): under its trim threshold
  const auto start = reinterpret_cast<std::uintptr_t>(sbrk(0));
  std::array<void*, kBlocks> blocks{};
  for (auto& b : blocks) b = std::malloc(kBlock);
  const auto end = reinterpret_cast<std::uintptr_t>(sbrk(0));
  for (void* b : blocks) std::free(b);
  const std::uintptr_t first = (start + kHugePage - 1) & ~(kHugePage - 1);
  const std::uintptr_t last = end & ~(kHugePage - 1);
  if (last > first) (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  // The free top of the heap starts keepcost bytes below the program break.
  const std::uintptr_t free_from = reinterpret_cast<std::uintptr_t>(sbrk(0)) - mallinfo2().keepcost;
  if (last > first && first > free_from) below_first_huge_page = std::malloc(first - free_from);
#endif
}

// A sweep's worker threads allocate from arenas of their own, which glibc maps as heaps of
// HEAP_MAX_SIZE (64 MiB on 64-bit: twice DEFAULT_MMAP_THRESHOLD_MAX) aligned to that size, and grows
// within by mprotect. The heap holding a fresh block of this thread is advised MADV_HUGEPAGE as a
// whole (its part not yet usable included: the advice is kept when it is), so the worker's graphs
// fault in 2 MiB at a time like the main thread's. The shipped sweep with --jobs 2 took twice the
// page faults of --jobs 1 (2,000 against 950), the second worker's in 4 KiB pages. A block from the
// main arena (the process heap, advised at start) lies below the program break: left alone.
//
// The heap's first 2 MiB hold its header, touched before the advice, so they can only have 4 KiB
// pages: the worker's first blocks landing there faulted in one by one (512 faults, half a 2-job
// search's). As for the main heap, a block covering the rest of that first 2 MiB, kept and never
// written, makes the worker's blocks start on a huge page. (MADV_COLLAPSE of those 2 MiB did the
// same, but synchronously: 0.17 ms, and 4.6-4.8 ms in 2 of 10 searches, while the main thread
// faulted its own first point in.) Once per heap: a later sweep's worker may get the same arena.
void back_thread_heap_with_huge_pages() {
#if defined(__GLIBC__) && defined(__linux__)
  if (huge_pages_off()) return;
  constexpr std::uintptr_t kHeapMax = std::uintptr_t{64} << 20;
  void* probe = std::malloc(1);
  const auto at = reinterpret_cast<std::uintptr_t>(probe);
  std::free(probe);
  if (probe == nullptr || at < reinterpret_cast<std::uintptr_t>(sbrk(0))) return;
  const std::uintptr_t heap = at & ~(kHeapMax - 1);
  (void)madvise(reinterpret_cast<void*>(heap), kHeapMax, MADV_HUGEPAGE);
  // The heaps whose first 2 MiB are covered, with their covering blocks (kept to the end).
  static std::mutex covered_lock;
  static std::vector<std::pair<std::uintptr_t, void*>> covered;
  const std::lock_guard guard(covered_lock);
  if (std::any_of(covered.begin(), covered.end(), [&](const auto& c) { return c.first == heap; })) return;
  const std::uintptr_t first_huge_page = heap + kHugePage;
  covered.emplace_back(heap, at < first_huge_page ? std::malloc(first_huge_page - at) : nullptr);
#endif
}

}  // namespace offsim::app

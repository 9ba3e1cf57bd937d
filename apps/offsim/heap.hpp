#pragma once
// The process heap's setup for offsim's allocation pattern (docs/adr/0009): called first in main()
// and by each sweep worker thread. OFFSIM_HUGE_PAGES=0 turns the huge-page advice off.

namespace offsim::app {

/// Freed memory stays in the process (a sweep builds and drops a graph per point).
void keep_freed_memory();
/// The main heap's next 720 MiB advised to transparent huge pages.
void back_heap_with_huge_pages();
/// The calling thread's own malloc arena (a sweep worker's) advised to transparent huge pages.
void back_thread_heap_with_huge_pages();

}  // namespace offsim::app

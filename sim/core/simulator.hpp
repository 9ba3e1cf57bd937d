#pragma once
// The event loop. Events are ordered totally by (time, phase, sequence number): equal times are
// broken by the caller's phase (lower first), then by insertion order, so a run is reproducible
// bit for bit. Time is an integer picosecond clock and may never go backwards.
//
// The queue is a radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, 1990) with byte-wide digits,
// which suits a clock that never goes backwards. `last` is the time of the event taken out last.
// An event at time t == last waits in a FIFO of its phase; any other waits in the bucket (d, v),
// where d is the highest byte in which t differs from last and v is t's byte d. When the FIFOs are
// empty, the lowest non-empty bucket is emptied into lower ones around its smallest time, which
// becomes `last`: an event moves at most once per byte of the time span, in order. Equal times
// always share a bucket and buckets are emptied in order, so events of one time and phase come out
// in insertion order: the same total order as a (time, phase, sequence) heap, at O(1) per
// insertion. Events hold their callbacks (pointer-and-index closures, moved as bytes), so taking
// one out reads memory the queue has just walked (docs/adr/0013-radix-event-queue-and-component-reshare.md).
#include <array>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "sim/core/callback.hpp"
#include "sim/core/units.hpp"

namespace offsim::sim {

/// Phases order same-time events. Completions run before new work is started, so a resource
/// freed at time t is visible to work that becomes ready at t.
enum class EventPhase : int {
  kCompletion = 0,
  kStart = 1,
};

class Simulator {
 public:
  using Callback = sim::Callback;

  Simulator() = default;
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  /// Schedules `callback` at absolute time `at`. Throws SimulationError if `at` < now().
  void schedule_at(TimePs at, EventPhase phase, Callback callback);
  void schedule_after(TimePs delay, EventPhase phase, Callback callback) {
    schedule_at(now_ + delay, phase, std::move(callback));
  }

  /// Runs until no event is left.
  void run();

  [[nodiscard]] TimePs now() const { return now_; }
  [[nodiscard]] std::uint64_t events_processed() const { return processed_; }
  [[nodiscard]] std::size_t pending_events() const { return pending_; }

 private:
  static constexpr std::size_t kPhases = 2;  // one bit of an entry's key
  static constexpr std::uint64_t kPhaseBit = std::uint64_t{1} << 63;
  static constexpr unsigned kDigitBits = 8;
  static constexpr std::size_t kDigits = (64 + kDigitBits - 1) / kDigitBits;
  static constexpr std::size_t kValues = std::size_t{1} << kDigitBits;
  static constexpr std::size_t kWords = kValues / 64;  // occupancy words per digit
  // The time (at most 2^63 - 1 ps) and, in the top bit, the phase: a 32-byte entry.
  struct Entry {
    std::uint64_t key;
    Callback callback;
    [[nodiscard]] std::uint64_t time() const { return key & ~kPhaseBit; }
    [[nodiscard]] std::uint32_t phase() const { return static_cast<std::uint32_t>(key >> 63); }
  };
  // Buckets and FIFOs are chains of fixed blocks from a free list: appending never moves what is
  // already queued, and emptied blocks are reused while still in cache. A block is 2 KB, 64-byte
  // aligned: a 32-byte header, then 63 entries that never straddle a cache line.
  static constexpr std::size_t kBlockBytes = 2048;
  static constexpr std::size_t kHeaderBytes = 32;
  static constexpr std::size_t kBlockEntries = (kBlockBytes - kHeaderBytes) / sizeof(Entry);
  // Entries are constructed in place (appending only writes the slot) and destroyed when taken
  // out or moved on.
  struct alignas(64) Block {
    std::uint32_t count;  // set when the block is taken (slabs are not written before use)
    Block* next;
    alignas(kHeaderBytes) unsigned char storage[kBlockEntries * sizeof(Entry)];
    Entry& at(std::uint32_t i) { return *std::launder(reinterpret_cast<Entry*>(storage + i * sizeof(Entry))); }
  };
  static_assert(sizeof(Block) == kBlockBytes);
  // A bucket also keeps its smallest time and the phases it holds (bit p: phase p), kept up as
  // entries are appended, so emptying it needs no pass to find them.
  // (No member initialisers: the buckets are left unwritten until used, kEmptyChain starts one.)
  struct Chain {
    Block* head;
    Block* tail;
    std::uint32_t read;    // entries of head already taken out (FIFOs only)
    std::uint32_t phases;  // buckets only
    std::uint64_t min;     // buckets only
    [[nodiscard]] bool empty() const { return head == nullptr; }
  };
  static constexpr Chain kEmptyChain{nullptr, nullptr, 0, 0, ~std::uint64_t{0}};

  void append(Chain& chain, Entry&& e);
  void push(Entry&& e);
  void release(Block* block);
  Block* new_block();
  // Moves the lowest non-empty bucket into lower ones (or the FIFOs); false when no event is left.
  bool refill();

  std::array<Chain, kPhases> now_fifo_{kEmptyChain, kEmptyChain};  // events at time last_, one FIFO per phase
  // A bucket holds a chain only while occupied_ marks it (push starts it with kEmptyChain): a run
  // makes its own simulator, which then neither writes 64 KB of empty buckets when it is made nor
  // reads them when it is destroyed.
  std::array<Chain, kDigits * kValues> buckets_;                       // NOLINT(cppcoreguidelines-pro-type-member-init)
  std::array<std::array<std::uint64_t, kWords>, kDigits> occupied_{};  // bit v of digit d: bucket (d, v)
  std::uint32_t digits_occupied_ = 0;                                  // bit d: some bucket of digit d
  // Every block, in slabs that double in size up to kMaxSlabBlocks (a small simulation allocates
  // little; a million queued events take a few hundred slabs, not fifteen thousand allocations).
  static constexpr std::size_t kFirstSlabBlocks = 8;
  static constexpr std::size_t kMaxSlabBlocks = 1024;
  struct SlabDelete {
    std::size_t bytes;
    void operator()(Block* slab) const;
  };
  std::vector<std::unique_ptr<Block, SlabDelete>> slabs_;
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;
  static_assert(kMaxSlabBlocks * sizeof(Block) == kHugePage);
  static std::unique_ptr<Block, SlabDelete> new_slab(std::size_t blocks);
  std::size_t slab_used_ = 0;  // blocks of slabs_.back() handed out
  std::size_t slab_size_ = 0;  // blocks in slabs_.back()
  Block* free_blocks_ = nullptr;
  std::uint64_t last_ = 0;
  std::size_t pending_ = 0;
  TimePs now_{0};
  std::uint64_t processed_ = 0;
};

}  // namespace offsim::sim

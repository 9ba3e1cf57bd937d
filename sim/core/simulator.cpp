#include "sim/core/simulator.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <bit>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "sim/core/errors.hpp"

namespace offsim::sim {

Simulator::~Simulator() {
  // Events still queued (a run that threw, or one never run) hold callbacks to destroy.
  const auto destroy = [](Chain& chain) {
    std::uint32_t first = chain.read;
    for (Block* b = chain.head; b != nullptr; b = b->next) {
      for (std::uint32_t i = first; i < b->count; ++i) b->at(i).~Entry();
      first = 0;
    }
  };
  for (auto& f : now_fifo_) destroy(f);
  for (std::size_t d = 0; d < kDigits; ++d) {
    for (std::size_t w = 0; w < kWords; ++w) {
      for (std::uint64_t bits = occupied_[d][w]; bits != 0; bits &= bits - 1) {
        destroy(buckets_[d * kValues + w * 64 + static_cast<std::size_t>(std::countr_zero(bits))]);
      }
    }
  }
}

void Simulator::schedule_at(TimePs at, EventPhase phase, Callback callback) {
  if (at < now_) {
    throw SimulationError(fmt::format(
        "event scheduled at {} ps, before the current time {} ps: time may not go backwards", at.ps, now_.ps));
  }
  // at >= now_ >= 0: the clock starts at 0 and never goes back, so the time fits unsigned.
  push(Entry{static_cast<std::uint64_t>(at.ps) | (static_cast<std::uint64_t>(phase) << 63), std::move(callback)});
  ++pending_;
}

void Simulator::append(Chain& chain, Entry&& e) {
  Block* tail = chain.tail;
  if (tail == nullptr || tail->count == kBlockEntries) {
    Block* block = free_blocks_;
    if (block != nullptr) {
      free_blocks_ = block->next;
    } else {
      block = new_block();
    }
    block->count = 0;
    block->next = nullptr;
    if (tail == nullptr) {
      chain.head = block;
    } else {
      tail->next = block;
    }
    chain.tail = block;
    tail = block;
  }
  ::new (static_cast<void*>(tail->storage + tail->count * sizeof(Entry))) Entry(std::move(e));
  ++tail->count;
}

void Simulator::SlabDelete::operator()(Block* slab) const {
  // The unsized aligned form: clang declares the sized one only with -fsized-deallocation.
  ::operator delete (static_cast<void*>(slab), std::align_val_t{bytes >= kHugePage ? kHugePage : alignof(Block)});
}

// Blocks are not constructed: append sets a block's header when it takes the block.
std::unique_ptr<Simulator::Block, Simulator::SlabDelete> Simulator::new_slab(std::size_t blocks) {
  const std::size_t bytes = blocks * sizeof(Block);
  const std::size_t align = bytes >= kHugePage ? kHugePage : alignof(Block);
  void* memory = ::operator new (bytes, std::align_val_t{align});
#ifdef __linux__
  // A large queue's slabs on 2 MB pages where the kernel allows (transparent huge pages in
  // "madvise" mode): one page fault per slab instead of 512. Only advice; ignored where refused.
  if (bytes >= kHugePage) madvise(memory, bytes, MADV_HUGEPAGE);
#endif
  return std::unique_ptr<Block, SlabDelete>(static_cast<Block*>(memory), SlabDelete{bytes});
}

Simulator::Block* Simulator::new_block() {
  if (slab_used_ == slab_size_) {
    slab_size_ = slabs_.empty() ? kFirstSlabBlocks : std::min(2 * slab_size_, kMaxSlabBlocks);
    slabs_.push_back(new_slab(slab_size_));
    slab_used_ = 0;
  }
  return slabs_.back().get() + slab_used_++;
}

void Simulator::release(Block* block) {
  block->next = free_blocks_;
  free_blocks_ = block;
}

void Simulator::push(Entry&& e) {
  const std::uint64_t time = e.time();
  if (time == last_) {
    append(now_fifo_[e.phase()], std::move(e));
    return;
  }
  const auto d = static_cast<unsigned>(std::bit_width(time ^ last_) - 1) / kDigitBits;
  const auto v = static_cast<unsigned>(time >> (d * kDigitBits)) & (kValues - 1);
  Chain& bucket = buckets_[d * kValues + v];
  std::uint64_t& word = occupied_[d][v / 64];
  const std::uint64_t bit = std::uint64_t{1} << (v % 64);
  if ((word & bit) == 0) bucket = kEmptyChain;
  bucket.min = std::min(bucket.min, time);
  bucket.phases |= 1U << e.phase();
  append(bucket, std::move(e));
  word |= bit;
  digits_occupied_ |= 1U << d;
}

bool Simulator::refill() {
  if (digits_occupied_ == 0) return false;
  const auto d = static_cast<unsigned>(std::countr_zero(digits_occupied_));
  unsigned v = 0;
  for (std::size_t w = 0; w < kWords; ++w) {
    if (occupied_[d][w] != 0) {
      v = static_cast<unsigned>(w * 64 + static_cast<std::size_t>(std::countr_zero(occupied_[d][w])));
      break;
    }
  }
  occupied_[d][v / 64] &= ~(std::uint64_t{1} << (v % 64));
  if (std::all_of(occupied_[d].begin(), occupied_[d].end(), [](std::uint64_t w) { return w == 0; })) {
    digits_occupied_ &= ~(1U << d);
  }
  const Chain moving = buckets_[d * kValues + v];  // (no longer occupied: the bucket holds nothing now)
  last_ = moving.min;
  if (d == 0 && std::has_single_bit(moving.phases)) {
    // Every entry of a lowest-digit bucket has the same time: the bucket becomes the FIFO of its
    // phase (the FIFOs are empty now) when its entries share one, as they mostly do.
    now_fifo_[static_cast<std::size_t>(std::countr_zero(moving.phases))] = moving;
    return true;
  }
  // In order: entries of one time keep their insertion order. All land in lower buckets.
  for (Block* b = moving.head; b != nullptr;) {
    for (std::uint32_t i = 0; i < b->count; ++i) {
      Entry& e = b->at(i);
      push(std::move(e));
      e.~Entry();
    }
    Block* next = b->next;
    release(b);
    b = next;
  }
  return true;
}

void Simulator::run() {
  for (;;) {
    Chain* fifo = nullptr;
    for (auto& f : now_fifo_) {
      if (!f.empty()) {
        fifo = &f;
        break;
      }
    }
    if (fifo == nullptr) {
      if (!refill()) return;
      continue;
    }
    Block* head = fifo->head;
    Entry& e = head->at(fifo->read++);
    const TimePs time{static_cast<std::int64_t>(e.time())};
    if (time < now_) throw SimulationError("event queue returned an event in the past");
    now_ = time;
    --pending_;
    ++processed_;
    // Moved out first: the callback may schedule events, which may append to this FIFO.
    Callback callback = std::move(e.callback);
    e.~Entry();
    if (fifo->read == head->count) {
      // The head block is used up; entries appended later start a new one.
      fifo->head = head->next;
      if (fifo->head == nullptr) fifo->tail = nullptr;
      fifo->read = 0;
      release(head);
    }
    callback();
  }
}

}  // namespace offsim::sim

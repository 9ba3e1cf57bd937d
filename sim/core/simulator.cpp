#include "sim/core/simulator.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <bit>

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
  for (auto& b : buckets_) destroy(b);
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
      block = &blocks_.emplace_back();
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
  append(buckets_[d * kValues + v], std::move(e));
  occupied_[d][v / 64] |= std::uint64_t{1} << (v % 64);
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
  Chain moving = buckets_[d * kValues + v];
  buckets_[d * kValues + v] = Chain{};
  if (d == 0) {
    // Every entry of a lowest-digit bucket has the same time: the bucket becomes the FIFO of its
    // phase (the FIFOs are empty now) when its entries share one, as they mostly do.
    last_ = moving.head->at(0).time();
    const std::uint32_t phase = moving.head->at(0).phase();
    bool one_phase = true;
    for (Block* b = moving.head; b != nullptr && one_phase; b = b->next) {
      for (std::uint32_t i = 0; i < b->count; ++i) one_phase = one_phase && b->at(i).phase() == phase;
    }
    if (one_phase) {
      now_fifo_[phase] = moving;
      return true;
    }
  } else {
    std::uint64_t smallest = moving.head->at(0).time();
    for (Block* b = moving.head; b != nullptr; b = b->next) {
      for (std::uint32_t i = 0; i < b->count; ++i) smallest = std::min(smallest, b->at(i).time());
    }
    last_ = smallest;
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

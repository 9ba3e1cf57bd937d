#include "sim/resources/memory_pool.hpp"

#include <fmt/format.h>
#include <algorithm>

#include "sim/core/errors.hpp"

namespace offsim::sim {

namespace {
constexpr std::size_t kTopTenantsInOverflow = 5;
}

MemoryPool::MemoryPool(std::string name, std::string kind, Bytes capacity)
    : name_(std::move(name)), kind_(std::move(kind)), capacity_(capacity) {
  timeline_.push_back(MemorySample{TimePs{0}, Bytes{0}});
}

MemoryPool::Held* MemoryPool::find(Tenant tenant) {
  for (auto& held : tenants_) {
    if (&held.tenant.str() == &tenant.str()) return &held;
  }
  return nullptr;
}

void MemoryPool::reserve(TimePs now, Tenant tenant, Bytes bytes) {
  if (bytes.count < 0) {
    throw SimulationError(fmt::format("pool {}: negative reservation by '{}'", name_, tenant.str()));
  }
  if (Held* held = find(tenant)) {
    held->bytes += bytes;
  } else {
    tenants_.push_back(Held{tenant, bytes});
  }
  used_ += bytes;
  if (used_ > peak_) {
    peak_ = used_;
    peak_time_ = now;
  }
  if (used_ > capacity_ && (!overflow_ || used_ > overflow_->used)) {
    overflow_ = MemoryOverflow{now, used_, used_ - capacity_, top_tenants(kTopTenantsInOverflow)};
  }
  record(now);
}

void MemoryPool::release(TimePs now, Tenant tenant, Bytes bytes) {
  Held* held = find(tenant);
  if (held == nullptr || held->bytes < bytes) {
    throw SimulationError(fmt::format("pool {}: '{}' releases {} B but holds {} B", name_, tenant.str(), bytes.count,
                                      held == nullptr ? 0 : held->bytes.count));
  }
  held->bytes -= bytes;
  used_ -= bytes;
  record(now);
}

Bytes MemoryPool::held_by(Tenant tenant) const {
  for (const auto& held : tenants_) {
    if (&held.tenant.str() == &tenant.str()) return held.bytes;
  }
  return Bytes{0};
}

std::vector<TenantBytes> MemoryPool::top_tenants(std::size_t n) const {
  std::vector<TenantBytes> all;
  for (const auto& held : tenants_) {
    if (held.bytes.count > 0) all.push_back({held.tenant.str(), held.bytes});
  }
  // Largest first, ties by name.
  std::sort(all.begin(), all.end(),
            [](const auto& a, const auto& b) { return a.bytes != b.bytes ? a.bytes > b.bytes : a.tenant < b.tenant; });
  if (all.size() > n) all.resize(n);
  return all;
}

void MemoryPool::record(TimePs now) {
  // One sample per instant: the last change at a given time wins.
  if (timeline_.back().time == now) {
    timeline_.back().used = used_;
  } else {
    timeline_.push_back(MemorySample{now, used_});
  }
}

}  // namespace offsim::sim

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

void MemoryPool::reserve(TimePs now, const std::string& tenant, Bytes bytes) {
  if (bytes.count < 0) throw SimulationError(fmt::format("pool {}: negative reservation by '{}'", name_, tenant));
  tenants_[tenant] += bytes;
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

void MemoryPool::release(TimePs now, const std::string& tenant, Bytes bytes) {
  auto it = tenants_.find(tenant);
  if (it == tenants_.end() || it->second < bytes) {
    throw SimulationError(fmt::format("pool {}: '{}' releases {} B but holds {} B", name_, tenant, bytes.count,
                                      it == tenants_.end() ? 0 : it->second.count));
  }
  it->second -= bytes;
  used_ -= bytes;
  record(now);
}

Bytes MemoryPool::held_by(const std::string& tenant) const {
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? Bytes{0} : it->second;
}

std::vector<TenantBytes> MemoryPool::top_tenants(std::size_t n) const {
  std::vector<TenantBytes> all;
  for (const auto& [tenant, bytes] : tenants_) {
    if (bytes.count > 0) all.push_back({tenant, bytes});
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
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

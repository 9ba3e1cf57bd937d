#pragma once
// A memory pool (HBM of one GPU, a host's DRAM, an NVMe device) with per-tenant accounting.
//
// Exceeding capacity is not an error: a configuration that does not fit is a result. The pool
// records the worst overflow (the highest use above capacity), with the tenants that held the
// most at that moment, so a report can say "HBM of gcd3 overflows by 5.2 GiB: parameters 4.1 GiB,
// activations 3.0 GiB, ...".
#include <optional>
#include <string>
#include <vector>

#include "sim/core/tenant.hpp"
#include "sim/core/units.hpp"

namespace offsim::sim {

struct MemorySample {
  TimePs time;
  Bytes used;
};

struct TenantBytes {
  std::string tenant;
  Bytes bytes;
};

struct MemoryOverflow {
  TimePs time;
  Bytes used;
  Bytes excess;
  std::vector<TenantBytes> top_tenants;  // largest first, ties by name
};

class MemoryPool {
 public:
  MemoryPool(std::string name, std::string kind, Bytes capacity);

  void reserve(TimePs now, Tenant tenant, Bytes bytes);
  /// Throws SimulationError when a tenant releases more than it holds.
  void release(TimePs now, Tenant tenant, Bytes bytes);

  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] const std::string& kind() const { return kind_; }
  [[nodiscard]] Bytes capacity() const { return capacity_; }
  [[nodiscard]] Bytes used() const { return used_; }
  [[nodiscard]] Bytes peak() const { return peak_; }
  [[nodiscard]] TimePs peak_time() const { return peak_time_; }
  [[nodiscard]] const std::vector<MemorySample>& timeline() const { return timeline_; }
  [[nodiscard]] const std::optional<MemoryOverflow>& overflow() const { return overflow_; }
  [[nodiscard]] Bytes held_by(Tenant tenant) const;
  /// Tenants by bytes held now, largest first.
  [[nodiscard]] std::vector<TenantBytes> top_tenants(std::size_t n) const;

 private:
  void record(TimePs now);

  std::string name_;
  std::string kind_;
  Bytes capacity_;
  Bytes used_{0};
  Bytes peak_{0};
  TimePs peak_time_{0};
  // What each tenant holds, in order of first reservation, found by its interned name's address (a
  // pool has a handful: a walk of them is cheaper than a map keyed by the name's text, which
  // compared strings for every alloc and free task; issue 35).
  struct Held {
    Tenant tenant;
    Bytes bytes;
  };
  std::vector<Held> tenants_;
  Held* find(Tenant tenant);
  std::vector<MemorySample> timeline_;
  std::optional<MemoryOverflow> overflow_;
};

}  // namespace offsim::sim

#pragma once
// The name of what holds memory, interned (sim::Tenant): tasks hold one and memory pools account by it.
#include <string>
#include <string_view>

namespace offsim::sim {

/// A memory task's tenant (what holds the bytes: "activations", "gathered parameters (bf16)"): its
/// name interned, one copy per distinct name for the whole process, so that a task holds a
/// pointer. Held as a string, most tenants' names were longer than its inline room, and every
/// alloc and free task of a sweep point allocated and freed its copy (issue 35). Names are the
/// builders' constants, a handful; the copies live until the process ends.
class Tenant {
 public:
  Tenant() : name_(intern({})) {}
  Tenant(std::string_view name) : name_(intern(name)) {}    // NOLINT(google-explicit-constructor)
  Tenant(const char* name) : name_(intern(name)) {}         // NOLINT(google-explicit-constructor)
  Tenant(const std::string& name) : name_(intern(name)) {}  // NOLINT(google-explicit-constructor)
  /// The one copy of the name: tenants of equal names give the same address.
  [[nodiscard]] const std::string& str() const { return *name_; }
  friend bool operator==(const Tenant& a, std::string_view b) { return *a.name_ == b; }

 private:
  // The one copy of `name` (thread-safe; a thread finds the names it used before without a lock).
  static const std::string* intern(std::string_view name);
  const std::string* name_;
};

}  // namespace offsim::sim

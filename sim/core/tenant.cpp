#include "sim/core/tenant.hpp"

#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace offsim::sim {

const std::string* Tenant::intern(std::string_view name) {
  // A thread's names (views of the interned copies) in front of the process's, which take a lock.
  thread_local std::unordered_map<std::string_view, const std::string*> seen;
  if (const auto it = seen.find(name); it != seen.end()) return it->second;
  static std::mutex lock;
  // Never destroyed: a thread's names may be asked for while statics are torn down at exit.
  static auto* const names = new std::unordered_set<std::string>();
  const std::lock_guard guard(lock);
  const std::string& copy = *names->emplace(name).first;
  seen.emplace(std::string_view(copy), &copy);
  return &copy;
}

}  // namespace offsim::sim

#pragma once
// The devices a strategy's ranks run on, by name (rank r on the r-th), shared between copies.
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace offsim::models {

/// A list of device names that copies share: a spec naming 1,024 devices is copied whole by each
/// point of a search (from the read cache into its experiment, into the steady state's shorter
/// run), and copying the names was about 1% of a point. A copy shares the list; a change
/// (push_back, assignment) gives the changed one a list of its own. Reads through the vector.
class DeviceNames {
 public:
  DeviceNames() = default;
  DeviceNames(std::vector<std::string> names)  // NOLINT(google-explicit-constructor): a list is a list of names
      : names_(std::make_shared<std::vector<std::string>>(std::move(names))) {}
  DeviceNames(std::initializer_list<std::string> names) : DeviceNames(std::vector<std::string>(names)) {}

  [[nodiscard]] const std::vector<std::string>& list() const { return names_ ? *names_ : empty_list(); }
  operator const std::vector<std::string>&() const { return list(); }  // NOLINT(google-explicit-constructor)
  [[nodiscard]] std::size_t size() const { return list().size(); }
  [[nodiscard]] bool empty() const { return list().empty(); }
  [[nodiscard]] auto begin() const { return list().begin(); }
  [[nodiscard]] auto end() const { return list().end(); }
  [[nodiscard]] const std::string& operator[](std::size_t i) const { return list()[i]; }

  /// Appends a name to this list only (a list other copies share is copied first).
  void push_back(std::string name) {
    if (!names_) {
      names_ = std::make_shared<std::vector<std::string>>();
    } else if (names_.use_count() > 1) {
      names_ = std::make_shared<std::vector<std::string>>(*names_);
    }
    names_->push_back(std::move(name));
  }

  friend bool operator==(const DeviceNames& a, const DeviceNames& b) { return a.list() == b.list(); }

 private:
  static const std::vector<std::string>& empty_list() {
    static const std::vector<std::string> none;
    return none;
  }
  // Never changed while shared: push_back copies it first unless this is its only owner.
  std::shared_ptr<std::vector<std::string>> names_;
};

}  // namespace offsim::models

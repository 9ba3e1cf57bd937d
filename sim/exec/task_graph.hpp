#pragma once
// The task-graph IR between a training strategy and the engine.
//
// A Platform names the resources a graph runs on (compute units, flow-network constraints,
// memory pools); tasks refer to them by index. A TaskGraph is plain data: it can be built, dumped
// as text or Graphviz DOT, compared in golden tests, and run by the executor, which knows nothing
// of what the tasks mean.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "sim/core/tenant.hpp"
#include "sim/core/units.hpp"
#include "sim/resources/flow_network.hpp"

namespace offsim::sim {

struct UnitSpec {
  std::string name;
  int lanes = 1;
};
struct ConstraintSpec {
  std::string name;
  Bandwidth capacity;
  std::string link_class;  // e.g. "cpu-gpu", "gpu-gpu", "memory"; groups activity in reports
  std::string group;       // finer reporting group, e.g. "cpu-gpu:cpu->gpu" (H2D); empty: the class
  // A link's endpoints (empty for other constraints): trace.json counts each device's traffic out
  // of it and into it.
  std::string from;
  std::string to;
};
struct PoolSpec {
  std::string name;
  std::string kind;  // e.g. "hbm", "dram", "nvme"; groups memory figures in reports
  Bytes capacity;
};

struct Platform {
  std::vector<UnitSpec> units;
  std::vector<ConstraintSpec> constraints;
  std::vector<PoolSpec> pools;

  std::uint32_t add_unit(UnitSpec u);
  ConstraintId add_constraint(ConstraintSpec c);
  std::uint32_t add_pool(PoolSpec p);
};

struct TaskId {
  std::uint32_t index = 0;
  auto operator<=>(const TaskId&) const = default;
};

struct ComputeTask {
  std::uint32_t unit = 0;
  TimePs duration{0};
  Flops flops{};       // for reports only; the duration was decided by the cost model
  Bytes bytes{0};      // memory traffic, for reports only
  std::string kernel;  // cost-model kernel class, e.g. "gemm", "adam"
};
/// A transfer's route: the constraints it crosses, in order; immutable once made. Copies share one
/// list: a builder that sends every micro-batch between the same two stages makes the route once
/// and each task holds a reference (a vector per task was an allocation and a copy of the route's
/// constraints for every pipeline transfer, 48 of them in a TP group of 8; issue 35).
class Route {
 public:
  Route() = default;
  Route(std::vector<ConstraintId> constraints)  // NOLINT(google-explicit-constructor): a list is a route
      : list_(constraints.empty() ? nullptr
                                  : std::make_shared<const std::vector<ConstraintId>>(std::move(constraints))) {}
  Route(std::initializer_list<ConstraintId> constraints) : Route(std::vector<ConstraintId>(constraints)) {}

  [[nodiscard]] std::span<const ConstraintId> view() const {
    return list_ ? std::span<const ConstraintId>(*list_) : std::span<const ConstraintId>();
  }
  operator std::span<const ConstraintId>() const { return view(); }  // NOLINT(google-explicit-constructor)
  [[nodiscard]] auto begin() const { return view().begin(); }
  [[nodiscard]] auto end() const { return view().end(); }
  [[nodiscard]] std::size_t size() const { return list_ ? list_->size() : 0; }
  [[nodiscard]] bool empty() const { return size() == 0; }
  [[nodiscard]] ConstraintId operator[](std::size_t i) const { return (*list_)[i]; }
  [[nodiscard]] ConstraintId front() const { return list_->front(); }
  /// The shared list's address: the same for every copy (RouteClasses knows a route met again by
  /// it); null when empty.
  [[nodiscard]] const void* identity() const { return list_.get(); }

 private:
  std::shared_ptr<const std::vector<ConstraintId>> list_;
};

struct TransferTask {
  Route route;
  Bytes bytes{0};
  TimePs latency{0};
  std::optional<Bandwidth> rate_bound;
  std::vector<ConstraintId> accounted;  // statistics only (FlowSpec::accounted)
};

struct AllocTask {
  std::uint32_t pool = 0;
  Tenant tenant;
  Bytes bytes{0};
};
struct FreeTask {
  std::uint32_t pool = 0;
  Tenant tenant;
  Bytes bytes{0};
};
struct BarrierTask {};

using TaskBody = std::variant<ComputeTask, TransferTask, AllocTask, FreeTask, BarrierTask>;

// A task's name, phase and dependencies live in its graph (TaskGraph::name, phase, deps): names and
// dependencies back to back in one buffer each, the few distinct phases in a table, so that a graph
// of millions of tasks does not hold two strings and a vector (and their heap blocks) per task.
/// Whether T is one of a task's bodies (ComputeTask, TransferTask, ...).
template <typename T, typename Variant = TaskBody>
inline constexpr bool kIsTaskBody = false;
template <typename T, typename... Bodies>
inline constexpr bool kIsTaskBody<T, std::variant<Bodies...>> = (std::is_same_v<T, Bodies> || ...);

struct Task {
  Task() = default;
  // Every field, the body made once in place from `body_` (TaskGraph::add constructs a task in the
  // graph's room): one of TaskBody's alternatives, or a TaskBody moved in.
  template <typename Body>
  Task(TaskId id_, std::uint32_t name_begin_, std::uint32_t name_size_, std::uint16_t phase_, Body&& body_,
       std::uint32_t deps_begin_, std::uint32_t deps_size_, std::int64_t priority_)
      : id(id_),
        name_begin(name_begin_),
        name_size(name_size_),
        phase(phase_),
        body(std::forward<Body>(body_)),
        deps_begin(deps_begin_),
        deps_size(deps_size_),
        priority(priority_) {}
  TaskId id;
  std::uint32_t name_begin = 0;  // in the graph's name buffer
  std::uint32_t name_size = 0;
  std::uint16_t phase = 0;  // index into the graph's phase table; reporting group, e.g. "forward"
  TaskBody body;
  std::uint32_t deps_begin = 0;  // in the graph's dependency buffer (TaskGraph::deps)
  std::uint32_t deps_size = 0;
  std::int64_t priority = 0;  // lower runs first among ready tasks competing for a unit
};

/// Memory a task costs, in the graph and while it runs, rounded up from measurements: GPT-1T on
/// 9,408 Frontier nodes (1.78 M tasks: 286 B each to build, 285 B more to run), GPT-3 175B on
/// 1,024 A100 (1.21 M tasks: 246 + 107 B), and GPT-1T with --all-ranks, whose communicators hold
/// more per task (30.7 M tasks built in 15.4 GB: 502 B each before running).
inline constexpr std::size_t kBytesPerTaskEstimate = 1000;

/// The most tasks a graph may hold on this machine: its available memory over
/// kBytesPerTaskEstimate (read once; at least 1 M).
[[nodiscard]] std::size_t default_task_limit();
/// When not 0, a lower limit for the graphs made after it is set: the fuzz harnesses build under a
/// 2 GiB memory limit, far below what default_task_limit() reads from the machine.
inline std::size_t task_limit_cap = 0;

/// Whether the graphs made on this thread keep their tasks' names (ScopedUnnamedTasks).
inline thread_local bool unnamed_tasks = false;

/// While one lives, the graphs made on its thread keep no task names (TaskGraph::keeps_names):
/// names feed only outputs (dumps, traces) and error messages, and a sweep point writes neither
/// unless it fails, when it is run again with names (models/sweep.cpp). Building the names was
/// an eighth of a sweep point's work (issue 35). Nests; restores the previous setting.
class ScopedUnnamedTasks {
 public:
  ScopedUnnamedTasks() : previous_(unnamed_tasks) { unnamed_tasks = true; }
  ~ScopedUnnamedTasks() { unnamed_tasks = previous_; }
  ScopedUnnamedTasks(const ScopedUnnamedTasks&) = delete;
  ScopedUnnamedTasks& operator=(const ScopedUnnamedTasks&) = delete;

 private:
  bool previous_;
};

class TaskGraph {
 public:
  TaskGraph()
      : task_limit_(task_limit_cap != 0 ? std::min(task_limit_cap, default_task_limit()) : default_task_limit()),
        keeps_names_(!unnamed_tasks) {}
  /// A graph that grows past `tasks` throws SimulationLimit (exit 3) instead of exhausting the
  /// machine's memory.
  void set_task_limit(std::size_t tasks) { task_limit_ = tasks; }
  [[nodiscard]] std::size_t task_limit() const { return task_limit_; }

  /// Whether the graph keeps the names given to add (true unless made under ScopedUnnamedTasks):
  /// without them every task's name is empty, and builders may skip making names
  /// (`if (graph.keeps_names())`). Nothing but outputs and error messages reads a name.
  [[nodiscard]] bool keeps_names() const { return keeps_names_; }
  /// `make()` when the graph keeps names, else an empty name without calling it: for a name built
  /// at the call site (`g.name_from([&] { return fmt::format(...); })`).
  template <typename MakeName>
  [[nodiscard]] std::string name_from(MakeName&& make) const {
    return keeps_names_ ? std::string(std::forward<MakeName>(make)()) : std::string();
  }

  /// Adds a task after `deps`: the graph copies the name (when it keeps names) and the
  /// dependencies into its buffers, so the caller's may be temporaries or reused storage.
  TaskId add(std::string_view name, std::string_view phase, TaskBody body, std::span<const TaskId> deps,
             std::int64_t priority = 0) {
    return emplace(name, phase, std::move(body), deps, priority);
  }
  TaskId add(std::string_view name, std::string_view phase, TaskBody body, std::initializer_list<TaskId> deps = {},
             std::int64_t priority = 0) {
    return emplace(name, phase, std::move(body), std::span<const TaskId>(deps.begin(), deps.size()), priority);
  }
  /// The same, for a body given as one of TaskBody's alternatives (what builders write): it is
  /// made in the task once, not first as a TaskBody and then moved.
  template <typename Body>
  requires kIsTaskBody<std::remove_cvref_t<Body>> TaskId add(std::string_view name, std::string_view phase, Body&& body,
                                                             std::span<const TaskId> deps, std::int64_t priority = 0) {
    return emplace(name, phase, std::forward<Body>(body), deps, priority);
  }
  template <typename Body>
  requires kIsTaskBody<std::remove_cvref_t<Body>> TaskId add(std::string_view name, std::string_view phase, Body&& body,
                                                             std::initializer_list<TaskId> deps = {},
                                                             std::int64_t priority = 0) {
    return emplace(name, phase, std::forward<Body>(body), std::span<const TaskId>(deps.begin(), deps.size()), priority);
  }
  /// Room for about `tasks` tasks (capped at the task limit), so that a builder that can count its
  /// tasks ahead does not move the graph's storage as it grows. Unused room costs address space,
  /// not memory.
  void reserve(std::size_t tasks);
  /// Adds an edge after the fact (e.g. to chain the last task of one stage to the next).
  void add_dependency(TaskId task, TaskId depends_on);

  /// Where the graph stands, for roll_back.
  struct Mark {
    std::size_t tasks = 0;
    std::size_t names = 0;
    std::size_t deps = 0;
    std::size_t phases = 0;
    std::uint64_t edges_added_after = 0;  // add_dependency calls so far
  };
  [[nodiscard]] Mark mark() const {
    return {tasks_.size(), names_.size(), deps_.size(), phases_.size(), edges_added_after_};
  }
  /// Removes every task added since `m` (their names, dependencies and new phases), as if never
  /// added, and returns true; the caller must hold no id of them. Returns false and removes
  /// nothing when an edge was added after the fact since `m` (add_dependency may have moved an
  /// earlier task's dependencies past the mark).
  bool roll_back(const Mark& m);

  [[nodiscard]] const std::vector<Task>& tasks() const { return tasks_; }
  [[nodiscard]] const Task& task(TaskId id) const { return tasks_[id.index]; }
  [[nodiscard]] std::size_t size() const { return tasks_.size(); }
  [[nodiscard]] std::string_view name(const Task& t) const {
    return std::string_view(names_).substr(t.name_begin, t.name_size);
  }
  [[nodiscard]] const std::string& phase(const Task& t) const { return phases_[t.phase]; }
  [[nodiscard]] std::span<const TaskId> deps(const Task& t) const {
    return std::span<const TaskId>(deps_).subspan(t.deps_begin, t.deps_size);
  }

  /// Checks every reference against the platform; throws std::invalid_argument listing them all.
  void validate(const Platform& platform) const;

  /// Receives a dump's text piece by piece (write_text, write_dot).
  using TextSink = std::function<void(std::string_view)>;
  /// The graph as text, a line per task (id, name, [phase], priority, dependencies, body), or as
  /// Graphviz DOT, handed to `sink` in pieces of about kDumpPieceBytes: a graph of millions of
  /// tasks is not held a second time as one string (`offsim graph` of GPT-530B at tp 4 is 6.1 M
  /// tasks and 1.07 GB of text).
  void write_text(const Platform& platform, const TextSink& sink) const;
  void write_dot(const Platform& platform, const TextSink& sink) const;
  static constexpr std::size_t kDumpPieceBytes = std::size_t{1} << 16;
  [[nodiscard]] std::string to_text(const Platform& platform) const;
  [[nodiscard]] std::string to_dot(const Platform& platform) const;

 private:
  std::vector<Task> tasks_;
  std::string names_;                // every task's name, back to back
  std::vector<TaskId> deps_;         // every task's dependencies, back to back
  std::vector<std::string> phases_;  // the distinct phases, in order of first use
  std::size_t task_limit_;
  bool keeps_names_ = true;
  std::uint64_t edges_added_after_ = 0;  // add_dependency calls (roll_back)
  std::uint16_t last_phase_index_ = 0;   // the phase of the last add (phase_index)
  // Where each phase's text was last given from (builders pass constants: phase::kForward...),
  // by that address: phase_index compares the text with one phase instead of searching them.
  struct PhaseHint {
    const char* data = nullptr;
    std::uint16_t index = 0;
  };
  static constexpr std::size_t kPhaseHints = 64;
  std::array<PhaseHint, kPhaseHints> phase_hints_{};

  // The index of `phase` in phases_, which it joins when new.
  std::uint16_t phase_index(std::string_view phase);
  // Where the next task's name and dependencies go, after the checks (limit, dependencies known,
  // buffers within 32-bit offsets): its id and offsets, the name and dependencies appended.
  struct Slot {
    TaskId id;
    std::uint32_t name_begin;
    std::uint32_t name_size;
    std::uint32_t deps_begin;
  };
  Slot append_task(std::string_view name, std::span<const TaskId> deps);
  template <typename Body>
  TaskId emplace(std::string_view name, std::string_view phase, Body&& body, std::span<const TaskId> deps,
                 std::int64_t priority) {
    const Slot slot = append_task(name, deps);
    tasks_.emplace_back(slot.id, slot.name_begin, slot.name_size, phase_index(phase), std::forward<Body>(body),
                        slot.deps_begin, static_cast<std::uint32_t>(deps.size()), priority);
    return slot.id;
  }
};

[[nodiscard]] std::string_view task_kind(const TaskBody& body);

}  // namespace offsim::sim

#include "sim/exec/task_graph.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include <unistd.h>

#include "sim/core/errors.hpp"

namespace offsim::sim {

std::uint32_t Platform::add_unit(UnitSpec u) {
  units.push_back(std::move(u));
  return static_cast<std::uint32_t>(units.size() - 1);
}
ConstraintId Platform::add_constraint(ConstraintSpec c) {
  constraints.push_back(std::move(c));
  return ConstraintId{static_cast<std::uint32_t>(constraints.size() - 1)};
}
std::uint32_t Platform::add_pool(PoolSpec p) {
  pools.push_back(std::move(p));
  return static_cast<std::uint32_t>(pools.size() - 1);
}

std::size_t default_task_limit() {
  static const std::size_t limit = [] {
    constexpr std::size_t kFloor = std::size_t{1} << 20;
    const long pages = sysconf(_SC_AVPHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0) return std::numeric_limits<std::uint32_t>::max() + std::size_t{0};
    const auto available = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size);
    // Task ids are 32-bit.
    return std::min<std::size_t>(std::max(kFloor, available / kBytesPerTaskEstimate),
                                 std::numeric_limits<std::uint32_t>::max());
  }();
  return limit;
}

TaskGraph::Slot TaskGraph::append_task(std::string_view name, std::span<const TaskId> deps) {
  if (tasks_.size() >= task_limit_) {
    throw SimulationLimit(fmt::format(
        "the task graph grows past {} tasks, about {} of memory to build and run ({} per task), more than this "
        "machine has available: simulate fewer ranks (rank symmetry stands one node or pipeline for all unless "
        "--all-ranks), layers, micro-batches or nodes",
        task_limit_, format_bytes(Bytes{static_cast<std::int64_t>(task_limit_ * kBytesPerTaskEstimate)}),
        format_bytes(Bytes{static_cast<std::int64_t>(kBytesPerTaskEstimate)})));
  }
  const TaskId id{static_cast<std::uint32_t>(tasks_.size())};
  for (const auto d : deps) {
    if (d.index >= id.index) throw std::invalid_argument(fmt::format("task '{}' depends on an unknown task", name));
  }
  if (!keeps_names_) name = {};
  if (names_.size() + name.size() > std::numeric_limits<std::uint32_t>::max() ||
      deps_.size() + deps.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error("the task graph's names or dependencies exceed 2^32 entries");
  }
  const Slot slot{id, static_cast<std::uint32_t>(names_.size()), static_cast<std::uint32_t>(name.size()),
                  static_cast<std::uint32_t>(deps_.size())};
  names_.append(name);
  deps_.insert(deps_.end(), deps.begin(), deps.end());
  return slot;
}

namespace {

// Whether two texts are equal, for the short ones phases are: up to 16 bytes by two overlapping
// loads from each (no call; memcmp's was most of a phase lookup), longer ones by memcmp.
[[gnu::always_inline]] inline bool same_text(std::string_view a, std::string_view b) {
  const std::size_t n = a.size();
  if (n != b.size()) return false;
  const auto load = [](const char* p, auto word) {
    std::memcpy(&word, p, sizeof(word));
    return word;
  };
  if (n >= sizeof(std::uint64_t) && n <= 2 * sizeof(std::uint64_t)) {
    const std::size_t last = n - sizeof(std::uint64_t);
    return load(a.data(), std::uint64_t{}) == load(b.data(), std::uint64_t{}) &&
           load(a.data() + last, std::uint64_t{}) == load(b.data() + last, std::uint64_t{});
  }
  if (n >= sizeof(std::uint32_t) && n < sizeof(std::uint64_t)) {
    const std::size_t last = n - sizeof(std::uint32_t);
    return load(a.data(), std::uint32_t{}) == load(b.data(), std::uint32_t{}) &&
           load(a.data() + last, std::uint32_t{}) == load(b.data() + last, std::uint32_t{});
  }
  return n == 0 || std::memcmp(a.data(), b.data(), n) == 0;
}

}  // namespace

std::uint16_t TaskGraph::phase_index(std::string_view phase) {
  // Phases are few (forward, backward, communication, ...) and builders name them with constants:
  // the phase last given from the same address is the likely match (its text is still compared:
  // the address may be a buffer's), then the last one used, then a search from the last added.
  // (Fibonacci hashing of the address: string constants lie a few bytes apart.)
  constexpr std::uint64_t kGoldenRatio = 0x9E3779B97F4A7C15ULL;
  constexpr int kHintBits = std::countr_zero(kPhaseHints);
  const std::uint64_t address = reinterpret_cast<std::uintptr_t>(phase.data());
  PhaseHint& hint = phase_hints_[(address * kGoldenRatio) >> (64 - kHintBits)];
  if (hint.data == phase.data() && hint.index < phases_.size() && same_text(phases_[hint.index], phase)) {
    return last_phase_index_ = hint.index;
  }
  hint.data = phase.data();
  if (last_phase_index_ < phases_.size() && same_text(phases_[last_phase_index_], phase)) {
    return hint.index = last_phase_index_;
  }
  auto phase_at =
      std::find_if(phases_.rbegin(), phases_.rend(), [phase](const std::string& p) { return same_text(p, phase); });
  if (phase_at == phases_.rend()) {
    if (phases_.size() > std::numeric_limits<std::uint16_t>::max()) throw std::length_error("too many task phases");
    phases_.emplace_back(phase);
    phase_at = phases_.rbegin();
  }
  last_phase_index_ = static_cast<std::uint16_t>(phases_.rend() - phase_at - 1);
  return hint.index = last_phase_index_;
}

void TaskGraph::reserve(std::size_t tasks) {
  // Names of a few tens of characters and one or two dependencies per task, as builders make them.
  constexpr std::size_t kNameBytesPerTask = 32;
  constexpr std::size_t kDependenciesPerTask = 2;
  const std::size_t n = std::min(tasks, task_limit_);
  tasks_.reserve(n);
  if (keeps_names_) names_.reserve(n * kNameBytesPerTask);  // (a graph without names holds none)
  deps_.reserve(n * kDependenciesPerTask);
}

void TaskGraph::add_dependency(TaskId task, TaskId depends_on) {
  if (task.index >= tasks_.size() || depends_on.index >= tasks_.size()) {
    throw std::invalid_argument("add_dependency: unknown task");
  }
  // Rare (a few per graph): the task's list moves to the end of the buffer with the new one.
  Task& t = tasks_[task.index];
  const std::uint32_t begin = t.deps_begin;
  t.deps_begin = static_cast<std::uint32_t>(deps_.size());
  for (std::uint32_t i = 0; i < t.deps_size; ++i) {
    const TaskId d = deps_[begin + i];  // a copy: push_back may reallocate
    deps_.push_back(d);
  }
  deps_.push_back(depends_on);
  ++t.deps_size;
  ++edges_added_after_;
}

bool TaskGraph::roll_back(const Mark& m) {
  if (m.edges_added_after != edges_added_after_ || m.tasks > tasks_.size()) return false;
  tasks_.erase(tasks_.begin() + static_cast<std::ptrdiff_t>(m.tasks), tasks_.end());
  names_.resize(m.names);
  deps_.resize(m.deps);
  // A phase hint naming a removed phase is found out of range (phase_index checks it).
  phases_.resize(m.phases);
  return true;
}

std::string_view task_kind(const TaskBody& body) {
  struct Visitor {
    std::string_view operator()(const ComputeTask&) const { return "compute"; }
    std::string_view operator()(const TransferTask&) const { return "transfer"; }
    std::string_view operator()(const AllocTask&) const { return "alloc"; }
    std::string_view operator()(const FreeTask&) const { return "free"; }
    std::string_view operator()(const BarrierTask&) const { return "barrier"; }
  };
  return std::visit(Visitor{}, body);
}

void TaskGraph::validate(const Platform& platform) const {
  std::vector<std::string> problems;
  // Dependencies need no check: add and add_dependency take only tasks already in the graph.
  const auto check_pool = [&](const Task& t, std::uint32_t pool) {
    if (pool >= platform.pools.size()) {
      problems.push_back(fmt::format("task {} '{}': unknown memory pool {}", t.id.index, name(t), pool));
    }
  };
  const void* checked_route = nullptr;  // the last route list found in range (shared by many transfers)
  for (const auto& t : tasks_) {
    // One visit per task: the executor runs this before every graph, a search once per point.
    std::visit(
        [&](const auto& body) {
          using Body = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<Body, ComputeTask>) {
            if (body.unit >= platform.units.size()) {
              problems.push_back(fmt::format("task {} '{}': unknown compute unit {}", t.id.index, name(t), body.unit));
            }
          } else if constexpr (std::is_same_v<Body, TransferTask>) {
            // The highest index first (a reduction the compiler vectorises: a pipeline transfer
            // crosses 48 constraints), each one only when it is out of range; a list shared with
            // the transfer checked before it (a pipeline pair's, a collective flow's) is not
            // walked again.
            if (!body.route.empty() && body.route.identity() != checked_route) {
              std::uint32_t highest = 0;
              for (const auto c : body.route) highest = std::max(highest, c.index);
              if (highest < platform.constraints.size()) {
                checked_route = body.route.identity();
              } else {
                for (const auto c : body.route) {
                  if (c.index >= platform.constraints.size()) {
                    problems.push_back(
                        fmt::format("task {} '{}': unknown constraint {}", t.id.index, name(t), c.index));
                  }
                }
              }
            }
            if (body.route.empty() && body.bytes.count > 0 && !body.rate_bound) {
              problems.push_back(fmt::format("task {} '{}': a transfer with bytes needs a route", t.id.index, name(t)));
            }
          } else if constexpr (std::is_same_v<Body, AllocTask> || std::is_same_v<Body, FreeTask>) {
            check_pool(t, body.pool);
          }
        },
        t.body);
  }
  if (!problems.empty())
    throw std::invalid_argument(fmt::format("invalid task graph:\n  {}", fmt::join(problems, "\n  ")));
}

namespace {

// A task's body as the dumps show it, appended to `out`.
void describe(const TaskBody& body, const Platform& p, fmt::memory_buffer& out) {
  struct Visitor {
    const Platform& p;
    fmt::memory_buffer& out;
    void operator()(const ComputeTask& c) const {
      fmt::format_to(std::back_inserter(out), "compute unit={} kernel={} duration_ps={} flops={:.6g} bytes={}",
                     p.units.at(c.unit).name, c.kernel, c.duration.ps, c.flops.count, c.bytes.count);
    }
    void operator()(const TransferTask& x) const {
      fmt::format_to(std::back_inserter(out), "transfer bytes={} latency_ps={} route=[", x.bytes.count, x.latency.ps);
      for (std::size_t i = 0; i < x.route.size(); ++i) {
        fmt::format_to(std::back_inserter(out), "{}{}", i == 0 ? "" : ", ", p.constraints.at(x.route[i].index).name);
      }
      out.push_back(']');
      if (x.rate_bound) fmt::format_to(std::back_inserter(out), " bound={:.6g}B/s", x.rate_bound->bytes_per_s);
      if (!x.accounted.empty()) fmt::format_to(std::back_inserter(out), " accounted_links={}", x.accounted.size());
    }
    void operator()(const AllocTask& a) const {
      fmt::format_to(std::back_inserter(out), "alloc pool={} tenant={} bytes={}", p.pools.at(a.pool).name,
                     a.tenant.str(), a.bytes.count);
    }
    void operator()(const FreeTask& f) const {
      fmt::format_to(std::back_inserter(out), "free pool={} tenant={} bytes={}", p.pools.at(f.pool).name,
                     f.tenant.str(), f.bytes.count);
    }
    void operator()(const BarrierTask&) const { fmt::format_to(std::back_inserter(out), "barrier"); }
  };
  std::visit(Visitor{p, out}, body);
}

std::string dot_escape(std::string_view s) {
  std::string out;
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') out.push_back('\\');
    out.push_back(ch);
  }
  return out;
}

}  // namespace

namespace {

// Hands `piece` to the sink and empties it once it holds about a piece's worth.
void flush_piece(fmt::memory_buffer& piece, const TaskGraph::TextSink& sink, bool last = false) {
  if (piece.size() < TaskGraph::kDumpPieceBytes && !(last && piece.size() > 0)) return;
  sink(std::string_view(piece.data(), piece.size()));
  piece.clear();
}

}  // namespace

void TaskGraph::write_text(const Platform& platform, const TextSink& sink) const {
  fmt::memory_buffer piece;
  for (const auto& t : tasks_) {
    fmt::format_to(std::back_inserter(piece), "{} {} [{}] prio={} deps=[", t.id.index, name(t), phase(t), t.priority);
    const auto ds = deps(t);
    for (std::size_t i = 0; i < ds.size(); ++i) {
      fmt::format_to(std::back_inserter(piece), "{}{}", i == 0 ? "" : ",", ds[i].index);
    }
    piece.append(std::string_view("] "));
    describe(t.body, platform, piece);
    piece.push_back('\n');
    flush_piece(piece, sink);
  }
  flush_piece(piece, sink, true);
}

void TaskGraph::write_dot(const Platform& platform, const TextSink& sink) const {
  fmt::memory_buffer piece;
  fmt::memory_buffer body;
  piece.append(std::string_view("digraph tasks {\n  rankdir=LR;\n  node [shape=box, fontsize=10];\n"));
  for (const auto& t : tasks_) {
    const std::string_view kind = task_kind(t.body);
    const char* shape = kind == "compute" ? "box" : kind == "transfer" ? "cds" : kind == "barrier" ? "diamond" : "note";
    body.clear();
    describe(t.body, platform, body);
    fmt::format_to(std::back_inserter(piece), "  t{} [label=\"{}\\n{}\", shape={}, tooltip=\"{}\"];\n", t.id.index,
                   dot_escape(name(t)), phase(t), shape, dot_escape(std::string_view(body.data(), body.size())));
    flush_piece(piece, sink);
  }
  for (const auto& t : tasks_) {
    for (const auto d : deps(t)) fmt::format_to(std::back_inserter(piece), "  t{} -> t{};\n", d.index, t.id.index);
    flush_piece(piece, sink);
  }
  piece.append(std::string_view("}\n"));
  flush_piece(piece, sink, true);
}

std::string TaskGraph::to_text(const Platform& platform) const {
  std::string out;
  write_text(platform, [&](std::string_view s) { out.append(s); });
  return out;
}

std::string TaskGraph::to_dot(const Platform& platform) const {
  std::string out;
  write_dot(platform, [&](std::string_view s) { out.append(s); });
  return out;
}

}  // namespace offsim::sim

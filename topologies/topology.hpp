#pragma once
// A machine as a graph: devices (GPUs, CPUs, NICs, NVMe, switches) are vertices, directed links
// are edges (a full-duplex link is two edges, one per direction). Built, validated, then sealed;
// a sealed Topology is immutable and answers routing queries deterministically.
//
// Routing, deterministic: an explicit route override when the YAML gives one; otherwise the
// fewest-hops path, and among those the widest (largest bottleneck bandwidth); remaining ties go
// to the path found first by a breadth-first search that visits links in declaration order. A
// route between devices of two nodes may only pass through those two nodes and the network, never
// through a third node. Routes are cached.
//
// A device's memory may have a bandwidth (host DDR): every route that starts or ends at that
// device also crosses the memory's constraint, which is how host-to-device copies of all GPUs
// contend for one DDR.
//
// Sealing builds the machine graph as a Boost.Graph compressed_sparse_row_graph (offsets, targets
// and link indices in three arrays) to check it and to lay out the route search's arcs, then drops
// it (topology.cpp). An adjacency_list kept a vector per device and a heap-allocated property per
// link: 555k allocations for the full Frontier.
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/core/units.hpp"

namespace offsim::topo {

enum class DeviceKind { kGpu, kCpu, kNic, kNvme, kSwitch };
[[nodiscard]] std::string_view to_string(DeviceKind k);

struct MemorySpec {
  std::string kind;  // "hbm", "dram", "nvme"
  sim::Bytes capacity;
  std::optional<sim::Bandwidth> bandwidth;  // when set, traffic to/from the device crosses it
};

struct Device {
  std::string name;
  int node = 0;  // index of the node it belongs to; -1 for network devices (switches of the fabric)
  DeviceKind kind = DeviceKind::kGpu;
  std::string device_kind;  // cost-table key, e.g. "mi250x-gcd" (GPUs and CPUs)
  int cores = 0;            // CPUs: worker threads available to the job
  // Shared, not held: a machine's nodes are copies of one template, so all GCDs of the full Frontier
  // point to one spec (16 B a device instead of 72).
  std::shared_ptr<const MemorySpec> memory;
};

/// A link as declared: its ends by device name (what add_link takes).
struct LinkSpec {
  std::string src;
  std::string dst;
  sim::Bandwidth bandwidth;
  sim::TimePs latency;
  std::string link_class;  // "gpu-gpu", "cpu-gpu", "nic", ...
};

/// A link of a built machine. Its ends are device indices (Topology::link_src, link_dst) and its
/// class an index into the machine's few classes (Topology::link_class), not strings: the full
/// Frontier has 555k links, and three strings each were most of its memory.
struct Link {
  sim::Bandwidth bandwidth;
  sim::TimePs latency;
  std::uint32_t class_index = 0;
};

/// The links of a built machine, indexable like a vector: each link holds a 32-bit index into the
/// machine's distinct links (a handful: one per bandwidth, latency and class), 4 B a link instead
/// of 24 (555k links on the full Frontier).
class LinkView {
 public:
  LinkView(const std::vector<Link>& kinds, const std::vector<std::uint32_t>& kind_of)
      : kinds_(&kinds), kind_of_(&kind_of) {}
  [[nodiscard]] const Link& operator[](std::size_t l) const { return (*kinds_)[(*kind_of_)[l]]; }
  [[nodiscard]] std::size_t size() const { return kind_of_->size(); }
  [[nodiscard]] bool empty() const { return kind_of_->empty(); }

 private:
  const std::vector<Link>* kinds_;
  const std::vector<std::uint32_t>* kind_of_;
};

struct Route {
  std::vector<std::size_t> links;  // indices into Topology::links(), in order
  [[nodiscard]] sim::Bandwidth bottleneck(const class Topology& t) const;
};

class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Topology {
 public:
  Topology() = default;

  std::size_t add_device(Device d);
  /// Adds one directed link. Throws TopologyError for unknown endpoints or non-positive bandwidth.
  std::size_t add_link(LinkSpec l);
  /// The same with the endpoints' device indices known (l.src and l.dst must name them): a
  /// machine's nodes are instantiated from one template without a name lookup per link.
  std::size_t add_link(LinkSpec l, std::size_t src, std::size_t dst);
  /// Room for this many devices and links (a machine of thousands of nodes is built in one go).
  void reserve(std::size_t devices, std::size_t links);
  /// Forces the route from `src` to `dst` through the listed devices (`hops` excludes both ends).
  /// Throws TopologyError when consecutive devices have no direct link.
  void add_route_override(const std::string& src, const std::string& dst, const std::vector<std::string>& hops);
  /// Checks the graph and freezes it. Throws TopologyError listing every problem.
  void seal();

  [[nodiscard]] bool sealed() const { return sealed_; }
  [[nodiscard]] const std::vector<Device>& devices() const { return devices_; }
  [[nodiscard]] LinkView links() const { return LinkView(link_kinds_, link_kind_of_); }
  /// The device indices of link l's endpoints (its names resolved once, for hot paths).
  [[nodiscard]] std::size_t link_src(std::size_t l) const { return link_ends_[l].first; }
  [[nodiscard]] std::size_t link_dst(std::size_t l) const { return link_ends_[l].second; }
  /// Link l's class ("gpu-gpu", "cpu-gpu", "network", ...).
  [[nodiscard]] const std::string& link_class(std::size_t l) const { return link_classes_[links()[l].class_index]; }
  /// The names of link l's ends.
  [[nodiscard]] const std::string& link_src_name(std::size_t l) const { return devices_[link_ends_[l].first].name; }
  [[nodiscard]] const std::string& link_dst_name(std::size_t l) const { return devices_[link_ends_[l].second].name; }
  [[nodiscard]] std::optional<std::size_t> find_device(std::string_view name) const;
  [[nodiscard]] const Device& device(std::size_t i) const { return devices_.at(i); }
  /// Devices of one kind, in declaration order.
  [[nodiscard]] std::vector<std::size_t> devices_of(DeviceKind kind) const;
  /// The distinct cost-table keys of the GPUs (Device::device_kind), in order of first appearance;
  /// made by seal(). A reader checking its table against every GPU checks these instead.
  [[nodiscard]] const std::vector<std::string>& gpu_device_kinds() const { return gpu_device_kinds_; }

  /// The route from `src` to `dst` (device indices). Throws TopologyError when unreachable.
  [[nodiscard]] const Route& route(std::size_t src, std::size_t dst) const;
  /// The direct link from `src` to `dst`, if any (the first declared).
  [[nodiscard]] std::optional<std::size_t> direct_link(std::size_t src, std::size_t dst) const;
  /// The identity of a sealed topology's content: copies of one sealed topology share it (they
  /// cannot change), and every seal() makes a new one, so two topologies with the same identity
  /// have the same devices, links and routes. Null before seal(). Caches keyed on it hold it, so
  /// that no other machine can take its address.
  [[nodiscard]] std::shared_ptr<const void> identity() const { return route_cache_; }

 private:
  std::vector<Device> devices_;
  std::vector<Link> link_kinds_;             // the distinct links, in order of first use
  std::vector<std::uint32_t> link_kind_of_;  // per link, its index in link_kinds_
  std::map<std::tuple<double, std::int64_t, std::uint32_t>, std::uint32_t> kind_index_;  // while building
  // Device indices of each link's ends, 32-bit (add_device checks the limit): 555k links on the full
  // Frontier, 4.4 MB less than two size_t.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> link_ends_;
  std::vector<std::string> link_classes_;      // the distinct classes, in order of first use
  std::vector<std::string> gpu_device_kinds_;  // gpu_device_kinds()
  // Device index by name: open addressing (linear probing) over 32-bit device indices, the names
  // themselves read from devices_. A node-based map cost 56 B a device (7.4 MB on the full
  // Frontier); this costs 4 B a slot at most 3/4 full. Lookups do not depend on insertion order.
  static constexpr std::uint32_t kEmptySlot = std::numeric_limits<std::uint32_t>::max();
  std::vector<std::uint32_t> name_slots_;  // kEmptySlot or a device index; size a power of two or 0
  // The slot holding `name`, or the empty slot where it would go (name_slots_ must not be empty).
  [[nodiscard]] std::size_t name_slot(std::string_view name) const;
  void grow_name_slots(std::size_t devices);  // room for this many devices
  std::map<std::pair<std::size_t, std::size_t>, Route> overrides_;
  bool sealed_ = false;
  // The route search's view of the links (built by seal()): each device's out-links in declaration
  // order, those that stay in its own node or reach the network first (up to local_end_), then
  // those into other nodes, sorted by that node. A search between two nodes then looks at the
  // links into those two nodes only, not at every node a network switch reaches.
  struct Arc {
    std::uint32_t target = 0;
    std::uint32_t link = 0;
    std::uint32_t order = 0;  // position among the device's out-links (ties go to the first declared)
    int node = -1;            // the target's node
  };
  std::vector<Arc> arcs_;
  std::vector<std::uint32_t> arc_begin_;  // per device, and one past the last (add_link checks the limit)
  std::vector<std::uint32_t> local_end_;  // per device
  // Routes found so far, by (src, dst) packed into one key. Made at seal() and shared by the copies
  // of the sealed topology, so a route is searched once per machine; the lock is for the sweep's
  // threads, which share one topology (ExperimentSpec::hardware) and its search scratch. Entries
  // are never erased, so the references route() returns stay valid.
  struct RouteCache {
    std::mutex mutex;
    std::unordered_map<std::uint64_t, Route> routes;
  };
  std::shared_ptr<RouteCache> route_cache_;
  // The search's per-device state, sized once and reset only where a search touched it, so that a
  // route costs what it visits (two nodes and the network), not the whole machine. Used under
  // route_cache_'s lock: threads share one sealed topology.
  struct RouteSearch {
    std::vector<int> hops;
    std::vector<double> width;
    std::vector<std::size_t> via_link;
    std::vector<std::size_t> touched;
  };
  mutable RouteSearch search_;
};

}  // namespace offsim::topo

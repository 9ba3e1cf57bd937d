#include "models/platform/machine_resources.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace offsim::models {

MachineResources make_machine_resources(const topo::Topology& topology, const std::vector<bool>& simulated_nodes) {
  MachineResources m;
  const auto simulated = [&](std::size_t device) {
    const int node = topology.device(device).node;
    return node < 0 || simulated_nodes.empty() ||
           (static_cast<std::size_t>(node) < simulated_nodes.size() && simulated_nodes[node]);
  };
  const auto& devices = topology.devices();
  m.unit_of_device.resize(devices.size());
  m.pool_of_device.resize(devices.size());
  m.memory_constraint_of_device.resize(devices.size());
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto& d = devices[i];
    if (!simulated(i)) continue;
    if (d.kind == topo::DeviceKind::kGpu) m.unit_of_device[i] = m.platform.add_unit({d.name + ".stream", 1});
    if (d.kind == topo::DeviceKind::kCpu) m.unit_of_device[i] = m.platform.add_unit({d.name + ".cores", d.cores});
    if (d.memory) {
      m.pool_of_device[i] = m.platform.add_pool({d.name + "." + d.memory->kind, d.memory->kind, d.memory->capacity});
      if (d.memory->bandwidth) {
        m.memory_constraint_of_device[i] = m.platform.add_constraint(
            {d.name + "." + d.memory->kind, *d.memory->bandwidth, d.memory->kind + "-bandwidth", "", "", ""});
      }
    }
  }
  m.constraint_of_link.assign(topology.links().size(), MachineResources::kNoConstraint);
  for (std::size_t i = 0; i < topology.links().size(); ++i) {
    const auto& l = topology.links()[i];
    if (!simulated(topology.link_src(i)) || !simulated(topology.link_dst(i))) continue;
    // Reports split a class by direction (H2D vs D2H): "cpu-gpu:cpu->gpu".
    const auto src_kind = topo::to_string(topology.device(topology.link_src(i)).kind);
    const auto dst_kind = topo::to_string(topology.device(topology.link_dst(i)).kind);
    m.constraint_of_link[i] = m.platform.add_constraint(
        {topology.link_src_name(i) + "->" + topology.link_dst_name(i), l.bandwidth, topology.link_class(i),
         fmt::format("{}:{}->{}", topology.link_class(i), src_kind, dst_kind), topology.link_src_name(i),
         topology.link_dst_name(i)});
  }
  return m;
}

std::vector<sim::ConstraintId> MachineResources::transfer_route(const topo::Topology& t, std::size_t src,
                                                                std::size_t dst) const {
  std::vector<sim::ConstraintId> out;
  append_transfer_route(out, t, src, dst);
  return out;
}

void MachineResources::append_transfer_route(std::vector<sim::ConstraintId>& out, const topo::Topology& t,
                                             std::size_t src, std::size_t dst) const {
  if (memory_constraint_of_device[src]) out.push_back(*memory_constraint_of_device[src]);
  for (const auto l : t.route(src, dst).links) out.push_back(link_constraint(t, l));
  if (memory_constraint_of_device[dst]) out.push_back(*memory_constraint_of_device[dst]);
}

sim::ConstraintId MachineResources::link_constraint(const topo::Topology& t, std::size_t link) const {
  const sim::ConstraintId c = constraint_of_link[link];
  if (c == kNoConstraint) {
    throw std::logic_error(
        fmt::format("link {}->{} is outside the simulated nodes", t.link_src_name(link), t.link_dst_name(link)));
  }
  return c;
}

}  // namespace offsim::models

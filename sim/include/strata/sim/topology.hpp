// The cluster as a Boost.Graph graph: GPUs, the NVSwitch fabric, PCIe switches, host (CPU + DRAM),
// the SSD array, NICs, leaf switches and the spine, with bandwidth and latency on the edges. It is
// the engine's ResourceMap: a LinkClass of a rank's demand becomes the concrete resources found by
// routing from that rank's GPU, loaded once per GPU of the program that crosses them. It does not
// compute costs (busy seconds come from cost.hpp).
#pragma once
#include <boost/graph/adjacency_list.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "strata/hwdb/view.hpp"
#include "strata/sim/engine.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::sim {

enum class VertexKind : std::uint8_t { gpu, nvswitch, pcie_switch, host, ssd, nic, leaf, spine };
const char* to_string(VertexKind);

struct TopoVertex {
    VertexKind kind = VertexKind::gpu;
    int node = -1;    ///< -1 for leaf and spine switches
    int index = 0;    ///< within its node (gpu, pcie switch, nic) or globally (leaf)
};

enum class EdgeKind : std::uint8_t { nvlink, pcie, network, uplink };

struct TopoEdge {
    EdgeKind kind = EdgeKind::pcie;
    double bandwidth_Bps = 0;   ///< one direction
    double latency_ns = 0;
    int id = 0;                 ///< dense edge index (resource naming)
};

using TopoGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, TopoVertex, TopoEdge>;

class Topology : public ResourceMap {
public:
    /// Builds the graph. Layout (documented in docs/engine.md): per node, GPUs on PCIe switches of
    /// cluster.gpus_per_pcie_switch, switches on the host, NIC k on the switch of GPU k*gpn/nics,
    /// GPU l uses NIC l*nics/gpn (its rail); an SSD array on the host; all GPUs on one NVSwitch.
    /// Across nodes: fat tree (a leaf per nodes_per_leaf nodes) or rail-optimised (a leaf per rail
    /// and group), every leaf up to one aggregate spine.
    Topology(const ClusterSpec& cluster, const hwdb::HardwareView& hw);

    const TopoGraph& graph() const { return g_; }
    int gpu_vertex(int global_rank) const;
    int gpus_per_node() const { return gpn_; }
    int nics_per_node() const { return nics_; }

    /// Resources a flow of GPU `global_rank` in class `c` loads (empty when the class has no
    /// resource here, e.g. the spine of a single-node cluster).
    std::vector<int> gpu_route(int global_rank, LinkClass c);

    // ResourceMap
    int resource_count() const override { return static_cast<int>(res_names_.size()); }
    std::string resource_name(int r) const override { return res_names_.at(static_cast<std::size_t>(r)); }
    LinkClass resource_class(int r) const override { return res_class_.at(static_cast<std::size_t>(r)); }
    /// The representative GPU's route; each resource's multiplicity is the number of the program's
    /// GPUs (global ranks [global_rank, global_rank + multiplicity)) whose own route crosses it.
    std::vector<ResourceUse> route(const RankProgram& rank, LinkClass c) override;
    int gpus_on_node(const RankProgram& rank) const override;

private:
    int add_vertex(VertexKind k, int node, int index);
    void add_edge(int a, int b, EdgeKind k, double Bps, double latency_ns);
    /// Shortest path (BFS, ties to the lowest vertex id) from `from` to `to` through vertices whose
    /// kind is in `allowed`; returns the edges' ids in order (empty if unreachable).
    std::vector<std::pair<int, int>> path(int from, int to, unsigned allowed);  // (edge id, vertex reached)
    int resource(int element, LinkClass c, const std::string& name);
    std::string vertex_name(int v) const;

    TopoGraph g_;
    int gpn_ = 1, nics_ = 0, nodes_ = 1, nodes_per_leaf_ = 1, spine_ = -1;
    std::vector<int> gpu_v_, nvswitch_v_, host_v_, ssd_v_;
    std::vector<std::vector<int>> nic_v_;  // [node][nic]
    std::vector<std::pair<int, int>> edge_ends_;
    std::vector<EdgeKind> edge_kind_;
    std::map<std::pair<int, int>, int> res_of_;
    std::vector<std::string> res_names_;
    std::vector<LinkClass> res_class_;
    std::vector<std::uint32_t> seen_;
    std::vector<std::pair<int, int>> via_;  // BFS: (edge id, previous vertex)
    std::uint32_t stamp_ = 0;
    bool create_ = true;  ///< false while counting: resource() only looks up
};

}  // namespace strata::sim

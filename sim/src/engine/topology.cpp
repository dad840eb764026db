// Builds the cluster graph and routes link classes over it (BFS restricted to the vertex kinds a
// class may cross). Resources are created lazily, only for what some program routes through.
#include "strata/sim/topology.hpp"

#include <algorithm>
#include <deque>

#include "cost/cost_detail.hpp"

namespace strata::sim {

const char* to_string(VertexKind k) {
    static const char* names[] = {"gpu", "nvswitch", "pcie_switch", "host", "ssd", "nic", "leaf", "spine"};
    return names[static_cast<int>(k)];
}

namespace {
constexpr unsigned bit(VertexKind k) { return 1u << static_cast<unsigned>(k); }
double or_default(double v, double d) { return v > 0 ? v : d; }
}  // namespace

int Topology::add_vertex(VertexKind k, int node, int index) {
    return static_cast<int>(boost::add_vertex(TopoVertex{k, node, index}, g_));
}

void Topology::add_edge(int a, int b, EdgeKind k, double Bps, double latency_ns) {
    const int id = static_cast<int>(edge_ends_.size());
    boost::add_edge(static_cast<std::size_t>(a), static_cast<std::size_t>(b), TopoEdge{k, Bps, latency_ns, id}, g_);
    edge_ends_.emplace_back(a, b);
    edge_kind_.push_back(k);
}

Topology::Topology(const ClusterSpec& c, const hwdb::HardwareView& hw) {
    gpn_ = std::max(1, c.gpus_per_node);
    nodes_ = std::max(1, c.nodes);
    // The cost model's rule (cost_detail::nics_per_node): the cluster's count, else the node's,
    // else one per GPU, as a generic GPU server is built (the planner's estimator assumes the same).
    nics_ = cost_detail::nics_per_node(hw, c);
    nodes_per_leaf_ = std::max(1, c.nodes_per_leaf);
    const int per_sw = std::max(1, c.gpus_per_pcie_switch > 0 ? c.gpus_per_pcie_switch : hw.node.gpus_per_pcie_switch);
    const int switches = (gpn_ + per_sw - 1) / per_sw;
    const double nvlink_Bps = or_default(hw.gpu.scale_up_per_dir_Bps, hw.scale_up.per_dir_Bps);
    const double pcie_Bps = hw.host.per_dir_Bps;
    const double nic_Bps = or_default(c.nic_Bps, hw.nic.per_dir_Bps);

    nic_v_.resize(static_cast<std::size_t>(nodes_));
    for (int n = 0; n < nodes_; ++n) {
        const int nvs = add_vertex(VertexKind::nvswitch, n, 0);
        const int host = add_vertex(VertexKind::host, n, 0);
        const int ssd = add_vertex(VertexKind::ssd, n, 0);
        nvswitch_v_.push_back(nvs);
        host_v_.push_back(host);
        ssd_v_.push_back(ssd);
        add_edge(host, ssd, EdgeKind::pcie, pcie_Bps, hw.host.latency_ns);
        std::vector<int> sw(static_cast<std::size_t>(switches));
        for (int s = 0; s < switches; ++s) {
            sw[static_cast<std::size_t>(s)] = add_vertex(VertexKind::pcie_switch, n, s);
            add_edge(sw[static_cast<std::size_t>(s)], host, EdgeKind::pcie, pcie_Bps, hw.host.latency_ns);
        }
        for (int l = 0; l < gpn_; ++l) {
            const int gv = add_vertex(VertexKind::gpu, n, l);
            gpu_v_.push_back(gv);
            add_edge(gv, nvs, EdgeKind::nvlink, nvlink_Bps, hw.scale_up.latency_ns);
            add_edge(gv, sw[static_cast<std::size_t>(l / per_sw)], EdgeKind::pcie, pcie_Bps, hw.host.latency_ns);
        }
        for (int k = 0; k < nics_; ++k) {
            const int nv = add_vertex(VertexKind::nic, n, k);
            nic_v_[static_cast<std::size_t>(n)].push_back(nv);
            const int near_gpu = static_cast<int>(static_cast<std::int64_t>(k) * gpn_ / nics_);
            add_edge(nv, sw[static_cast<std::size_t>(near_gpu / per_sw)], EdgeKind::pcie, pcie_Bps, hw.host.latency_ns);
        }
    }
    if (nics_ > 0) {
        spine_ = add_vertex(VertexKind::spine, -1, 0);
        const int groups = (nodes_ + nodes_per_leaf_ - 1) / nodes_per_leaf_;
        const bool rail = c.topology == NetTopology::rail_optimized;
        const int leaves_per_group = rail ? nics_ : 1;
        // Leaf uplink: the leaf's NIC bandwidth divided by the oversubscription (fat-tree ratio).
        const int nics_per_leaf = nodes_per_leaf_ * (rail ? 1 : nics_);
        const double uplink_Bps = nic_Bps * nics_per_leaf / std::max(1.0, c.oversubscription);
        std::vector<int> leaves;
        for (int gi = 0; gi < groups; ++gi)
            for (int k = 0; k < leaves_per_group; ++k) {
                const int lv = add_vertex(VertexKind::leaf, -1, gi * leaves_per_group + k);
                leaves.push_back(lv);
                add_edge(lv, spine_, EdgeKind::uplink, uplink_Bps, hw.nic.latency_ns);
            }
        for (int n = 0; n < nodes_; ++n)
            for (int k = 0; k < nics_; ++k) {
                const int leaf = leaves[static_cast<std::size_t>((n / nodes_per_leaf_) * leaves_per_group + (rail ? k : 0))];
                add_edge(nic_v_[static_cast<std::size_t>(n)][static_cast<std::size_t>(k)], leaf, EdgeKind::network, nic_Bps,
                         hw.nic.latency_ns);
            }
    }
    seen_.assign(boost::num_vertices(g_), 0);
    via_.assign(boost::num_vertices(g_), {-1, -1});
}

int Topology::gpu_vertex(int global_rank) const {
    const auto n = static_cast<int>(gpu_v_.size());
    return gpu_v_.at(static_cast<std::size_t>(std::clamp(global_rank, 0, n - 1)));
}

std::vector<std::pair<int, int>> Topology::path(int from, int to, unsigned allowed) {
    ++stamp_;
    std::deque<int> q{from};
    seen_[static_cast<std::size_t>(from)] = stamp_;
    while (!q.empty()) {
        const int u = q.front();
        q.pop_front();
        if (u == to) break;
        // Neighbours in edge-insertion order: deterministic.
        for (auto e : boost::make_iterator_range(boost::out_edges(static_cast<std::size_t>(u), g_))) {
            const int v = static_cast<int>(boost::target(e, g_));
            if (seen_[static_cast<std::size_t>(v)] == stamp_ || !(allowed & bit(g_[static_cast<std::size_t>(v)].kind))) continue;
            seen_[static_cast<std::size_t>(v)] = stamp_;
            via_[static_cast<std::size_t>(v)] = {g_[e].id, u};
            q.push_back(v);
        }
    }
    std::vector<std::pair<int, int>> out;
    if (seen_[static_cast<std::size_t>(to)] != stamp_) return out;
    for (int v = to; v != from; v = via_[static_cast<std::size_t>(v)].second) out.emplace_back(via_[static_cast<std::size_t>(v)].first, v);
    std::reverse(out.begin(), out.end());
    return out;
}

std::string Topology::vertex_name(int v) const {
    const auto& x = g_[static_cast<std::size_t>(v)];
    std::string s = x.node >= 0 ? "node" + std::to_string(x.node) + "/" : "";
    s += to_string(x.kind);
    if (x.kind == VertexKind::gpu || x.kind == VertexKind::pcie_switch || x.kind == VertexKind::nic || x.kind == VertexKind::leaf)
        s += std::to_string(x.index);
    return s;
}

int Topology::resource(int element, LinkClass c, const std::string& name) {
    auto key = std::make_pair(element, static_cast<int>(c));
    auto it = res_of_.find(key);
    if (it != res_of_.end()) return it->second;
    if (!create_) return -1;  // counting other GPUs' routes: never invent resources nobody loads
    const int r = static_cast<int>(res_names_.size());
    res_of_.emplace(key, r);
    res_names_.push_back(name + " " + to_string(c));
    res_class_.push_back(c);
    return r;
}

std::vector<int> Topology::gpu_route(int global_rank, LinkClass c) {
    const int gv = gpu_vertex(global_rank);
    const int node = g_[static_cast<std::size_t>(gv)].node;
    const int local = g_[static_cast<std::size_t>(gv)].index;
    const int nv = static_cast<int>(boost::num_vertices(g_));
    const unsigned in_node = bit(VertexKind::gpu) | bit(VertexKind::pcie_switch) | bit(VertexKind::host);
    std::vector<int> out;
    auto edges_of_kind = [&](const std::vector<std::pair<int, int>>& p, EdgeKind k) {
        for (const auto& [e, v] : p)
            if (edge_kind_[static_cast<std::size_t>(e)] == k) {
                const auto& [a, b] = edge_ends_[static_cast<std::size_t>(e)];
                const int from = a == v ? b : a;  // name the edge in the direction travelled
                out.push_back(resource(nv + e, c, vertex_name(from) + "->" + vertex_name(v)));
            }
    };
    auto at_vertex = [&](int target, unsigned allowed) {
        if (!path(gv, target, allowed).empty()) out.push_back(resource(target, c, vertex_name(target)));
    };
    const int host = host_v_[static_cast<std::size_t>(node)];
    const int nic = nics_ > 0 ? nic_v_[static_cast<std::size_t>(node)][static_cast<std::size_t>(static_cast<std::int64_t>(local) * nics_ / gpn_)] : -1;
    switch (c) {
        case LinkClass::nvlink:
            edges_of_kind(path(gv, nvswitch_v_[static_cast<std::size_t>(node)], bit(VertexKind::gpu) | bit(VertexKind::nvswitch)), EdgeKind::nvlink);
            break;
        case LinkClass::pcie_h2d:
        case LinkClass::pcie_d2h: {
            auto p = path(gv, host, in_node);
            if (c == LinkClass::pcie_h2d) std::reverse(p.begin(), p.end());  // host -> GPU: names read downwards
            for (auto& [e, v] : p)
                if (c == LinkClass::pcie_h2d) {
                    const auto& [a, b] = edge_ends_[static_cast<std::size_t>(e)];
                    v = (a == v) ? b : a;  // the vertex this direction arrives at
                }
            edges_of_kind(p, EdgeKind::pcie);
            break;
        }
        case LinkClass::host_mem:
        case LinkClass::cpu: at_vertex(host, in_node); break;
        case LinkClass::ssd_read:
        case LinkClass::ssd_write: at_vertex(ssd_v_[static_cast<std::size_t>(node)], in_node | bit(VertexKind::ssd)); break;
        case LinkClass::nic:
            if (nic >= 0) at_vertex(nic, in_node | bit(VertexKind::nic));  // may cross the root complex
            break;
        case LinkClass::spine:
            if (nic >= 0 && nodes_ > 1) edges_of_kind(path(nic, spine_, bit(VertexKind::nic) | bit(VertexKind::leaf) | bit(VertexKind::spine)), EdgeKind::uplink);
            break;
        default: break;
    }
    return out;
}

std::vector<ResourceUse> Topology::route(const RankProgram& rank, LinkClass c) {
    const auto mine = gpu_route(rank.global_rank, c);
    std::vector<ResourceUse> out;
    for (int r : mine) out.push_back(ResourceUse{r, 0});
    if (out.empty()) return out;
    // The program's GPUs that can share these resources: same node, or same leaf group (spine).
    const std::int64_t g0 = rank.global_rank, g1 = g0 + std::max<std::int64_t>(1, rank.multiplicity);
    const std::int64_t node = g0 / gpn_;
    const std::int64_t span = c == LinkClass::spine ? static_cast<std::int64_t>(nodes_per_leaf_) * gpn_ : gpn_;
    const std::int64_t lo = std::max(g0, (c == LinkClass::spine ? (node / nodes_per_leaf_) * nodes_per_leaf_ : node) * gpn_);
    const std::int64_t hi = std::min({g1, lo - lo % span + span, static_cast<std::int64_t>(gpu_v_.size())});
    create_ = false;
    for (std::int64_t g = lo; g < hi; ++g) {
        const auto theirs = g == g0 ? mine : gpu_route(static_cast<int>(g), c);
        for (auto& u : out)
            if (std::find(theirs.begin(), theirs.end(), u.resource) != theirs.end()) u.multiplicity += 1;
    }
    create_ = true;
    for (auto& u : out) u.multiplicity = std::max(1.0, u.multiplicity);
    return out;
}

int Topology::gpus_on_node(const RankProgram& rank) const {
    const std::int64_t g0 = rank.global_rank;
    const std::int64_t end_of_node = (g0 / gpn_ + 1) * gpn_;
    return static_cast<int>(std::max<std::int64_t>(1, std::min(g0 + std::max<std::int64_t>(1, rank.multiplicity), end_of_node) - g0));
}

}  // namespace strata::sim

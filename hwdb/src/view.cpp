// Database::view(): resolves a cluster's hardware ids to rows (explicit id, else the node's, else
// defaults derived from the GPU; rules in docs/hwdb.md "view() resolution"), then attaches the
// newest representative measured figures for that GPU (and for device "cpu"). Unknown ids are
// InputErrors with a did-you-mean. Reads only; never writes.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <sstream>

#include "impl.hpp"
#include "sqlite_util.hpp"
#include "strata/common/text.hpp"

namespace strata::hwdb {

namespace {

// Candidates containing the word (case-insensitive) first, since users type "H100" for
// "H100-SXM5-80GB"; otherwise the closest by edit distance.
std::string suggestion(const std::string& word, const std::vector<std::string>& ids) {
    std::vector<std::string> hits;
    const std::string w = ascii_lower(word);
    if (!w.empty())
        for (const auto& id : ids)
            if (ascii_lower(id).find(w) != std::string::npos) hits.push_back(id);
    if (hits.empty()) {
        std::string d = did_you_mean(word, ids);
        if (!d.empty()) hits.push_back(d);
    }
    if (hits.empty()) return "";
    if (hits.size() > 3) hits.resize(3);
    std::string s = " (did you mean ";
    for (std::size_t i = 0; i < hits.size(); ++i) s += (i ? (i + 1 == hits.size() ? " or " : ", ") : "") + ("\"" + hits[i] + "\"");
    return s + "?)";
}

template <class T>
std::vector<std::string> ids_of(const std::vector<T>& rows) {
    std::vector<std::string> v;
    for (const auto& r : rows) v.push_back(r.id);
    return v;
}

[[noreturn]] void unknown(const std::string& field, const std::string& id, const std::string& what,
                          const std::vector<std::string>& ids) {
    throw InputError("", "cluster." + field, "= \"" + id + "\" is not " + what + " in the hardware database" + suggestion(id, ids));
}

// A row named by another row (node -> link) that is missing means the database itself is broken.
[[noreturn]] void dangling(const std::string& from, const std::string& id) {
    throw RuntimeError("hwdb: " + from + " names \"" + id + "\", which is not in the database");
}

// PCIe generation of a host link id ("pcie5-x16" -> 5; 0 if not PCIe).
int pcie_gen(const std::string& host_link) {
    if (host_link.rfind("pcie", 0) != 0 || host_link.size() < 5) return 0;
    return std::isdigit(static_cast<unsigned char>(host_link[4])) ? host_link[4] - '0' : 0;
}

// Defaults when neither the cluster nor a node says: NICs and SSDs of the GPU's PCIe generation,
// since they share the GPU's PCIe switch and are bought to match it (docs/hwdb.md).
std::string default_nic(const Gpu& g) {
    int gen = pcie_gen(g.host_link);
    if (gen >= 5 || g.host_link == "nvlink-c2c") return "ib-ndr";
    if (gen == 4) return "ib-hdr";
    return "ib-edr";
}
std::string default_ssd(const Gpu& g) {
    int gen = pcie_gen(g.host_link);
    if (gen >= 5 || g.host_link == "nvlink-c2c") return "nvme-gen5-x4-datacenter";
    if (gen == 4) return "nvme-gen4-x4-datacenter";
    return "nvme-gen3-x4-client";
}

// The generic node's host memory and drives. DRAM per GPU: the node row of this GPU, else of its
// architecture (DGX-1 V100 64 GB, DGX A100 / H100 256 GB a GPU), else twice the GPU's HBM (the
// lowest ratio of any node row, DGX-1's). One NVMe drive per GPU, as DGX A100 and H100 have it
// (each on its GPU's PCIe switch). Without these a cluster that names no node had no host memory
// and no drive at all, and every offloaded plan was declared out of memory.
void generic_host(Node& n, const Gpu& g, const std::vector<Node>& rows, const std::vector<Gpu>& gpu_rows) {
    auto arch_of = [&](const std::string& id) {
        for (const Gpu& r : gpu_rows)
            if (r.id == id) return r.arch;
        return std::string();
    };
    const Node* same_gpu = nullptr;
    const Node* same_arch = nullptr;
    for (const Node& r : rows) {
        if (r.cpu_dram_bytes <= 0 || r.gpus_per_node <= 0) continue;
        if (r.gpu_hint == g.id && !same_gpu) same_gpu = &r;
        if (!g.arch.empty() && arch_of(r.gpu_hint) == g.arch && !same_arch) same_arch = &r;
    }
    const Node* from = same_gpu ? same_gpu : same_arch;
    const double dram_per_gpu = from ? from->cpu_dram_bytes / from->gpus_per_node : 2.0 * g.hbm_bytes;
    n.gpus_per_node = 8;
    n.cpu_dram_bytes = dram_per_gpu * n.gpus_per_node;
    n.ssd_count = n.gpus_per_node;
    n.notes = "host DRAM " + std::to_string(static_cast<long long>(dram_per_gpu / 1e9)) + " GB a GPU (" +
              (from ? "as node " + from->id : std::string("2 x HBM")) + "), one SSD a GPU; scaled to the cluster's gpus_per_node";
}

// Representative runs holding rows of `device`, newest first (by started_at, then id).
std::vector<std::int64_t> runs_for(sqlite3* db, const std::string& path, const std::string& device) {
    detail::Stmt s(db, path,
                   "SELECT r.id FROM run r WHERE r.representative = 1 AND ("
                   " EXISTS (SELECT 1 FROM measurement m WHERE m.run_id = r.id AND m.device = ?1) OR"
                   " EXISTS (SELECT 1 FROM fit f WHERE f.run_id = r.id AND f.device = ?1))"
                   " ORDER BY r.started_at DESC, r.id DESC");
    s.bind(1, device);
    std::vector<std::int64_t> ids;
    while (s.step()) ids.push_back(s.i64(0));
    return ids;
}

double param(const std::map<std::string, double>& p, const std::string& key, double dflt = 0) {
    auto it = p.find(key);
    return it == p.end() ? dflt : it->second;
}

std::optional<BandwidthFit> bandwidth(const Fit& f) {
    BandwidthFit b;
    b.latency_ns = param(f.params, "latency_ns", param(f.params, "alpha_ns"));
    b.Bps = param(f.params, "Bps", param(f.params, "busbw_Bps"));
    b.provenance = Provenance::fitted;
    if (b.Bps <= 0) return std::nullopt;
    return b;
}

// "all_reduce/intra/8" -> parts; false if malformed.
bool parse_collective_key(const std::string& key, CollectiveFit& c) {
    std::stringstream ss(key);
    std::string coll, scope, group;
    if (!std::getline(ss, coll, '/') || !std::getline(ss, scope, '/') || !std::getline(ss, group)) return false;
    if (coll.empty() || (scope != "intra" && scope != "inter") || group.empty()) return false;
    for (char ch : group)
        if (!std::isdigit(static_cast<unsigned char>(ch))) return false;
    c.collective = coll, c.scope = scope, c.group = std::stoi(group);
    return true;
}

// The kind of GPU figure a fit gives (view(): each kind comes from the newest run measuring it);
// "" for host figures, which attach_host takes.
std::string fit_category(const Fit& f) {
    if (f.kind == "collective") return "collective";
    if (f.key == "hbm" || f.key == "kernel/runtime" || f.key == "kernel/runtime_adam" || f.key == "kernel/runtime_fp32" ||
        f.key == "kernel/runtime_adam_fp32" || f.key == "kernel/runtime_bf16")
        return f.key;
    if (f.kind == "memcpy" && (f.key == "h2d/pinned" || f.key == "d2h/pinned")) return f.key;
    return "";
}

// Host-side figures (CPU Adam, SSD, DRAM) from one run's rows of one device; fills only what is unset.
void attach_host(HardwareView& v, const std::vector<Measurement>& ms, const std::vector<Fit>& fs, const std::string& dev) {
    for (const Fit& f : fs) {
        if (f.device != dev) continue;
        if (f.kind == "ssd" && f.key == "read" && !v.ssd_read) v.ssd_read = bandwidth(f);
        if (f.kind == "ssd" && f.key == "write" && !v.ssd_write) v.ssd_write = bandwidth(f);
        if (f.kind == "host_mem" && f.key == "dram" && !v.host_dram) v.host_dram = bandwidth(f);
        if (f.kind == "cpu_adam" && !v.cpu_adam_params_per_s && param(f.params, "params_per_s") > 0)
            v.cpu_adam_params_per_s = param(f.params, "params_per_s");
    }
    if (!v.cpu_adam_params_per_s) {
        // No fit: the best measured rate (over thread counts and sizes).
        double best = 0;
        for (const Measurement& m : ms)
            if (m.device == dev && m.kind == "cpu_adam") best = std::max(best, m.value);
        if (best > 0) v.cpu_adam_params_per_s = best;
    }
}

}  // namespace

HardwareView Database::view(const std::string& gpu_id, const std::string& node_id, const std::string& intra_link,
                            const std::string& nic_link, const std::string& ssd_id, const std::string& cpu_id) const {
    HardwareView v;
    if (gpu_id.empty()) throw InputError("", "cluster.gpu", "is required (a GPU id of the hardware database, e.g. \"H100-SXM5-80GB\")");
    auto g = gpu(gpu_id);
    if (!g) unknown("gpu", gpu_id, "a GPU", ids_of(gpus()));
    v.gpu = *g;

    if (!node_id.empty()) {
        auto n = node(node_id);
        if (!n) unknown("node", node_id, "a node", ids_of(nodes()));
        v.node = *n;
    } else {
        // No node named: a generic 8-GPU server around this GPU; its links come from the rules below,
        // its host memory and drives from a server of the GPU's generation (generic_host()).
        v.node.id = "";
        v.node.gpu_hint = v.gpu.id;
        v.node.fabric = "generic (no node given)";
        v.node.source = "Strata defaults (no node named in the cluster)";
        v.node.confidence = "low";
        generic_host(v.node, v.gpu, nodes(), gpus());
    }

    auto find_link = [&](const std::string& id, const std::string& field, bool user_given) -> Link {
        auto l = link(id);
        if (!l) {
            if (user_given) unknown(field, id, "a link", ids_of(links()));
            dangling(field == "intra_link" || field == "nic" ? "node \"" + v.node.id + "\" or GPU \"" + v.gpu.id + "\"" : field, id);
        }
        return *l;
    };

    // Scale-up: explicit, else the node's, else the GPU's own, else its host link (PCIe only).
    std::string su = intra_link;
    bool su_given = !su.empty();
    if (su.empty()) su = v.node.intra_link;
    if (su.empty()) su = v.gpu.scale_up_link;
    if (su.empty()) su = v.gpu.host_link;
    if (!su.empty()) {
        v.scale_up = find_link(su, "intra_link", su_given);
        // A fabric row describes its generation's usual GPU; an export-limited part (A800, H800)
        // gets less per GPU. Scale line rate and achievable figure by the GPU's own share.
        const bool nv = v.scale_up.kind == LinkKind::scale_up || v.scale_up.kind == LinkKind::switch_fabric;
        if (nv && v.gpu.scale_up_per_dir_Bps > 0 && v.gpu.scale_up_per_dir_Bps < v.scale_up.per_dir_Bps) {
            const double k = v.gpu.scale_up_per_dir_Bps / v.scale_up.per_dir_Bps;
            v.scale_up.per_dir_Bps *= k;
            v.scale_up.achievable_Bps *= k;
            v.scale_up.notes += " [view: scaled to " + v.gpu.id + "'s per-GPU scale-up bandwidth]";
        }
    }
    if (!v.gpu.host_link.empty()) v.host = find_link(v.gpu.host_link, "gpu " + v.gpu.id + " host_link", false);

    std::string nic = nic_link;
    bool nic_given = !nic.empty();
    if (nic.empty()) nic = v.node.nic_link;
    if (nic.empty() && v.node.id.empty()) nic = default_nic(v.gpu);
    if (!nic.empty()) v.nic = find_link(nic, "nic", nic_given);

    std::string sd = ssd_id;
    if (!sd.empty()) {
        auto s = ssd(sd);
        if (!s) unknown("ssd", sd, "an SSD", ids_of(ssds()));
        v.ssd = *s;
    } else {
        sd = v.node.ssd.empty() && v.node.id.empty() ? default_ssd(v.gpu) : v.node.ssd;
        if (!sd.empty()) {
            auto s = ssd(sd);
            if (!s) dangling("node \"" + v.node.id + "\"", sd);
            v.ssd = *s;
        }
    }

    std::string cp = cpu_id;
    if (!cp.empty()) {
        auto c = cpu(cp);
        if (!c) unknown("cpu", cp, "a CPU", ids_of(cpus()));
        v.cpu = *c;
    } else {
        cp = v.node.cpu.empty() ? "cpu-generic" : v.node.cpu;
        auto c = cpu(cp);
        if (!c) dangling("node \"" + v.node.id + "\"", cp);
        v.cpu = *c;
    }

    // ---- measured and fitted figures ----
    // Each kind of GPU figure (GEMM points, attention points, collective fits, HBM, each copy
    // direction, the runtime's kernels) comes whole from the newest run that measured that kind,
    // so the points of one curve describe one software stack together, and a partial profile
    // (`--only ssd`) leaves the kinds it did not measure as they were.
    std::set<std::string> taken;
    for (const std::int64_t gpu_run : runs_for(impl_->db, impl_->path, v.gpu.id)) {
        const auto ms = measurements(gpu_run);
        const auto fs = fits(gpu_run);
        std::set<std::string> here;
        // A plan's own shapes (`strata validate`, origin "plan") are a kind of their own: they
        // join the newest grid's points rather than replace them.
        auto category = [](const Measurement& m) {
            auto o = m.labels.find("origin");
            return o != m.labels.end() && o->second == "plan" ? m.kind + "/plan" : m.kind;
        };
        for (const Measurement& m : ms)
            if (m.device == v.gpu.id && (m.kind == "gemm" || m.kind == "attention")) here.insert(category(m));
        for (const Fit& f : fs)
            if (f.device == v.gpu.id) here.insert(fit_category(f));
        here.erase("");
        auto fresh = [&](const std::string& cat) { return !cat.empty() && taken.count(cat) == 0; };
        if (!v.measured_run) {  // the newest run of this GPU
            v.measured_run = gpu_run;
            v.measured_device = v.gpu.id;
        }
        for (const Measurement& m : ms) {
            if (m.device != v.gpu.id || !fresh(category(m))) continue;
            auto lab = m.labels.find("dtype");
            auto dt = dtype_from_string(lab == m.labels.end() ? "bf16" : lab->second);
            if (!dt || m.value <= 0) continue;
            if (m.kind == "gemm") {
                const double peak = v.gpu.peak(*dt);
                if (peak <= 0) continue;
                GemmPoint p;
                p.m = static_cast<std::int64_t>(param(m.params, "m")), p.n = static_cast<std::int64_t>(param(m.params, "n"));
                p.k = static_cast<std::int64_t>(param(m.params, "k")), p.dtype = *dt, p.efficiency = m.value / peak;
                p.plan = category(m) != m.kind;
                if (p.m > 0 && p.n > 0 && p.k > 0) v.gemm_points.push_back(p);
            } else if (m.kind == "attention") {
                AttentionPoint a;
                a.seq = static_cast<std::int64_t>(param(m.params, "seq"));
                a.head_dim = static_cast<std::int64_t>(param(m.params, "head_dim"));
                // The profiler labels causal "1"/"0" and direction "fwd"/"bwd"; numeric params
                // causal/backward (0/1) are accepted too.
                auto causal = m.labels.find("causal");
                auto dir = m.labels.find("direction");
                a.causal = causal != m.labels.end() ? (causal->second == "1" || causal->second == "true")
                                                    : param(m.params, "causal", 1) != 0;
                a.backward = dir != m.labels.end() ? dir->second == "bwd" : param(m.params, "backward", 0) != 0;
                a.dtype = *dt, a.flops_per_s = m.value;
                a.batch_heads = static_cast<std::int64_t>(param(m.params, "batch", 1) * param(m.params, "heads", 0));
                a.plan = category(m) != m.kind;
                auto impl = m.labels.find("impl");
                a.runtime = impl != m.labels.end() && impl->second == "strata-runtime";
                a.unfused = impl != m.labels.end() && impl->second == "unfused";
                if (a.seq > 0 && a.head_dim > 0) v.attention_points.push_back(a);
            }
        }
        for (const Fit& f : fs) {
            if (f.device != v.gpu.id || !fresh(fit_category(f))) continue;
            if (f.kind == "collective") {
                CollectiveFit c;
                if (!parse_collective_key(f.key, c)) continue;
                c.alpha_ns = param(f.params, "alpha_ns"), c.busbw_Bps = param(f.params, "busbw_Bps");
                c.provenance = Provenance::fitted;
                if (c.busbw_Bps > 0) v.collectives.push_back(c);
            } else if (f.key == "hbm") {
                v.hbm = bandwidth(f);
            } else if (f.key == "kernel/runtime") {
                v.memory_bound = bandwidth(f);
            } else if (f.key == "kernel/runtime_adam") {
                v.optimizer_kernel = bandwidth(f);
            } else if (f.key == "kernel/runtime_fp32") {
                v.memory_bound_fp32 = bandwidth(f);
            } else if (f.key == "kernel/runtime_adam_fp32") {
                v.optimizer_kernel_fp32 = bandwidth(f);
            } else if (f.key == "kernel/runtime_bf16") {
                v.memory_bound_bf16 = bandwidth(f);
            } else if (f.kind == "memcpy" && f.key == "h2d/pinned") {
                v.h2d = bandwidth(f);
            } else if (f.kind == "memcpy" && f.key == "d2h/pinned") {
                v.d2h = bandwidth(f);
            }
        }
        attach_host(v, ms, fs, v.gpu.id);
        taken.insert(here.begin(), here.end());
    }
    // Host-side figures on device "cpu" (a CPU-backend profile: CPU Adam, SSD, host DRAM) describe
    // the host they ran on: they apply to the cpu backend's own view, and to a GPU profiled on that
    // same host (the device workflow profiles the GPU, then its host). A GPU never profiled keeps
    // its datasheet host, so profiling a laptop does not move a DGX cluster's offload predictions.
    // Each figure comes from the newest run that has it, so a run measuring only CPU Adam hides no
    // older SSD figure.
    std::map<std::int64_t, std::string> host_of;
    for (const Run& r : runs()) host_of[r.id] = r.host;
    std::set<std::string> gpu_hosts;
    for (const std::int64_t r : runs_for(impl_->db, impl_->path, v.gpu.id)) gpu_hosts.insert(host_of[r]);
    for (std::int64_t cpu_run : runs_for(impl_->db, impl_->path, "cpu")) {
        if (v.gpu.id != "cpu" && gpu_hosts.count(host_of[cpu_run]) == 0) continue;
        attach_host(v, measurements(cpu_run), fits(cpu_run), "cpu");
        if (!v.measured_run) {
            v.measured_run = cpu_run;
            v.measured_device = "cpu";
        }
    }

    // Deterministic order for consumers that interpolate or print.
    // A shape timed both by the grid and for a plan keeps the plan's (the newer, and the one
    // measured for what will run).
    std::sort(v.gemm_points.begin(), v.gemm_points.end(), [](const GemmPoint& a, const GemmPoint& b) {
        return std::tie(a.dtype, a.m, a.n, a.k, b.plan) < std::tie(b.dtype, b.m, b.n, b.k, a.plan);
    });
    v.gemm_points.erase(std::unique(v.gemm_points.begin(), v.gemm_points.end(),
                                    [](const GemmPoint& a, const GemmPoint& b) { return std::tie(a.dtype, a.m, a.n, a.k) == std::tie(b.dtype, b.m, b.n, b.k); }),
                        v.gemm_points.end());
    auto attn_key = [](const AttentionPoint& a) { return std::tie(a.runtime, a.unfused, a.dtype, a.backward, a.causal, a.head_dim, a.seq, a.batch_heads); };
    std::sort(v.attention_points.begin(), v.attention_points.end(), [&](const AttentionPoint& a, const AttentionPoint& b) {
        return attn_key(a) < attn_key(b) || (attn_key(a) == attn_key(b) && a.plan && !b.plan);
    });
    v.attention_points.erase(std::unique(v.attention_points.begin(), v.attention_points.end(),
                                         [&](const AttentionPoint& a, const AttentionPoint& b) { return attn_key(a) == attn_key(b); }),
                             v.attention_points.end());
    std::sort(v.collectives.begin(), v.collectives.end(), [](const CollectiveFit& a, const CollectiveFit& b) {
        return std::tie(a.collective, a.scope, a.group) < std::tie(b.collective, b.scope, b.group);
    });
    return v;
}

}  // namespace strata::hwdb

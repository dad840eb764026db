// The discrete-event engine: executes a Program (program.hpp) and returns a SimResult.
// Single-threaded and deterministic: integer nanoseconds, events ordered by (time, insertion
// counter), no clock, no I/O, no global state. Costs arrive through CostModel; shared resources
// through ResourceMap (topology.hpp implements it from the cluster graph). It does not lower
// programs, compute costs, or format output beyond the SimResult.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "strata/sim/cost.hpp"
#include "strata/lowering/program.hpp"
#include "strata/sim/result.hpp"

namespace strata::sim {

/// How the engine learns what an instruction costs. Tests pass fakes; RealCostModel wraps cost.hpp.
class CostModel {
public:
    virtual ~CostModel() = default;
    /// Duration of a compute instruction on the GPU(s) of `rank`.
    virtual Estimate compute(const Instr& in, const RankProgram& rank) const = 0;
    /// Latency and busy seconds per LinkClass of a data movement (collective, send, recv, copy,
    /// CPU optimizer) issued by `rank`.
    virtual Demand transfer(const Instr& in, const RankProgram& rank) const = 0;
};

/// The real cost models of cost.hpp behind the CostModel interface. Full mode: the straggler factor
/// of the rank's GPU (cluster.slow_gpus) goes into CostContext::gpu_slowdown.
class RealCostModel : public CostModel {
public:
    explicit RealCostModel(CostContext ctx) : ctx_(ctx) {}
    Estimate compute(const Instr& in, const RankProgram& rank) const override;
    Demand transfer(const Instr& in, const RankProgram& rank) const override;

private:
    CostContext context_for(const RankProgram& rank) const;
    CostContext ctx_;
};

/// A concrete shared resource a flow of some program loads, and by how many of that program's GPUs
/// at once (symmetric mode: one RankProgram stands for several GPUs).
struct ResourceUse {
    int resource = 0;
    double multiplicity = 1;
};

/// Maps (RankProgram, LinkClass) to concrete shared resources. Called once per pair at setup.
class ResourceMap {
public:
    virtual ~ResourceMap() = default;
    virtual int resource_count() const = 0;
    virtual std::string resource_name(int resource) const = 0;
    virtual LinkClass resource_class(int resource) const = 0;
    virtual std::vector<ResourceUse> route(const RankProgram& rank, LinkClass c) = 0;
    /// GPUs of `rank` that live on its node (scales node-level memory pools); default: all of them.
    virtual int gpus_on_node(const RankProgram& rank) const { return static_cast<int>(rank.multiplicity); }
};

/// Fallback map when no topology is given: every (RankProgram, LinkClass) has its own resource, so
/// programs never contend with each other; streams of one program still do.
class PrivateResourceMap : public ResourceMap {
public:
    explicit PrivateResourceMap(int gpus_per_node = 1) : gpus_per_node_(gpus_per_node) {}
    int resource_count() const override { return static_cast<int>(names_.size()); }
    std::string resource_name(int r) const override { return names_.at(static_cast<std::size_t>(r)); }
    LinkClass resource_class(int r) const override { return classes_.at(static_cast<std::size_t>(r)); }
    std::vector<ResourceUse> route(const RankProgram& rank, LinkClass c) override;
    int gpus_on_node(const RankProgram& rank) const override;

private:
    int gpus_per_node_;
    std::vector<std::string> names_;
    std::vector<LinkClass> classes_;
};

/// Allocator model and pool capacities. Capacities: HBM per GPU, DRAM and SSD per node.
struct MemoryOptions {
    double gpu_capacity_bytes = std::numeric_limits<double>::infinity();
    double cpu_capacity_bytes = std::numeric_limits<double>::infinity();  ///< per node
    double ssd_capacity_bytes = std::numeric_limits<double>::infinity();  ///< per node
    /// PyTorch caching allocator rounding on the GPU tier: requests > 1 MiB round up to 2 MiB,
    /// smaller ones to 512 B. Off: bytes are charged as requested.
    bool caching_allocator = true;
    /// Extra fraction charged on the GPU tier for fragmentation of the caching allocator's segments.
    double fragmentation = 0.02;
    /// Replay PyTorch's caching allocator on each GPU (caching_allocator.hpp) instead of rounding
    /// and a fixed fragmentation: the GPU pool's use and peak are then the bytes its segments
    /// reserve, and an OOM is a request the allocator cannot serve after emptying its cache.
    bool replay_caching_allocator = false;
    /// With the replay: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (pages mapped into one
    /// growing virtual range per pool instead of cudaMalloc segments; caching_allocator.hpp).
    bool expandable_segments = false;
};

struct EngineOptions {
    MemoryOptions memory;
    bool record_trace = false;     ///< keep spans and memory samples for trace.hpp
    bool critical_path = true;     ///< build the DAG and its longest path after the run
    std::size_t max_oom_records = 1000;
    /// Compute/communication interference: a kernel that starts while a collective or p2p transfer
    /// of its rank is in flight runs (1 + overlap_slowdown) times longer (NCCL kernels take SMs and
    /// HBM bandwidth from the GEMMs they overlap). 0 = ideal overlap.
    double overlap_slowdown = 0;
    /// Host issue model: each rank's CPU thread issues its instructions in program order, spending
    /// host_launch_ns per kernel launch (host_launches(), cost.hpp); no kernel, transfer or copy starts
    /// before it is issued, and the thread stops at every host_sync until the GPU has reached it.
    /// 0 = the host is never the bottleneck (always ahead of the GPU).
    double host_launch_ns = 0;
};

/// Run one step of `program`. `resources` may be null (PrivateResourceMap is used). The Program
/// must be well formed (stream order, events recorded at most once, matched counterparts present);
/// a program that cannot finish is reported as deadlock in the result, not thrown.
SimResult simulate_program(const Program& program, const CostModel& costs, ResourceMap* resources,
                           const EngineOptions& options = {});

/// Completion time of the remaining work of a flow, rounded UP to whole nanoseconds. The one
/// rounding rule of the engine (a tolerance of 1e-6 ns absorbs floating-point noise).
std::int64_t ceil_ns(double seconds);

/// Bytes charged for an allocation of `bytes` on `tier` under the allocator model.
double charged_bytes(double bytes, Tier tier, const MemoryOptions& m);

/// Label of an instruction for traces and the critical path ("gemm", "reduce_scatter(dp)", ...).
std::string instr_label(const Instr& in);

}  // namespace strata::sim

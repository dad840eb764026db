// Value types of the hardware database: datasheet rows (every one with its source and a
// confidence), profiling runs with their measurements, and the curves fitted from them.
// Units are SI: bytes, bytes/s (_Bps), FLOP/s, nanoseconds. No SQL here.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::hwdb {

enum class Dtype { fp32 = 0, tf32 = 1, fp16 = 2, bf16 = 3, fp8 = 4 };
constexpr int kDtypeCount = 5;
const char* to_string(Dtype);
std::optional<Dtype> dtype_from_string(const std::string&);

/// Where a number came from, best first: a fit or a raw measurement on this kind of GPU, or a datasheet.
enum class Provenance { measured = 0, fitted = 1, datasheet = 2 };
const char* to_string(Provenance);

struct Gpu {
    std::string id, vendor, arch, compute_capability;
    int sm_count = 0;
    double boost_clock_mhz = 0;
    double l2_bytes = 0;
    double hbm_bytes = 0;
    double hbm_Bps = 0;
    std::array<double, kDtypeCount> peak_flops{};  ///< dense FLOP/s per Dtype; 0 = unsupported
    std::string scale_up_link;                     ///< link id, e.g. "nvlink4" ("" = none)
    double scale_up_per_dir_Bps = 0;               ///< per GPU, one direction, line rate
    std::string host_link;                         ///< link id, e.g. "pcie5-x16"
    double tdp_w = 0;
    std::string notes, source, confidence;
    double peak(Dtype d) const { return peak_flops[static_cast<int>(d)]; }
};

enum class LinkKind { scale_up, switch_fabric, host, scale_out };
const char* to_string(LinkKind);

struct Link {
    std::string id;
    LinkKind kind = LinkKind::host;
    double per_dir_Bps = 0;        ///< line rate, one direction (per link for NVLink: see per_link)
    double achievable_Bps = 0;     ///< what applications reach (0 = unknown: use per_dir x fraction)
    double achievable_fraction = 0.8;
    double latency_ns = 0;         ///< typical small-message latency
    std::string notes, source, confidence;
};

struct Node {
    std::string id, gpu_hint;
    int gpus_per_node = 8;
    std::string fabric;            ///< text, e.g. "4x NVSwitch gen3"
    std::string intra_link;        ///< link id of the scale-up fabric
    int nic_count = 0;
    std::string nic_link;          ///< link id
    std::string cpu;               ///< cpu id
    double cpu_dram_bytes = 0;
    std::string ssd;               ///< ssd id
    int ssd_count = 0;
    double ssd_aggregate_read_Bps = 0;
    double h2d_per_gpu_Bps = 0;
    int gpus_per_pcie_switch = 2;
    std::string notes, source, confidence;
};

struct Ssd {
    std::string id, interface, example;
    double seq_read_Bps = 0, seq_write_Bps = 0;
    std::string notes, source, confidence;
};

struct Cpu {
    std::string id;
    int sockets = 1;
    int cores = 0;                 ///< total over sockets
    double dram_Bps = 0;           ///< total over sockets (STREAM-like achievable)
    double adam_params_per_s = 0;  ///< CPU Adam throughput over all cores (0 = derive from dram_Bps)
    std::string notes, source, confidence;
};

/// One profiling run (one `strata profile`), written in one transaction.
struct Run {
    std::int64_t id = 0;
    std::string host, devices, driver, tool_version, backend;
    std::string started_at, finished_at;  ///< ISO-8601 UTC
    bool representative = true;           ///< false: e.g. collectives on one GPU
    std::string notes;
};

/// One measured point. `params` holds the shape (m, n, k, bytes, group, ...); `value` is in `unit`.
struct Measurement {
    std::int64_t run_id = 0;
    std::string kind;      ///< gemm, attention, membw, memcpy, collective, overlap, p2p, ssd, cpu_adam, overhead
    std::string device;    ///< hwdb GPU id, or "cpu"
    std::string key;       ///< canonical, e.g. "bf16 m=4096 n=4096 k=4096" or "all_reduce n=8 intra"
    std::map<std::string, double> params;
    std::map<std::string, std::string> labels;  ///< dtype, direction, collective, scope, ...
    double value = 0;      ///< the median
    std::string unit;      ///< "s", "flop/s", "B/s", "params/s"
    double p10 = 0, p90 = 0;
    int samples = 0;
};

/// A fitted curve. `params` by name (e.g. alpha_ns, busbw_Bps); `model` says which formula.
struct Fit {
    std::int64_t id = 0, run_id = 0;
    std::string kind;      ///< same vocabulary as Measurement::kind
    std::string device;
    std::string key;       ///< e.g. "all_reduce/intra/8", "h2d/pinned", "bf16"
    std::string model;     ///< "alpha_beta", "bandwidth", "gemm_grid", "rate"
    std::map<std::string, double> params;
    std::string points_json;  ///< for grid models: the points, as JSON
    double valid_min = 0, valid_max = 0;
    int n_points = 0;
    double mape = 0;       ///< mean absolute percentage error of the fit on its points (model proportional: mean absolute error)
};

}  // namespace strata::hwdb

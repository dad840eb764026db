#!/usr/bin/env python3
# Derives hwdb/seed/seed.json (Strata's built-in datasheet seed, SI units, the hwdb export format)
# from the shared reference /work/shared/reference/hwdb-seed.json, plus the rows that file lacks
# (CPUs, the Angel-PTM testbed and local-cpu nodes). Run by hand when the reference changes; the
# build reads only seed.json. Sources and confidence are carried over row by row.
import json
import sys

GB = 1e9
TB = 1e12
US_NS = 1e3

ref_path = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/reference/hwdb-seed.json"
out_path = sys.argv[2] if len(sys.argv) > 2 else "seed.json"
ref = json.load(open(ref_path))


def num(v, scale=1.0):
    # Large SI values are rounded to whole units so the JSON carries no binary-fraction noise.
    if v is None:
        return 0.0
    r = float(v) * scale
    return float(round(r)) if abs(r) >= 1e3 else r


def scale_up_link_id(gpu):
    su = gpu.get("scale_up")
    if not su:
        return ""
    t = su["type"]
    for gen in ("NVLink2", "NVLink3", "NVLink4", "NVLink5"):
        if t.startswith(gen):
            return gen.lower()
    if t.startswith("Infinity Fabric"):
        return "infinity-fabric-mi300x"
    raise SystemExit("unknown scale-up type " + t)


def host_link_id(gpu):
    h = gpu["host_link"]
    if h["type"] == "PCIe":
        return "pcie%d-x%d" % (h["gen"], h["lanes"])
    if h["type"].startswith("NVLink-C2C"):
        return "nvlink-c2c"
    raise SystemExit("unknown host link " + h["type"])


# What CUDA reports as the device's memory (cudaDeviceProp::totalGlobalMem, which PyTorch prints as
# "GPU 0 has a total capacity of X GiB" and `strata profile` records). Marketing "80 GB" parts carry
# 80 GiB of HBM, less a driver reservation, so the label read as 1e9 bytes understates the capacity
# by ~6 % and moved OOM verdicts. Values are the lowest seen across drivers in public logs
# (conservative); parts without an observation keep the label in decimal GB, a lower bound.
GIB = 1024.0 ** 3
VISIBLE_GIB = {
    "V100-SXM2-32GB": (31.75, "observed"),
    "A100-SXM4-40GB": (39.38, "observed (39.38-39.56)"),
    "A100-SXM4-80GB": (79.15, "observed (79.15-79.25)"),
    "A800-SXM4-80GB": (79.15, "assumed equal to A100-SXM4-80GB (same memory)"),
    "H100-SXM5-80GB": (79.11, "observed (79.11-79.25)"),
    "H800-SXM5-80GB": (79.11, "assumed equal to H100-SXM5-80GB (same memory)"),
    "H100-PCIe-80GB": (79.11, "assumed equal to H100-SXM5-80GB"),
    "H200-SXM-141GB": (139.80, "observed (139.72-139.81)"),
    "RTX-4090": (23.68, "observed"),
}
VISIBLE_SOURCE = ("CUDA-visible total from PyTorch OOM messages 'total capacity of X GiB' "
                  "(cudaDeviceProp::totalGlobalMem) in public GitHub issues and logs, 2019-2026")


def hbm_bytes(g):
    v = VISIBLE_GIB.get(g["id"])
    return num(v[0], GIB) if v else num(g["mem_gb"], GB)


def hbm_note(g):
    v = VISIBLE_GIB.get(g["id"])
    if not v:
        return " hbm_bytes = the label in decimal GB (no CUDA-visible total observed; a lower bound)."
    return " hbm_bytes = %.2f GiB CUDA-visible, %s (label %s GB)." % (v[0], v[1], g["mem_gb"])


gpus = []
for g in ref["gpus"]:
    p = g["peak_tflops_dense"]
    su = g.get("scale_up")
    gpus.append({
        "id": g["id"], "vendor": g["vendor"], "arch": g["arch"],
        "compute_capability": g["compute_capability"] or "",
        "sm_count": g["sm_count"] or 0,
        "boost_clock_mhz": num(g["boost_clock_mhz"]),
        "l2_bytes": num(g["l2_mb"], 1e6),          # published "MB" taken as 1e6 bytes
        "hbm_bytes": hbm_bytes(g),
        "hbm_Bps": num(g["mem_bw_tbps"], TB),
        "peak_flops": {k: num(p[k], 1e12) for k in ("fp32", "tf32", "fp16", "bf16", "fp8")},
        "scale_up_link": scale_up_link_id(g),
        "scale_up_per_dir_Bps": num(su["per_dir_gbps"], GB) if su else 0.0,
        "host_link": host_link_id(g),
        "tdp_w": num(g["tdp_w"]),
        "notes": ((g.get("mem_type", "") + ". " if g.get("mem_type") else "") + g.get("notes", "")
                  + hbm_note(g)).strip(),
        "source": g["source"] + (" | " + VISIBLE_SOURCE if g["id"] in VISIBLE_GIB else ""),
        "confidence": g["confidence"],
    })

# Meta's Grand Teton H100 (torchtitan's benchmark GPU), not in NVIDIA's datasheets and absent from
# the shared reference. Sources disagree on its capacity (96 GB vs 95 GB) and give no peak FLOPs:
# the notes say what each source states and what was inferred.
SXM_BF16 = 989e12        # H100 SXM5 dense bf16 (the 80GB row above)
NVL_BF16 = 835e12        # H100 NVL dense bf16 (NVIDIA H100 datasheet: 1,671 TFLOPS with sparsity)
TT_BF16 = (SXM_BF16 + NVL_BF16) / 2  # torchtitan: "between SXM and NVL"; the midpoint, not a measurement
gpus.append({
    "id": "H100-SXM5-96GB-HBM2e", "vendor": "NVIDIA", "arch": "Hopper", "compute_capability": "9.0",
    "sm_count": 132, "boost_clock_mhz": 1830.0 * TT_BF16 / SXM_BF16, "l2_bytes": 50e6,
    "hbm_bytes": num(95.0, GIB), "hbm_Bps": 2.4 * TB,
    "peak_flops": {"fp32": 67e12 * TT_BF16 / SXM_BF16, "tf32": TT_BF16 / 2, "fp16": TT_BF16, "bf16": TT_BF16,
                   "fp8": 2 * TT_BF16},
    "scale_up_link": "nvlink4", "scale_up_per_dir_Bps": 450 * GB, "host_link": "pcie5-x16", "tdp_w": 500.0,
    "notes": "HBM2e. Meta's Grand Teton H100 (torchtitan's benchmarks). Sources: torchtitan "
             "benchmarks/llama3_h100_202412_torchtitan.md (2025-01-30, commit d4c86e3) says '96GB HBM2e with "
             "2.4 TB/sec peak memory bandwidth', 'the default 500W power limit, although tuning it up to 700W TDP "
             "can potentially provide further speedups', and 'HBM2e-based SXM H100 with lower TDP, the actual peak "
             "TFLOPs number is between SXM and NVL, and we don't know its exact value'; the earlier torchtitan "
             "docs/performance.md (2024-08, commits 9515a14 to 3faaa1a) says 'HBM2e based lower TDP SXM H100(95GB)'. "
             "NVIDIA's H100 datasheet lists no 96 GB HBM2e SXM part (SXM 80 GB HBM3 3.35 TB/s; PCIe 80 GB HBM2e "
             "2.0 TB/s; NVL 94 GB HBM3 3.9 TB/s). hbm_bytes = 95.0 GiB, taking the '95GB' as the CUDA-visible "
             "total torchtitan logs in GiB (an 80 GB part shows 79.11 GiB); 96 GB read as six 16 GB stacks is an "
             "inference. Peak FLOPs = the midpoint of SXM (989) and NVL (835) dense bf16, 912 TFLOPS, boost clock "
             "scaled to match: an assumption standing in for the unknown value; tdp_w = the 500 W limit used.",
    "source": "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Hardware section and footnote 2) | "
              "pytorch/torchtitan docs/performance.md @3faaa1a (footnote 1) | NVIDIA H100 Tensor Core GPU datasheet "
              "(SXM / NVL columns)",
    "confidence": "low",
})

# The CPU backend's "accelerator": the cores of this machine, ranks as threads. Placeholder figures
# (a 2-core AVX2 machine) so a CPU-only machine simulates out of the box; `strata profile --backend
# cpu` measures the real ones (device "cpu") and the view prefers them.
gpus.append({
    "id": "cpu", "vendor": "generic", "arch": "x86-64 CPU (ranks as threads)", "compute_capability": "",
    "sm_count": 2, "boost_clock_mhz": 2500.0, "l2_bytes": 2e6, "hbm_bytes": 16 * GB, "hbm_Bps": 20 * GB,
    # 2 cores x 2.5 GHz x 32 fp32 FLOP/cycle (two 8-wide AVX2 FMAs); no bf16/fp8 units: Eigen computes
    # those in fp32, so they get the fp32 peak.
    "peak_flops": {"fp32": 160e9, "tf32": 160e9, "fp16": 160e9, "bf16": 160e9, "fp8": 160e9},
    "scale_up_link": "shared-memory", "scale_up_per_dir_Bps": 10 * GB, "host_link": "shared-memory",
    "tdp_w": 0.0,
    "notes": "Placeholder for the CPU backend (a generic 2-core AVX2 machine, dual-channel DDR4). Replace by "
             "profiling: strata profile --backend cpu.",
    "source": "Strata placeholder: FLOP/cycle from the AVX2 FMA width (Intel/AMD optimisation manuals); "
              "DDR4-3200 dual channel = 51.2 GB/s peak, ~40% reached by one thread",
    "confidence": "low",
})

KIND = {"scale-up": "scale-up", "switch": "switch", "host/peer": "host", "host": "host", "scale-out": "scale-out"}
# NVLink and NVSwitch rows describe what ONE GPU of the generation's usual part gets, one direction.
PER_GPU = {"nvlink2": 150, "nvlink3": 300, "nvlink4": 450, "nvlink5": 900}
# Achievable per-GPU figures: NCCL's app-level per-link constant x link count of the usual GPU
# (topo.h), except nvlink4 where the measured ring busbw (~370 GB/s, nccl-tests #212) is used.
ACHIEVABLE = {"nvlink2": 6 * 20.0, "nvlink3": 12 * 20.0, "nvlink4": 370.0, "nvlink5": 18 * 40.1,
              "nvswitch-gen2": 12 * 20.0, "nvswitch-gen3": 370.0, "nvswitch-nvl72": 18 * 40.1,
              "infinity-fabric-mi300x": 0.0}
ACH_NOTE = {
    "nvlink2": " achievable_Bps = 6 links x 20 GB/s (NCCL SM70 per-link constant).",
    "nvlink3": " achievable_Bps = 12 links x 20 GB/s (NCCL SM80 per-link constant, ~80% of peak).",
    "nvlink4": " achievable_Bps = 370 GB/s NCCL ring busbw on 8x H100 (nccl-tests #212).",
    "nvlink5": " achievable_Bps = 18 links x 40.1 GB/s (NCCL SM100 per-link constant).",
    "nvswitch-gen2": " achievable_Bps as nvlink3; latency_ns copied from nvlink3 (estimate).",
    "nvswitch-gen3": " achievable_Bps as nvlink4 (ring, not NVLS); latency_ns copied from nvlink4 (estimate).",
    "nvswitch-nvl72": " achievable_Bps as nvlink5; latency_ns copied from nvlink5 (estimate).",
}
links = []
for l in ref["links"]:
    lid = l["id"]
    if lid in PER_GPU:
        per_dir = PER_GPU[lid]
    elif "per_gpu_per_dir_gbps" in l:
        per_dir = l["per_gpu_per_dir_gbps"]
    elif lid == "infinity-fabric-mi300x":
        per_dir = 7 * l["per_link_per_dir_gbps"]
    elif "per_dir_gbps_theoretical" in l:
        per_dir = l["per_dir_gbps_theoretical"]
    else:
        per_dir = l["per_dir_gbps"]
    ach = ACHIEVABLE.get(lid, l.get("per_dir_gbps_achievable"))
    lat = l.get("latency_us") or {}
    lat_us = lat.get("typical_p2p_small_msg", lat.get("typical", lat.get("typical_end_to_end")))
    if lid.startswith("nvswitch"):
        lat_us = 1.5
    note = l.get("notes", "")
    if "example_per_gpu" in l:
        note = ("Per GPU: " + l["example_per_gpu"] + ". " + note).strip()
    links.append({
        "id": lid, "kind": KIND[l["kind"]],
        "per_dir_Bps": num(per_dir, GB), "achievable_Bps": num(ach, GB),
        "achievable_fraction": float(l.get("achievable_fraction", 0.8)),
        "latency_ns": num(lat_us, US_NS),
        "notes": (note + ACH_NOTE.get(lid, "")).strip(),
        "source": l["source"], "confidence": l["confidence"],
    })

CPU_OF = {"DGX-1-V100": "xeon-e5-2698v4-x2", "DGX-A100": "epyc-7742-x2", "DGX-H100": "xeon-8480c-x2",
          "HGX-H200": "xeon-8480c-x2", "GB200-NVL72": "grace-x2"}
NODE = {
    # id: gpu_hint, intra_link, nic_link, ssd, gpus_per_pcie_switch
    "DGX-1-V100": ("V100-SXM2-32GB", "nvlink2", "ib-edr", "sata-ssd", 2),
    "DGX-A100": ("A100-SXM4-80GB", "nvswitch-gen2", "ib-hdr", "nvme-gen4-x4-datacenter", 2),
    "DGX-H100": ("H100-SXM5-80GB", "nvswitch-gen3", "ib-ndr", "nvme-gen4-x4-datacenter", 2),
    "HGX-H200": ("H200-SXM-141GB", "nvswitch-gen3", "ib-ndr", "nvme-gen4-x4-datacenter", 2),
    "GB200-NVL72": ("GB200-GPU", "nvswitch-nvl72", "ib-ndr", "nvme-gen4-x4-datacenter", 2),
}
nodes = []
for n in ref["nodes"]:
    hint, intra, nic, ssd, per_sw = NODE[n["id"]]
    st = n["local_storage"]
    h2d = n["host_to_device"]
    h2d_gbps = h2d.get("per_gpu_gbps_measured", h2d.get("per_gpu_gbps_est"))
    nodes.append({
        "id": n["id"], "gpu_hint": hint, "gpus_per_node": n["gpus_per_node"], "fabric": n["gpu_fabric"],
        "intra_link": intra, "nic_count": n["nics"]["count"], "nic_link": nic, "cpu": CPU_OF[n["id"]],
        "cpu_dram_bytes": num(n["cpu_dram_gb"], GB), "ssd": ssd, "ssd_count": st["count"],
        "ssd_aggregate_read_Bps": num(st.get("aggregate_read_gbps_est"), GB),
        "h2d_per_gpu_Bps": num(h2d_gbps, GB), "gpus_per_pcie_switch": per_sw,
        "notes": ("NICs: %s. CPU: %s. Storage: %s. H2D: %s. " % (n["nics"]["type"], n["cpu"], st["type"], h2d["link"])
                  + n.get("notes", "")).strip(),
        "source": n["source"], "confidence": n["confidence"],
    })
nodes.append({
    "id": "angel-ptm-a100-40g", "gpu_hint": "A100-SXM4-40GB", "gpus_per_node": 8,
    "fabric": "NVLink3 through NVSwitch (DGX/HGX A100 layout)", "intra_link": "nvswitch-gen2",
    "nic_count": 8, "nic_link": "ib-hdr", "cpu": "epyc-7742-x2", "cpu_dram_bytes": 1024 * GB,
    "ssd": "nvme-gen4-x4-datacenter", "ssd_count": 4, "ssd_aggregate_read_Bps": 0.0,
    "h2d_per_gpu_Bps": 25.13 * GB, "gpus_per_pcie_switch": 2,
    "notes": "Testbed of the Angel-PTM evaluation: 8x A100-SXM4-40GB per node, 1.6 Tbit/s RDMA per node, "
             "recorded as 8 NICs x 200 Gb/s (the paper does not name the fabric; ib-hdr stands in). "
             "CPU, DRAM (1 TB) and SSD layout are assumptions modelled on an HGX A100 server; set them in the "
             "cluster spec when known. H2D = measured A100 pinned copy (nvbandwidth #42).",
    "source": "Nie et al., 'Angel-PTM: A Scalable and Economical Large-scale Pre-training System in Tencent', "
              "VLDB 2023 (arXiv 2303.02868) | NVIDIA/nvbandwidth issue #42",
    "confidence": "low",
})
nodes.append({
    "id": "local-cpu", "gpu_hint": "", "gpus_per_node": 1, "fabric": "none (CPU-only machine)",
    "intra_link": "", "nic_count": 0, "nic_link": "", "cpu": "cpu-generic", "cpu_dram_bytes": 32 * GB,
    "ssd": "nvme-gen4-x4-client", "ssd_count": 1, "ssd_aggregate_read_Bps": 0.0,
    "h2d_per_gpu_Bps": 0.0, "gpus_per_pcie_switch": 1,
    "notes": "A workstation or laptop running the CPU backend; the figures are placeholders to be replaced by a "
             "profiler run on device 'cpu'.",
    "source": "Strata placeholder (no datasheet)", "confidence": "low",
})

links.append({
    "id": "shared-memory", "kind": "scale-up", "per_dir_Bps": 10 * GB, "achievable_Bps": 5 * GB,
    "achievable_fraction": 0.5, "latency_ns": 1000.0,
    "notes": "CPU backend: ranks as threads exchange through host DRAM (placeholder; profile to replace).",
    "source": "Strata placeholder", "confidence": "low",
})

ssds = []
for s in ref["ssds"]:
    if "seq_read_gbps" not in s:
        continue  # guidance rows carry no figures
    ssds.append({
        "id": s["id"], "interface": s["interface"], "example": s.get("example", ""),
        "seq_read_Bps": num(s["seq_read_gbps"], GB), "seq_write_Bps": num(s["seq_write_gbps"], GB),
        "notes": s.get("notes", ""), "source": s["source"], "confidence": s["confidence"],
    })

# CPUs: dram_Bps = channels x MT/s x 8 bytes x sockets x 0.7 (a STREAM-like fraction of peak; an
# assumption, to be replaced by a profiler run). adam_params_per_s = 0: derived from dram_Bps.
def cpu(id_, sockets, cores, channels, mts, notes, source, conf, frac=0.7):
    peak = channels * mts * 1e6 * 8 * sockets
    return {"id": id_, "sockets": sockets, "cores": cores, "dram_Bps": round(peak * frac),
            "adam_params_per_s": 0.0,
            "notes": "%s dram_Bps = 70%% of the %.1f GB/s peak (%d sockets x %d channels x %d MT/s x 8 B); "
                     "the 70%% STREAM-like fraction is an assumption." % (notes, peak / GB, sockets, channels, mts),
            "source": source, "confidence": conf}

cpus = [
    cpu("epyc-7742-x2", 2, 128, 8, 3200, "2x AMD EPYC 7742 (Zen 2 'Rome', 64 cores each), as in DGX A100.",
        "AMD EPYC 7002 series: 64 cores, 8-channel DDR4-3200 per socket (204.8 GB/s per socket) | "
        "mlcommons/training_results_v1.0 NVIDIA/systems/dgxa100_ngc21.05_pytorch.json (2x EPYC 7742)", "medium"),
    cpu("xeon-8480c-x2", 2, 112, 8, 4800, "2x Intel Xeon Platinum 8480C (Sapphire Rapids, 56 cores each), as in DGX H100.",
        "Intel Sapphire Rapids: 56 cores, 8 DDR5 channels per socket (servethehome Xeon Max 9480 deep-dive) | "
        "DDR5-4800 (vendor spec, recalled) | mlcommons/training_results_v3.1 NVIDIA/systems/eos_n8_ngc23.09_pytorch.json", "medium"),
    cpu("xeon-e5-2698v4-x2", 2, 40, 4, 2400, "2x Intel Xeon E5-2698 v4 (Broadwell, 20 cores each), as in DGX-1.",
        "Intel E5-2698 v4: 20 cores, 4-channel DDR4-2400 (vendor spec, recalled) | "
        "mlcommons/training_results_v0.6 NVIDIA/systems/dgx1_ngc19.05_pytorch.json", "medium"),
    cpu("grace-x2", 2, 144, 8, 8000, "2x NVIDIA Grace (72 Neoverse-V2 cores each) of one GB200 compute tray; "
        "LPDDR5X modelled as 8 64-bit-equivalent channels at 8000 MT/s = 512 GB/s per Grace.",
        "NVIDIA GB200 NVL72 / Grace datasheet: up to 480 GB LPDDR5X at up to 512 GB/s per Grace (recalled)", "low"),
    cpu("cpu-generic", 1, 8, 2, 3200, "A generic desktop/laptop CPU: 8 cores, dual-channel DDR4-3200.",
        "Strata placeholder: DDR4-3200 dual-channel arithmetic (JEDEC rate x 8 bytes x 2 channels)", "low"),
]

doc = {"schema": 1, "gpus": gpus, "links": links, "nodes": nodes, "ssds": ssds, "cpus": cpus, "runs": []}
with open(out_path, "w") as f:
    json.dump(doc, f, indent=1, sort_keys=False)
    f.write("\n")
print("wrote", out_path, len(gpus), "gpus", len(links), "links", len(nodes), "nodes", len(ssds), "ssds", len(cpus), "cpus")

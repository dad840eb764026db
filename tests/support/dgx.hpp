// A cluster of 8-GPU DGX nodes for planner tests: H100 parts on DGX-H100 nodes, the rest on
// DGX-A100 (the node entries of the embedded hardware database).
#pragma once
#include <string>

#include "strata/lowering/spec.hpp"

namespace strata::test {

inline sim::ClusterSpec dgx_cluster(const std::string& gpu, int nodes) {
    sim::ClusterSpec c;
    c.name = gpu + "-test";
    c.gpu = gpu;
    c.nodes = nodes;
    c.gpus_per_node = 8;
    c.node = gpu.rfind("H100", 0) == 0 ? "DGX-H100" : "DGX-A100";
    return c;
}

}  // namespace strata::test

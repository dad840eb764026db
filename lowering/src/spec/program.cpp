#include "strata/lowering/program.hpp"

#include <cstdint>
#include <limits>

#include "strata/common/error.hpp"

namespace strata::sim {

const char* to_string(Stream s) {
    static const char* names[] = {"compute", "tp-comm", "cp-comm", "ep-comm", "dp-comm", "pp-p2p", "h2d", "d2h", "ssd", "cpu", "pp-recv", "pp-p2p-b", "pp-recv-b"};
    auto i = static_cast<int>(s);
    return i >= 0 && i < kStreamCount ? names[i] : "?";
}
const char* to_string(InstrKind k) {
    static const char* names[] = {"compute", "collective", "send", "recv", "copy", "alloc", "free", "optimizer", "record", "wait", "host_sync"};
    return names[static_cast<int>(k)];
}
const char* to_string(Op o) {
    static const char* names[] = {"none", "gemm", "attention_fwd", "attention_bwd", "norm", "elementwise", "embedding", "loss", "optimizer_gpu", "router", "grad_accum"};
    return names[static_cast<int>(o)];
}
const char* to_string(Phase p) {
    static const char* names[] = {"forward", "backward", "recompute", "optimizer", "other"};
    return names[static_cast<int>(p)];
}
const char* to_string(CollKind c) {
    static const char* names[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"};
    return names[static_cast<int>(c)];
}
const char* to_string(Group g) {
    static const char* names[] = {"tp", "cp", "ep", "dp", "edp", "pp", "embedding", "world", "etp"};
    return names[static_cast<int>(g)];
}
const char* to_string(CopyKind c) {
    static const char* names[] = {"h2d", "d2h", "ssd_read", "ssd_write"};
    return names[static_cast<int>(c)];
}

const char* to_string(Kernel k) {
    static const char* names[] = {"fused", "eager", "flash_fa3", "flash_fa2", "flash_fa1", "unfused_attention"};
    return names[static_cast<int>(k)];
}
const char* to_string(TensorRole r) {
    static const char* names[] = {"activation", "grad", "param", "param_grad", "tokens", "stats", "optimizer_state", "weight_grad", "mask"};
    return names[static_cast<int>(r)];
}

std::int64_t ring_block_rows(const Instr& in, const DataTensor& first_in) {
    return in.kind == InstrKind::compute && in.op == Op::gemm ? in.m : first_in.rows;
}

int Program::name_id(const std::string& s) {
    for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == s) return static_cast<int>(i);
    STRATA_ASSERT(names.size() < static_cast<std::size_t>(std::numeric_limits<std::int16_t>::max()),
                  "Program::name_id: more labels than Instr::name holds");
    names.push_back(s);
    return static_cast<int>(names.size() - 1);
}

}  // namespace strata::sim

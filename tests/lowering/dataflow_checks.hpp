// Helpers of the dataflow tests (test_dataflow.cpp, test_dataflow_moe.cpp): lowering with the
// dataflow, an instruction's operands, and the check that every value is written before it is read.
#pragma once
#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "strata/lowering/lower.hpp"
#include "support/lower_fixtures.hpp"

namespace strata::test {

using namespace strata::sim;

inline Program lower_df(const ModelSpec& m, const PlanSpec& p, bool dataflow = true, int steps = 1) {
    LowerOptions o;
    o.full_mode = true;
    o.dataflow = dataflow;
    o.steps = steps;
    return lower(m, cluster(p.gpus()), p, o);
}

inline std::vector<int> ins(const Program& prog, const RankProgram& r, std::size_t i) {
    const Operands& o = r.operands[i];
    return {r.operand_ids.begin() + o.first, r.operand_ids.begin() + o.first + o.n_in};
}
inline std::vector<int> outs(const Program& prog, const RankProgram& r, std::size_t i) {
    const Operands& o = r.operands[i];
    return {r.operand_ids.begin() + o.first + o.n_in, r.operand_ids.begin() + o.first + o.n_in + o.n_out};
}

inline bool is_range(const DataTensor& t) {
    return t.role == TensorRole::param || t.role == TensorRole::param_grad || t.role == TensorRole::optimizer_state;
}

// Every activation, gradient and statistic is written on a rank before that rank reads it (a
// receive writes what it receives; flat ranges and tokens exist from the start).
inline void check_def_before_use(const Program& prog) {
    for (const RankProgram& r : prog.ranks) {
        REQUIRE(r.operands.size() == r.instrs.size());
        std::set<int> written;
        for (std::size_t i = 0; i < r.instrs.size(); ++i) {
            for (int t : ins(prog, r, i)) {
                REQUIRE(t >= 0);
                REQUIRE(t < static_cast<int>(prog.tensors.size()));
                const DataTensor& d = prog.tensors[static_cast<std::size_t>(t)];
                if (is_range(d) || d.role == TensorRole::tokens) continue;
                INFO("rank " << r.id << " instr " << i << " " << prog.names[static_cast<std::size_t>(r.instrs[i].name)]
                              << " reads " << prog.tensor_names[static_cast<std::size_t>(d.name)] << " layer " << d.layer << " mb " << d.microbatch);
                CHECK(written.count(t) == 1);
            }
            for (int t : outs(prog, r, i)) written.insert(t);
        }
    }
}


}  // namespace strata::test

// Imports: a plan from Megatron-LM arguments (export_megatron's output, or a user's command line,
// `\` continuations and --flag=value included).
#include "strata/planner/export.hpp"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <sstream>

#include "strata/common/error.hpp"

namespace strata::planner {

using namespace strata::sim;

namespace {

/// Repeat `body` `times` times onto `flat`, refusing what would not fit in memory.
void repeat_onto(std::string& flat, const std::string& body, long times, const std::string& s, const std::string& file,
                 const std::string& flag) {
    if (static_cast<double>(body.size()) * static_cast<double>(times) + static_cast<double>(flat.size()) > 1e6)
        throw InputError(file, flag, "has an oversized repetition (got \"" + s + "\")");
    for (long k = 0; k < times; ++k) flat += body;
}

/// The decimal count after a '*' at `at` (advanced past it), at most 100000.
long repeat_count(const std::string& s, std::size_t& at) {
    long times = 0;
    while (at < s.size() && std::isdigit(static_cast<unsigned char>(s[at])) && times < 100000) times = times * 10 + (s[at++] - '0');
    return times;
}

/// Decoder layers per virtual stage of a layout string, read as Megatron-Core's
/// PipelineParallelLayerLayout.parse_str_to_list does: commas are cosmetic, "(X)*N" repeats X
/// N times (not nested), then "xN" for one character x written "x*N" repeats it.
std::vector<int> parse_megatron_layout(std::string s, const std::string& file, const std::string& flag) {
    s.erase(std::remove(s.begin(), s.end(), '"'), s.end());
    s.erase(std::remove(s.begin(), s.end(), '\''), s.end());
    s.erase(std::remove(s.begin(), s.end(), ','), s.end());
    std::string flat;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '(') {
            flat += s[i];
            continue;
        }
        const std::size_t close = s.find(')', i);
        if (close == std::string::npos || close + 2 >= s.size() || s[close + 1] != '*' || !std::isdigit(static_cast<unsigned char>(s[close + 2])))
            throw InputError(file, flag, "has a repetition that is not \"(...)*N\" (got \"" + s + "\")");
        std::size_t end = close + 2;
        const long times = repeat_count(s, end);
        const std::string body = s.substr(i + 1, close - i - 1);
        if (body.find('(') != std::string::npos) throw InputError(file, flag, "has a nested repetition (got \"" + s + "\")");
        repeat_onto(flat, body, times, s, file, flag);
        i = end - 1;
    }
    // Then "x*N": the character before the star, N times.
    std::string expanded;
    for (std::size_t i = 0; i < flat.size(); ++i) {
        if (flat[i] != '*') {
            expanded += flat[i];
            continue;
        }
        std::size_t end = i + 1;
        if (expanded.empty() || end >= flat.size() || !std::isdigit(static_cast<unsigned char>(flat[end])))
            throw InputError(file, flag, "has a '*' that does not follow \"(...)\" or one character with a count (got \"" + s + "\")");
        const long times = repeat_count(flat, end);
        const std::string body(1, expanded.back());
        expanded.pop_back();
        repeat_onto(expanded, body, times, s, file, flag);
        i = end - 1;
    }
    std::vector<int> stages(1, 0);
    for (char c : expanded) {
        if (c == '|') stages.push_back(0);
        else if (c == 't') ++stages.back();
        else if (c != 'E' && c != 'm' && c != 'L')
            throw InputError(file, flag, "may hold only E, t, m, L, '|' and (...)*N, x*N (got '" + std::string(1, c) + "')");
    }
    return stages;
}

}  // namespace


PlanSpec plan_from_megatron_args(const std::string& args, int gpus, const std::string& file) {
    std::istringstream in(args);
    std::vector<std::string> tok;
    for (std::string t; in >> t;) {
        if (t == "\\") continue;  // a shell line continuation
        // --flag=value, as argparse also takes it
        const std::size_t eq = t.find('=');
        if (t.rfind("--", 0) == 0 && eq != std::string::npos) {
            tok.push_back(t.substr(0, eq));
            tok.push_back(t.substr(eq + 1));
        } else {
            tok.push_back(t);
        }
    }
    PlanSpec p;
    p.recompute = Recompute::none;
    p.precision = Precision::fp32;
    // Megatron's default --attention-backend auto picks Transformer Engine's fused kernels.
    p.flash_attention = true;
    p.overlap_grad_reduce = false;
    p.overlap_param_gather = false;
    p.vocab_divisible_by = 128;  // Megatron's --make-vocab-size-divisible-by default
    int layers_per_virtual = 0, virtual_stages = 0, first_layers = 0, last_layers = 0;
    int num_layers = 0;
    bool grad_reduce_bf16 = false, accumulate_fp32 = false;
    int bucket_params = 0;  // --ddp-bucket-size: parameters, turned into bytes once the gradients' type is known
    auto value = [&](std::size_t& i) -> int {
        if (i + 1 >= tok.size()) throw InputError(file, tok[i], "needs a value");
        try {
            std::size_t pos = 0;
            int v = std::stoi(tok[i + 1], &pos);
            if (pos != tok[i + 1].size() || v <= 0) throw std::invalid_argument("x");
            ++i;
            return v;
        } catch (const std::exception&) {
            throw InputError(file, tok[i], "must be a positive integer (got \"" + tok[i + 1] + "\")");
        }
    };
    for (std::size_t i = 0; i < tok.size(); ++i) {
        const std::string& t = tok[i];
        if (t == "--tensor-model-parallel-size") p.tp = value(i);
        else if (t == "--pipeline-model-parallel-size") p.pp = value(i);
        else if (t == "--context-parallel-size") p.cp = value(i);
        else if (t == "--cp-comm-type" && i + 1 < tok.size()) {
            const std::string v = tok[++i];
            if (v == "a2a") p.cp_comm_type = CpCommType::a2a;
            else if (v == "p2p") p.cp_comm_type = CpCommType::p2p;
            else if (v == "all_gather" || v == "allgather") p.cp_comm_type = CpCommType::allgather;  // TE's spelling, the help text's
            else throw InputError(file, t, "= \"" + v + "\" is not modelled (p2p, the ring; a2a, Ulysses' all-to-alls; all_gather, K/V "
                                           "all-gathered; the hierarchical a2a+p2p is not)");
        }
        else if (t == "--expert-model-parallel-size") p.ep = value(i);
        else if (t == "--expert-tensor-parallel-size") p.expert_tp = value(i);
        else if (t == "--micro-batch-size") p.micro_batch = value(i);
        else if (t == "--global-batch-size") p.global_batch = value(i);
        else if (t == "--num-layers-per-virtual-pipeline-stage") layers_per_virtual = value(i);
        else if (t == "--microbatch-group-size-per-virtual-pipeline-stage") p.microbatch_group = value(i);
        else if (t == "--num-layers") num_layers = value(i);
        else if (t == "--sequence-parallel") p.sequence_parallel = true;
        else if (t == "--use-distributed-optimizer") p.zero_stage = 1;
        else if (t == "--bf16") p.precision = Precision::bf16;
        else if (t == "--grad-reduce-in-bf16") grad_reduce_bf16 = true;
        else if (t == "--accumulate-allreduce-grads-in-fp32") accumulate_fp32 = true;
        else if (t == "--no-gradient-accumulation-fusion") p.grad_accum_fusion = false;
        else if (t == "--fp16") p.precision = Precision::fp16;
        else if (t == "--use-flash-attn") p.flash_attention = true, p.attention_kernel = AttentionKernel::fa2;
        else if (t == "--attention-backend") {
            if (i + 1 >= tok.size()) throw InputError(file, t, "needs a value");
            const std::string v = tok[++i];
            if (v == "flash") p.flash_attention = true, p.attention_kernel = AttentionKernel::fa2;
            else if (v == "fused" || v == "auto") p.flash_attention = true, p.attention_kernel = AttentionKernel::fa3;
            else if (v == "unfused" || v == "local") p.flash_attention = false;
            else throw InputError(file, t, "must be flash, fused, unfused, local or auto (got \"" + v + "\")");
        }
        else if (t == "--moe-token-dispatcher-type") {
            if (i + 1 >= tok.size()) throw InputError(file, t, "needs a value");
            const std::string v = tok[++i];
            if (v != "alltoall" && v != "allgather" && v != "flex")
                throw InputError(file, t, "must be alltoall, allgather or flex (got \"" + v + "\")");
        }
        else if (t == "--decoder-first-pipeline-num-layers") first_layers = value(i);
        else if (t == "--decoder-last-pipeline-num-layers") last_layers = value(i);
        else if (t == "--num-virtual-stages-per-pipeline-rank") virtual_stages = value(i);
        else if (t == "--fp8-recipe" || t == "--recompute-method") {
            if (i + 1 >= tok.size()) throw InputError(file, t, "needs a value");
            ++i;
        }
        else if (t == "--overlap-grad-reduce") p.overlap_grad_reduce = true;
        else if (t == "--ddp-bucket-size") bucket_params = value(i);
        else if (t == "--make-vocab-size-divisible-by") {
            p.vocab_divisible_by = value(i);
            if (p.vocab_divisible_by > 65536) throw InputError(file, t, "must be an integer from 1 to 65536 (plan.vocab_divisible_by's range)");
        }
        else if (t == "--overlap-param-gather") p.overlap_param_gather = true;
        else if (t == "--tp-comm-overlap") p.tp_comm_overlap = true;
        else if (t == "--overlap-moe-expert-parallel-comm") p.moe_a2a_overlap = true;
        else if (t == "--moe-pad-expert-input-to-capacity") p.moe_pad_to_capacity = true;
        else if (t == "--moe-enable-deepep") p.moe_dispatcher = MoeDispatcher::deepep;
        else if (t == "--moe-flex-dispatcher-backend") {
            if (i + 1 >= tok.size()) throw InputError(file, t, "needs a value");
            if (tok[++i] == "deepep") p.moe_dispatcher = MoeDispatcher::deepep;
        }
        else if (t == "--recompute-num-layers") p.recompute_layers = value(i);
        else if (t == "--pipeline-model-parallel-layout") {
            if (i + 1 >= tok.size()) throw InputError(file, t, "needs a value");
            p.virtual_layer_split = parse_megatron_layout(tok[++i], file, t);
        }
        else if (t == "--exp-avg-dtype" || t == "--exp-avg-sq-dtype") {
            if (i + 1 >= tok.size()) throw InputError(file, t, "needs a value");
            const std::string v = tok[++i];
            if (!precision_from(v, t == "--exp-avg-dtype" ? p.exp_avg_dtype : p.exp_avg_sq_dtype))
                throw InputError(file, t, "must be fp32, bf16, fp16 or fp8 (got \"" + v + "\")");
        }
        else if (t == "--recompute-modules") {
            p.recompute_modules = 0;
            while (i + 1 < tok.size() && tok[i + 1].rfind("--", 0) != 0) {
                const std::string v = tok[++i];
                RecomputeModule mod{};
                if (!recompute_module_from(v, mod))
                    throw InputError(file, t, "names an unknown module \"" + v + "\" (one of " + recompute_module_choices() + ")");
                p.recompute_modules |= recompute_bit(mod);
            }
            if (p.recompute_modules == 0) throw InputError(file, t, "needs at least one module name");
        }
        else if (t == "--recompute-granularity") {
            if (i + 1 >= tok.size()) throw InputError(file, t, "needs a value");
            std::string v = tok[++i];
            if (v == "selective") p.recompute = Recompute::selective;
            else if (v == "full") p.recompute = Recompute::full;
            else throw InputError(file, t, "must be selective or full (got \"" + v + "\")");
        } else if (t == "--fp8-format") {
            if (i + 1 < tok.size()) ++i;
            p.precision = Precision::fp8;
        }
    }
    if (p.recompute == Recompute::full && p.recompute_layers == 1 && args.find("uniform") != std::string::npos) p.recompute_layers = -1;
    // Megatron's defaults: bf16 weights get fp32 gradient accumulation and reduction unless
    // --grad-reduce-in-bf16; fp16 weights only with --accumulate-allreduce-grads-in-fp32.
    if (p.precision == Precision::bf16 || p.precision == Precision::fp8) p.fp32_grads = !grad_reduce_bf16;
    else if (p.precision == Precision::fp16) p.fp32_grads = accumulate_fp32;
    if (bucket_params > 0) p.dp_bucket_bytes = std::llround(bucket_params * p.grad_bytes());
    if (layers_per_virtual > 0) {
        if (num_layers == 0) throw InputError(file, "--num-layers-per-virtual-pipeline-stage", "needs --num-layers");
        int per_stage = num_layers / p.pp;
        if (per_stage % layers_per_virtual != 0)
            throw InputError(file, "--num-layers-per-virtual-pipeline-stage", "must divide the layers per stage (" + std::to_string(per_stage) + ")");
        p.vpp = per_stage / layers_per_virtual;
        p.schedule = p.vpp > 1 ? Schedule::interleaved_1f1b : Schedule::one_f_one_b;
    }
    if (virtual_stages > 1) {
        p.vpp = virtual_stages;
        p.schedule = Schedule::interleaved_1f1b;
    }
    if (first_layers > 0 || last_layers > 0) {
        // Megatron's uneven split: the first and/or last stage given, the rest even.
        if (num_layers == 0) throw InputError(file, "--decoder-first-pipeline-num-layers", "needs --num-layers");
        const int ends = (first_layers > 0) + (last_layers > 0);
        const int middle_stages = p.pp - ends, middle_layers = num_layers - first_layers - last_layers;
        if (middle_stages < 0 || middle_layers < 0 || (middle_stages == 0) != (middle_layers == 0) ||
            (middle_stages > 0 && middle_layers % middle_stages != 0))
            throw InputError(file, "--decoder-first-pipeline-num-layers",
                             "leaves " + std::to_string(middle_layers) + " layers that do not split evenly over the " +
                                 std::to_string(std::max(0, middle_stages)) + " middle stages");
        p.layer_split.assign(static_cast<std::size_t>(p.pp), middle_stages > 0 ? middle_layers / middle_stages : 0);
        if (first_layers > 0) p.layer_split.front() = first_layers;
        if (last_layers > 0) p.layer_split.back() = last_layers;
    }
    if (!p.virtual_layer_split.empty()) {
        // The layout fixes the virtual stages: pp x vpp of them.
        const int n = static_cast<int>(p.virtual_layer_split.size());
        if (n % p.pp != 0)
            throw InputError(file, "--pipeline-model-parallel-layout", "has " + std::to_string(n) + " stages, not a multiple of --pipeline-model-parallel-size " + std::to_string(p.pp));
        p.vpp = n / p.pp;
        p.schedule = p.vpp > 1 ? Schedule::interleaved_1f1b : Schedule::one_f_one_b;
        // One stage per rank is a plain uneven split.
        if (p.vpp == 1) p.layer_split = std::move(p.virtual_layer_split), p.virtual_layer_split.clear();
    }
    // Megatron reads the group only under interleaving.
    if (p.schedule != Schedule::interleaved_1f1b) p.microbatch_group = 0;
    int denom = p.tp * p.pp * p.cp;
    if (gpus % denom != 0) throw InputError(file, "--tensor-model-parallel-size", "tp x pp x cp = " + std::to_string(denom) + " does not divide the GPU count " + std::to_string(gpus));
    p.dp = gpus / denom;
    // The arguments set every knob the import reads; the framework says what ran them.
    p.framework = "megatron-core";
    return p;
}

}  // namespace strata::planner

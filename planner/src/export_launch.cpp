// Launch scripts around an export: what Megatron-LM's pretrain_gpt.py (or a DeepSpeed training
// script) needs beyond the plan's own arguments to start on the plan's cluster: the process
// launcher (torchrun per node, or Slurm's srun), a tokenizer or vocabulary size, a data source,
// iterations and a learning-rate schedule, and the environment the simulation assumed.
#include <cstdio>
#include <sstream>

#include "strata/common/error.hpp"
#include "strata/planner/export.hpp"

namespace strata::planner {

using namespace strata::sim;

namespace {

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

/// Single-quoted for bash (a path or name from the user may hold anything).
std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

void header(std::ostringstream& o, const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const char* tool) {
    o << "#!/usr/bin/env bash\n"
      << "# " << tool << " launch of " << (p.name.empty() ? std::string("the plan") : "plan " + p.name) << " for " << m.name << " on "
      << c.gpu_count() << " GPUs (" << c.nodes << " nodes x " << c.gpus_per_node << " " << c.gpu << "), written by strata export --launch.\n"
      << "# tp " << p.tp << ", pp " << p.pp << ", dp " << p.dp << ", cp " << p.cp << ", ep " << p.ep << "; micro-batch " << p.micro_batch
      << ", global batch " << p.global_batch << ".\n"
      << "set -euo pipefail\n";
}

void environment(std::ostringstream& o, const ExportResult& r) {
    o << "\n# The environment the simulated plan assumes.\n";
    for (const auto& [name, value] : r.env) o << "export " << name << "=" << value << "\n";
    if (r.env.empty()) o << "# (none beyond the defaults)\n";
    // NCCL: the simulation models NCCL's own ring/tree algorithms over the cluster's NICs, so no
    // NCCL setting is forced; site settings (NCCL_IB_HCA, NCCL_SOCKET_IFNAME) go here.
}

void unsupported_block(std::ostringstream& o, const ExportResult& r, const char* framework) {
    if (r.unsupported.empty()) return;
    o << "\n# Simulated but not expressible in " << framework << " (the run will differ here):\n";
    for (const std::string& u : r.unsupported) o << "#   - " << u << "\n";
}

}  // namespace

std::string megatron_launch(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const LaunchOptions& opt, const ExportResult& args) {
    if (opt.launcher != "torchrun" && opt.launcher != "srun") throw InputError("--launcher", "", "must be torchrun or srun (got \"" + opt.launcher + "\")");
    std::ostringstream o;
    header(o, m, c, p, "Megatron-LM");
    environment(o, args);
    unsupported_block(o, args, "Megatron-LM");
    const int iters = opt.train_iters > 0 ? opt.train_iters : 100;
    const double lr = opt.lr > 0 ? opt.lr : 3e-4;
    o << "\nMEGATRON_LM=${MEGATRON_LM:-.}  # a Megatron-LM checkout\n"
      << "\nARGS=(\n";
    std::istringstream lines(args.text);
    for (std::string line; std::getline(lines, line);)
        if (!line.empty()) o << "  " << line << "\n";
    o << "  # tokenizer and data\n";
    if (opt.tokenizer_model.empty())
        o << "  --tokenizer-type NullTokenizer\n  --vocab-size " << m.vocab << "\n";
    else
        o << "  --tokenizer-type HuggingFaceTokenizer\n  --tokenizer-model " << shell_quote(opt.tokenizer_model) << "\n";
    if (opt.data_path.empty())
        o << "  --mock-data\n";
    else
        o << "  --data-path " << shell_quote(opt.data_path) << "\n  --split 99,1,0\n";
    o << "  # schedule (Strata's defaults for a first run: change for a real one)\n"
      << "  --train-iters " << iters << "\n"
      << "  --lr " << number(lr) << "\n  --min-lr " << number(lr / 10) << "\n"
      << "  --lr-decay-style cosine\n  --lr-warmup-iters " << std::max(1, iters / 100) << "\n"
      << "  --weight-decay 0.1\n  --clip-grad 1.0\n  --adam-beta1 0.9\n  --adam-beta2 0.95\n  --init-method-std 0.02\n"
      << "  --log-interval 1\n  --eval-iters 0\n"
      << ")\n\n";
    if (opt.launcher == "torchrun") {
        o << "# Run this script on each of the " << c.nodes << " nodes with NODE_RANK set (0.." << c.nodes - 1
          << ") and MASTER_ADDR naming node 0.\n"
          << "torchrun --nnodes " << c.nodes << " --nproc-per-node " << c.gpus_per_node
          << " --node-rank \"${NODE_RANK:-0}\" --master-addr \"${MASTER_ADDR:-localhost}\" --master-port \"${MASTER_PORT:-6000}\" \\\n"
          << "  \"$MEGATRON_LM/" << opt.entry << "\" \"${ARGS[@]}\"\n";
    } else {
        o << "# Run inside a Slurm allocation of " << c.nodes << " nodes (sbatch --nodes " << c.nodes << " --gpus-per-node "
          << c.gpus_per_node << "); one task per GPU.\n"
          << "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
          << "export MASTER_PORT=${MASTER_PORT:-6000}\n"
          << "srun --nodes " << c.nodes << " --ntasks-per-node " << c.gpus_per_node << " --gpus-per-node " << c.gpus_per_node
          << " --cpu-bind none \\\n"
          << "  bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS exec python \"$0\" \"$@\"' \\\n"
          << "  \"$MEGATRON_LM/" << opt.entry << "\" \"${ARGS[@]}\"\n";
    }
    return o.str();
}

std::string deepspeed_launch(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const LaunchOptions& opt, const ExportResult& config) {
    if (opt.launcher != "torchrun" && opt.launcher != "srun") throw InputError("--launcher", "", "must be torchrun or srun (got \"" + opt.launcher + "\")");
    std::ostringstream o;
    header(o, m, c, p, "DeepSpeed");
    environment(o, config);
    unsupported_block(o, config, "a DeepSpeed config");
    o << "\n# Settings DeepSpeed takes from the training script / model code, not from the config:\n";
    for (const std::string& s : config.model_code) o << "#   - " << s << "\n";
    if (config.model_code.empty()) o << "#   (none: a plain data-parallel model)\n";
    const std::string entry = opt.entry == "pretrain_gpt.py" ? std::string("train.py") : opt.entry;
    o << "\ncat > ds_config.json <<'STRATA_DS_CONFIG'\n" << config.text << "STRATA_DS_CONFIG\n\n";
    o << "# " << entry << ": the training script that builds the model code above (--entry); the arguments after the\n"
      << "# config are a sketch of what it should take (data, iterations, learning rate), not DeepSpeed's.\n";
    if (opt.launcher == "torchrun") {
        o << "# One line of the hostfile per node: \"<host> slots=" << c.gpus_per_node << "\".\n"
          << "HOSTFILE=${HOSTFILE:-hostfile}\n"
          << "deepspeed --hostfile \"$HOSTFILE\" --num_nodes " << c.nodes << " --num_gpus " << c.gpus_per_node << " \\\n"
          << "  " << shell_quote(entry) << " --deepspeed --deepspeed_config ds_config.json";
    } else {
        o << "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
          << "export MASTER_PORT=${MASTER_PORT:-6000}\n"
          << "srun --nodes " << c.nodes << " --ntasks-per-node " << c.gpus_per_node << " --gpus-per-node " << c.gpus_per_node << " \\\n"
          << "  bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS exec python \"$0\" \"$@\"' \\\n"
          << "  " << shell_quote(entry) << " --deepspeed --deepspeed_config ds_config.json";
    }
    if (!opt.data_path.empty()) o << " --data-path " << shell_quote(opt.data_path);
    if (!opt.tokenizer_model.empty()) o << " --tokenizer " << shell_quote(opt.tokenizer_model);
    o << " --train-iters " << (opt.train_iters > 0 ? opt.train_iters : 100) << " --lr " << number(opt.lr > 0 ? opt.lr : 3e-4) << "\n";
    return o.str();
}

}  // namespace strata::planner

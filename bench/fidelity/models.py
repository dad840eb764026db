# Model architectures used by the fidelity data set (bench/fidelity/runs.json), in Strata's model
# JSON vocabulary. Each entry names where its numbers come from; architecture is configuration,
# not a measurement, so a value recalled from a public config.json is marked as such in SOURCES.
# This file holds data only; build_runs.py turns it into runs.json.


def gpt(name, layers, hidden, heads, vocab, seq_len, dropout=0.1, tied=True, ffn_mult=4):
    """A GPT-2/3 style decoder: learned positions, LayerNorm, GeLU MLP of ffn_mult*hidden, biases."""
    return {
        "name": name, "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": heads,
        "ffn_hidden": ffn_mult * hidden, "ffn": "gelu", "vocab": vocab, "seq_len": seq_len,
        "norm": "layernorm", "position": "learned", "tied_embeddings": tied, "linear_bias": True,
        "dropout": dropout, "moe": None,
    }


def llama(name, layers, hidden, heads, kv_heads, ffn_hidden, vocab, seq_len):
    """A LLaMA-style decoder: RoPE, RMSNorm, SwiGLU, no biases, untied embeddings, no dropout."""
    return {
        "name": name, "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads,
        "ffn_hidden": ffn_hidden, "ffn": "swiglu", "vocab": vocab, "seq_len": seq_len,
        "norm": "rmsnorm", "position": "rope", "tied_embeddings": False, "linear_bias": False,
        "dropout": 0.0, "moe": None,
    }


def with_seq(model, seq_len):
    m = dict(model)
    m["seq_len"] = seq_len
    return m


# --- Megatron-LM GPT-3-style models (Korthikanti et al. 2023, Table 3; Narayanan et al. 2021) ---
# Vocabulary 51,200 and sequence 2,048 are the values the Megatron papers state for their GPT runs.
MEGATRON_22B = gpt("megatron-gpt-22b", 48, 6144, 64, 51200, 2048)
MEGATRON_175B = gpt("megatron-gpt-175b", 96, 12288, 96, 51200, 2048)
MEGATRON_530B = gpt("megatron-gpt-530b", 105, 20480, 128, 51200, 2048)
MEGATRON_1T = gpt("megatron-gpt-1t", 128, 25600, 160, 51200, 2048)

# MT-NLG 530B (Smith et al. 2022, Sec. 2.4/3): same shape as MEGATRON_530B, GPT-2 BPE vocabulary.
MTNLG_530B = gpt("mt-nlg-530b", 105, 20480, 128, 50257, 2048)

# OPT-175B (Zhang et al. 2022, Table 1): 96 layers, 96 heads, d_model 12288, seq 2048, vocab 50272.
# Its MLP is ReLU (metaseq: fc1 -> relu -> fc2); model.ffn "relu" since stop 48 (it was written as
# "gelu" before: the same two matrices, the elementwise difference under 0.1 % of the layer's FLOPs).
OPT_175B = dict(gpt("opt-175b", 96, 12288, 96, 50272, 2048), ffn="relu")

# BLOOM-176B (bigscience tr11 README "Architecture"): ALiBi instead of a position table,
# an extra LayerNorm after the embedding, vocabulary 250,680 (padded to 250,880 in the run).
BLOOM_176B = dict(gpt("bloom-176b", 70, 14336, 112, 250680, 2048), position="none",
                  position_note="ALiBi attention bias (no position table)", embed_layernorm=True)

# ZeRO-Offload tutorial 10B GPT-2 (deepspeed docs/_tutorials/zero-offload.md): 50 x 4096, 32 heads.
ZERO_OFFLOAD_10B = gpt("gpt2-10b-zero-offload", 50, 4096, 32, 50257, 1024)

# NeMo GPT-3 family (NeMo-Megatron-Launcher conf/training/gpt3/{5b,20b}.yaml; 175B is GPT-3).
NEMO_GPT3_5B = gpt("nemo-gpt3-5b", 24, 4096, 32, 50257, 2048)
NEMO_GPT3_20B = gpt("nemo-gpt3-20b", 44, 6144, 48, 50257, 2048)
NEMO_GPT3_175B = gpt("nemo-gpt3-175b", 96, 12288, 96, 50257, 2048)

# LLaMA families (public Hugging Face config.json of each model).
LLAMA2_7B = llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096)
LLAMA2_13B = llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096)
LLAMA2_70B = llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096)
LLAMA3_8B = llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192)
LLAMA3_70B = llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192)
LLAMA3_405B = llama("llama3.1-405b", 126, 16384, 128, 8, 53248, 128256, 8192)

# Nemotron-4 340B (Nemotron-4 340B technical report, Table 1): squared-ReLU MLP (two matrices, no
# gate: ffn "relu2"), LayerNorm, RoPE, GQA 8, untied, no biases.
# Nemotron-3 8B / 22B (NeMo's Nemotron3Config8B / Nemotron3Config22B, nemo/collections/llm/gpt/
# model/nemotron.py): the Nemotron family's LayerNorm, squared ReLU, RoPE (on half of each head's
# channels), no biases, untied embeddings; full multi-head attention; vocabulary 256000 as for
# Nemotron-4 below.
NEMOTRON3_8B = {
    "name": "nemotron3-8b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32,
    "ffn_hidden": 16384, "ffn": "relu2", "vocab": 256000,
    "seq_len": 4096, "norm": "layernorm", "position": "rope", "tied_embeddings": False,
    "linear_bias": False, "dropout": 0.0, "moe": None,
}
NEMOTRON3_22B = dict(NEMOTRON3_8B, name="nemotron3-22b", layers=40, hidden=6144, heads=48, kv_heads=48,
                     ffn_hidden=24576)

NEMOTRON4_340B = {
    "name": "nemotron4-340b", "layers": 96, "hidden": 18432, "heads": 96, "kv_heads": 8,
    "ffn_hidden": 73728, "ffn": "relu2", "vocab": 256000,
    "seq_len": 4096, "norm": "layernorm", "position": "rope", "tied_embeddings": False,
    "linear_bias": False, "dropout": 0.0, "moe": None,
}

# Qwen3 MoE (public config.json): head_dim 128 is not hidden/heads for the 30B-A3B model. Every
# Qwen3 has an RMSNorm over each head's query and key (q_norm, k_norm; Megatron-Core qk_layernorm),
# modelled since stop 25 (model.qk_norm).
QWEN3_30B_A3B = dict(llama("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, 4096), head_dim=128, qk_norm=True,
                     moe={"experts": 128, "top_k": 8, "expert_ffn_hidden": 768, "moe_every": 1,
                          "shared_experts": 0})
QWEN3_235B_A22B = dict(llama("qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 151936, 4096),
                       head_dim=128, qk_norm=True,
                       moe={"experts": 128, "top_k": 8, "expert_ffn_hidden": 1536, "moe_every": 1,
                            "shared_experts": 0})

# DeepSeek-V3 (technical report Sec. 4.2 and config.json): MLA attention (model.mla: q_lora 1536,
# kv_lora 512, nope 128 + rope 64 per query/key head, values 128; kv_heads = heads), first 3
# layers dense (ffn 18432; moe.first_k_dense), then 256 routed + 1 shared expert of width 2048,
# top-8. Multi-token prediction: one module (Sec. 2.2; num_nextn_predict_layers 1), model.mtp_depth.
# Node-limited routing (Sec. 2.1.2; config
# n_group 8, topk_group 4): the 256 experts form 8 groups and a token picks from its best 4.
DEEPSEEK_V3 = dict(llama("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 4096), head_dim=128,
                   mla={"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                        "qk_rope_head_dim": 64, "v_head_dim": 128},
                   mtp_depth=1,
                   moe={"experts": 256, "top_k": 8, "expert_ffn_hidden": 2048, "moe_every": 1,
                        "shared_experts": 1, "first_k_dense": 3, "router_groups": 8,
                        "router_group_topk": 4})

# Qwen3-8B (Megatron-Bridge Qwen3ModelProvider8B and the public config.json): 36 layers, GQA 32/8
# heads of 128, SwiGLU 12288, untied embeddings of 151936 rows, QK-norm (tiny weights, but its
# input is kept: model.qk_norm since stop 25).
QWEN3_8B = dict(llama("qwen3-8b", 36, 4096, 32, 8, 12288, 151936, 4096), head_dim=128, qk_norm=True)

# Moonlight-16B-A3B (moonshotai, DeepseekV3ForCausalLM config.json): MLA without query compression
# (q_lora_rank null), kv_lora 512, nope 128 + rope 64, values 128, 16 heads; layer 0 dense (ffn
# 11264), then 64 routed experts of 1408 (top-6) and 2 shared experts; no group limit (n_group 1);
# no MTP.
MOONLIGHT_16B_A3B = dict(llama("moonlight-16b-a3b", 27, 2048, 16, 16, 11264, 163840, 4096), head_dim=128,
                         mla={"q_lora_rank": 0, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                              "qk_rope_head_dim": 64, "v_head_dim": 128},
                         moe={"experts": 64, "top_k": 6, "expert_ffn_hidden": 1408, "moe_every": 1,
                              "shared_experts": 2, "first_k_dense": 1})

# MosaicML MPT (llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml): expansion ratio 4, vocab
# 50,368. The benchmark NumParams column grows by seq_len*d_model per step of seq_len and equals
# 12*L*d^2 + 13*L*d + V*d + s*d + 2*d exactly (checked in build_runs.py), i.e. the benchmark runs
# used a learned position table, biases on every linear, LayerNorm with bias, tied embeddings.
MPT = {
    "125m": gpt("mpt-125m", 12, 768, 12, 50368, 2048, dropout=0.0),
    "350m": gpt("mpt-350m", 24, 1024, 16, 50368, 2048, dropout=0.0),
    "760m": gpt("mpt-760m", 24, 1536, 12, 50368, 2048, dropout=0.0),
    "1b": gpt("mpt-1b", 24, 2048, 16, 50368, 2048, dropout=0.0),
    "3b": gpt("mpt-3b", 32, 2560, 20, 50368, 2048, dropout=0.0),
    "7b": gpt("mpt-7b", 32, 4096, 32, 50368, 2048, dropout=0.0),
    "13b": gpt("mpt-13b", 40, 5120, 40, 50368, 2048, dropout=0.0),
    "30b": gpt("mpt-30b", 48, 7168, 56, 50368, 2048, dropout=0.0),
    "70b": gpt("mpt-70b", 80, 8192, 64, 50368, 2048, dropout=0.0),
}

# Where each architecture's numbers were read (R = read in a stored copy during this survey;
# C = recalled from the public config/paper, not re-read here: verify before relying on it).
SOURCES = {
    "megatron-gpt-*": "R: calculon-ai/calculon examples/{22B,1T}.json, models/turing-530B.json "
                      "(reproductions of Korthikanti Table 3); vocab 51200 from Megatron papers (C)",
    "mt-nlg-530b": "R: cli99/llm-analysis examples/megatron-turing-nlg README (config of the paper)",
    "opt-175b": "R: OPT paper summary (ai-papers.xuzou.cn/papers/opt_2022): 96 L, 96 heads, 12288",
    "bloom-176b": "R: bigscience-workshop/bigscience train/tr11-176B-ml/README.md",
    "gpt2-10b-zero-offload": "R: deepspeedai/DeepSpeed docs/_tutorials/zero-offload.md; seq 1024 "
                             "and vocab 50257 are the Megatron GPT-2 tutorial defaults (C)",
    "nemo-gpt3-5b/20b": "R: NVIDIA/NeMo-Megatron-Launcher launcher_scripts/conf/training/gpt3/*.yaml",
    "llama2-*, llama3-*": "R (Llama 3 dims): aarnphm.xyz/thoughts/Llama-3 table, engineermaxxing "
                          "scaling-book ch06, Llama-3.1-8B config.json copy (id 30247352769); "
                          "Llama 2 dims: C (HF config.json)",
    "nemotron4-340b": "C: Nemotron-4 340B technical report Table 1",
    "nemotron3-8b/22b": "R: NVIDIA/NeMo nemo/collections/llm/gpt/model/nemotron.py (Nemotron3Config8B, "
                        "Nemotron3Config22B and the NemotronConfig defaults they inherit)",
    "qwen3-*": "R: copies of the Qwen3-30B-A3B and Qwen3-235B-A22B config.json found in public "
               "repositories (find_string ids 30247352769, 22176531064)",
    "deepseek-v3": "R: copy of the DeepSeek-V3 config fields in a public FLOPs test (id 1025404803); "
                   "MTP depth 1 from the technical report (C); n_group 8 / topk_group 4 from "
                   "tests/data/hf/deepseek-v3.json (the published config.json) and Sec. 2.1.2 "
                   "(each token sent to at most 4 nodes)",
    "qwen3-8b": "R: Megatron-Bridge src/megatron/bridge/models/qwen/qwen_provider.py (Qwen3ModelProvider8B) "
                "and two copies of the HF config.json in public code (ids 7900191062, 45545632891)",
    "moonlight-16b-a3b": "R: a copy of the Moonlight-16B-A3B-Instruct config.json in public test code "
                         "(id 70906042521), cross-checked with Megatron-Bridge MoonlightModelProvider16B",
    "gpt2-*-llmc": "R: karpathy/llm.c scripts/run_gpt2_*.sh (-e d12/d24/d36/d48: layers, and "
                   "train_gpt2.cu's GPT-2 channels 768/1024/1280/1600 and heads 12/16/20/25 for them); "
                   "vocab 50257, seq 1024 (-t), no dropout (llm.c has none)",
    "mpt-*": "R: mosaicml/llm-foundry scripts/train/yamls/pretrain/mpt-{1b,3b,7b,13b,30b,70b}.yaml; "
             "125m/350m/760m heads C; all sizes cross-checked against the NumParams column",
}

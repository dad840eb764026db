#!/usr/bin/env python3
"""Random plan sweeps against the runtime (docs/reliability.md, "Random plan sweeps").

  losses: tiny models (GPT, Llama, MoE) on the cpu backend, or the emulated cuda path, under random
          plans (tp/pp/dp/cp/ep, schedules, ZeRO, recompute, precision, offload, overlap, loss
          kernels). Every plan the validator accepts must run, and its first steps must follow the
          single-rank curve of the same model and precision (fp32 to 1e-4, 2-byte and fp8 plans to 2e-2;
          a lock-free update only on its first step).
  memory: bundled models on DGX clusters under random plans: the runtime's memory walk
          (`strata run --memory-only`) against the analytical model (`strata memory`, less its
          framework reserve), per tier; a gap over 5 % is printed with its plan.

Usage: scripts/plan_sweep.py losses|memory [--seed N] [--plans N] [--strata build/strata]
A line starting FAIL or MISMATCH (losses) or GAP (memory) is a finding; `refused` lines are the
validator's or the runtime's refusals, printed for review. Exit status 1 if any FAIL or MISMATCH.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY = {
    'gpt': dict(name='gpt4', layers=4, hidden=64, heads=4, kv_heads=4, ffn_hidden=256, ffn='gelu', vocab=256, seq_len=16,
                max_position=16, norm='layernorm', position='learned', tied_embeddings=True, linear_bias=True, dropout=0.1, moe=None),
    'qwen': dict(name='qwen4', layers=4, hidden=64, heads=4, kv_heads=2, head_dim=32, ffn_hidden=96, ffn='swiglu', vocab=300,
                 seq_len=16, max_position=16, norm='rmsnorm', position='rope', tied_embeddings=True, linear_bias=False, qkv_bias=True,
                 qk_norm=True, sliding_window=8, dropout=0.0, moe=None),
    'gemma': dict(name='gemma4', layers=4, hidden=64, heads=4, kv_heads=2, head_dim=32, ffn_hidden=128, ffn='geglu', vocab=300,
                  seq_len=16, max_position=16, norm='rmsnorm', position='rope', tied_embeddings=True, linear_bias=False,
                  sliding_window=8, window_attn_skip_freq=2, dropout=0.0, moe=None),
    'llama': dict(name='llama4', layers=4, hidden=64, heads=4, kv_heads=2, ffn_hidden=128, ffn='swiglu', vocab=300, seq_len=16,
                  max_position=16, norm='rmsnorm', position='rope', tied_embeddings=False, linear_bias=False, dropout=0.0, moe=None),
    'mla': dict(name='mla4', layers=4, hidden=64, heads=4, kv_heads=4, head_dim=16, ffn_hidden=128, ffn='swiglu', vocab=300, seq_len=16,
                max_position=16, norm='rmsnorm', position='rope', tied_embeddings=False, linear_bias=False, dropout=0.0, moe=None,
                mla=dict(q_lora_rank=32, kv_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12)),
    'mtp': dict(name='mtp4', layers=4, hidden=64, heads=4, kv_heads=2, ffn_hidden=128, ffn='swiglu', vocab=300, seq_len=16,
                max_position=16, norm='rmsnorm', position='rope', tied_embeddings=False, linear_bias=False, dropout=0.0, moe=None,
                mtp_depth=2),
    'moe': dict(name='moe4', layers=4, hidden=64, heads=4, kv_heads=2, ffn_hidden=128, ffn='swiglu', vocab=300, seq_len=16,
                max_position=16, norm='rmsnorm', position='rope', tied_embeddings=False, linear_bias=False, dropout=0.0,
                moe=dict(experts=4, top_k=2, expert_ffn_hidden=64, first_k_dense=1)),
}


def write(path, obj):
    with open(path, 'w') as f:
        json.dump(obj, f)
    return path


def cpu_cluster(work, ranks):
    with open(os.path.join(ROOT, 'scenarios/clusters/local-cpu.json')) as f:
        c = json.load(f)
    c['gpus_per_node'] = ranks
    return write(os.path.join(work, f'cluster{ranks}.json'), c)


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1] if lines else ''


def random_tiny_plan(rng, model):
    p = dict(tp=rng.choice([1, 2]), pp=rng.choice([1, 2]), dp=rng.choice([1, 2]), cp=rng.choice([1, 1, 2]),
             micro_batch=rng.choice([1, 2]), global_batch=8)
    if p['pp'] > 1:
        p['schedule'] = rng.choice(['gpipe', '1f1b', 'interleaved-1f1b', 'dualpipev'])
        if p['schedule'] in ('interleaved-1f1b', 'dualpipev'):
            p['vpp'] = 2
    if p['tp'] > 1:
        p['sequence_parallel'] = model == 'moe' or rng.random() < 0.5
        p['tp_comm_overlap'] = p['sequence_parallel'] and rng.random() < 0.4
    p['zero_stage'] = rng.choice([0, 1, 2, 3])
    p['recompute'] = rng.choice(['none', 'selective', 'full'])
    if p['recompute'] == 'full' and rng.random() < 0.4:
        p['recompute_layers'] = 1
    p['precision'] = rng.choice(['fp32', 'bf16', 'bf16', 'fp16', 'fp8'])
    p['flash_attention'] = rng.random() < 0.5
    off = {}
    if rng.random() < 0.3:
        off['optimizer'] = rng.choice(['cpu', 'ssd'])
    if rng.random() < 0.2:
        off['params'] = rng.choice(['cpu', 'ssd', 'split'])
        if off['params'] == 'split':  # Angel-PTM: layers homed on the GPU or the host
            off['params'] = {'gpu': 0.5, 'cpu': 0.5, 'ssd': 0.0}
        off['optimizer'] = 'ssd' if off['params'] == 'ssd' else rng.choice(['cpu', 'ssd'])
        p['zero_stage'] = rng.choice([1, 2, 3]) if p['dp'] * p['cp'] == 1 else 3
    if off.get('optimizer') and 'params' not in off and rng.random() < 0.4:
        off['grads'] = 'cpu'  # DeepSpeed's ZeRO-Offload: streamed to the host (refused where not executed)
    if off:
        p['offload'] = off
    if rng.random() < 0.2:
        p['lock_free_update'] = True
    p['overlap_grad_reduce'] = rng.random() < 0.5
    p['overlap_param_gather'] = rng.random() < 0.5
    p['dp_bucket_mb'] = rng.choice([0.01, 0.05, 40])
    if rng.random() < 0.3:
        p['grad_accum_fusion'] = rng.random() < 0.5
    if p['pp'] > 1 and p.get('schedule') in ('gpipe', '1f1b') and p['zero_stage'] < 2 and rng.random() < 0.3:
        p['p2p_blocking'] = True  # DeepSpeed's pipeline engine
    if rng.random() < 0.2:
        p['loss_upcast'] = False
    if rng.random() < 0.15:
        p['eager_cross_entropy'] = True
    if p['cp'] > 1 and rng.random() < 0.5:
        p['cp_comm_type'] = rng.choice(['a2a', 'allgather'])
    if model == 'mtp':  # its weights are neither gathered (ZeRO-3) nor fetched from the host
        p['zero_stage'] = min(p['zero_stage'], 2)
        p.get('offload', {}).pop('params', None)
    if p['zero_stage'] == 3 and p['dp'] * p['cp'] > 1 and p['pp'] == 1 and model != 'moe' and rng.random() < 0.3:
        p['zero3_param_sync'] = True  # DeepSpeed 2021: a gather and a reduce-scatter per tensor
    if model == 'moe':
        p['ep'] = rng.choice([1, 2]) if p['dp'] * p['cp'] % 2 == 0 else 1
        # Combined 1F1B: no full recompute, a pipeline only interleaved or DualPipeV (validate_plan).
        if p['ep'] > 1 and p['recompute'] != 'full' and (p['pp'] == 1 or p.get('vpp', 1) > 1) and rng.random() < 0.4:
            p['moe_a2a_overlap'] = True
    return p


def losses(args, work):
    rng = random.Random(args.seed)
    for k, m in TINY.items():
        write(os.path.join(work, f'{k}.json'), m)

    def run(model, plan, tag, backend='cpu', steps=3):
        n = plan.get('tp', 1) * plan.get('pp', 1) * plan.get('dp', 1) * plan.get('cp', 1)
        out = os.path.join(work, f'{tag}.out.json')
        r = subprocess.run([args.strata, 'run', '-m', os.path.join(work, f'{model}.json'), '-c', cpu_cluster(work, n),
                            '-p', write(os.path.join(work, f'{tag}.plan.json'), plan), '--steps', str(steps), '--backend', backend,
                            '--json', out, '--data', 'text', '--ssd-dir', work], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            return r.returncode, last_line(r.stderr), None
        with open(out) as f:
            return 0, '', [s['loss'] for s in json.load(f)['steps']]

    base = {}
    for k in TINY:
        for prec in ('fp32', 'bf16', 'fp16', 'fp8'):
            rc, err, l = run(k, dict(tp=1, pp=1, dp=1, micro_batch=2, global_batch=8, precision=prec), f'base-{k}-{prec}')
            if rc != 0:
                sys.exit(f'the single-rank baseline failed: {err}')
            base[(k, prec)] = l
    bad = 0
    for i in range(args.plans):
        k = rng.choice(list(TINY))
        p = random_tiny_plan(rng, k)
        backend = 'emulated' if rng.random() < 0.25 else 'cpu'
        tag = f'plan{i}'
        try:
            rc, err, l = run(k, p, tag, backend)
        except subprocess.TimeoutExpired:
            print('FAIL timeout', tag, k, backend, json.dumps(p))
            bad += 1
            continue
        if rc == 2:
            print(f'refused {tag} {k}: {err[:200]}')
            continue
        if rc != 0:
            print('FAIL', rc, tag, k, backend, json.dumps(p), err[:300])
            bad += 1
            continue
        ref = base[(k, p['precision'])]
        tol = 1e-4 if p['precision'] == 'fp32' else 2e-2
        pairs = list(zip(l, ref))[:1] if p.get('lock_free_update') else list(zip(l, ref))
        d = max(abs(a - b) / abs(b) for a, b in pairs)
        if d > tol:
            print(f'MISMATCH {tag} {k} {backend} rel {d:.2e}: {l} against {ref}; {json.dumps(p)}')
            bad += 1
        else:
            streamed = ' host-grads' if p.get('offload', {}).get('grads') == 'cpu' else ''
            print(f'ok {tag} {k} {backend} {p["precision"]} rel {d:.1e}{streamed}')
    print(f'{bad} findings in {args.plans} plans')
    return 1 if bad else 0


def memory(args, work):
    rng = random.Random(args.seed)
    models = ['llama-2-7b', 'llama-3-8b', 'gpt2-1.5b', 'mixtral-8x7b', 'deepseek-v3-8l']
    with open(os.path.join(ROOT, 'scenarios/clusters/dgx-h100-x8.json')) as f:
        dgx = json.load(f)
    # DeepSeek-V3's layers (MLA, 256 experts, its MTP module) cut to 8.
    with open(os.path.join(ROOT, 'scenarios/models/deepseek-v3.json')) as f:
        ds = json.load(f)
    ds.update(name='deepseek-v3-8l', layers=8)
    ds['moe']['first_k_dense'] = 1
    ds_path = write(os.path.join(work, 'deepseek-v3-8l.json'), ds)
    gaps = 0
    for i in range(args.plans):
        model = rng.choice(models)
        n = rng.choice([8, 8, 16, 64])
        tp, pp, cp = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4]), rng.choice([1, 1, 2])
        if n % (tp * pp * cp):
            continue
        dp = n // (tp * pp * cp)
        p = dict(tp=tp, pp=pp, dp=dp, cp=cp, micro_batch=rng.choice([1, 2, 4]), precision=rng.choice(['bf16', 'bf16', 'fp16', 'fp32', 'fp8']))
        p['global_batch'] = p['micro_batch'] * dp * rng.choice([1, 2, 4, 8])
        if pp > 1:
            p['schedule'] = rng.choice(['gpipe', '1f1b', 'interleaved-1f1b'])
            if p['schedule'] == 'interleaved-1f1b':
                p['vpp'] = 2
        if tp > 1:
            p['sequence_parallel'] = rng.random() < 0.6
            p['tp_comm_overlap'] = p['sequence_parallel'] and rng.random() < 0.3
        p['zero_stage'] = rng.choice([0, 1, 2, 3])
        p['recompute'] = rng.choice(['none', 'selective', 'full'])
        p['flash_attention'] = rng.random() < 0.7
        if rng.random() < 0.25:
            p['offload'] = {'optimizer': rng.choice(['cpu', 'ssd'])}
            if p['zero_stage'] >= 2 and rng.random() < 0.5:
                p['offload']['grads'] = 'cpu'  # streamed to the host (DeepSpeed's ZeRO-Offload)
                p['cpu_grad_accumulation'] = rng.random() < 0.5  # FSDP's sum on the host
        if cp > 1 and rng.random() < 0.5:
            p['cp_comm_type'] = 'allgather'  # the K/V chunks gathered for the backward
        if 'deepseek' in model:
            p['zero_stage'] = min(p['zero_stage'], 2)  # MTP's weights are not gathered under ZeRO-3
        elif (p['zero_stage'] == 3 or dp * cp == 1) and rng.random() < 0.15:
            # Weights homed on the host, whole or split with the GPU (Angel-PTM), the update there.
            p['zero_stage'] = max(1, p['zero_stage'])
            p['offload'] = {'optimizer': 'cpu', 'params': rng.choice(['cpu', {'gpu': 0.5, 'cpu': 0.5, 'ssd': 0.0}])}
        if 'mixtral' in model or 'deepseek' in model:
            p['ep'] = rng.choice([1, 2, 4, 8])
            if (dp * cp) % p['ep']:
                p['ep'] = 1
            if tp > 1:
                p['sequence_parallel'] = True
            if p['ep'] > 1 and p['recompute'] != 'full' and (pp == 1 or p.get('vpp', 1) > 1) and rng.random() < 0.4:
                p['moe_a2a_overlap'] = True  # combined 1F1B: two micro-batches' activations at once
        if rng.random() < 0.2:
            p['loss_upcast'] = False
        if rng.random() < 0.3:
            p['framework'] = rng.choice(['megatron-core', 'torchtitan', 'deepspeed', 'nemo', 'megatron-lm-2021', 'llm-foundry'])
        cl = write(os.path.join(work, f'dgx-h100-{n}.json'), dict(dgx, name=f'dgx-h100-{n}', nodes=n // dgx['gpus_per_node']))
        plan = write(os.path.join(work, f'mem{i}.plan.json'), p)
        walk_out, model_out = os.path.join(work, 'walk.json'), os.path.join(work, 'model.json')
        if model == 'deepseek-v3-8l':
            model = ds_path
        r = subprocess.run([args.strata, 'run', '-m', model, '-c', cl, '-p', plan, '--memory-only', '--json', walk_out],
                           capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            print(f'refused {i}: {last_line(r.stderr)[:200]}')
            continue
        r2 = subprocess.run([args.strata, 'memory', '-m', model, '-c', cl, '-p', plan, '--json', model_out],
                            capture_output=True, text=True, timeout=900)
        if r2.returncode not in (0, 1):
            print(f'FAIL memory {i}: {last_line(r2.stderr)[:200]}')
            continue
        with open(walk_out) as f:
            w = json.load(f)['steps'][-1]['peak_bytes']
        with open(model_out) as f:
            m = json.load(f)
        a = dict(gpu=m['worst']['hbm_bytes_per_gpu'] - m['reserve_bytes'], cpu=m['worst']['cpu_bytes_per_node'],
                 ssd=m['worst']['ssd_bytes_per_node'])
        parts, worst = [], 0.0
        for t in ('gpu', 'cpu', 'ssd'):
            if a[t] == 0 and w[t] == 0:
                continue
            e = (w[t] - a[t]) / max(a[t], 1)
            worst = max(worst, abs(e))
            parts.append(f'{t} {w[t] / 1e9:.2f}/{a[t] / 1e9:.2f} GB {100 * e:+.1f}%')
        gap = worst > 0.05
        gaps += gap
        # DeepSpeed's presets stream an offloaded optimizer's gradients to the host under ZeRO-2/3.
        streamed = p['zero_stage'] >= 2 and 'optimizer' in p.get('offload', {}) and (
            'deepspeed' in p.get('framework', '') or p['offload'].get('grads') == 'cpu')
        print(('GAP ' if gap else 'ok  ') + f'{i} {os.path.basename(model)} on {n} H100 {p["precision"]}: walk/model ' + ', '.join(parts) +
              (' host-grads' if streamed else '') + (f'; {json.dumps(p)}' if gap else ''))
    print(f'{gaps} gaps over 5 %')
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('mode', choices=['losses', 'memory'])
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--plans', type=int, default=40)
    ap.add_argument('--strata', default=os.path.join(ROOT, 'build', 'strata'))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix='strata-sweep-') as work:
        return losses(args, work) if args.mode == 'losses' else memory(args, work)


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env bash
# GPU check (issue 6): nanoGPT's GPU recipe shape (6 layers, 6 heads, n_embd 384, block 256, batch 64,
# dropout 0.2) on Tiny Shakespeare until val <= 1.47 nats or a time limit; prints time-to-1.47,
# tokens/s and MFU. Installs nothing: run it inside an environment where depthlab is installed.
# Usage: bash benchmarks/gpu_check.sh [TIME_LIMIT_S=240] [OUT_DIR]
# On a machine without CUDA it runs a tiny CPU configuration instead (a smoke test of this script).
set -euo pipefail
limit=${1:-240}
out=${2:-$(mktemp -d "${TMPDIR:-/tmp}/depthlab-gpu.XXXX")/run}
if python -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  args=(--model.n_layer 6 --model.n_head 6 --model.n_embd 384 --model.block_size 256 --model.dropout 0.2
        --train.batch_size 64 --train.learning_rate 1e-3 --train.min_lr 1e-4 --train.warmup_iters 100
        --train.max_iters 5000 --train.eval_interval 100 --train.eval_iters 40 --train.beta2 0.99
        --train.device cuda --train.dtype bfloat16 --train.compile true)
  target=1.47
else
  echo "gpu_check: no CUDA device; running the tiny CPU fallback"
  args=(--model.n_layer 1 --model.n_head 2 --model.n_embd 32 --model.block_size 32 --train.batch_size 8
        --train.max_iters 60 --train.eval_interval 20 --train.eval_iters 2 --train.device cpu)
  target=3.5
fi
depthlab train "${args[@]}" --train.max_time "$limit" --train.target_val_loss "$target" \
  --train.out_dir "$out" --train.progress false --train.grad_log_interval 0 --train.probe_interval 0
python - "$out" "$target" <<'PY'
import json, sys, torch
from depthlab.benchmarking import flops_per_token, peak_flops
run, target = sys.argv[1], float(sys.argv[2])
s = json.load(open(f"{run}/summary.json")); c = json.load(open(f"{run}/config.json"))
fpt = flops_per_token(s["params"], c["model"]["n_layer"], c["model"]["block_size"], c["model"]["n_embd"])
peak, what = peak_flops()
tps = s["tokens_per_sec"]  # whole run: compile, evaluation and checkpoints included
recs = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
steps = sorted(r["tokens_per_sec"] for r in recs if r.get("kind") == "train")[1:] or [tps]  # the first holds the compile
step_tps = steps[len(steps) // 2]  # median over log intervals: training steps only
t = s.get("target_reached_s")
print(f"device: {what}; resolved {c.get('resolved')}")
print(f"time_to_{target}: {t if t is not None else 'not reached'} s (step {s.get('target_reached_step')}); "
      f"best val {s['best_val_loss']:.4f}; tokens/s {tps:,.0f} over the run, {step_tps:,.0f} in training steps; "
      f"MFU {step_tps * fpt / peak:.1%} in training steps, {tps * fpt / peak:.1%} over the run "
      f"(model {step_tps * fpt / 1e12:.2f} TFLOP/s of {peak / 1e12:.0f} peak)")
PY

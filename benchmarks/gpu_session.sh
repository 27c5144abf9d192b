#!/usr/bin/env bash
# The GPU checks of one lent-machine session, prepared to run once (issue 24): benchmarks/gpu_vs_nanogpt.py
# (nanoGPT's own train.py with compile=True, then depthlab's nanogpt-gpu variants, each to val <= 1.47),
# then the CUDA tests and where depthlab's start-up goes (cProfile of a 1-step run). Installs nothing from the
# network: depthlab runs from src/; the pure-Python dependencies the GPU image lacks come as wheels in
# WHEELS (pip download, see the device notes). Writes OUT_DIR/env.txt and OUT_DIR/g/ (logs and table).
# Usage: bash benchmarks/gpu_session.sh OUT_DIR NANOGPT_CHECKOUT [DEADLINE_S=450] [WHEELS=.whl] [VARIANTS]
set -uo pipefail
out=${1:?OUT_DIR}; nano=${2:?NANOGPT_CHECKOUT}; deadline=${3:-450}; wheels=${4:-.whl}
variants=${5:-preset,no-graphs,eval250}
mkdir -p "$out/g"
export PYTHONUNBUFFERED=1 TMPDIR=${TMPDIR:-/tmp}
if compgen -G "$wheels/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$wheels"/*.whl || exit 2
  export PYTHONPATH=/tmp/site:$PWD/src:${PYTHONPATH:-}
else
  export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
fi
{ nvidia-smi -L; nproc
  python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))"
} 2>&1 | tee "$out/env.txt"
python3 benchmarks/gpu_vs_nanogpt.py --nanogpt "$nano" --deadline "$deadline" --logs "$out/g" --variants "$variants"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tail -20 | tee -a "$out/env.txt"
echo "start-up profile: depthlab train --preset nanogpt-gpu, 1 step, eager (cProfile, cumulative s):" | tee -a "$out/env.txt"
python3 -m cProfile -o /tmp/startup.prof -m depthlab train --preset nanogpt-gpu --train.max_iters 1 \
  --train.compile false --train.eval_iters 1 --train.final_validation false --train.out_dir /tmp/startup \
  --train.progress false > /tmp/startup.log 2>&1 || tail -3 /tmp/startup.log | tee -a "$out/env.txt"
python3 -c "import pstats; pstats.Stats('/tmp/startup.prof').sort_stats('cumulative').print_stats(35)" 2>&1 \
  | tail -45 | tee -a "$out/env.txt"

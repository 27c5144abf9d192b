"""Speed of `depthlab coordcheck` (issue 25: <= 2 min on 2 cores for 4 depths x 5 variants x 3 steps).

Usage: python benchmarks/coordcheck_speed.py [--threads N] [--norm layernorm] [--steps 3] [--seeds 1]

Runs exactly the issue's case in one process: ``--axis model.n_layer=2,4,8,16`` crossed with
``model.variant`` = every variant of depthlab's GPT at the time of the issue (prenorm, postnorm, plain,
rezero, deepnorm), ``--steps 3``, the default model otherwise (128 wide, context 128) on the embedded
Tiny Shakespeare corpus. Prints the wall and CPU seconds (the one-off first import of the optimizer machinery is
timed apart, as the CLI pays it once per process), the verdicts, the machine and the load average,
since the numbers mean little on a busy machine.
"""

import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the depthlab command sets it before torch loads (cli.main)

import torch  # noqa: E402

from _common import machine_info  # noqa: E402
from depthlab.analytics.coordcheck import coordcheck  # noqa: E402
from depthlab.config import RunConfig  # noqa: E402

VARIANTS = ["prenorm", "postnorm", "plain", "rezero", "deepnorm"]
DEPTHS = [2, 4, 8, 16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--norm", default="layernorm", help="model.norm of every point")
    ap.add_argument("--steps", type=int, default=3, help="measurements per point (step 1 = init)")
    ap.add_argument("--seeds", type=int, default=1, help="seeds averaged")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(machine_info())
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    base = RunConfig.from_dict({"model": {"norm": args.norm}})
    t0 = time.perf_counter()
    from depthlab.training.optimization import make_optimizer

    import depthlab.optim  # noqa: F401 - Muon, which the default recipe uses on CPU

    make_optimizer(torch.nn.Linear(2, 2), base.train, torch.device("cpu"), "adamw")  # torch.optim's first import
    t_import = time.perf_counter() - t0
    t1, c1 = time.perf_counter(), time.process_time()
    res = coordcheck(base, ("model.n_layer", DEPTHS), {"model.variant": VARIANTS}, steps=args.steps,
                     seeds=args.seeds)
    t_run, c_run = time.perf_counter() - t1, time.process_time() - c1
    print(f"coordcheck: {len(DEPTHS)} depths x {len(VARIANTS)} variants x {args.steps} steps x {args.seeds} seed(s), "
          f"norm {args.norm}: {t_run:.1f} s wall, {c_run:.1f} s CPU over all threads (+ {t_import:.1f} s first "
          "import of the optimizer); on a busy machine an idle one's wall time lies between CPU / threads and CPU")
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in res["verdicts"].items()))
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

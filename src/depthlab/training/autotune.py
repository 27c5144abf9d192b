"""Measured ``auto``: a CPU run's threads, dtype, attention path and OpenMP waiting, chosen by timing
the run's own training step.

Which of these is fastest depends on the CPU and on what else runs on it, and rules read off one CPU
were wrong on the next one (issue 24, 2 Intel Xeon cores with avx512_bf16: bf16 autocast 0.8x of fp32;
OpenMP's passive waiting 0.5x of spinning when idle, while on a busy AMD machine passive was 6x faster).
So every setting the config leaves at ``auto`` (``train.dtype``, ``train.attention``; ``train.threads``
0) and the OpenMP wait policy (when the environment does not set ``OMP_WAIT_POLICY``) is decided by
timing a few optimizer steps of a copy of the run's model and optimizer at the run's batch shape under
each candidate (:func:`candidates`), in rounds so that a change of load hits every candidate alike.
Explicit values are never overridden.

The wait policy is read once, when the OpenMP runtime starts inside ``import torch``, so the other
policy is timed in a child process (``python -m depthlab.training.autotune``), and a run whose
fastest setting is the other policy is restarted by the command line before anything is written
(:class:`Restart`); a run started from Python keeps its process's policy.

Results are cached under the cache directory (``$DEPTHLAB_CACHE`` or ``$XDG_CACHE_HOME/depthlab``) per
CPU model, core count, torch version, model and batch shape, optimizer, and how many cores other
processes kept busy when it was measured (a busy machine wants other settings than an idle one). A
resumed run keeps the settings it started with (its numbers continue bit for bit) when it runs on the
same machine. Runs too short to repay the measurement (under :data:`MIN_RUN_S` of planned training,
judged from the first timed step) keep the rules of :mod:`depthlab.training.runtime`.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from ..units import counted
from . import hostmem, runtime
from .machine import (OMP_MARK, busy_cores, cache_file, cpu_model, ignored_env_threads, machine_name, omp_free,
                      policy_key, read_cache)
from .runtime import OWN_ATTENTION, omp_policy, use_bf16, use_explicit_attention

__all__ = ["OMP_MARK", "Restart", "Setting", "Tuning", "busy_cores", "candidates", "fastest", "omp_free",
           "omp_policy", "tune"]

#: ``off``: keep the rule-based settings; ``on``: measure even a run too short to repay it (benchmarks).
SWITCH = "DEPTHLAB_AUTOTUNE"
#: Planned training time (s) below which measuring is not worth its cost (about 3 steps per candidate,
#: kept under MEASURE_SHARE of the run: it runs before the first step, outside ``train.max_time``).
MIN_RUN_S = 60.0
#: Candidates within this fraction of the fastest count as equally fast; the earlier one (the simpler
#: setting: fewer threads, float32, SDPA, passive waiting) wins, so noise does not flip choices.
TIE = 0.02
_START = time.perf_counter()  # a child's deadline counts from its import, not from its first step
ROUNDS = 2  # timed steps per candidate, interleaved (after one untimed warm-up step each)
CAP = 2.5  # a candidate this many times slower than the fastest is timed no more
#: On a busy machine each visit of a candidate is one untimed step, then this many timed ones, and a
#: candidate's figure is a median of its visits, not the minimum: see :func:`time_settings`.
BUSY_STEPS = 2
BUSY_BUDGET = 2.0  # ... so the measurement's time budget is this many times the idle one
#: Share of the planned training time the measurement may take (at least MIN_MEASURE_S).
MEASURE_SHARE, MIN_MEASURE_S = 0.03, 6.0
MIN_CHILD_S = 12.0  # the child that times the other wait policy: measured 8.2 s for one setting (6 s of imports)




@dataclass(frozen=True)
class Setting:
    """One way to run a CPU training step.

    Attributes:
        threads: torch intra-op threads. dtype: ``float32`` | ``bfloat16`` (autocast).
        attention: ``sdpa`` | ``explicit`` | ``own`` (:data:`OWN_ATTENTION`).
        omp_wait: ``passive`` | ``active``: how idle OpenMP threads wait.
    """

    threads: int
    dtype: str
    attention: str
    omp_wait: str

    def label(self) -> str:
        """``"2 threads, float32, sdpa, passive"``: one table row's name."""
        n = counted(self.threads, "thread")
        attention = "the model's own attention" if self.attention == OWN_ATTENTION else self.attention
        return f"{n}, {self.dtype}, {attention}, {self.omp_wait}"


@dataclass
class Tuning:
    """What :func:`tune` decided and why (config.json ``resolved.tuning``).

    Attributes:
        setting: the chosen :class:`Setting`.
        source: ``measured`` | ``cached`` | ``resumed`` (the run's own earlier choice) | ``rule`` (not
            measured: see ``why``).
        why: one sentence: what decided.
        ms_per_step: candidate label -> measured milliseconds per optimizer step (empty for ``rule``).
        seconds: wall time the measurement took (0 when cached). busy: cores other processes kept busy
            when the measurement started, or as the rules were applied (None: not read). busy_after: the same,
            read again when it ended (None: not read, or equal); a measurement whose load changed is not cached
            (:func:`_measure`).
        machine: :func:`machine_name` of the machine that measured it.
    """

    setting: Setting
    source: str
    why: str
    ms_per_step: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    busy: Optional[int] = None
    machine: str = field(default_factory=lambda: machine_name())
    busy_after: Optional[int] = None

    def to_record(self) -> dict:
        return {"setting": asdict(self.setting), "source": self.source, "why": self.why,
                "ms_per_step": dict(self.ms_per_step), "seconds": round(self.seconds, 2), "busy_cores": self.busy,
                "machine": self.machine, **({} if self.busy_after is None else {"busy_cores_after": self.busy_after})}

    @classmethod
    def from_record(cls, r: Mapping) -> Optional["Tuning"]:
        try:
            return cls(Setting(**r["setting"]), str(r["source"]), str(r["why"]),
                       {str(k): float(v) for k, v in dict(r.get("ms_per_step") or {}).items()},
                       float(r.get("seconds", 0.0)),
                       None if r.get("busy_cores") is None else int(r["busy_cores"]), str(r.get("machine", "")),
                       None if r.get("busy_cores_after") is None else int(r["busy_cores_after"]))
        except (KeyError, TypeError, ValueError):
            return None

    def line(self, given: Sequence[str] = ()) -> str:
        """The one console line: what was chosen, from what; ``given`` names the fields the user set
        (``train.threads``), which the line says were not chosen."""
        s = self.setting
        kept = f"{', '.join(given)} as given; " if given and self.why != "every setting given" else ""
        if self.source == "rule" or not self.ms_per_step:
            return f"auto settings: {s.label()} ({kept}{self.why})"
        best = self.ms_per_step.get(s.label())
        # a resume given another thread count or dtype than its first session measured runs a setting never timed
        took = f"{best:.0f} ms/step" if best is not None else "this setting was not timed"
        rest = sorted((v, k) for k, v in self.ms_per_step.items() if k != s.label())
        # a setting given (or resumed) that another timed one beats: name the faster one, not "slowest"
        v, k = rest[0] if rest and (best is None or rest[0][0] < best) else rest[-1] if rest else (0.0, "")
        worst = "" if not rest else f"; {'fastest timed' if best is None or v < best else 'slowest'} {k} {v:.0f} ms"
        when = f"measured in {self.seconds:.1f} s" if self.source == "measured" else self.source
        tried = counted(len(self.ms_per_step), "candidate")
        load = ("" if self.busy is None else f", {self.busy} of {os.cpu_count() or 1} cores busy with other work"
                if self.busy_after is None or self.source != "measured" else
                f", {self.busy} then {self.busy_after} of {os.cpu_count() or 1} cores busy with other work while "
                f"timed: not cached, measured again next time")
        return f"auto settings: {s.label()} ({kept}{took}{worst}; {tried}, {when}{load})"


class Restart(Exception):
    """The chosen setting needs another OpenMP wait policy: the command line restarts the process with ``env``."""

    def __init__(self, env: dict[str, str], tuning: Tuning):
        self.env, self.tuning = env, tuning
        super().__init__(f"restart with OMP_WAIT_POLICY={env['OMP_WAIT_POLICY']}")

    def line(self) -> str:
        """The console line before the restart, true of how the setting was chosen (a resume keeping its run's
        policy said "was fastest", though nothing was measured)."""
        how = {"measured": "was fastest", "cached": "was fastest when measured earlier on this machine",
               "resumed": "is the run's own earlier choice"}.get(self.tuning.source,
                                                                 f"is the auto choice ({self.tuning.why})")
        return (f"auto settings: {self.tuning.setting.label()} {how}; restarting with "
                f"OMP_WAIT_POLICY={self.env['OMP_WAIT_POLICY']} (read once, when torch loads)")


# ------------------------------------------------------------------------- candidates and choice
#: What a run's thread count came from when it is not given, by :class:`Tuning` source (None: no tuning).
_THREADS_FROM = {"measured": "the fastest it measured", "cached": "the fastest measured earlier on this machine",
                 "resumed": "the run's own earlier choice", "rule": "its auto choice, not measured",
                 None: "its auto choice"}


def env_threads_warning(train, threads: int, source: Optional[str]) -> Optional[str]:
    """A run's warning for an ``OMP_NUM_THREADS`` that is set but not a positive integer
    (:func:`~depthlab.training.machine.ignored_env_threads`), saying what sets the thread count instead, or None.

    Args:
        train: the run's TrainConfig. threads: the threads the run uses. source: its :class:`Tuning`'s source, or None.
    """
    return ignored_env_threads(f"lets train.threads {train.threads} set the thread count" if train.threads else
                               f"runs with {counted(threads, 'thread')}, "
                               f"{_THREADS_FROM.get(source, _THREADS_FROM[None])}")


def given_threads(train) -> int:
    """The thread count the user gave (:func:`depthlab.training.runtime.given_threads`); 0 = measured. Measuring
    is for one process only (:func:`tune` keeps the rules with several), so ``OMP_NUM_THREADS`` counts here."""
    return runtime.given_threads(train, world_size=1)[0]


def candidates(train, cores: int, bf16_native: bool, policy: str, other_policy: bool, own: bool = False
               ) -> list[Setting]:
    """Every setting worth timing, simplest first.

    Args:
        train: the run's TrainConfig: a field not at ``auto`` is fixed to its value (threads: :func:`given_threads`).
        cores: CPU cores. bf16_native: the CPU has native bf16 dot products (otherwise bf16 is emulated,
            several times slower than fp32, and not timed). policy: this process's OpenMP wait policy.
        other_policy: whether the other policy may be timed (depthlab chose this one).
        own: the model is the user's (``model.source``): its attention is its own, not timed.
    """
    threads = [given_threads(train)] if given_threads(train) else sorted({1, cores})
    dtypes = [train.dtype] if train.dtype != "auto" else (["float32", "bfloat16"] if bf16_native else ["float32"])
    attns = [OWN_ATTENTION] if own else [train.attention] if train.attention != "auto" else ["sdpa", "explicit"]
    policies = [policy] + ([{"passive": "active", "active": "passive"}[policy]] if other_policy else [])
    out = []
    for w in sorted(policies, key=lambda p: p != "passive"):
        for n in threads:
            if n == 1 and w != policy:
                continue  # one thread starts no OpenMP team: its waiting policy changes nothing
            out += [Setting(n, d, a, w) for d in dtypes for a in attns]
    return out


def fastest(ms: Mapping[Setting, float], order: Sequence[Setting]) -> Setting:
    """The fastest of ``ms`` (milliseconds per step); one within :data:`TIE` of it that comes earlier in
    ``order`` (simpler) wins instead."""
    best = min(ms.values())
    return next(s for s in order if s in ms and ms[s] <= best * (1.0 + TIE))


# ------------------------------------------------------------------------- measuring
def time_settings(model, make_optimizer: Callable, loss_fn: Callable, batch, settings: Sequence[Setting],
                  rounds: int = ROUNDS, set_attention: Callable = lambda m, e: None, ref_ms: float = float("inf"),
                  deadline: float = float("inf"), busy: bool = False) -> dict[Setting, float]:
    """Milliseconds per optimizer step of each setting: the minimum over ``rounds`` interleaved timings (the
    median on a busy machine).

    ``busy`` (other processes keep cores busy): each visit of a setting is one untimed step, then
    :data:`BUSY_STEPS` timed ones whose median is the visit's figure, and the setting's figure is the median
    of its visits' figures. The first step after a switch pays for
    waking the thread team behind the other processes, and the minimum of single steps favours one
    thread, which needs one lucky time slice where two threads need two at once: measured on a 2-core
    Zen 3 with one spinning process per core, the idle scheme picked 1 thread in 3 of 5 measurements where
    2 threads trained 1.36x faster (benchmarks/auto_choice.py --load busy).

    A setting whose step takes over :data:`CAP` times the fastest seen (or ``ref_ms``) is timed no
    more: a spinning thread team on a busy machine measured 8x slower, and timing it three times would
    cost more than it could win. Past ``deadline`` (``time.perf_counter()``) nothing new is timed.

    Args:
        model: a copy of the run's model (its weights change: never pass the run's own).
        make_optimizer: ``model -> optimizer`` as the run makes it. loss_fn: ``(model, x, y) -> loss``.
        batch: (x, y), each (B, T) int64. settings: those of this process's wait policy.
        set_attention: ``(model, explicit: bool) -> None``.
        ref_ms: a step time already measured elsewhere (the other process), for the cap.

    Returns:
        setting -> ms for every setting timed at least once (a dropped one: its slowest step).
    """
    import torch

    from .optimization import set_update_precision

    x, y = batch
    opt = make_optimizer(model)
    threads0 = torch.get_num_threads()

    def step(s: Setting) -> float:
        if busy:  # the switch's step, untimed, then the median of the timed ones
            one(s)
            return statistics.median(one(s) for _ in range(BUSY_STEPS))
        return one(s)

    def one(s: Setting) -> float:
        torch.set_num_threads(s.threads)
        set_attention(model, s.attention == "explicit")
        ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if s.dtype == "bfloat16" else contextlib.nullcontext())
        set_update_precision(opt, s.dtype == "bfloat16")  # Muon's iteration follows the dtype, as in the run
        t0 = time.perf_counter()
        with ctx:
            loss = loss_fn(model, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return (time.perf_counter() - t0) * 1e3

    times: dict[Setting, list[float]] = {}
    warm: dict[Setting, float] = {}  # the warm-up step: the figure of a setting the deadline left untimed
    live: list[Setting] = []
    best = ref_ms
    try:
        for s in settings:  # warm-up: first-call allocations and kernel selection
            if time.perf_counter() > deadline:
                break
            w = warm[s] = one(s)
            if w > CAP * 2 * best:  # 2: a first call may cost twice a later one
                times[s] = [w]
                continue
            best = min(best, w)
            times[s], live = [], live + [s]
        for _ in range(rounds):
            for s in list(live):
                if time.perf_counter() > deadline:
                    break
                v = step(s)
                times[s].append(v)
                best = min(best, v)
                if v > CAP * best:
                    live.remove(s)
    finally:
        torch.set_num_threads(threads0)
    pick = statistics.median if busy else min
    return {s: (pick(v) if s in live else max(v)) if v else warm[s] for s, v in times.items()}


def _child(cfg_dict: dict, settings: Sequence[Setting], policy: str, timeout_s: float,
           run_dir: Optional[str] = None, ref_ms: float = float("inf"), busy: bool = False) -> dict[Setting, float]:
    """Time ``settings`` in a new Python process whose OpenMP waits ``policy`` ({} if it fails).

    ``run_dir``: where a ``model.source`` run keeps its copy of the user's file (the child builds from it).
    ``busy``: time as on a busy machine (:func:`time_settings`).
    """
    env = {**os.environ, "OMP_WAIT_POLICY": policy.upper(), OMP_MARK: policy.upper(), SWITCH: "child"}
    spec = json.dumps({"config": cfg_dict, "settings": [asdict(s) for s in settings], "run_dir": run_dir,
                       "ref_ms": ref_ms if ref_ms != float("inf") else None, "seconds": timeout_s, "busy": busy})
    try:
        out = subprocess.run([sys.executable, "-m", "depthlab.training.autotune"], input=spec, env=env,
                             capture_output=True, text=True, timeout=timeout_s, check=True).stdout
        rows = json.loads(out.strip().splitlines()[-1])
        return {Setting(**r["setting"]): float(r["ms"]) for r in rows}
    except (subprocess.SubprocessError, OSError, ValueError, KeyError, IndexError, TypeError):
        return {}  # too slow or failed: the choice is among this process's settings


def _model_and_batch(cfg, model=None, run_dir: Optional[str] = None):
    """A copy of ``model`` (or a new one from ``cfg``, a source model from ``run_dir``'s copy), its
    optimizer maker, loss and a random batch."""
    import torch

    from ..usermodel import make_model
    from .optimization import make_optimizer, resolve_optimizer
    from .protocol import ModelPort

    cpu = torch.device("cpu")
    m = copy.deepcopy(model) if model is not None else make_model(cfg.model, Path(run_dir) if run_dir else None)
    port = ModelPort(m)
    name = resolve_optimizer(cfg.train.optimizer, cpu, m)
    g = torch.Generator().manual_seed(0)
    B, T, V = cfg.train.batch_size, cfg.model.block_size, cfg.model.vocab_size
    x = torch.randint(0, V, (B, T), generator=g)
    y = torch.randint(0, V, (B, T), generator=g)
    return (m, lambda mm: make_optimizer(mm, cfg.train, cpu, name), port.loss, (x, y),
            lambda mm, e: ModelPort(mm).set_attention(e))


# ------------------------------------------------------------------------- the cache


def cache_key(cfg, busy: int) -> str:
    """CPU model, cores, torch version, model section, batch shape, optimizer and busy cores, hashed."""
    import torch

    m, t = asdict(cfg.model), cfg.train
    what = [cpu_model(), os.cpu_count(), torch.__version__, m, t.batch_size, t.grad_accum, t.optimizer,
            t.dtype, t.attention, given_threads(t), busy]
    if busy:  # measured with medians since this round (time_settings): an older busy record is measured again
        what.append("busy-median")
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:24]








def _write_cache(key: str, tuning: Tuning, policies_compared: bool) -> None:
    from ..rundir import write_json

    d = read_cache()
    d[key] = tuning.to_record()
    if policies_compared:  # else the winner's policy is just the one this process had: no evidence either way
        d[policy_key(tuning.busy)] = {"omp_wait": tuning.setting.omp_wait}
    if len(d) > 200:  # keep the newest entries only
        d = dict(list(d.items())[-200:])
    try:
        cache_file().parent.mkdir(parents=True, exist_ok=True)
        write_json(cache_file(), d)
    except OSError:
        pass  # a read-only home: measure again next time


# ------------------------------------------------------------------------- the decision
def rule_setting(train, device, bf16_native: bool, policy: str, own: bool = False) -> Setting:
    """What the rules of :mod:`depthlab.training.runtime` pick without measuring (``own``: a model.source model,
    whose attention is its own)."""
    import torch

    bf16 = use_bf16(device, train.dtype) if train.dtype != "auto" else bf16_native
    attention = (OWN_ATTENTION if own else "explicit" if use_explicit_attention(train.attention, device, bf16)
                 else "sdpa")
    return Setting(train.threads or torch.get_num_threads(), "bfloat16" if bf16 else "float32", attention, policy)


def tune(cfg, model, device, resumed: Optional[Mapping] = None, restart_ok: bool = False,
         log: Callable[[str], None] = lambda s: None, world_size: int = 1) -> Tuning:
    """Decide the CPU settings of a run (see the module docstring).

    Args:
        cfg: the run's RunConfig (``model.vocab_size`` filled in). model: the run's model (copied, not changed).
        device: the run's device; only ``cpu`` is measured. resumed: the run's earlier ``resolved`` record.
        restart_ok: the caller can restart the process (:class:`Restart`) for another wait policy.
        log: console lines. world_size: processes of the run (several: rules, the ranks must agree).

    Raises:
        Restart: the fastest setting has the other wait policy and ``restart_ok``.
    """
    policy, t = omp_policy(), cfg.train
    native = runtime.cpu_has_bf16()
    own = cfg.model.source is not None
    rule = rule_setting(t, device, native, policy, own)
    if device.type != "cpu" or world_size > 1:
        return Tuning(rule, "rule", "not measured: " + ("not a CPU run" if device.type != "cpu" else
                                                        "several processes keep the rules so all ranks agree"))
    if os.environ.get(SWITCH, "").lower() in ("off", "0", "false"):
        return Tuning(rule, "rule", f"not measured: {SWITCH}=off")
    if given_threads(t) and t.dtype != "auto" and t.attention != "auto" and not (restart_ok and omp_free()):
        return Tuning(rule, "rule", "every setting given")
    given = decided_in_env()
    if given is not None:  # this process was restarted with the decision its first start measured
        return given
    old = Tuning.from_record((resumed or {}).get("tuning") or {}) if resumed else None
    # the run keeps what it started with, measured or ruled (a short first session is ruled): a resume that
    # measured or read the cache could change its dtype mid-run, and its record would call that its start
    if old is not None and old.machine == machine_name():
        s = old.setting  # values given on this command line still win
        old.setting = Setting(given_threads(t) or s.threads, s.dtype if t.dtype == "auto" else rule.dtype,
                              rule.attention if own or t.attention != "auto" else s.attention, s.omp_wait)
        old.source, old.why = "resumed", "the settings this run started with"
        return _maybe_restart(old, policy, restart_ok)
    switch = restart_ok and omp_free()
    order = candidates(t, os.cpu_count() or 1, native, policy, switch, own=own)
    if len(order) == 1:  # nothing to choose: timing it would only cost time
        return Tuning(order[0], "rule", "only one setting possible, not timed")
    busy = busy_cores()
    key = cache_key(cfg, busy)
    hit = Tuning.from_record(read_cache().get(key) or {})
    short = _short_limit(t) or _short_run(t, hit)
    if short is not None:  # no step is timed for it (a GPU-sized step on a CPU took a minute); nor a cache read,
        # nor a restart, which alone would cost seconds of a run this short
        return Tuning(rule, "rule", short, busy=busy)  # the load it was ruled under (it said 0 under any load)
    if hit is not None:
        hit.source = "cached"
        if own:  # the model's own attention, whatever an older record says
            hit.setting = replace(hit.setting, attention=OWN_ATTENTION)
        return _maybe_restart(hit, policy, restart_ok)
    return _maybe_restart(_measure(cfg, model, t, native, policy, rule, busy, key, log, switch), policy, restart_ok)


def _measure(cfg, model, t, native: bool, policy: str, rule: Setting, busy: int, key: str, log,
             switch: bool) -> Tuning:
    import torch

    t0 = time.perf_counter()
    cores = os.cpu_count() or 1
    order = candidates(t, cores, native, policy, switch, own=cfg.model.source is not None)
    here = [s for s in order if s.omp_wait == policy]
    try:
        m, make_opt, loss_fn, batch, set_attn = _model_and_batch(cfg, model)
    except Exception as e:  # noqa: BLE001 - a user's model that deepcopy cannot copy (a lock, an open file)
        from ..usermodel import first_line

        return Tuning(rule, "rule", f"not measured: the model cannot be copied to time it (copy.deepcopy: "
                                    f"{first_line(e)})")
    rng = torch.get_rng_state()
    try:
        first = time_settings(m, make_opt, loss_fn, batch, [rule if rule in here else here[0]], rounds=1,
                              set_attention=set_attn)
        planned = _planned_seconds(t, next(iter(first.values())) / 1e3)
        short = _short_words(planned)
        if short is not None:
            return Tuning(rule, "rule", short, busy=busy)
        # busy: steps are slower and each visit times more of them (time_settings); the choice matters most there
        budget = max(MIN_MEASURE_S, MEASURE_SHARE * planned) * (BUSY_BUDGET if busy else 1)
        there = [s for s in order if s.omp_wait != policy]  # timed in a child: the other OpenMP policy
        # half the budget here, then the child may use what is left but at least MIN_CHILD_S (its imports)
        most = max(budget, 0.5 * budget + MIN_CHILD_S) if there else 0.5 * budget
        log(f"auto settings: timing {counted(len(order), 'candidate')} of threads / dtype / attention / OpenMP "
            f"waiting at this run's shape (up to about {most:.0f} s, once per machine, load and shape; cached)")
        ms = time_settings(m, make_opt, loss_fn, batch, here, set_attention=set_attn,
                           deadline=time.perf_counter() + 0.5 * budget, busy=busy > 0) or first
    finally:
        torch.set_rng_state(rng)
    left = max(MIN_CHILD_S, budget - (time.perf_counter() - t0))  # the other policy was worth 2x (issue 24)
    if there:
        ms.update(_child(cfg.to_dict(), there, there[0].omp_wait, timeout_s=left, ref_ms=min(ms.values()),
                         run_dir=cfg.train.out_dir if cfg.model.source else None, busy=busy > 0))
    best = fastest(ms, order)
    # The load is read again: one read before timing cannot see a process that starts during it, and a
    # measurement under load cached as an idle machine's would choose every later idle run's settings
    # (seen: 1 thread chosen beside another training process, under the key "0 busy cores").
    after = busy_cores()
    tuning = Tuning(best, "measured", "fastest measured", {s.label(): round(v, 2) for s, v in ms.items()},
                    time.perf_counter() - t0, busy, busy_after=None if after == busy else after)
    if after == busy:
        _write_cache(key, tuning, policies_compared=any(s.omp_wait != policy for s in ms))
    return tuning


def _short_words(planned: float) -> Optional[str]:
    """Why a run planned to train ``planned`` seconds keeps the rules (under :data:`MIN_RUN_S`, unless the switch
    is ``on``), or None."""
    if planned >= MIN_RUN_S or os.environ.get(SWITCH, "").lower() == "on":
        return None
    return f"not measured: about {planned:.0f} s of training planned, under {MIN_RUN_S:.0f} s"


def _short_limit(t) -> Optional[str]:
    """Why a run whose ``train.max_time`` is under :data:`MIN_RUN_S` keeps the rules, or None: that limit bounds its
    training, whatever a step costs, so no step needs timing to know it."""
    if not t.max_time or _short_words(t.max_time) is None:
        return None
    return f"not measured: train.max_time {t.max_time:g} s, under {MIN_RUN_S:.0f} s"


def _short_run(t, hit: Optional[Tuning]) -> Optional[str]:
    """:func:`_short_words` of a run whose step a cached measurement ``hit`` timed at its shape (its chosen
    setting's milliseconds), or None: no such timing, or a run long enough to use it. A short run keeps the
    rules whether or not its shape was measured before (its settings, and a restart, depended on the cache)."""
    ms = (hit.ms_per_step.get(hit.setting.label()) if hit is not None else None) or None
    return _short_words(_planned_seconds(t, ms / 1e3)) if ms else None


def _planned_seconds(t, s_per_step: float) -> float:
    steps = t.max_iters * s_per_step
    return min(steps, t.max_time) if t.max_time else steps


def _maybe_restart(tuning: Tuning, policy: str, restart_ok: bool) -> Tuning:
    want = tuning.setting.omp_wait
    if want != policy and tuning.setting.threads > 1:
        if restart_ok and omp_free():
            env = {"OMP_WAIT_POLICY": want.upper(), OMP_MARK: want.upper(), SWITCH + "_DECIDED": json.dumps(
                tuning.to_record())}
            raise Restart(env, tuning)
        tuning.setting = Setting(tuning.setting.threads, tuning.setting.dtype, tuning.setting.attention, policy)
        tuning.why += f"; OpenMP waits {policy} in this process (its policy is fixed once torch has loaded)"
    elif want != policy:  # one thread runs no OpenMP team (nothing to restart for): say the policy it runs under,
        # not a resumed or cached one that the 'auto settings' line and resolved.omp_wait would contradict
        tuning.setting = replace(tuning.setting, omp_wait=policy)
        tuning.why += f"; OpenMP waits {policy} in this process (one thread: it started {want})"
    return tuning


def decided_in_env() -> Optional[Tuning]:
    """The decision a restarted process was given (``DEPTHLAB_AUTOTUNE_DECIDED``), else None."""
    raw = os.environ.pop(SWITCH + "_DECIDED", None)
    return Tuning.from_record(json.loads(raw)) if raw else None


def _main() -> int:
    """Child process: read {config, settings} JSON on stdin, print [{setting, ms}] JSON on stdout."""
    from ..config import RunConfig

    spec = json.loads(sys.stdin.read())
    cfg = RunConfig.from_dict(spec["config"])
    if cfg.train.flush_denormal:  # timed in the process state the run trains in (cli.run_train)
        import torch

        torch.set_flush_denormal(True)
    hostmem.keep_freed_memory()
    settings = [Setting(**s) for s in spec["settings"]]
    m, make_opt, loss_fn, batch, set_attn = _model_and_batch(cfg, run_dir=spec.get("run_dir"))
    ref = spec.get("ref_ms") or float("inf")
    ms = time_settings(m, make_opt, loss_fn, batch, settings, set_attention=set_attn, ref_ms=ref,
                       deadline=_START + 0.8 * float(spec.get("seconds") or 60.0), busy=bool(spec.get("busy")))
    print(json.dumps([{"setting": asdict(s), "ms": v} for s, v in ms.items()]))
    return 0


if __name__ == "__main__":
    sys.exit(_main())

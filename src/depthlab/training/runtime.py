"""Where and how a run computes: device, processes, threads, dtype and autocast, attention path, compile.

A :class:`Runtime` is made once per run from the train config; what its ``auto`` settings became is
:meth:`Runtime.resolved` (config.json's ``resolved`` section). Every decision that must be the same
on every process (stop flags, the time plan) goes through :meth:`Runtime.agree` / :meth:`Runtime.min_int`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from typing import Mapping, Optional

import numpy as np
import torch

from ..config import RunConfig, TrainConfig, check_device_name
from ..data import get_batch
from ..errors import DepthlabError
from . import hostmem
from .machine import env_threads, omp_policy, oversubscribed_threads
from .subnormals import subnormals_flushed

__all__ = ["Runtime", "autocast_ctx", "check_memory", "console", "cpu_has_bf16", "given_threads", "omp_policy",
           "resolve_device", "training_memory_bytes", "use_bf16", "use_explicit_attention"]


OWN_ATTENTION = "own"
"""The attention of a model given by ``model.source``: its forward's own code (``train.attention`` does not apply)."""

#: The openings of the log lines that are warnings or notices (:func:`console` shows them on stderr): a resume's
#: changes (``resume: model.dropout 0.0 -> 0.1: ...``) and a resume that has nothing to train.
NOTICES = ("warning: ", "resume: ", "nothing to train")


def console(msg: str) -> None:
    """Print one log line, safely around a tqdm progress bar: the log to stdout, warnings and notices to stderr.

    The rule of every command (as of Unix tools): results and the run's log on stdout, warnings and
    notices on stderr, so ``depthlab train > log.txt`` still shows them. A warning or notice is a line depthlab
    writes opening with one of :data:`NOTICES`; it is shown with ``depthlab: `` before it (``depthlab: warning:
    ...``, as ``sample`` shows its warnings). A notice, nothing amiss, keeps its own words, as ``depthlab: sampling
    from ...`` and export's tokenizer rules (``depthlab: export: ...``) do. If stdout is a pipe whose reader has gone
    (``depthlab train | head``), the rest of the
    log is discarded instead of killing the run: training and its files matter more than the log.
    """
    stream = sys.stderr if msg.startswith(NOTICES) else sys.stdout
    text = f"depthlab: {msg}" if stream is sys.stderr else msg
    try:
        try:
            from tqdm import tqdm

            tqdm.write(text, file=stream)
        except ImportError:
            print(text, file=stream)
        stream.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def resolve_device(name: str, option: str = "train.device", fix: Optional[str] = None) -> torch.device:
    """``auto`` -> cuda if available, else mps, else cpu; other names are checked.

    Args:
        name: the device name. option: how messages name the setting (``train.device``, ``--device``).
        fix: the way out a missing device's message ends with (default: ``use --train.device cpu``).

    Raises:
        DepthlabError: if the name is not a device name (:func:`~depthlab.config.check_device_name`)
            or the named device is not available.
    """
    check_device_name(name, option)
    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if mps else "cpu")
    flag = f"--{option}" if "." in option else option
    fix = fix or f"use {flag} cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise DepthlabError(f"{option} {name} requested but CUDA is not available on this machine; {fix}")
    if name == "mps" and not mps:
        raise DepthlabError(f"{option} {name} requested but MPS is not available on this machine; {fix}")
    return torch.device(name)


def cpu_has_bf16() -> bool:
    """True when the CPU has native bf16 dot products (AVX512-BF16 or AMX-BF16 in /proc/cpuinfo).

    Without them, bf16 autocast on CPU is emulated and slower than fp32.
    """
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def use_bf16(device: torch.device, dtype: str) -> bool:
    """Whether ``dtype`` resolves to bf16 autocast: ``auto`` = CUDA, or a CPU with native bf16."""
    if dtype == "bfloat16":
        return True
    return dtype == "auto" and (device.type == "cuda" or (device.type == "cpu" and cpu_has_bf16()))


def use_explicit_attention(attention: str, device: torch.device, bf16: bool) -> bool:
    """Whether ``train.attention`` (``explicit`` | ``sdpa`` | ``auto``) means the explicit path here.

    ``auto`` = explicit only on CPU under bf16 autocast. Measured with benchmarks/train_speed.py:
    there the explicit matmul + masked-softmax path is 1.6-1.7x faster per training step than
    SDPA's CPU flash kernel (whose backward took 43 % of the step); in fp32 on an AVX2 CPU SDPA is
    the faster one (35.4 vs 39.3 ms/iter at nanoGPT's CPU shape, 346 vs 373 at the default shape).
    """
    return attention == "explicit" or (attention == "auto" and device.type == "cpu" and bf16)


def configure_attention(model, attention: str, device: torch.device, bf16: bool = False) -> None:
    """Set each block of depthlab's GPT ``model`` to the attention path :func:`use_explicit_attention` decides.

    Both paths compute the same causal softmax attention (tests hold them to 1e-5).
    """
    from .protocol import ModelPort

    ModelPort(model).set_attention(use_explicit_attention(attention, device, bf16))


def autocast_ctx(device: torch.device, dtype: str):
    """``torch.autocast`` in bf16 when :func:`use_bf16` says so, else a no-op context."""
    if use_bf16(device, dtype):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def training_memory_bytes(cfg: RunConfig, vocab_size: int) -> float:
    """Rough peak memory of one training micro-batch step, in bytes.

    Activations per block follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in
    Large Transformer Models", eq. 1): s·b·h·(34 + 5·a·s/h) bytes at 16 bits, doubled here for
    float32 (s = block_size T, b = batch_size B, h = n_embd C, a = n_head). Plus the logits and
    their gradient (3 · B·T·V · 4 bytes) and 16 bytes per parameter (weights, gradients, AdamW's two
    moments, float32). A planning figure, good to a factor of ~2; it exists to refuse sizes that
    cannot fit before anything is allocated or written.
    """
    m, t = cfg.model, cfg.train
    B, T, C, L, nh = t.batch_size, m.block_size, m.n_embd, m.n_layer, m.n_head
    acts = 2.0 * L * T * B * C * (34 + 5 * nh * T / C)
    return acts + 12.0 * B * T * vocab_size + weights_memory_bytes(cfg, vocab_size)


def weights_memory_bytes(cfg: RunConfig, vocab_size: int) -> float:
    """The part of :func:`training_memory_bytes` that no batch size changes: 16 bytes per parameter
    (weights, gradients, AdamW's two moments, float32)."""
    m = cfg.model
    return 16.0 * (m.n_layer * m.n_embd ** 2 * (4 + 2 * m.ff_mult) + (vocab_size + m.block_size) * m.n_embd)


def check_memory(cfg: RunConfig, vocab_size: int, device: torch.device) -> None:
    """Refuse a configuration whose training step needs more memory than the device has.

    Raises:
        DepthlabError: the estimate (:func:`training_memory_bytes`) exceeds 90 % of the machine's
            RAM (CPU) or of the GPU's memory, naming the sizes to lower.
    """
    need = training_memory_bytes(cfg, vocab_size)
    try:
        if device.type == "cuda":
            have, where = float(torch.cuda.get_device_properties(device).total_memory), "GPU memory"
        else:
            have, where = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")), "RAM"
    except (AttributeError, ValueError, OSError, RuntimeError):
        return  # unknown machine size: let the allocator decide
    if need > 0.9 * have:
        m, t = cfg.model, cfg.train
        weights = weights_memory_bytes(cfg, vocab_size)
        one = training_memory_bytes(dataclasses.replace(cfg, train=dataclasses.replace(t, batch_size=1)), vocab_size)
        fix = (f"the weights, their gradients and AdamW's moments alone need about {weights / 2**30:,.0f} GiB: "
               "lower model.n_embd or model.n_layer" if weights >= 0.5 * have else  # no batch size helps
               f"even train.batch_size 1 needs about {one / 2**30:,.0f} GiB: lower model.block_size"
               if one > 0.9 * have else
               "lower train.batch_size (raise train.grad_accum to keep the tokens per step) or model.block_size")
        raise DepthlabError(
            f"a training step with train.batch_size {t.batch_size}, model.block_size {m.block_size}, "
            f"model.n_embd {m.n_embd}, model.n_layer {m.n_layer} needs about {need / 2**30:,.0f} GiB, more than this "
            f"machine's {have / 2**30:,.0f} GiB of {where}; {fix}")


#: The resolved settings a resumed session may run with otherwise than the run did, and what each changes.
RESOLVED_MEANING = {
    "device": "another device, whose float rounding differs",
    "dtype": "the rest of the run computes in the new precision, not bit-identical to either",
    "attention": "the same function by another kernel, whose float rounding differs",
    "threads": "the speed, and float rounding where a sum is split across threads",
    "omp_wait": "how idle OpenMP threads wait, which changes the speed only",
}


def resolved_changes(old: Optional[Mapping], new: Mapping) -> str:
    """The :data:`RESOLVED_MEANING` settings whose value in ``new`` (this session's ``resolved``) differs from
    ``old`` (the run's config.json ``resolved``), e.g. ``omp_wait 'passive' -> 'active': how idle OpenMP threads
    wait, which changes the speed only``, joined by ``; ``; "" when none does or ``old`` is not a record (a field
    it lacks is not compared)."""
    if not isinstance(old, Mapping):
        return ""
    return "; ".join(f"{k} {old[k]!r} -> {new[k]!r}: {why}" for k, why in RESOLVED_MEANING.items()
                     if k in old and k in new and old[k] != new[k]
                     and not (k == "attention" and new[k] == OWN_ATTENTION))  # a model.source's: never another


def given_threads(train: TrainConfig, world_size: int = 1) -> tuple[int, str]:
    """The thread count the user gave and its knob: ``train.threads``, else a positive ``OMP_NUM_THREADS`` (which
    torch alone would cap at the cores); ``(0, "")`` when none is given (the threads are depthlab's choice).

    The one home of this rule (:class:`Runtime` and :mod:`~depthlab.training.autotune` ask it). With several
    processes (``world_size`` > 1, torchrun) ``OMP_NUM_THREADS`` does not count: torchrun sets it (to 1) for the
    processes it starts, so it is not the user's choice.
    """
    if train.threads:
        return train.threads, "train.threads"
    env = env_threads() if world_size == 1 else 0
    return (env, "OMP_NUM_THREADS") if env else (0, "")


def accum_fix(batch_size: int, grad_accum: int, world_size: int) -> str:
    """The flags that keep the global batch (``batch_size`` x ``grad_accum`` sequences) on ``world_size`` processes:
    ``grad_accum`` raised to a multiple of them with ``batch_size`` lowered to match where it divides, else the
    nearest multiple alone (a global batch that changes, as a resume then says)."""
    import math

    k = world_size // math.gcd(grad_accum, world_size)  # the least factor making grad_accum divisible
    if batch_size % k == 0:
        return (f"for the same global batch of {batch_size * grad_accum} sequences use --train.grad_accum "
                f"{grad_accum * k} --train.batch_size {batch_size // k}")
    return f"use --train.grad_accum {grad_accum * k} (a global batch of {batch_size * grad_accum * k} sequences)"


class Runtime:
    """The processes, device and numeric settings of one run (``torchrun`` sets RANK / WORLD_SIZE).

    Args:
        train: the run's train section (read only).
        log: console lines (rank 0 only; the runtime's warnings go there).

    Attributes:
        rank, world_size, is_main: this process among the run's processes (rank 0 writes files).
        device: where the model lives. bf16: whether autocast computes in bfloat16.
        ctx: the autocast context of forward passes (a no-op context in float32).
        explicit_attention: the attention path of depthlab's GPT.

    Raises:
        DepthlabError: unavailable device, or ``grad_accum`` not divisible by the processes.
    """

    def __init__(self, train: TrainConfig, log=console):
        self.train = train
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.is_main = self.rank == 0
        self.log = log if self.is_main else (lambda s: None)
        if train.grad_accum % self.world_size:
            raise DepthlabError(f"train.grad_accum ({train.grad_accum}) counts micro-batches of the global batch and "
                                f"must be divisible by the number of processes ({self.world_size}); "
                                + accum_fix(train.batch_size, train.grad_accum, self.world_size))
        self.accum = train.grad_accum // self.world_size  # micro-batches per process per step
        self.threads_before = torch.get_num_threads()  # close() gives them back (a notebook trains again)
        self.on_close: list = []  # called by close(): the run folder's lock is given back (training/runlock.py)
        self.closed = False
        self._set_threads()
        self.device = resolve_device(train.device)
        self.owns_process_group = False
        if self.world_size > 1:
            self.device = self._init_distributed()
        self.bf16 = use_bf16(self.device, train.dtype)
        if self.bf16 and train.dtype == "bfloat16" and self.device.type == "cpu" and not cpu_has_bf16():
            # measured on an AVX2 EPYC: 3,498 tokens/s against float32's 23,797 (Muon), with no word said
            self.log("warning: train.dtype bfloat16 on a CPU without native bf16 (no avx512_bf16 or amx_bf16 in "
                     "/proc/cpuinfo): bf16 is emulated here, several times slower than float32; --train.dtype "
                     "float32 (or auto, which measures) trains faster")
        self.explicit_attention = use_explicit_attention(train.attention, self.device, self.bf16)
        self.ctx = autocast_ctx(self.device, train.dtype)
        self.tuning = None  # what depthlab.training.autotune decided (apply())
        self.own_attention = False  # the model is model.source's: train.attention does not apply (apply())
        self.flush_denormal = bool(train.flush_denormal and self.device.type == "cpu")

    @contextlib.contextmanager
    def numerics(self):
        """While training: subnormal floats computed as zero on the CPU (``train.flush_denormal``), and
        freed memory kept for reuse by the C allocator (:mod:`~depthlab.training.hostmem`), then the
        caller's handling again. Both are process state, so they are set only for the loop (the command
        line sets them once before any parallel work, so OpenMP's threads, made later, inherit the first)."""
        ours = self.device.type == "cpu" and not hostmem.kept() and hostmem.keep_freed_memory()
        try:
            with subnormals_flushed(self.flush_denormal):
                yield
        finally:
            if ours:
                hostmem.release_freed_memory()

    def apply(self, tuning, resumed: Optional[Mapping] = None) -> None:
        """Run with ``tuning``'s setting (:class:`~depthlab.training.autotune.Tuning`): threads, dtype and
        attention path (CPU only; elsewhere the rules stand). ``resumed``: a resumed run's config.json
        ``resolved`` section; settings this session runs with otherwise are said in one ``resume:`` line
        (:func:`resolved_changes`), by :meth:`say_resolved_changes` once the session is known to train."""
        self.tuning = tuning
        self.own_attention = tuning.setting.attention == OWN_ATTENTION  # a model.source model: its forward's own code
        if self.device.type == "cpu":
            s = tuning.setting
            torch.set_num_threads(s.threads)
            self.bf16 = s.dtype == "bfloat16"
            self.explicit_attention = s.attention == "explicit"
            self.ctx = autocast_ctx(self.device, s.dtype)
        said = resolved_changes(resumed, self.resolved())
        self._resolved_said = (f"resume: this session runs with other settings than config.json's resolved section "
                               f"records (run -> now): {said}") if said else ""

    def say_resolved_changes(self) -> None:
        """Log :meth:`apply`'s ``resume:`` line, if any, once: a resume that has nothing to train runs with none of
        those settings, so it is not said there."""
        if getattr(self, "_resolved_said", ""):
            self.log(self._resolved_said)
        self._resolved_said = ""

    def given_threads(self) -> tuple[int, str]:
        """:func:`given_threads` of this run's processes (under torchrun, ``OMP_NUM_THREADS`` is not the user's)."""
        return given_threads(self.train, self.world_size)

    def _set_threads(self) -> None:
        n, knob = self.given_threads()
        if n:
            warning = oversubscribed_threads(n, knob)
            if warning:
                self.log(f"warning: {warning}")
            torch.set_num_threads(n)
        elif self.world_size > 1:  # share the cores between the local processes instead of oversubscribing
            local = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))

    def _init_distributed(self) -> torch.device:
        import torch.distributed as dist

        cuda = self.device.type == "cuda"
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if cuda else "gloo")
            self.owns_process_group = True  # so close() destroys it (a group left to interpreter exit
            # measured "terminate called without an active exception" and SIGABRT in one rank of two)
        if cuda:
            dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(dev)
            return dev
        return self.device

    @property
    def dtype_name(self) -> str:
        """``bfloat16`` or ``float32``: what the forward passes compute in."""
        return "bfloat16" if self.bf16 else "float32"

    @property
    def compile_wanted(self) -> bool:
        """``train.compile``: true / false, or ``auto`` = on CUDA only (where compiling pays)."""
        c = self.train.compile
        return c is True or (c == "auto" and self.device.type == "cuda")

    @property
    def compile_mode(self) -> str:
        """``train.compile_mode`` with ``auto`` resolved: ``reduce-overhead`` (CUDA graphs) on one CUDA device,
        ``default`` elsewhere."""
        m = self.train.compile_mode
        if m != "auto":
            return m
        return "reduce-overhead" if self.device.type == "cuda" and self.world_size == 1 else "default"

    def resolved(self) -> dict:
        """What the ``auto``/0 device settings became on this machine (part of config.json ``resolved``)."""
        r = {"device": str(self.device), "dtype": self.dtype_name,
             "attention": OWN_ATTENTION if self.own_attention else "explicit" if self.explicit_attention else "sdpa",
             "threads": torch.get_num_threads(),
             "processes": self.world_size, "compile": self.compile_wanted,
             "compile_mode": self.compile_mode if self.compile_wanted else None, "omp_wait": omp_policy(),
             "flush_denormal": self.flush_denormal,
             "host_memory": "kept" if self.device.type == "cpu" and hostmem.available() else "system"}
        return {**r, "tuning": self.tuning.to_record()} if self.tuning is not None else r

    def agree(self, **flags: bool) -> dict[str, bool]:
        """Each flag OR-ed over every process (one all-reduce of a small tensor); as given with one process.

        Stop decisions (time limit, signal, target loss, non-finite step, failed checkpoint write)
        go through here so that every rank leaves the loop at the same step.
        """
        if self.world_size == 1:
            return {k: bool(v) for k, v in flags.items()}
        import torch.distributed as dist

        t = torch.tensor([int(bool(v)) for v in flags.values()], dtype=torch.int32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return dict(zip(flags, (bool(x) for x in t.tolist())))

    def min_int(self, n: int) -> int:
        """The smallest ``n`` over the processes (the slowest process decides a plan)."""
        if self.world_size == 1:
            return n
        import torch.distributed as dist

        nt = torch.tensor([n], dtype=torch.int64, device=self.device)
        dist.all_reduce(nt, op=dist.ReduceOp.MIN)
        return int(nt.item())

    def max_(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` max-reduced over the processes in place, on the device (no host read)."""
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(x, op=dist.ReduceOp.MAX)
        return x

    def mean_(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` averaged over the processes in place."""
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(x)
            x /= self.world_size
        return x

    def synchronize(self) -> None:
        """Wait for queued device work (CUDA), so a clock reading sees it."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def wrap(self, model: torch.nn.Module, batch_size: int, block_size: int, port) -> torch.nn.Module:
        """``model`` compiled when :attr:`compile_wanted` (eager on failure), then in DDP with several processes."""
        mode = self.train.compile_mode
        if self.compile_wanted:
            if mode == "reduce-overhead" and self.device.type != "cuda":
                self.log(f"warning: train.compile_mode reduce-overhead's CUDA graphs do nothing on {self.device.type}: "
                         "the model compiles as with default")
            model = self._compile(model, batch_size, block_size, port)
        elif mode not in ("auto", "default"):
            c = self.train.compile
            self.log(f"warning: train.compile_mode {mode} has no effect: the model is not compiled (train.compile "
                     f"{str(c).lower()}{' = on CUDA only' if c == 'auto' else ''}; --train.compile true compiles it)")
        if self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        return model

    def _compile(self, model, batch_size: int, block_size: int, port):
        """``torch.compile(model)``, or the eager model with one warning if compiling fails.

        Compilation is lazy, so a missing toolchain only shows at the first call: one forward of
        a training micro-batch's shape, with targets, is run here (RNG states restored) so a failure
        falls back now, not mid-training; it compiles the graphs the first step uses, forward and backward,
        on a batch with the training batches' strides (measured cold on a 2-core Xeon: a contiguous
        warm-up batch and no backward left ~10 s of compiling in step 0, on the training clock), and
        leaves no gradient behind (the trainer warms the evaluation graph through its
        evaluator). Shapes are
        static (``dynamic=False``): training and evaluation batches each get their own graph instead
        of one generic dynamic-shape graph after the first shape change.
        """
        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        self.log("compiling the model with torch.compile, the training step then the evaluation graph (measured "
                 "45-105 s in all the first time on 2-core CPUs, more with other work on the cores; ~5 s once "
                 "torch's compile cache holds them for the same shapes and thread count)")
        t0 = time.perf_counter()
        try:
            compiled = torch.compile(model, dynamic=False, mode=self.compile_mode)
            # a batch laid out as training's (strided views of one window): another stride is a recompile
            x, y = get_batch(np.zeros(block_size + 1, dtype=np.int64), block_size, batch_size,
                             np.random.default_rng(0), self.device)
            with self.ctx:
                loss = port.loss(compiled, x, y)
            if loss.requires_grad:  # the backward graph compiles at the first backward: here, not on the clock
                loss.backward()
            self.log(f"compiled the training step's forward and backward in {time.perf_counter() - t0:.1f} s, "
                     "before the run's clock (not in its tokens/s or summary.json's wall_time_s)")
            return compiled
        except Exception as e:  # noqa: BLE001 - any backend failure means "run eager"
            self.log(f"warning: torch.compile unavailable ({type(e).__name__}: "
                     f"{str(e).splitlines()[0][:120] if str(e) else ''}); running eager")
            return model
        finally:
            model.zero_grad(set_to_none=True)  # no warm-up gradient reaches step 0, even after a failed backward
            torch.set_rng_state(rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng, self.device)

    def barrier(self) -> None:
        """Wait for every process (a no-op alone)."""
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self, wait: bool = True) -> None:
        """Wait for every process, give back the caller's thread count and the run folder's lock, then
        destroy the process group this runtime made; once (a second call does nothing).

        Args:
            wait: False on the way out of a run that failed or stopped: no barrier (the other processes may never
                reach it) and the process group is left to the process's exit.
        """
        if self.closed:
            return
        self.closed = True
        if wait:
            self.barrier()
        torch.set_num_threads(self.threads_before)
        while self.on_close:
            self.on_close.pop()()
        if wait and self.world_size > 1 and self.owns_process_group:
            import torch.distributed as dist

            dist.destroy_process_group()
            self.owns_process_group = False

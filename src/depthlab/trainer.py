"""The training loop: AdamW or Muon + AdamW, warmup + cosine LR, clipping, accumulation, eval, checkpoints, resume.

The trainer runs exactly the callbacks it is given (see :mod:`depthlab.callbacks`); the public
:func:`depthlab.train` adds the default analytics observers. Files go through
:mod:`depthlab.rundir` and :mod:`depthlab.checkpoint`; only rank 0 writes.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Iterable, Iterator, Optional

import numpy as np
import torch

from . import checkpoint as ckpt
from . import evaluation, rundir
from .budget import FIT_STEPS, REFIT_STEPS, TimeBudget  # noqa: F401 (FIT_STEPS, REFIT_STEPS: re-exported)
from .callbacks import Callback, StepInfo
from .config import PREDATING, RunConfig, check_device_name
from .data import Corpus, get_batch, load_corpus, to_device
from .errors import DepthlabError, NonFiniteError
from .model import GPT
from .rundir import MetricsWriter, RunDir, default_out_dir, prepare_run_dir, truncate_metrics

LN2 = math.log(2.0)


class Interrupted(Exception):
    """Training stopped by SIGINT/SIGTERM after writing a checkpoint; ``exit_code`` is 130/143."""

    def __init__(self, signum: int, run_dir: Path, step: int):
        self.exit_code = 128 + signum
        self.run_dir, self.step = run_dir, step
        super().__init__(f"interrupted at step {step}; checkpoint written. Resume with: "
                         f"depthlab train --resume {run_dir}")


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda if available, else mps, else cpu; other names are checked.

    Raises:
        DepthlabError: if the name is not a device name (:func:`~depthlab.config.check_device_name`)
            or the named device is not available.
    """
    check_device_name(name, "train.device")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise DepthlabError(f"train.device {name} requested but CUDA is not available; use --train.device cpu")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise DepthlabError("train.device mps requested but MPS is not available; use --train.device cpu")
    return torch.device(name)


def get_lr(it: int, learning_rate: float, min_lr: float, warmup_iters: int, decay_iters: int) -> float:
    """Learning rate at optimizer step ``it`` (0-based): linear warmup, then cosine to ``min_lr``.

    Warmup gives lr * (it + 1) / (warmup + 1), so step 0 is > 0; then
    min_lr + 0.5 (1 + cos(pi r)) (lr - min_lr) with r = (it - warmup) / (decay - warmup)
    (Loshchilov & Hutter 2017, SGDR; the nanoGPT schedule); after ``decay_iters``: min_lr.
    """
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it >= decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / max(1, decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def get_lr_from(it: int, start: int, start_lr: float, min_lr: float, decay_iters: int) -> float:
    """Learning rate at step ``it`` of a cosine that starts at ``start_lr`` at step ``start`` and reaches
    ``min_lr`` at ``decay_iters`` (then stays there): the schedule of an extended run.

    When ``--resume`` changes where the decay ends (a larger ``max_iters`` with ``lr_decay_iters`` 0),
    recomputing the original warmup + cosine for the new length would make the learning rate jump
    (e.g. from ``min_lr`` at the end of a finished run back up to near the peak, with no warmup).
    Instead the run continues from the learning rate it had and decays from there (SGDR-style
    cosine, Loshchilov & Hutter 2017).
    """
    if it >= decay_iters or decay_iters <= start:
        return min_lr
    ratio = (it - start) / (decay_iters - start)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (start_lr - min_lr)


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on tensors with >= 2 dims (matmuls, embeddings), none on gains/biases.

    Each parameter appears in exactly one group; tied weights once (``named_parameters`` dedups).
    """
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def resolve_optimizer(name: str, device: torch.device) -> str:
    """``adamw`` or ``muon`` for ``train.optimizer``; ``auto`` is Muon on CPU, AdamW elsewhere.

    On CPU (2-core AMD EPYC, fp32) Muon reached val 1.536 nats in the default recipe's 270 s against
    AdamW's 1.616, and fast-cpu's val 1.88 in 300 steps instead of 700. On CUDA it is unmeasured,
    and fused AdamW lets the trainer check for non-finite steps on the device without a host sync.
    """
    return ("muon" if device.type == "cpu" else "adamw") if name == "auto" else name


def make_optimizer(model: torch.nn.Module, cfg, device: torch.device, name: Optional[str] = None):
    """The optimizer ``name`` (default: ``cfg.optimizer`` resolved, see :func:`resolve_optimizer`) over ``model``.

    ``adamw``: AdamW (Loshchilov & Hutter 2019) over :func:`param_groups`; fused kernel on CUDA
    and CPU (measured ~7 % faster per step than foreach at nanoGPT's CPU shape), foreach elsewhere.
    ``muon``: :class:`~depthlab.optim.Muon` (peak lr ``cfg.muon_lr``) for the 2-D weights inside the
    transformer blocks, that AdamW for the embeddings, the head, gains and biases
    (:class:`~depthlab.optim.MuonAdamW`).
    """
    kw = {"fused": True} if device.type in ("cuda", "cpu") else {"foreach": True}
    if (name or resolve_optimizer(cfg.optimizer, device)) == "adamw":
        return torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.learning_rate,
                                 betas=(cfg.beta1, cfg.beta2), **kw)
    from .optim import Muon, MuonAdamW

    hidden = [p for p in model.transformer.h.parameters() if p.requires_grad and p.dim() == 2]
    ids = {id(p) for p in hidden}
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in ids]
    groups = [{"params": [p for p in rest if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0}]
    return MuonAdamW(Muon(hidden, lr=cfg.muon_lr, weight_decay=cfg.weight_decay),
                     torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), **kw))


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


def configure_attention(model: GPT, attention: str, device: torch.device, bf16: bool = False) -> None:
    """Set each block's attention path as :func:`use_explicit_attention` decides.

    Both paths compute the same causal softmax attention (tests hold them to 1e-5).
    """
    explicit = use_explicit_attention(attention, device, bf16)
    for blk in model.transformer.h:
        blk.attn.explicit = explicit


def autocast_ctx(device: torch.device, dtype: str):
    """``torch.autocast`` in bf16 when :func:`use_bf16` says so, else a no-op context."""
    use_bf16_ = use_bf16(device, dtype)
    if use_bf16_:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def console(msg: str) -> None:
    """Print one log line to stdout, safely around a tqdm progress bar.

    If stdout is a pipe whose reader has gone (``depthlab train | head``), the rest of the log
    is discarded instead of killing the run: training and its files matter more than the log.
    """
    try:
        try:
            from tqdm import tqdm

            tqdm.write(msg, file=sys.stdout)
        except ImportError:
            print(msg)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


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
    params = L * C * C * (4 + 2 * m.ff_mult) + (vocab_size + T) * C
    acts = 2.0 * L * T * B * C * (34 + 5 * nh * T / C)
    return acts + 12.0 * B * T * vocab_size + 16.0 * params


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
        raise DepthlabError(
            f"a training step with train.batch_size {t.batch_size}, model.block_size {m.block_size}, "
            f"model.n_embd {m.n_embd}, model.n_layer {m.n_layer} needs about {need / 2**30:,.0f} GiB, more than this "
            f"machine's {have / 2**30:,.0f} GiB of {where}; lower train.batch_size (raise train.grad_accum to keep "
            "the tokens per step) or model.block_size")


def val_perplexity(loss: float) -> Optional[float]:
    """Perplexity exp(loss) of a mean loss in nats/token, exact in float64; None when it overflows.

    float64 ``exp`` is finite up to ~709.78 nats; beyond it (or for NaN) there is no true finite
    value to write, and a capped number would be a wrong one.
    """
    try:
        v = math.exp(loss)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None


class Trainer:
    """One training run. Use :func:`train` unless you need the object.

    Args:
        cfg: the run config; ``cfg.model.vocab_size`` is filled from the corpus.
        callbacks: read-only observers (:class:`~depthlab.callbacks.Callback`); only these run.
        overwrite: replace an existing run directory (only if it is a depthlab run).
        log: ``callable(str)`` for console lines (default: stdout).
        init_from: a run directory whose best weights start this new run (same shape and vocabulary;
            new optimizer, step 0).

    Raises:
        DepthlabError: bad data, sizes, run directory, resume mismatch, or ``init_from`` weights that
            do not fit (a run directory this call created is removed again).

    Attributes:
        device_checks: where the per-step non-finite check runs: None (default) = on the device
            when it is CUDA and the optimizer is fused, else on the host; True / False force it
            (True on CPU is how the tests cover the device path). See :meth:`_device_checked_step`.
    """

    device_checks: Optional[bool] = None

    def __init__(self, cfg: RunConfig, callbacks: Iterable[Callback] = (), overwrite: bool = False,
                 log=console, init_from: Optional[str] = None):
        self.cfg = cfg
        self.callbacks = list(callbacks)
        t = cfg.train
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.is_main = self.rank == 0
        self.log = log if self.is_main else (lambda s: None)  # only rank 0 talks
        if t.grad_accum % self.world_size:
            raise DepthlabError(f"train.grad_accum ({t.grad_accum}) counts micro-batches of the global batch and "
                                f"must be divisible by the number of processes ({self.world_size})")
        self.accum = t.grad_accum // self.world_size  # micro-batches per process per step
        self._set_threads()
        self.device = resolve_device(t.device)
        self._owns_process_group = False
        if self.world_size > 1:
            self.device = self._init_distributed()
        self.corpus: Corpus = load_corpus(cfg.data, log=log if self.is_main else None, seed=t.seed,
                                          tokenizer_json=ckpt.given_tokenizer_json(cfg, init_from))
        self.corpus.check_block_size(cfg.model.block_size, log=log if self.is_main else None)
        vocab = self.corpus.tokenizer.vocab
        check_memory(cfg, len(vocab), self.device)  # before anything is written: no half-made run folder
        if len(vocab) == 1 and self.is_main:
            log(f"warning: {self.corpus.path} has a single distinct character ({vocab[0]!r}); "
                "the model has nothing to learn (loss will go to 0)")
        self.run_dir = Path(t.out_dir) if t.out_dir else default_out_dir()
        if t.resume and not t.out_dir:
            raise DepthlabError("train.resume needs the run to continue: give --resume RUN_DIR "
                                "(or train.out_dir in the config)")
        resume_entry = None
        created = False
        self.optimizer_name: Optional[str] = None  # resolved in _setup (on resume: the run's own)
        new_dirs: list[Path] = []  # the folders this start makes, innermost first (runs/<time>, runs)
        if t.resume:
            resume_entry = self._check_resume(vocab)
        elif self.is_main:
            new_dirs = [p for p in (self.run_dir, *self.run_dir.parents) if not p.exists()]
            created = bool(new_dirs)
            prepare_run_dir(self.run_dir, overwrite)
        self.created_run_dir = created
        try:
            self._setup(cfg, vocab, resume_entry)
            if init_from:
                self._init_from(Path(init_from))
        except BaseException:
            if getattr(self, "metrics", None) is not None:
                self.metrics.close()
            if created:  # a failed start leaves nothing behind: no run folder, no empty runs/ around it
                shutil.rmtree(self.run_dir, ignore_errors=True)
                for parent in new_dirs[1:]:
                    try:
                        parent.rmdir()  # only while empty: another run may have appeared there
                    except OSError:
                        break
            raise

    def _init_from(self, rd: Path) -> None:
        """Load the best weights of run ``rd`` (or of a ``depthlab export`` folder) into this fresh run's model."""
        sd = ckpt.init_weights(rd, self.cfg.model, self.corpus.tokenizer)
        ckpt.load_into(self.raw_model, sd, rd)

    def _set_threads(self) -> None:
        t = self.cfg.train
        if t.threads:
            cores = os.cpu_count() or 1
            if t.threads > cores:
                self.log(f"warning: train.threads {t.threads} is more than this machine's {cores} cores; "
                         f"oversubscribed threads make each step slower (try --train.threads {cores}, or 0)")
            torch.set_num_threads(t.threads)
        elif self.world_size > 1:  # share the cores between the local processes instead of oversubscribing
            local = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))

    def _init_progress(self) -> None:
        """Counters and flags of a run at step 0 (a resume then loads them from its checkpoint)."""
        self.step = 0
        self.best_val = float("inf")
        self.best_step = -1
        self.wall_before = 0.0
        self.tokens_seen = 0
        self.nonfinite_skips = 0
        self._pending: list[tuple] = []  # device-checked steps not yet read: (step, lr, tokens, loss, gnorm, bad)
        self._halted: Optional[torch.Tensor] = None  # on_nonfinite stop, device check: sticky 0-d skip flag
        self.evals_without_improvement = 0  # for train.patience
        self.lr_anchor: Optional[tuple[int, float, int]] = None  # (step, lr, decay_iters) of an extended run
        self.patience_exhausted = False
        self.last_eval: dict = {}
        self.budget = TimeBudget(self.cfg.train)  # train.fit_to_time; its record goes to config.json "resolved"
        self.final_val: Optional[dict] = None  # train.final_validation's result, for the summary
        if self.cfg.train.final_validation and len(self.corpus.val) >= 2:
            self.budget.final_batches = evaluation.forward_batches(len(self.corpus.val), self.cfg.model.block_size,
                                                                   self.cfg.train.batch_size)

    def _setup(self, cfg: RunConfig, vocab: list[str], resume_entry: Optional[dict]) -> None:
        t = cfg.train
        cfg.model = dataclasses.replace(cfg.model, vocab_size=len(vocab))
        t.out_dir = str(self.run_dir)
        self.decay_iters = t.lr_decay_iters or t.max_iters
        torch.manual_seed(t.seed)
        random.seed(t.seed)
        np.random.seed(t.seed % 2**32)
        # One stream of global batches, the same on every rank; each rank takes its own slice, so the
        # data seen is independent of the world size (2 x B equals 1 x 2B) and resumes across sizes.
        self.batch_rng = np.random.default_rng(t.seed)
        self.model = GPT(cfg.model).to(self.device)
        configure_attention(self.model, t.attention, self.device, use_bf16(self.device, t.dtype))
        self.raw_model = self.model
        self.optimizer_name = self.optimizer_name or resolve_optimizer(t.optimizer, self.device)
        self.optimizer = make_optimizer(self.model, t, self.device, self.optimizer_name)
        self.ctx = autocast_ctx(self.device, t.dtype)
        self._init_progress()
        self.last_info = StepInfo(step=0)
        self.target_reached: Optional[tuple[int, float]] = None
        self.stopped_by = "max_iters"
        self._signal: Optional[int] = None
        if self._compile_wanted():
            self.model = self._compile(self.model)
        if self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.model = DDP(self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if resume_entry is not None:
            self._load_resume(resume_entry)  # reads and checks only: nothing is written before it passes
        # resuming a run that is already at max_iters changes nothing on disk
        self.resumed = resume_entry is not None  # from a checkpoint, whose step was evaluated already
        self.nothing_to_train = self.resumed and self.step >= t.max_iters
        if self.is_main and not self.nothing_to_train:
            self._write_static_files(vocab, resume=resume_entry is not None)
            if resume_entry is not None:
                truncate_metrics(self.run_dir, self.step)
                (self.run_dir / rundir.SUMMARY).unlink(missing_ok=True)
                repaired = ckpt.repair_best(self.run_dir)
                if repaired is not None:
                    self.log(f"warning: {repaired}")
                    if "next evaluation" in repaired:
                        self.best_val = float("inf")  # the next evaluation becomes best.safetensors
            elif t.resume:
                self.log(f"no checkpoint in {self.run_dir} yet; starting it again from step 0")
                truncate_metrics(self.run_dir, -1)
        # TensorBoard drops the events after the checkpoint, as metrics.jsonl does (no doubled steps)
        self.metrics = MetricsWriter(self.run_dir, tensorboard=t.tensorboard,
                                     enabled=self.is_main and not self.nothing_to_train,
                                     purge_step=self.step + 1 if resume_entry is not None else None)

    # ----------------------------------------------------------------- setup helpers
    def _init_distributed(self) -> torch.device:
        import torch.distributed as dist

        cuda = self.device.type == "cuda"
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if cuda else "gloo")
            self._owns_process_group = True  # so _finish destroys it (a group left to interpreter exit
            # measured "terminate called without an active exception" and SIGABRT in one rank of two)
        if cuda:
            dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(dev)
            return dev
        return self.device

    def _micro_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's slice (B, T) of the next global micro-batch (B * world_size windows)."""
        B, T = self.cfg.train.batch_size, self.cfg.model.block_size
        x, y = get_batch(self.corpus.train, T, B * self.world_size, self.batch_rng)
        sl = slice(self.rank * B, (self.rank + 1) * B)
        return to_device(x[sl], y[sl], self.device)

    def _compile_wanted(self) -> bool:
        """``train.compile``: true / false, or ``auto`` = on CUDA only (where compiling pays)."""
        c = self.cfg.train.compile
        return c is True or (c == "auto" and self.device.type == "cuda")

    def _compile(self, model):
        """``torch.compile(model)``, or the eager model with one warning if compiling fails.

        Compilation is lazy, so a missing toolchain only shows at the first call: one forward of
        a training micro-batch's shape, with targets, is run here (RNG states restored) so a failure
        falls back now, not mid-training; it compiles the graph the first step uses. Shapes are
        static (``dynamic=False``): training and evaluation batches each get their own graph instead
        of one generic dynamic-shape graph after the first shape change.
        """
        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        self.log("compiling the model with torch.compile (the first steps take longer; ~20 s on a CPU)")
        try:
            compiled = torch.compile(model, dynamic=False)
            x = torch.zeros((self.cfg.train.batch_size, self.cfg.model.block_size), dtype=torch.long,
                            device=self.device)
            with self.ctx:
                compiled(x, x)
            return compiled
        except Exception as e:  # noqa: BLE001 - any backend failure means "run eager"
            self.log(f"warning: torch.compile unavailable ({type(e).__name__}: "
                     f"{str(e).splitlines()[0][:120] if str(e) else ''}); running eager")
            return model
        finally:
            torch.set_rng_state(rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng, self.device)

    def _resume_optimizer(self, old: dict, asked: dict) -> None:
        """On resume, keep the optimizer the run was made with (``old``: its config.json).

        ``auto`` resumes with what it resolved to then, whatever this device is, and ``auto`` and
        that optimizer count as the same value in ``asked`` (the config compared for changes). A
        run without ``resolved.optimizer`` predates the field (:data:`~depthlab.config.PREDATING`).
        """
        ran = (old.get("resolved") or {}).get("optimizer") or PREDATING["train"]["optimizer"]
        if self.cfg.train.optimizer == "auto":
            self.optimizer_name = ran
        old_field = (old.get("train") or {}).get("optimizer")
        if old_field is not None and {old_field, asked["train"]["optimizer"]} <= {"auto", ran}:
            asked["train"]["optimizer"] = old_field

    def _check_resume(self, vocab: list[str]) -> Optional[dict]:
        rd = RunDir(self.run_dir)
        try:
            rd.require("config")
        except DepthlabError as e:
            raise DepthlabError(f"cannot resume: {e}") from None
        old, old_vocab = rd.config or {}, rd.vocab or []
        self._old_config = old
        same_kind = (old.get("data") or {}).get("tokenizer", "char") == self.cfg.data.tokenizer
        new = [c for c in vocab if c not in set(old_vocab)]  # another tokenizer is refused below, by name
        gone = [c for c in old_vocab if c not in set(vocab)]
        if same_kind and (new or gone):
            parts = []
            if new:
                parts.append(f"characters absent from the checkpoint: {''.join(new)[:40]!r}")
            if gone:
                parts.append(f"checkpoint characters absent from this corpus: {''.join(gone)[:40]!r}")
            raise DepthlabError(
                f"cannot resume {rd.path}: the corpus vocabulary differs from the checkpoint's "
                f"({'; '.join(parts)}); resume with the run's own corpus, or use --init-from for a new run")
        asked = self.cfg.to_dict()
        self._resume_optimizer(old, asked)
        refused, noted = ckpt.resume_changes({k: v for k, v in old.items() if k in asked}, asked)
        if refused:
            raise DepthlabError(f"cannot resume {rd.path} with changed {'; '.join(refused)} (run value -> asked); "
                                "these change what the run's numbers mean: resume with the run's own values, or "
                                "start a new run (--init-from to reuse its weights)")
        for line in noted:
            self.log(f"resume: {line}")
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            entry = ckpt.latest_checkpoint(rd.path)
        for w in caught:
            self.log(f"warning: {w.message}")
        return entry

    def resolved(self) -> dict:
        """What the ``auto``/0 settings became on this machine (written to config.json as ``resolved``)."""
        t = self.cfg.train
        bf16 = use_bf16(self.device, t.dtype)
        explicit = use_explicit_attention(t.attention, self.device, bf16)
        return {"device": str(self.device), "dtype": "bfloat16" if bf16 else "float32",
                "attention": "explicit" if explicit else "sdpa", "threads": torch.get_num_threads(),
                "optimizer": self.optimizer_name,
                "processes": self.world_size, "compile": self._compile_wanted(),
                **({"fit_to_time": self.budget.record} if self.budget.record else {})}

    def _write_config(self) -> None:
        """config.json: every field as this run uses it, plus what ``auto`` settings resolved to."""
        rundir.write_json(self.run_dir / rundir.CONFIG, {**self.cfg.to_dict(), "resolved": self.resolved()})

    def _write_static_files(self, vocab: list[str], resume: bool) -> None:
        # on resume too: config.json must show what this run now uses (e.g. an extended max_iters)
        self._write_config()
        if not resume:
            rundir.write_json(self.run_dir / rundir.VOCAB, vocab)
            tok_json = getattr(self.corpus.tokenizer, "json", None)  # BPE: the trained tokenizer
            if tok_json is not None:
                rundir.atomic_write(self.run_dir / rundir.TOKENIZER, tok_json.encode("utf-8"))

    def _load_resume(self, entry: dict) -> None:
        ckdir = self.run_dir / ckpt.CKPT_DIR
        sd, _ = ckpt.load_weights_file(ckdir / f"{entry['name']}.safetensors")
        ckpt.load_into(self.raw_model, sd, ckdir / f"{entry['name']}.safetensors")
        st = ckpt.load_state(ckdir / f"{entry['name']}.state.pt")
        try:
            self.optimizer.load_state_dict(st["optimizer"])
        except (ValueError, KeyError):  # a state of another optimizer: config.json was edited by hand
            raise DepthlabError(
                f"cannot resume {self.run_dir}: its checkpoint holds another optimizer's state than the "
                f"{self.optimizer_name} this run uses; pass --train.optimizer with the run's own "
                f"(config.json resolved.optimizer)") from None
        ckpt.restore_rng_state(st["rng"], self.batch_rng, self.device)
        self.step = int(st["step"])
        self.best_val = float(st["best_val_loss"])
        self.best_step = int(st["best_step"])
        self.wall_before = float(st["wall_time_s"])
        self.tokens_seen = int(st["tokens_seen"])
        self.nonfinite_skips = int(st.get("nonfinite_skips", 0))
        self.evals_without_improvement = int(st.get("evals_without_improvement", 0))
        self._anchor_schedule(st)
        self.budget.record = ((self._old_config or {}).get("resolved") or {}).get("fit_to_time")  # the run's plan
        old_sha = st.get("corpus_sha256")
        if old_sha is not None and old_sha != self.corpus.sha256:
            raise DepthlabError(f"cannot resume {self.run_dir}: the corpus {self.corpus.path} changed since the "
                                f"checkpoint (sha256 {old_sha[:12]}... then, {self.corpus.sha256[:12]}... now); "
                                "resume with the original file, or start a new run (--init-from)")
        evals = [r for r in RunDir(self.run_dir).evals if r["step"] <= self.step]
        self.last_eval = evals[-1] if evals else {}
        self.log(f"resuming {self.run_dir} from step {self.step} (best val {self.best_val:.4f})")

    # ----------------------------------------------------------------- evaluation and checkpoints
    @torch.no_grad()
    def evaluate(self) -> dict:
        """Mean loss (nats/token) over ``eval_iters`` fixed batches of each split, in eval mode.

        The eval batches come from a generator seeded with (seed, 1) at every call, so every
        evaluation sees the same windows and the training RNG is untouched.

        Returns:
            ``{"train": float, "val": float}`` in nats per token.
        """
        t = self.cfg.train
        was_training = self.model.training
        self.model.eval()
        out = {}
        for split, data in (("train", self.corpus.train), ("val", self.corpus.val)):
            rng = np.random.default_rng([t.seed, 1, 0 if split == "train" else 1])
            losses = torch.zeros(t.eval_iters)
            for i in range(t.eval_iters):
                # the global batch size, so evaluation is the same whatever the number of processes
                x, y = get_batch(data, self.cfg.model.block_size, t.batch_size * self.world_size, rng,
                                 self.device)
                with self.ctx:
                    _, loss = self.model(x, y)
                losses[i] = loss.float().item()
            out[split] = losses.mean().item()
        self.model.train(was_training)
        return out

    def _bpc(self, val_loss: float) -> float:
        """Bits per character of a val loss (mean nats/token over :meth:`evaluate`'s fixed val windows).

        total nats / characters of the evaluated text / ln 2 = loss / (characters per target token
        of those windows) / ln 2; a char run has one character per token, so loss / ln 2.
        """
        if getattr(self, "_val_chars_per_token", None) is None:
            t = self.cfg.train
            rng = np.random.default_rng([t.seed, 1, 1])  # the windows evaluate() draws for "val"
            chars, tokens = self.corpus.tokenizer.token_chars, 0
            total = 0.0
            for _ in range(t.eval_iters):
                _, y = get_batch(self.corpus.val, self.cfg.model.block_size, t.batch_size * self.world_size, rng)
                total += float(chars[y.numpy()].sum())
                tokens += y.numel()
            self._val_chars_per_token = total / tokens if total > 0 else 1.0
        return val_loss / self._val_chars_per_token / LN2

    def _state(self) -> dict:
        return {"step": self.step, "best_val_loss": self.best_val, "best_step": self.best_step,
                "optimizer": self.optimizer.state_dict(),
                "rng": ckpt.capture_rng_state(self.batch_rng, self.device),
                "wall_time_s": self._wall(), "tokens_seen": self.tokens_seen,
                "nonfinite_skips": self.nonfinite_skips, "corpus_sha256": self.corpus.sha256,
                "evals_without_improvement": self.evals_without_improvement,
                "lr_anchor": list(self.lr_anchor) if self.lr_anchor is not None else None}

    def _meta(self) -> dict[str, str]:
        import json

        tok = self.corpus.tokenizer
        meta = {"config": json.dumps(self.cfg.to_dict()), "vocab": json.dumps(tok.vocab, ensure_ascii=False),
                "tokenizer": self.cfg.data.tokenizer}
        if getattr(tok, "json", None) is not None:
            meta["tokenizer_sha256"] = tok.sha256
        return meta

    def _wall(self) -> float:
        """Seconds of training wall time, earlier sessions of a resumed run included."""
        return self.wall_before + (time.time() - self._t_start)

    def save(self, is_best: bool = False, val_loss: Optional[float] = None) -> None:
        """Write a step checkpoint (and ``best`` if ``is_best``) on the main process."""
        if self.is_main:
            ckpt.save_checkpoint(self.run_dir, self.step, self.raw_model, self._state(), self._meta(),
                                 keep_last=self.cfg.train.keep_last, is_best=is_best, val_loss=val_loss)

    def _agree(self, **flags: bool) -> dict[str, bool]:
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

    def _save_agreed(self, is_best: bool = False, val_loss: Optional[float] = None) -> None:
        """:meth:`save` on rank 0, then every rank learns whether it failed and stops together if so.

        Raises:
            DepthlabError or OSError: the checkpoint could not be written (on every rank).
        """
        error: Optional[BaseException] = None
        try:
            self.save(is_best=is_best, val_loss=val_loss)
        except (DepthlabError, OSError) as e:
            error = e
        if self._agree(save_failed=error is not None)["save_failed"]:
            raise error if error is not None else DepthlabError(
                "the checkpoint write failed on the main process; every process stops")

    def _do_eval(self) -> None:
        losses = self.evaluate()
        tl, vl = losses["train"], losses["val"]
        rec = {"step": self.step, "train_loss": tl, "val_loss": vl, "val_bpc": self._bpc(vl),
               "val_ppl": val_perplexity(vl), "tokens_seen": self.tokens_seen,
               "elapsed_s": round(self._wall(), 3)}
        t = self.cfg.train
        improved = math.isfinite(vl) and vl < self.best_val - t.min_delta
        self.evals_without_improvement = 0 if improved else self.evals_without_improvement + 1
        is_best = math.isfinite(vl) and vl < self.best_val
        if is_best:
            self.best_val, self.best_step = vl, self.step
        self.last_eval = rec
        agreed = self._agree(target=t.target_val_loss > 0 and vl <= t.target_val_loss,
                             patience=0 < t.patience <= self.evals_without_improvement)
        reached, self.patience_exhausted = agreed["target"], agreed["patience"]
        if reached and self.target_reached is None:
            self.target_reached = (self.step, rec["elapsed_s"])
        self.metrics.log("eval", rec, {"train/loss_eval": tl, "val/loss": vl, "val/bpc": rec["val_bpc"]})
        ppl = "inf" if rec["val_ppl"] is None else f"{rec['val_ppl']:.2f}"
        self.log(f"eval step {self.step}: train {tl:.4f} val {vl:.4f} nats/token ({rec['val_bpc']:.3f} bits/char, "
                 f"ppl {ppl})")
        for cb in self.callbacks:
            cb.on_eval(self, self.last_info, rec)
        self._save_agreed(is_best=is_best, val_loss=vl)

    # ----------------------------------------------------------------- one optimisation step
    def lr_at(self, it: int) -> float:
        """Learning rate of optimizer step ``it``: :func:`get_lr`, or :func:`get_lr_from` after an extension."""
        t = self.cfg.train
        a = self.lr_anchor
        if a is not None and it >= a[0]:
            return get_lr_from(it, a[0], a[1], t.min_lr, self.decay_iters)
        return get_lr(it, t.learning_rate, t.min_lr, t.warmup_iters, self.decay_iters)

    def _anchor_schedule(self, st: dict) -> None:
        """On resume: keep a stored extension anchor, or make one when the decay length changed."""
        t = self.cfg.train
        stored = st.get("lr_anchor")
        stored = (int(stored[0]), float(stored[1]), int(stored[2])) if stored is not None else None
        if stored is not None and stored[2] == self.decay_iters:
            self.lr_anchor = stored  # this schedule was already extended to the same end
            return
        if self.step >= t.max_iters:
            return  # nothing will train (fit says so): no schedule to continue, nothing to announce
        old = (self._old_config or {}).get("train", {})
        old_decay = int(old.get("lr_decay_iters") or old.get("max_iters") or self.decay_iters)
        if old_decay == self.decay_iters or self.step == 0:
            return  # the planned schedule is unchanged: the run continues exactly as it was
        if stored is not None and self.step >= stored[0]:  # extended once before, extended again now
            lr_now = get_lr_from(self.step, stored[0], stored[1], t.min_lr, stored[2])
        else:
            lr_now = get_lr(self.step, float(old.get("learning_rate", t.learning_rate)), t.min_lr,
                            int(old.get("warmup_iters", t.warmup_iters)), old_decay)
        self.lr_anchor = (self.step, lr_now, self.decay_iters)
        if lr_now <= t.min_lr:  # the old schedule had ended: nothing left to decay
            self.log(f"resume: the learning rate stays at train.min_lr {t.min_lr:g} (the decay ended at step "
                     f"{old_decay}); no jump back to the peak")
            return
        self.log(f"resume: the learning rate continues from {lr_now:.3g} at step {self.step} and decays to "
                 f"train.min_lr {t.min_lr:g} at step {self.decay_iters} (the decay used to end at {old_decay}); "
                 "no jump back to the peak")

    def _first_nonfinite_param(self) -> str:
        for name, p in self.raw_model.named_parameters():
            if p.grad is not None and not torch.isfinite(p.grad).all():
                return name
        return "(none: every gradient is finite but their total norm overflowed float32)"

    def _forward_backward(self) -> torch.Tensor:
        """Forward + backward over this step's micro-batches; returns the summed loss (a 0-d tensor)."""
        loss_sum = torch.zeros((), device=self.device)
        for micro in range(self.accum):
            x, y = self._micro_batch()
            sync = contextlib.nullcontext()
            if self.world_size > 1 and micro < self.accum - 1:
                sync = self.model.no_sync()  # all-reduce once, on the last micro-batch
            with sync:
                with self.ctx:
                    _, loss = self.model(x, y)
                (loss / self.accum).backward()
            loss_sum += loss.detach().float()
        return loss_sum

    def _handle_nonfinite(self, loss_val: float, gnorm: float, lr: float, step: Optional[int] = None) -> None:
        """Skip the step (``on_nonfinite: skip``) or raise :class:`NonFiniteError`; nothing reaches the weights.

        Args:
            loss_val: the step's mean loss (nats/token); gnorm: its total gradient norm; lr: its rate.
            step: None = the step being taken now (host check: its gradients are dropped and the step
                counter advances here); a number = a step already taken whose update the device-side
                check skipped, read later (:meth:`_read_device_checks`): only counted and logged.

        Raises:
            NonFiniteError: with ``on_nonfinite: stop``.
        """
        t = self.cfg.train
        deferred = step is not None
        step = self.step + 1 if step is None else step
        if t.on_nonfinite == "skip":
            if not deferred:
                self.optimizer.zero_grad(set_to_none=True)
            self.nonfinite_skips += 1
            self.metrics.log("event", {"step": step, "nonfinite_skip": True,
                                       "nonfinite_skips": self.nonfinite_skips})
            if not deferred:
                self.step += 1
            return
        self.metrics.log("event", {"step": step, "nonfinite": True, "loss": loss_val,
                                   "grad_norm": gnorm, "lr": lr})
        where = ("not recorded (checked on the device; this and every later update were skipped)"
                 if deferred else self._first_nonfinite_param())
        raise NonFiniteError(
            f"non-finite {'loss' if not math.isfinite(loss_val) else 'gradient'} at step "
            f"{step} (loss {loss_val}, first non-finite gradient: "
            f"{where}, lr {lr:.3g}, dtype "
            f"{'bfloat16' if use_bf16(self.device, t.dtype) else 'float32'}); lower "
            f"train.learning_rate or raise train.warmup_iters; the "
            f"checkpoints in {self.run_dir} are untouched")

    def _checks_on_device(self) -> bool:
        """Whether this run keeps the non-finite check on the device (see ``device_checks``)."""
        on = self.device.type == "cuda" if self.device_checks is None else self.device_checks
        return bool(on and self.optimizer.defaults.get("fused"))  # found_inf needs the fused kernel

    def _device_checked_step(self, loss_sum: torch.Tensor, gnorm: torch.Tensor, lr: float,
                             tokens_per_step: int) -> Optional[StepInfo]:
        """The end of :meth:`train_step` with the non-finite check on the device: no host read per step.

        A 0-d float flag ``bad`` = 1 when the summed loss or the total gradient norm is not finite
        (max-reduced over the ranks on the device under DDP, so every rank skips or stops at the same
        step) is handed to fused AdamW as ``found_inf``, the mechanism of ``torch.amp.GradScaler``:
        its kernel then leaves weights, moments and step count untouched. With ``on_nonfinite: stop``
        the flag is sticky, so no later update lands either. Flags, losses and grad norms are read
        in one transfer (:meth:`_read_device_checks`) at log, eval and last steps and before a
        time-up or signal checkpoint (:meth:`fit`), where skips are counted and logged and a stop
        raises: a non-finite step never reaches the weights or a checkpoint.

        Unlike the host check, ``on_step_end`` also runs for a skipped step when it is not a read
        step, and StepInfo.loss / grad_norm are None except at read steps.

        Args:
            loss_sum: 0-d summed loss over the micro-batches (device); gnorm: 0-d total grad norm.
            lr: the step's learning rate; tokens_per_step: tokens of one step, all processes.

        Returns:
            The step's StepInfo, or None when this step was read and found skipped.
        """
        t = self.cfg.train
        bad = (~(torch.isfinite(loss_sum) & torch.isfinite(gnorm))).float()  # 0-d, 1.0 = non-finite
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        skip = bad
        if t.on_nonfinite == "stop":
            skip = self._halted = bad if self._halted is None else torch.maximum(self._halted, bad)
        self.optimizer.found_inf = skip
        try:
            self.optimizer.step()
        finally:
            del self.optimizer.found_inf
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens_seen += tokens_per_step  # provisional: a skipped step's tokens come off when read
        self._pending.append((self.step, lr, tokens_per_step, loss_sum, gnorm, bad))
        info = StepInfo(step=self.step, lr=lr, tokens_seen=self.tokens_seen)
        if self.step % t.log_interval == 0 or self.step % t.eval_interval == 0 or self.step >= t.max_iters:
            info = self._read_device_checks()
            if info is None:
                return None
        self.last_info = info
        for cb in self.callbacks:
            cb.on_step_end(self, info)
        return info

    def _read_device_checks(self) -> Optional[StepInfo]:
        """Read the pending device-checked steps (one host transfer); count, log or raise their non-finite ones.

        Returns:
            The last pending step's StepInfo with its loss and grad norm; None if nothing was
            pending or that step was skipped.

        Raises:
            NonFiniteError: a pending step was non-finite and ``on_nonfinite`` is ``stop``.
        """
        rows, self._pending = self._pending, []
        if not rows:
            return None
        vals = torch.stack([x.float() for r in rows for x in r[3:]]).view(-1, 3).tolist()  # the one sync
        for (step, lr, tokens, *_), (loss_sum, gnorm, bad) in zip(rows, vals):
            if bad:
                self.tokens_seen -= tokens
                self._handle_nonfinite(loss_sum / self.accum, gnorm, lr, step=step)
        (step, lr, *_), (loss_sum, gnorm, bad) = rows[-1], vals[-1]
        if bad:
            return None
        return StepInfo(step=step, loss=loss_sum / self.accum, lr=lr, grad_norm=gnorm, tokens_seen=self.tokens_seen)

    def train_step(self, params: list[torch.nn.Parameter], tokens_per_step: int) -> Optional[StepInfo]:
        """One optimisation step: LR, forward/backward, clip, non-finite check, ``optimizer.step``.

        On CUDA the non-finite check stays on the device (:meth:`_device_checked_step`); elsewhere
        the loss and gradient norm are read on the host every step.

        Returns:
            The step's :class:`StepInfo`, or None when a non-finite step was skipped.

        Raises:
            NonFiniteError: non-finite loss/gradient with ``on_nonfinite: stop``.
        """
        t = self.cfg.train
        lr = self.lr_at(self.step)
        muon_lr = lr * t.muon_lr / t.learning_rate  # the same schedule, scaled to Muon's peak
        for g in self.optimizer.param_groups:
            g["lr"] = muon_lr if g.get("muon") else lr
        loss_sum = self._forward_backward()
        for cb in self.callbacks:
            cb.on_before_clip(self, StepInfo(step=self.step, lr=lr, tokens_seen=self.tokens_seen))
        gnorm = torch.nn.utils.clip_grad_norm_(params, t.grad_clip if t.grad_clip > 0 else float("inf"))
        if self.world_size > 1 and (self.step + 1) % t.log_interval == 0:
            import torch.distributed as dist

            dist.all_reduce(loss_sum)  # logged loss = mean over all ranks' micro-batches
            loss_sum /= self.world_size
        if self._checks_on_device():
            return self._device_checked_step(loss_sum, gnorm, lr, tokens_per_step)
        loss_val, gnorm_val = loss_sum.item() / self.accum, gnorm.item()
        if self._agree(bad=not (math.isfinite(loss_val) and math.isfinite(gnorm_val)))["bad"]:
            self._handle_nonfinite(loss_val, gnorm_val, lr)
            return None
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens_seen += tokens_per_step
        self.last_info = StepInfo(step=self.step, loss=loss_val, lr=lr, grad_norm=gnorm_val,
                                  tokens_seen=self.tokens_seen)
        for cb in self.callbacks:
            cb.on_step_end(self, self.last_info)
        return self.last_info

    # ----------------------------------------------------------------- the loop
    def _on_signal(self, signum, frame):
        self._signal = signum

    @contextlib.contextmanager
    def _signals_caught(self) -> Iterator[None]:
        """SIGINT/SIGTERM set a flag (checked between steps) instead of killing the process mid-write."""
        import threading

        old = {}
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                old[s] = signal.signal(s, self._on_signal)
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _stop_reason(self, time_up: bool) -> Optional[str]:
        """``max_iters`` | ``max_time`` | ``target_val_loss`` when training must stop now, else None."""
        t = self.cfg.train
        if self.step >= t.max_iters:
            if not self.budget.planned_end():
                return "max_iters"
            self.log(f"stopped at step {self.step}: the end train.fit_to_time planned for train.max_time "
                     f"{t.max_time:g} s ({self.budget.record['max_iters_asked']} steps were asked for)")
            return "max_time"  # the time budget ended the run, with its decay finished
        if time_up:
            self.log(f"stopped by train.max_time ({t.max_time:g} s) at step {self.step} of "
                     f"{t.max_iters}: the learning rate had not finished its decay")
            return "max_time"
        if self.target_reached is not None:
            self.log(f"stopped at step {self.step}: val loss reached train.target_val_loss {t.target_val_loss:g}")
            return "target_val_loss"
        if self.patience_exhausted:
            self.log(f"stopped early at step {self.step}: {self.evals_without_improvement} evaluations without "
                     f"lowering the best val loss {self.best_val:.4f} (step {self.best_step}) by train.min_delta "
                     f"{t.min_delta:g} (train.patience {t.patience}); best.safetensors holds the best weights")
            return "patience"
        return None

    def _banner(self, tokens_per_step: int) -> None:
        from .config import schedule_warnings

        t, m = self.cfg.train, self.cfg.model
        for w in schedule_warnings(t):
            self.log(f"warning: {w}")
        r = self.resolved()
        self.log(f"run {self.run_dir}: {self.raw_model.num_params() / 1e6:.3f} M parameters, "
                 f"vocab {m.vocab_size}, {m.n_layer} x {m.variant}, device {r['device']}, {r['dtype']}, "
                 f"{r['threads']} thread{'s' if r['threads'] != 1 else ''}, {tokens_per_step} tokens/step")
        self.log(f"global batch = micro-batch {t.batch_size} x accumulation {self.accum} x processes "
                 f"{self.world_size} = {t.batch_size * self.accum * self.world_size} sequences of "
                 f"{m.block_size} tokens")

    def _log_step(self, info: StepInfo, tokens_per_sec: float, bar) -> None:
        self.metrics.log("train", {"step": info.step, "loss": info.loss, "lr": info.lr,
                                   "grad_norm": info.grad_norm, "tokens_per_sec": tokens_per_sec},
                         {"train/loss": info.loss, "lr": info.lr, "grad_norm/total": info.grad_norm,
                          "tokens_per_sec": tokens_per_sec})
        if bar is not None:
            bar.set_postfix_str(f"loss {info.loss:.3f} val {self.best_val:.3f} {tokens_per_sec:,.0f} tok/s")
        else:
            self.log(f"step {info.step}/{self.cfg.train.max_iters} | loss {info.loss:.4f} | lr {info.lr:.2e} | "
                     f"grad_norm {info.grad_norm:.3f} | {tokens_per_sec:,.0f} tokens/s | "
                     f"{self._wall():.1f}s")

    def fit(self) -> Path:
        """Train to ``max_iters`` (or ``max_time`` / ``target_val_loss``); returns the run directory.

        Raises:
            NonFiniteError: non-finite loss/gradient with ``on_nonfinite: stop``.
            Interrupted: SIGINT/SIGTERM (after a checkpoint).
        """
        t, m = self.cfg.train, self.cfg.model
        self._t_start = time.time()
        if self.nothing_to_train:
            self.log(f"nothing to train: the run is at step {self.step} and train.max_iters is {t.max_iters} "
                     f"(a total); pass a larger --train.max_iters to extend it. Nothing was changed.")
            self.metrics.close()
            return self.run_dir
        tokens_per_step = t.batch_size * self.accum * m.block_size * self.world_size
        resumed_at = self.step if self.resumed else None  # a step-0 checkpoint was evaluated too
        self.budget.begin(self.step)
        self._banner(tokens_per_step)
        for cb in self.callbacks:
            cb.on_train_start(self, StepInfo(step=self.step, tokens_seen=self.tokens_seen))
        bar = self._progress_bar()
        params = list(self.raw_model.parameters())
        last_log_t, last_log_step = time.time(), self.step
        with self._signals_caught():
            try:
                self.model.train()
                while True:
                    # every process takes the same decision, or one leaves while another waits in an all-reduce
                    flags = self._agree(time_up=t.max_time > 0 and (time.time() - self._t_start) >= t.max_time,
                                        signal=self._signal is not None)
                    time_up = flags["time_up"]
                    if time_up or flags["signal"]:  # a checkpoint follows: settle device-checked steps first
                        self._read_device_checks()
                    if (self.step % t.eval_interval == 0 or self.step >= t.max_iters or time_up) \
                            and self.step != resumed_at:
                        t_eval = time.time()
                        self._do_eval()
                        self.budget.note_eval(time.time() - t_eval)
                    reason = self._stop_reason(time_up)
                    if reason is not None:
                        self.stopped_by = reason
                        break
                    if flags["signal"]:
                        self._save_agreed()
                        raise Interrupted(self._signal or signal.SIGTERM, self.run_dir, self.step)
                    info = self.train_step(params, tokens_per_step)
                    if self.step in self.budget.marks:
                        self._fit_tick(bar)
                    if info is None:
                        continue
                    if bar is not None:
                        bar.update(1)
                    if self.step % t.log_interval == 0:
                        now = time.time()
                        tps = (self.step - last_log_step) * tokens_per_step / max(now - last_log_t, 1e-9)
                        last_log_t, last_log_step = now, self.step
                        self._log_step(info, tps, bar)
                self._final_validation()
            finally:
                if bar is not None:
                    bar.close()
        return self._finish()

    def _final_validation(self) -> None:
        """train.final_validation: the best weights on the whole val split, logged and kept for the summary.

        Only the main process evaluates (the others wait at :meth:`_finish`'s barrier); the weights
        are the model's own when the last evaluation was the best, else the verified best checkpoint's.
        """
        t = self.cfg.train
        if not (t.final_validation and self.is_main and self.budget.final_batches and math.isfinite(self.best_val)):
            return
        t0 = time.time()
        model = self.raw_model
        if self.best_step != self.step:
            model = copy.deepcopy(self.raw_model)
            path = ckpt.verified_best(self.run_dir)
            ckpt.load_into(model, ckpt.load_weights_file(path)[0], path)
        res = evaluation.split_loss(model, self.corpus.val, self.cfg.model.block_size, t.batch_size,
                                    self.corpus.tokenizer.token_chars, self.device, self.ctx)
        self.final_val = {"step": self.best_step, "val_loss": res.loss, "val_bpc": res.bpc,
                          "tokens": res.tokens, "of_tokens": res.of_tokens, "seconds": round(time.time() - t0, 3)}
        self.log(f"final validation, best weights (step {self.best_step}): "
                 f"{evaluation.describe(res, self.cfg.model.block_size)}, {time.time() - t0:.1f}s")

    def _fit_tick(self, bar) -> None:
        """train.fit_to_time at one of the budget's marks: read the clock, plan when it has a timing."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # three times per run: the clock must see the queued steps
        s_step = self.budget.tick(self.step, time.time())
        if s_step is not None:
            self._fit_plan(s_step, bar)

    def _fit_plan(self, s_step: float, bar) -> None:
        """Plan max_iters from ``s_step`` (measured seconds per step); every process plans the same."""
        n = self.budget.steps_that_fit(self.step, s_step, time.time() - self._t_start)
        if self.world_size > 1:  # every rank must plan the same schedule: the slowest decides
            import torch.distributed as dist

            nt = torch.tensor([n], dtype=torch.int64, device=self.device)
            dist.all_reduce(nt, op=dist.ReduceOp.MIN)
            n = int(nt.item())
        t = self.cfg.train
        lr_now = self.lr_at(self.step)
        msg = self.budget.apply(self.step, n, s_step)
        if msg is None:
            return
        self.log(msg)
        self.decay_iters = t.lr_decay_iters or t.max_iters
        if self.step > t.warmup_iters:  # mid-decay: continue from the current rate (no jump), as an extension does
            self.lr_anchor = (self.step, lr_now, self.decay_iters)
        if bar is not None:
            bar.total = t.max_iters
            bar.refresh()
        if self.is_main:  # a resume continues this schedule
            self._write_config()

    def _finish(self) -> Path:
        summary = self._summary()
        for cb in self.callbacks:
            cb.on_train_end(self, summary)
        if self.is_main:
            rundir.write_json(self.run_dir / rundir.SUMMARY, summary)
            whole = "" if self.final_val is None else f" (whole val split {self.final_val['val_loss']:.4f})"
            self.log(f"done: best val {summary['best_val_loss']:.4f} nats "
                     f"({summary['best_val_bpc']:.3f} bits/char) at step {summary['best_val_step']}{whole}, "
                     f"{summary['final_step']} steps in {summary['wall_time_s']:.1f}s -> {self.run_dir}")
        self.metrics.close()
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()
            if self._owns_process_group:
                dist.destroy_process_group()
        return self.run_dir

    def _progress_bar(self):
        if not (self.is_main and self.cfg.train.progress and sys.stderr.isatty()):
            return None
        try:
            from tqdm import tqdm
        except ImportError:
            return None
        return tqdm(total=self.cfg.train.max_iters, initial=self.step, unit="step", dynamic_ncols=True)

    def _summary(self) -> dict:
        wall = self._wall()
        ev = self.last_eval
        return {"best_val_loss": self.best_val, "best_val_bpc": self._bpc(self.best_val),
                "best_val_step": self.best_step, "final_step": self.step,
                "final_train_loss": ev.get("train_loss"), "final_val_loss": ev.get("val_loss"),
                "wall_time_s": round(wall, 3), "tokens_seen": self.tokens_seen,
                "tokens_per_sec": self.tokens_seen / max(wall, 1e-9),
                "params": self.raw_model.num_params(), "nonfinite_skips": self.nonfinite_skips,
                "vocab_size": self.cfg.model.vocab_size, "stopped_by": self.stopped_by,
                "target_reached_step": self.target_reached[0] if self.target_reached else None,
                "target_reached_s": self.target_reached[1] if self.target_reached else None,
                "final_validation": self.final_val}


def train(cfg: RunConfig, callbacks: Iterable[Callback] = (), overwrite: bool = False, log=console) -> Path:
    """Train a GPT as configured with exactly ``callbacks`` and return its run directory.

    :func:`depthlab.train` (= :func:`depthlab.analytics.train`) adds the default analytics
    observers; this bare form runs none.

    Args:
        cfg: run config (data / model / train sections).
        callbacks: read-only observers (see :class:`~depthlab.callbacks.Callback`).
        overwrite: replace an existing run directory of the same name.
        log: ``callable(str)`` for console lines.

    Returns:
        The run directory (``config.json``, ``vocab.json``, ``metrics.jsonl``, ``summary.json``,
        ``checkpoints/``).

    Raises:
        DepthlabError: bad input; NonFiniteError; Interrupted.
    """
    return Trainer(cfg, callbacks=callbacks, overwrite=overwrite, log=log).fit()

"""The training loop and its wiring: AdamW or Muon + AdamW, warmup + cosine LR, clipping, accumulation,
evaluation, checkpoints, resume.

The :class:`Trainer` only wires the parts of :mod:`depthlab.training` (runtime, optimizer and
schedule, stepper, evaluator, stop rules, checkpointer) and runs the loop; each part keeps its own
state. The trainer talks to the model through :class:`~depthlab.training.protocol.ModelPort`. It runs
exactly the callbacks it is given (see :mod:`depthlab.callbacks`); the public :func:`depthlab.train`
adds the default analytics observers. Files go through :mod:`depthlab.rundir` and
:mod:`depthlab.checkpoint`; only rank 0 writes. The config it is given is never changed.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import random
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

import numpy as np
import torch

from . import checkpoint as ckpt
from . import rundir
from .init_from import given_tokenizer_json
from .budget import FIT_STEPS, REFIT_STEPS, TimeBudget, nothing_to_train  # noqa: F401 (FIT_STEPS, REFIT_STEPS: re-exported)
from .callbacks import Callback, StepInfo, checked_callbacks
from .config import RunConfig, corpus_file, model_record, run_path, schedule_warnings, wiring_label
from .data import Corpus, load_corpus
from .model import require_float32_default
from .errors import DepthlabError, Terminated, Worded, api_errors, api_words
from .rundir import MetricsWriter, default_out_dir, drop_replaced, restore_replaced
from .training.checkpointer import Checkpointer, ResumePoint
from .training.evaluator import Evaluator, eval_batch, nonfinite_final_error, val_perplexity  # noqa: F401 (re-exported)
from .training.optimization import (  # noqa: F401 (re-exported)
    LRSchedule, get_lr, get_lr_from, lr_words, make_optimizer, param_groups, resolve_optimizer, set_update_precision)
from .training import runlock
from .training.protocol import ModelPort
from .training.runtime import (  # noqa: F401 (re-exported)
    Runtime, autocast_ctx, check_memory, configure_attention, console, cpu_has_bf16, resolve_device,
    training_memory_bytes, use_bf16, use_explicit_attention)
from .training.stepper import Stepper
from .training.autotune import Restart, env_threads_warning, tune
from .training.stopping import StopRules
from .units import counted, plus_minus
from .usermodel import make_model, source_run_model


class Interrupted(Worded):
    """Training stopped by SIGINT/SIGTERM after writing a checkpoint; ``exit_code`` is 130/143."""

    def __init__(self, signum: int, run_dir: Path, step: int, words: Optional[str] = None):
        self.exit_code = 128 + signum
        self.run_dir, self.step = run_dir, step
        # quoted: the command is pasted into a shell, where a folder "my runs" would be two words
        super().__init__(words or f"{stopped_by(signum)} at step {step}; checkpoint written. Resume with: "
                         f"depthlab train --resume {shlex.quote(str(run_dir))}")

    @classmethod
    def at_the_end(cls, signum: int, run_dir: Path, step: int, cut: bool = True,
                   validated: bool = True) -> "Interrupted":
        """A signal during the final validation, after the last step: the run is finished and summary.json says the
        final validation was cut (``final_validation_cut``); a resume trains nothing and runs it. ``cut`` False: the
        signal came as it ended (it is whole) or during the end-of-run analytics (diagnosis.json not written)."""
        if not cut:  # "and its final validation" only where one ran (train.final_validation)
            return cls(signum, run_dir, step, f"{stopped_by(signum)} after the last step ({step})"
                       f"{' and its final validation' if validated else ''}: the run is finished (summary.json "
                       f"written); its end-of-run diagnosis may be missing: depthlab diagnose "
                       f"{shlex.quote(str(run_dir))}")
        return cls(signum, run_dir, step, f"{stopped_by(signum)} during the final validation, after the last step "
                   f"({step}): the run is finished (summary.json written) and its final_validation is null; to run "
                   f"it: depthlab train --resume {shlex.quote(str(run_dir))}")


def stopped_by(signum: int) -> str:
    """How a stop by signal ``signum`` is said: ``interrupted`` (Ctrl-C's SIGINT) or ``terminated (SIGTERM)``."""
    return "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"


def before_the_first_step(e: KeyboardInterrupt, removed: str) -> str:
    """What a stop ``e`` (Ctrl-C, or :class:`~depthlab.errors.Terminated`) while a run started undid: ``removed``."""
    signum = signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT
    return f"{stopped_by(signum)} before the first step: nothing was trained, and {removed}"


class HeldLog:
    """Console lines (``log``), held while ``hold``: a process that may restart for another OpenMP policy says its
    lines only once the policy is settled (:meth:`release`), since the restarted process says them again and a
    resume's lines said twice read as two events. Unheld, a line goes out as it comes."""

    def __init__(self, log: Callable[[str], None], hold: bool):
        self._log, self._held = log, ([] if hold else None)

    def __call__(self, line: str) -> None:
        if self._held is not None:
            self._held.append(line)
        else:
            self._log(line)

    def release(self) -> None:
        """Say the held lines, in order; from here every line goes out as it comes."""
        lines, self._held = self._held or [], None
        for line in lines:
            self._log(line)


def _write_vocab(run_dir: Path, vocab: list[str], tokenizer) -> None:
    """vocab.json, and a BPE run's trained tokenizer.json."""
    rundir.write_json(run_dir / rundir.VOCAB, vocab)
    tok_json = getattr(tokenizer, "json", None)
    if tok_json is not None:
        rundir.atomic_write(run_dir / rundir.TOKENIZER, tok_json.encode("utf-8"))


def _progress_bar(show: bool, total: int, initial: int):
    """A tqdm bar of training steps when ``show`` and stderr is a terminal with tqdm installed, else None."""
    if not (show and sys.stderr.isatty()):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)


class Trainer:
    """One training run. Use :func:`train` unless you need the object.

    Making one seeds torch's, ``random``'s and numpy's global generators with ``train.seed`` (as nanoGPT's
    ``train.py`` does); threads, denormal flushing and signal handlers it changes are set back when it ends.

    Args:
        cfg: the run config, as asked (never changed). The run's own config, :attr:`cfg`, is a copy
            with ``model.vocab_size`` from the corpus and ``train.out_dir`` the run directory.
        callbacks: read-only observers (:class:`~depthlab.callbacks.Callback`); only these run.
        overwrite: replace an existing run directory (only if it is a depthlab run).
        log: ``callable(str)`` for console lines (default: stdout).
        init_from: a run directory whose best weights start this new run (same shape and vocabulary;
            new optimizer, step 0).
        restart_ok: the caller (the command line) can restart the process with another OpenMP wait
            policy: :class:`~depthlab.training.autotune.Restart` is raised, before anything is written,
            when the measured-fastest setting needs one.
        init_from_copy: build ``model.source`` (the ``init_from`` run's) from that run's own copy of the file.
        command_line: the caller is ``depthlab train``: its errors and lines name flags (``--train.max_iters``);
            else (a Python caller) they name config fields and keyword arguments (:func:`~depthlab.errors.api_words`).

    Raises:
        DepthlabError: bad data, sizes, run directory, resume mismatch, or ``init_from`` weights that
            do not fit (a run directory this call created is removed again).

    Attributes:
        device_checks: where the per-step non-finite check runs: None (default) = on the device
            when it is CUDA and the optimizer is fused, else on the host; True / False force it
            (True on CPU is how the tests cover the device path). See :meth:`Stepper.device_step`.
    """

    device_checks: Optional[bool] = None

    def __init__(self, cfg: RunConfig, callbacks: Iterable[Callback] = (), overwrite: bool = False,
                 log=console, init_from: Optional[str] = None, restart_ok: bool = False, init_from_copy: bool = False,
                 command_line: bool = False):
        self._words = contextlib.nullcontext if command_line else api_errors
        with self._words():
            self._init(cfg, callbacks, overwrite, log if command_line else (lambda s: log(api_words(s))), init_from,
                       restart_ok, init_from_copy)

    def _init(self, cfg: RunConfig, callbacks: Iterable[Callback], overwrite: bool, log, init_from: Optional[str],
              restart_ok: bool, init_from_copy: bool) -> None:
        # the caller's stays as asked; fields set after construction refused here
        cfg = copy.deepcopy(RunConfig.require(cfg, "Trainer")).checked()
        require_float32_default("train")  # before anything is made: nothing to give back
        self.callbacks = checked_callbacks(callbacks)
        self.restart_ok, self.init_from_copy = restart_ok, init_from_copy
        t = cfg.train
        self.runtime = rt = Runtime(t, log)
        self.rank, self.world_size, self.is_main, self.device = rt.rank, rt.world_size, rt.is_main, rt.device
        self.log = HeldLog(rt.log, hold=restart_ok)
        try:
            self._open(cfg, overwrite, init_from)
        except Restart:
            raise  # said by the restarted process
        except BaseException:
            self.log.release()  # before the refusal, as they came
            self.close()
            raise

    def close(self) -> None:
        """Give the run back (lock, open records, the caller's thread count) without training it, as any end of
        :meth:`fit` does: a notebook can then resume the run, in this process or another."""
        if getattr(self, "metrics", None) is not None:
            self.metrics.close()
        self.runtime.close(wait=False)

    def _open(self, cfg: RunConfig, overwrite: bool, init_from: Optional[str]) -> None:
        """The run's corpus, folder, checkpoint, model and parts (:meth:`__init__`)."""
        t, rt = cfg.train, self.runtime
        if t.resume:
            Checkpointer.refuse_before_loading(cfg)
        # the corpus's lines are held until the run's weights are settled (Trainer._setup): a refused resume or
        # --init-from then says one line, not the corpus's warnings first
        self._held: list[str] = []
        hold = self._held.append if self.is_main else None
        self.corpus: Corpus = load_corpus(cfg.data, log=hold, seed=t.seed,
                                          tokenizer_json=given_tokenizer_json(cfg, init_from))
        vocab = self.corpus.tokenizer.vocab
        if not cfg.model.source:  # the estimate knows depthlab's GPT only; before the split's warning (moot if refused)
            check_memory(cfg, len(vocab), self.device)  # before anything is written: no half-made run folder
        if not t.resume:  # a resume checks the corpus is the run's first (check_resume)
            self.corpus.check_block_size(cfg.model.block_size, log=hold)
        if single := self.corpus.one_symbol_words():
            self._held.append(f"warning: {single}")
        self._held += unused_vocab_size(cfg, len(vocab))
        self.run_dir = run_path(t.out_dir, "train.out_dir") if t.out_dir else default_out_dir()
        if t.resume and not t.out_dir:
            raise DepthlabError("train.resume needs the run to continue: give its folder as train.out_dir "
                                "(--resume RUN_DIR on the command line)")
        self.checkpointer = Checkpointer(self.run_dir, rt, self.log, init_from)
        point, new_dirs, self._replaced, self._was_empty = None, [], None, False  # new_dirs: made here, innermost 1st
        if t.resume:
            point = self.checkpointer.check_resume(cfg, self.corpus, self.device)
        elif self.is_main:
            new_dirs = [p for p in (self.run_dir, *self.run_dir.parents) if not p.exists()]
            self._was_empty = self.run_dir.is_dir() and not any(self.run_dir.iterdir())
            self._replaced = self.checkpointer.claim(overwrite)  # locked; --overwrite: old run aside till step 1
        self._new_dirs = new_dirs  # removed by a start that fails, or is interrupted before its first step
        self.cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=len(vocab)),
                                       train=dataclasses.replace(t, out_dir=str(self.run_dir)))
        try:
            self._setup(vocab, point)  # --init-from's weights load into the new model there (start_weights)
        except BaseException:
            self._remove_new_dirs()  # bad input loses nothing: the old run is back
            raise

    def _remove_new_dirs(self) -> Optional[str]:
        """A start that fails leaves nothing behind (:func:`~depthlab.rundir.remove_made`) and puts back the run
        ``--overwrite`` set aside (:func:`put_back`); what it did, in words."""
        if getattr(self, "metrics", None) is not None:
            self.metrics.close()
        removed = rundir.remove_made(self.run_dir, self._new_dirs, self._was_empty)
        back, self._replaced = put_back(self.run_dir, self._replaced), None
        return back or removed

    @property
    def replacing(self) -> bool:
        """True while the run ``--overwrite`` replaces is set aside and no step has trained in its place: a failure
        now puts it back."""
        return getattr(self, "_replaced", None) is not None

    def _setup(self, vocab: list[str], point: Optional[ResumePoint]) -> None:
        t, rt = self.cfg.train, self.runtime
        torch.manual_seed(t.seed)
        random.seed(t.seed)
        np.random.seed(t.seed % 2**32)
        # One stream of global batches, the same on every rank; each rank takes its own slice, so the
        # data seen is independent of the world size (2 x B equals 1 x 2B) and resumes across sizes.
        self.batch_rng = np.random.default_rng(t.seed)
        resumed = point is not None and point.entry is not None
        if point is not None and not resumed and self.checkpointer.init_record:
            _restart_from_init(self)
        self.raw_model = self.checkpointer.start_weights(self._make_model(point), self).to(self.device)
        for line in self._held:
            self.log(line)
        self._held.clear()
        self.port = ModelPort(self.raw_model)
        rt.apply(tune(self.cfg, self.raw_model, self.device, old := point.old_config.get("resolved") if point else None,
                      restart_ok=self.restart_ok, log=self.log, world_size=self.world_size), resumed=old)
        self.log.release()  # this process trains: its OpenMP policy is settled
        self.port.set_attention(rt.explicit_attention)
        self.optimizer_name = point.optimizer if point else resolve_optimizer(t.optimizer, self.device, self.raw_model)
        self.optimizer = make_optimizer(self.raw_model, t, self.device, self.optimizer_name)
        set_update_precision(self.optimizer, rt.bf16)
        self.ctx = rt.ctx
        plan = point.plan if resumed and point.plan is not None and point.plan.made_for(t) else None
        self.budget = TimeBudget(t, plan)  # train.fit_to_time; its plan goes to config.json "resolved"
        self.eval_batch = eval_batch(t, point.old_config if resumed else None)  # windows per evaluation batch
        self.evaluator = Evaluator(self.cfg, self.corpus, rt, self.port, self.eval_batch)
        self.budget.final_batches = self.evaluator.final_batches
        self.schedule = LRSchedule(t, self.budget)
        self.stepper = Stepper(self, self._before_clip)
        self.stop = StopRules(t, rt, self.log)
        self.wall_before = 0.0
        self.last_info = StepInfo(step=0)
        self.model = rt.wrap(self.raw_model, t.batch_size, self.cfg.model.block_size, self.port)
        if self.model is not self.raw_model and rt.compile_wanted:
            # one evaluation compiles its graph now, before the clock starts: otherwise the first
            # evaluation pays for it and fit_to_time charges every evaluation that much
            t0 = time.time()
            self.evaluator.evaluate(self.model)
            self.log(f"compiled the evaluation graph in {time.time() - t0:.1f} s, before the run's clock too")
        self.nothing_to_train: Optional[str] = None  # its line: a resume with no step left changes nothing on disk
        if resumed:
            _load_resume(self, point)  # reads and checks only: nothing is written before it passes
        self.resumed = resumed  # from a checkpoint, whose step was evaluated already
        if self.is_main and not self.nothing_to_train:
            _start_files(self, vocab, point)
        # TensorBoard drops the events after the checkpoint, as metrics.jsonl does (no doubled steps)
        self.metrics = MetricsWriter(self.run_dir, tensorboard=t.tensorboard,
                                     enabled=self.is_main and not self.nothing_to_train,
                                     purge_step=self.step + 1 if resumed else None)

    def _make_model(self, point: Optional[ResumePoint]) -> torch.nn.Module:
        """depthlab's GPT, or the user's ``model.source`` (:func:`~depthlab.usermodel.source_run_model`)."""
        self.source_record: dict = {}  # config.json resolved: the sha256s of the run's copies (keep_source)
        if not self.cfg.model.source:
            return make_model(self.cfg.model)
        init_dir = Path(str(self.checkpointer.init_source)) if self.init_from_copy and point is None else None
        model, self.source_record = source_run_model(
            self.cfg.model, self.run_dir, point is not None, point is not None and point.entry is not None, init_dir,
            self.cfg.train.batch_size, self.is_main, self.log)
        return model

    # ----------------------------------------------------------------- what the parts hold, by name
    @property
    def step(self) -> int:
        """Optimizer steps done."""
        return self.stepper.step

    @property
    def tokens_seen(self) -> int:
        return self.stepper.tokens_seen

    @property
    def best_val(self) -> float:
        return self.evaluator.best_val

    @property
    def best_step(self) -> int:
        return self.evaluator.best_step

    @property
    def stopped_by(self) -> str:
        return self.stop.stopped_by

    def lr_at(self, it: int) -> float:
        """Learning rate of optimizer step ``it`` (:meth:`LRSchedule.lr_at`)."""
        return self.schedule.lr_at(it)

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Stop at the next step boundary as ``signum`` would: a checkpoint, then :class:`Interrupted`."""
        self.stop.request(signum)

    # ----------------------------------------------------------------- files
    def resolved(self) -> dict:
        """What the ``auto``/0 settings became on this machine and the time plan decided (``resolved``)."""
        plan = self.budget.plan
        model = self.cfg.model  # model.embed_scale auto: what the GPT was built with (a model.source has none)
        return {**self.runtime.resolved(), "optimizer": self.optimizer_name, "corpus_sha256": self.corpus.sha256,
                "eval_batch": self.eval_batch,
                **({"plan": plan.to_record()} if plan is not None else {}), **self.checkpointer.init_record,
                **self.source_record, **({} if model.source else {"embed_scale": model.built_embed_scale})}

    def _write_config(self) -> None:
        """config.json (asked config, vocab_size/out_dir set, data.path absolute; ``resolved``): the one writer."""
        runlock.mark(self.run_dir)  # committed to training: RUN/.lock names this process from here on
        path = self.run_dir / rundir.CONFIG  # a resume stopped before its first step puts it back (_undone)
        self._config_before = path.read_bytes() if self.resumed and path.is_file() else None
        rundir.write_json(path, {**config_record(self.cfg), "resolved": self.resolved()})

    def resume_state(self) -> dict:
        """What a checkpoint stores besides the weights (loaded with ``weights_only=True``)."""
        return {**self.stepper.state_dict(), **self.evaluator.state_dict(), **self.schedule.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "rng": ckpt.capture_rng_state(self.batch_rng, self.device),
                "wall_time_s": self._wall(), "corpus_sha256": self.corpus.sha256}

    def _wall(self) -> float:
        """Seconds of training wall time, earlier sessions of a resumed run included."""
        return self.wall_before + (time.time() - self._t_start)

    def save(self, is_best: bool = False, val_loss: Optional[float] = None, background: bool = False) -> None:
        """Write a step checkpoint (and ``best`` if ``is_best``) on the main process (:meth:`Checkpointer.save`)."""
        self.checkpointer.save(self, is_best=is_best, val_loss=val_loss, background=background)

    # ----------------------------------------------------------------- evaluation
    def evaluate(self) -> Optional[dict]:
        """Mean loss (nats/token) over ``eval_iters`` fixed batches of each split (:meth:`Evaluator.evaluate`); None
        when a Ctrl-C or SIGTERM caught by :meth:`fit` ended it (one process: several finish it, then agree)."""
        return self.evaluator.evaluate(self.model, self.stop.caught if self.world_size == 1 else None)

    # ----------------------------------------------------------------- the loop
    def _before_clip(self, info: StepInfo) -> None:
        for cb in self.callbacks:
            cb.on_before_clip(self, info)

    @property
    def checks_on_device(self) -> bool:
        """Whether this run keeps the non-finite check on the device (see ``device_checks``)."""
        on = self.device.type == "cuda" if self.device_checks is None else self.device_checks
        return bool(on and self.optimizer.defaults.get("fused"))  # found_inf needs the fused kernel

    def fit(self) -> Path:
        """Train to the end step (``max_iters`` or its plan; or ``max_time`` / ``target_val_loss`` /
        ``patience``); returns the run directory. However it ends, the run is given back (:meth:`close`).

        Raises:
            NonFiniteError: non-finite loss/gradient with ``on_nonfinite: stop``.
            Interrupted: SIGINT/SIGTERM (after a checkpoint; during the final validation, after the done line).
        """
        with self._words():
            _fit_once(self.metrics, self.run_dir, getattr(self, "_fit_called", False))
            self._fit_called = True
            try:
                return self._fit()
            finally:
                self.close()  # after the done line's close() (a barrier under torchrun), it does nothing

    def _fit(self) -> Path:
        t, m, self._t_start = self.cfg.train, self.cfg.model, time.time()
        if self.nothing_to_train:
            self.log(self.nothing_to_train)
            return self.run_dir
        self.stepper.on_device = self.checks_on_device
        tokens_per_step = t.batch_size * self.runtime.accum * m.block_size * self.world_size
        self.budget.begin(self.step)
        try:  # the corpus baselines of a large file take a while: a Ctrl-C there has trained nothing
            for line in banner(self, tokens_per_step):
                self.log(line)
            for cb in self.callbacks:
                cb.on_train_start(self, StepInfo(step=self.step, tokens_seen=self.tokens_seen))
        except BaseException as e:  # the baselines of a large corpus take seconds: the old run is not lost there
            _undone(self, e)
            raise
        bar = _progress_bar(self.is_main and self.cfg.train.progress, self.schedule.max_iters, self.step)
        with self.stop.signals_caught(), self.runtime.numerics():
            try:
                self.model.train()
                self._loop(tokens_per_step, bar)
                _drop_old(self)  # a run that ended before a step (max_time) is the new run too
                self.checkpointer.wait_agreed()  # the last background write, before final_validation reads best
                self.evaluator.final_validation(self.raw_model, self.step, self.run_dir, self.log, self.stop.caught)
            except BaseException as e:  # a non-finite first step, a callback's error in evaluation 0
                if self.replacing:  # nothing trained in the old run's place: it is back, as after a Ctrl-C there
                    self.checkpointer.wait_agreed()
                    raise _undone(self, e)
                raise
            finally:
                self.checkpointer.settle()
                if bar is not None:
                    bar.close()
        return self._finish()

    def _loop(self, tokens_per_step: int, bar) -> None:
        t = self.cfg.train
        params = list(self.raw_model.parameters())
        # a checkpoint's step was evaluated (a step-0 one too), unless a signal cut that evaluation short
        resumed_at = self.step if self.resumed and self.evaluator.cut_at != self.step else None
        last_log_s, last_log_step, trained, evaluated = self.stepper.train_seconds, self.step, False, False
        while True:
            flags = self.stop.flags(time.time() - self._t_start)
            time_up = flags["time_up"]
            if time_up or flags["signal"]:  # a checkpoint follows: settle device-checked steps first
                self.stepper.read_pending()
            cut = False
            if (self.step % t.eval_interval == 0 or self.step >= self.schedule.max_iters or time_up) \
                    and self.step != resumed_at:
                t_eval = time.time()
                cut = not _evaluate_now(self)
                evaluated |= not cut
                self.budget.note_eval(time.time() - t_eval, self.evaluator.first_batch_s, self.evaluator.batches_run)
                flags["signal"] |= self.world_size == 1 and self.stop.caught()  # one that came during it
            # a cut evaluation of the last step is no end: its checkpoint is written and a resume evaluates it
            if not cut and self.stop.reason(self.step, time_up, self.schedule, self.budget, self.evaluator) is not None:
                return
            if flags["signal"] or cut:
                # nothing trained yet (a stop in evaluation 0), or a resume whose checkpoint holds nothing of it (the
                # evaluation it was redoing cut again): undone, its config.json put back
                if not (trained or (self.resumed and evaluated)):
                    raise _undo_start(self)
                self.checkpointer.save_agreed(self)
                raise Interrupted(self.stop.signum or signal.SIGTERM, self.run_dir, self.step)
            info = self.stepper.train_step(params, tokens_per_step)
            if not trained:  # the run --overwrite replaces goes once a step has trained in its place
                trained = _drop_old(self)
            if info is not None:
                self.last_info = info
                for cb in self.callbacks:
                    cb.on_step_end(self, info)
            if self.step in self.budget.marks:
                _fit_tick(self, bar)
            if info is None:
                continue
            if bar is not None:
                bar.update(1)
            # the last step too: a run shorter than log_interval had no train record at all (throughput: the steps'
            # own time, Stepper.train_seconds)
            if self.step % t.log_interval == 0 or self.step == self.schedule.max_iters:
                spent = self.stepper.train_seconds - last_log_s
                tps = (self.step - last_log_step) * tokens_per_step / max(spent, 1e-9)
                last_log_s, last_log_step = self.stepper.train_seconds, self.step
                self._log_step(info, tps, bar)

    def _log_step(self, info: StepInfo, tokens_per_sec: float, bar) -> None:
        self.metrics.log("train", {"step": info.step, "loss": info.loss, "lr": info.lr,
                                   "grad_norm": info.grad_norm, "tokens_per_sec": tokens_per_sec},
                         {"train/loss": info.loss, "lr": info.lr, "grad_norm/total": info.grad_norm,
                          "tokens_per_sec": tokens_per_sec})
        if bar is not None:
            bar.set_postfix_str(f"loss {info.loss:.3f} val {self.best_val:.3f} {tokens_per_sec:,.0f} tok/s")
        else:
            self.log(f"step {info.step}/{self.schedule.max_iters} | loss {info.loss:.4f} | "
                     f"{lr_words(info.lr, self.cfg.train, self.optimizer_name)} | grad_norm {info.grad_norm:.3f} | "
                     f"{tokens_per_sec:,.0f} tokens/s | {self._wall():.1f}s")

    def _finish(self) -> Path:
        summary, stop = run_summary(self), None
        if self.is_main:  # before the end-of-run analytics: a Ctrl-C there lost the finished run's summary for good
            # NaN/inf as metrics.jsonl writes them ("nan"): a bare NaN is no JSON (jq, JavaScript refuse the file)
            rundir.write_json(self.run_dir / rundir.SUMMARY, rundir.json_values(summary))
        try:
            for cb in self.callbacks:
                cb.on_train_end(self, summary)
        except KeyboardInterrupt as e:  # Ctrl-C (or SIGTERM) in the diagnosis: the run is whole, say so and go
            stop = signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT
        if self.is_main:
            no_se = self.evaluator.no_se_reason() if summary["best_val_loss_se"] is None else None
            self.log(done_line(summary, self.evaluator.final_val, self.run_dir, no_se))
        self.metrics.close()
        self.runtime.close(wait=stop is None)
        if stop or self.stop.caught():  # the training is whole: the exit says the signal came
            raise Interrupted.at_the_end(stop or self.stop.signum, self.run_dir, self.step, self.evaluator.final_cut,
                                         self.evaluator.final_val is not None)
        return self.run_dir


def _restart_from_init(tr: "Trainer") -> None:
    """A run started --init-from SRC with no checkpoint yet starts again from SRC's weights, as its record says; SRC
    gone is said as this run's problem (the user typed only --resume: "--init-from SRC: no such folder" blamed a
    flag never given)."""
    src = tr.checkpointer.init_record["init_from"]["source"]
    if not Path(src).is_dir():
        raise DepthlabError(f"{tr.run_dir} was started from the weights of {src} (--init-from) and has no checkpoint "
                            f"yet, so it starts again from them, but {src} is gone: put it back, or start the run anew "
                            "without them (--overwrite)")
    tr.checkpointer.init_source = src


def _start_files(tr: "Trainer", vocab: list[str], point: Optional[ResumePoint]) -> None:
    """The files a session that trains (or evaluates) writes as it starts (the main process): config.json (on resume
    too: it must show what this run now uses), vocab.json, and a resumed run's records reopened at its step or a run
    without a checkpoint started again."""
    resumed = tr.resumed
    tr.checkpointer.settle_writable(True)  # no checkpoint to resume from: it starts again, writing
    tr.runtime.say_resolved_changes()
    tr._write_config()
    if not resumed or point.vocab_missing:
        _write_vocab(tr.run_dir, vocab, tr.corpus.tokenizer)
    if resumed and point.vocab_missing:
        tr.log(f"resume: {tr.run_dir / rundir.VOCAB} was {point.vocab_missing}; written again from the "
               "corpus, the file the run trained on (its sha256 is config.json's resolved.corpus_sha256)")
    if resumed and tr.checkpointer.reopen(tr.step, point.record_slack, tr.evaluator.best):
        tr.evaluator.best_val = float("inf")  # the next evaluation becomes best.safetensors
    elif point is not None and not resumed:
        tr.checkpointer.restart()


def run_summary(tr: "Trainer") -> dict:
    """summary.json of a run that ended: its best and final losses, length, speed, how it stopped."""
    wall, ev = tr._wall(), tr.evaluator
    reached = ev.target_reached
    return {"best_val_loss": ev.best_val, "best_val_loss_se": ev.best_se, "best_val_bpc": ev.bpc(ev.best_val),
            "best_val_step": ev.best_step, "final_step": tr.step,
            "final_train_loss": ev.last_eval.get("train_loss"), "final_val_loss": ev.last_eval.get("val_loss"),
            "wall_time_s": round(wall, 3), "tokens_seen": tr.tokens_seen,
            "tokens_per_sec": tr.tokens_seen / max(tr.stepper.train_seconds, 1e-9),
            "tokens_per_sec_overall": tr.tokens_seen / max(wall, 1e-9),
            "params": tr.port.num_params(), "nonfinite_skips": tr.stepper.nonfinite_skips,
            "vocab_size": tr.cfg.model.vocab_size, "stopped_by": tr.stopped_by,
            "planned_end": tr.stop.planned_end,
            "target_reached_step": reached[0] if reached else None,
            "target_reached_s": reached[1] if reached else None,
            "final_validation": ev.final_val, "final_validation_cut": ev.final_cut,
            "final_validation_error": ev.final_error,
            **tr.checkpointer.init_record}


def _fit_tick(tr: "Trainer", bar) -> None:
    """train.fit_to_time at one of the budget's marks: read the clock, plan when it has a timing.

    Every process plans the same end: the slowest decides.
    """
    tr.runtime.synchronize()  # three times per run: the clock must see the queued steps
    s_step = tr.budget.tick(tr.step, time.time())
    if s_step is None:
        return
    n = tr.runtime.min_int(tr.budget.steps_that_fit(tr.step, s_step, time.time() - tr._t_start))
    lr_before, warmup_before = tr.schedule.lr_at(tr.step), tr.schedule.warmup_iters
    floor = tr.step > warmup_before and tr.schedule.at_floor(tr.step)  # a warmup starts low
    msg = tr.budget.propose(tr.step, n, s_step, at_floor=floor)
    if msg is None:
        return
    tr.log(msg)
    tr.schedule.replanned(tr.step, lr_before, warmup_before)
    if bar is not None:
        bar.total = tr.schedule.max_iters
        bar.refresh()
    if tr.is_main:  # a resume continues this plan
        tr._write_config()


def _evaluate_now(tr: "Trainer") -> bool:
    """One evaluation of the loop: its record, line, callbacks and checkpoint; nothing when a signal ended it
    (:meth:`~depthlab.training.evaluator.Evaluator.evaluate`: the loop then checkpoints and stops, as between two
    steps). Several processes finish it: they agree on the signal afterwards. False when a signal ended it."""
    res = tr.evaluate()
    if res is None:
        tr.evaluator.cut_at = tr.step  # the checkpoint says so: a resume evaluates this step again
        return False
    tr.evaluator.cut_at = None  # evaluated: a later resume from this step's checkpoint does not evaluate it again
    rec, is_best = tr.evaluator.judge(res, tr.step, tr.tokens_seen, tr._wall())
    tr.metrics.log("eval", rec, {"train/loss_eval": rec["train_loss"], "val/loss": rec["val_loss"],
                                 "val/bpc": rec["val_bpc"]})
    tr.log(Evaluator.describe(rec))
    for cb in tr.callbacks:
        cb.on_eval(tr, tr.last_info, rec)
    tr.checkpointer.save_agreed(tr, is_best=is_best, val_loss=rec["val_loss"])
    return True


def _load_resume(tr: "Trainer", point: ResumePoint) -> None:
    """The checkpoint of ``point`` into the trainer's parts (step, evaluations, wall time, schedule), and whether
    anything is left to train (``nothing_to_train``): a resume that trains nothing says only that, no "resuming
    from" and no schedule it will not follow."""
    st = tr.checkpointer.load(point.entry, tr)
    tr.stepper.load_state_dict(st)
    tr.evaluator.load_state_dict(st, tr.run_dir, tr.step)
    tr.wall_before = _wall_before(tr.run_dir, tr.step, float(st["wall_time_s"]))
    tr.nothing_to_train = _nothing_left(tr)
    tr.checkpointer.settle_writable(not tr.nothing_to_train)  # a read-only run: only if it trains (or evaluates)
    tr.schedule.resume(tr.step, st.get("lr_anchor"), point.schedule_train, point.plan,
                       _quiet if tr.nothing_to_train else tr.log, muon=point.optimizer == "muon")
    if not tr.nothing_to_train:
        tr.checkpointer.announce_resume(tr)


def _wall_before(run_dir: Path, step: int, checkpointed: float) -> float:
    """Seconds of the sessions before a resume from the checkpoint of ``step``: the checkpoint's clock, or where the
    session that ended at ``step`` wrote summary.json, its ``wall_time_s`` (its final validation and end-of-run
    analytics came after the checkpoint, and a resume's total left them out)."""
    summary = rundir.RunDir(run_dir).summary or {}
    wall = summary.get("wall_time_s")
    if summary.get("final_step") == step and isinstance(wall, (int, float)) and math.isfinite(wall):
        return max(checkpointed, float(wall))
    return checkpointed


def _nothing_left(tr: "Trainer") -> Optional[str]:
    """The line of a resume with no step left to train, or None: its run is at its last step (``max_iters`` or the
    plan's end), or a stop rule (a target reached, patience lost) ended it already. Such a resume changes nothing.
    None too, to finish the run, where a signal cut its last evaluation or final validation, or its end never ran
    (no readable summary.json at its last step)."""
    if tr.step > tr.schedule.max_iters:  # asked to end before the run's step: not even a cut evaluation is redone
        return nothing_to_train(tr.step, tr.cfg.train.max_iters, tr.budget.plan)
    if tr.evaluator.cut_at == tr.step:  # a signal cut its last evaluation: the resume evaluates it, then ends
        return None
    if final_validation_cut(tr.run_dir, tr.step) and tr.cfg.train.final_validation:
        return None  # a signal cut its final validation: the resume runs it and writes summary.json again
    ended = (nothing_to_train(tr.step, tr.cfg.train.max_iters, tr.budget.plan) if tr.step >= tr.schedule.max_iters
             else tr.stop.ended_before_resume(tr.step, tr.evaluator))
    if ended and not isinstance(rundir.read_json(tr.run_dir / rundir.SUMMARY), dict):
        # a checkpoint of the run's last step and no (readable) summary.json: the process ended between them (killed,
        # a power cut) and the run's end never ran; the resume runs it (a plain one said "nothing to train")
        tr.log(f"the run ended at step {tr.step} but has no readable {rundir.SUMMARY}: its end did not run (the "
               "process stopped after the last checkpoint); this resume trains nothing, runs the end (final "
               "validation, loss by position, diagnosis) and writes it")
        return None
    return ended


def final_validation_cut(run_dir: Path, step: int) -> bool:
    """Whether ``run_dir``'s summary.json says a signal cut the final validation of the run ending at ``step``
    (``final_validation_cut``): such a run resumes to run it (and a sweep resumes it), though nothing is left to
    train."""
    summary = rundir.read_json(Path(run_dir) / rundir.SUMMARY)
    return isinstance(summary, dict) and summary.get("final_validation_cut") is True \
        and summary.get("final_step") == step


def _quiet(*_args, **_kw) -> None:
    """A console that prints nothing."""


def _drop_old(tr: "Trainer") -> bool:
    """Delete the run ``--overwrite`` set aside (:func:`~depthlab.rundir.drop_replaced`), once; True."""
    drop_replaced(tr._replaced)
    tr._replaced = None
    return True


def _undo_start(tr: "Trainer") -> KeyboardInterrupt:
    """The stop (Ctrl-C, or :class:`~depthlab.errors.Terminated`) of a run before its first step trained, as one
    while it started: what the start wrote is removed and a run ``--overwrite`` set aside is put back (a stop in a
    long evaluation 0 had deleted it for a step-0 checkpoint)."""
    tr.checkpointer.wait_agreed()  # a best.safetensors evaluation 0 wrote in the background: done before removal
    return _undone(tr, Terminated() if tr.stop.signum == signal.SIGTERM else KeyboardInterrupt())


def _undone(tr: "Trainer", e: BaseException) -> BaseException:
    """``e``, ending a run before its first step trained, after the start is undone: a new run's folders removed (a
    run ``--overwrite`` set aside put back; a resumed run keeps everything), and a stop (Ctrl-C, SIGTERM) with no
    words of its own given the line saying what was undone (said once, by whoever catches it)."""
    removed = _config_put_back(tr) if tr.resumed else tr._remove_new_dirs()
    if removed and isinstance(e, KeyboardInterrupt) and not e.args:
        e.args = (before_the_first_step(e, removed),)
    return e


def _config_put_back(tr: "Trainer") -> Optional[str]:
    """A resume stopped before its first step: config.json as it was before it (its new settings trained nothing,
    and the next plain --resume took them up as if asked), in words; None when there is nothing to put back."""
    before = getattr(tr, "_config_before", None)
    if before is None:
        return None
    rundir.atomic_write(tr.run_dir / rundir.CONFIG, before)
    return (f"{tr.run_dir / rundir.CONFIG} is as it was before this resume; to resume: depthlab train --resume "
            f"{shlex.quote(str(tr.run_dir))}")


def _fit_once(metrics: MetricsWriter, run_dir: Path, fit_called: bool) -> None:
    """Refuse (DepthlabError) a second :meth:`Trainer.fit`, or one after :meth:`Trainer.close`: the run's records
    are closed (it failed inside them with an AttributeError, after saying the run's start again)."""
    if metrics.closed or fit_called:  # a run with nothing to train never opened its records: fit_called tells
        done = (f"has trained {run_dir} already (fit() runs once)" if fit_called else
                f"of {run_dir} was closed (close()) before it trained, and trains no more")
        raise DepthlabError(f"this Trainer {done}; to train on, make a new "
                            f"Trainer(RunConfig.from_run({str(run_dir)!r})) (the run's own config, set to resume it, "
                            "as depthlab train --resume reads it; raise its train.max_iters to go further)")


def put_back(run_dir: Path, replaced: Optional[Path]) -> Optional[str]:
    """Put back the run ``--overwrite`` set aside in ``replaced`` (:func:`~depthlab.rundir.restore_replaced`; the new
    run's files are deleted): what was done, in words, or None when nothing was set aside."""
    if replaced is None:
        return None
    restore_replaced(run_dir, replaced)
    return f"the run --overwrite was replacing is back in {run_dir}"


def config_record(cfg: RunConfig) -> dict:
    """config.json's data/model/train sections: ``cfg`` as asked, with ``data.path`` absolute (the run's commands
    then find its corpus from any folder)."""
    d = cfg.to_dict()
    d["model"] = model_record(d["model"])  # a model.source run: only the fields that describe the user's model
    if d["data"].get("path"):
        d["data"]["path"] = str(corpus_file(d["data"]["path"]))
    return d


def done_line(summary: dict, final: Optional[dict], run_dir: Path, no_se: Optional[str] = None) -> str:
    """The run's last console line: best val (nats/token) ± its sampling error over where the evaluation windows
    fell (README, "Measured speed and quality"; ``no_se``: why there is none, when known), bits/char, the
    whole-split loss of ``final`` (the final validation, or None), steps and seconds."""
    part = final is not None and final.get("tokens") is not None and final.get("tokens") != final.get("of_tokens")
    what = f"{final['tokens']:,} of the val split's {final['of_tokens']:,} tokens" if part else "whole val split"
    whole = "" if final is None else f" ({what} {final['val_loss']:.4f})"
    se = summary.get("best_val_loss_se")
    err = plus_minus(se)
    why = "" if se is not None or not no_se else f"no ±: {no_se}; "
    return (f"done: best val {summary['best_val_loss']:.4f}{err} nats ({why}{summary['best_val_bpc']:.3f} bits/char) "
            f"at step {summary['best_val_step']}{whole}, {counted(summary['final_step'], 'step')} in "
            f"{summary['wall_time_s']:.1f}s -> {run_dir}{ckpt.kept_clause(run_dir, summary['best_val_loss'])}")


def unused_vocab_size(cfg: RunConfig, vocab_size: int) -> list[str]:
    """The warning of a config whose ``model.vocab_size`` (a config file's or the Python API's: the flag is refused)
    is not the corpus's ``vocab_size`` (tokens), which the run uses; [] when it is, or unset (0)."""
    if cfg.model.vocab_size in (0, vocab_size):
        return []
    return [f"warning: model.vocab_size {cfg.model.vocab_size} is not used: the corpus's tokenizer sets it, "
            f"{vocab_size} here (for BPE choose data.vocab_size)"]


def banner(run: Trainer, tokens_per_step: int) -> list[str]:
    """The lines a run prints before its first step: schedule warnings, size and settings (with the
    measured ``auto`` line on a CPU), and the global batch."""
    t, m, rt = run.cfg.train, run.cfg.model, run.runtime
    r = rt.resolved()
    omp = env_threads_warning(t, r["threads"], rt.tuning.source if rt.tuning is not None else None)
    continued = run.resumed and run.schedule.anchor is not None  # the rate goes on from the checkpoint's
    lines = [f"warning: {w}" for w in schedule_warnings(t, run.budget.may_shorten, continued) + ([omp] if omp else [])]
    shape = m.source if m.source else f"{m.n_layer} x {wiring_label(dataclasses.asdict(m))}"
    wpe = getattr(getattr(run.raw_model, "transformer", {}), "wpe", None) if run.port.native else None
    table = f" (and {wpe.weight.numel():,} of the position table, left out as nanoGPT counts)" if wpe else ""
    lines.append(f"run {run.run_dir}: {run.port.num_params() / 1e6:.3f} M parameters{table}, "
                 f"vocab {m.vocab_size}, {shape}, device {r['device']}, {r['dtype']}, "
                 f"{counted(r['threads'], 'thread')}, {tokens_per_step} tokens/step")
    if rt.tuning is not None and run.device.type == "cpu":
        given = [f"train.{f}" for f, auto in (("threads", 0), ("dtype", "auto"), ("attention", "auto"))
                 if getattr(t, f) != auto]
        n, knob = rt.given_threads()
        given += [f"OMP_NUM_THREADS={n}"] if knob == "OMP_NUM_THREADS" else []
        lines.append(rt.tuning.line(given))
    lines.append(f"global batch = micro-batch {t.batch_size} x accumulation {rt.accum} x processes "
                 f"{run.world_size} = {t.batch_size * rt.accum * run.world_size} sequences of {m.block_size} tokens")
    if run.eval_batch != t.batch_size * t.grad_accum:  # a resume keeps the windows its best loss was read on
        lines.append(f"evaluation: {t.eval_iters} batches of {run.eval_batch} windows per split, as the run's "
                     "earlier sessions evaluated (config.json resolved.eval_batch), in micro-batches of "
                     f"{t.batch_size}")
    return lines


def train(cfg: RunConfig, callbacks: Iterable[Callback] = (), overwrite: bool = False, log=console) -> Path:
    """Train a GPT as configured with exactly ``callbacks`` and return its run directory.

    :func:`depthlab.train` (= :func:`depthlab.analytics.train`) adds the default analytics
    observers; this bare form runs none.

    Args:
        cfg: run config (data / model / train sections); it is not changed.
        callbacks: read-only observers (see :class:`~depthlab.callbacks.Callback`).
        overwrite: replace an existing run directory of the same name.
        log: ``callable(str)`` for console lines.

    Returns:
        The run directory (``config.json``, ``vocab.json``, ``metrics.jsonl``, ``summary.json``,
        ``checkpoints/``).

    Raises:
        DepthlabError: bad input; NonFiniteError (also when the final validation is not finite: the run is
            kept); Interrupted.
    """
    with api_errors():  # the command line builds its own Trainer: only a Python caller gets here
        return fit_checked(Trainer(cfg, callbacks=callbacks, overwrite=overwrite, log=log))


def fit_checked(run: Trainer) -> Path:
    """``run.fit()``, then :class:`NonFiniteError` when the final validation was not finite (the run is kept)."""
    run_dir = run.fit()
    ev = run.evaluator
    err = nonfinite_final_error(ev.final_val, ev.best_val, run.cfg.model.source, run_dir, ev.final_nonfinite)
    if err is not None:
        raise err
    return run_dir

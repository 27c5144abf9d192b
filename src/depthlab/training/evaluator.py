"""Periodic evaluation on fixed windows, the best loss so far, target and patience, and the final validation."""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from .. import checkpoint as ckpt
from .. import evaluation
from ..data import get_batch, windows_at
from ..errors import DepthlabError, NonFiniteError
from ..rundir import RunDir
from ..units import LN2, agree, finite_or_none
from ..usermodel import check_command

__all__ = ["Evaluator", "eval_batch", "eval_batches", "micro_batches", "val_perplexity"]


def eval_batch(train, run_config: Optional[dict] = None) -> int:
    """Windows in one evaluation batch of a run: the global batch of its first session, fixed for its life.

    The global batch, ``train.batch_size x train.grad_accum`` sequences, is what a training step reads, the same
    for one process and for torchrun's processes sharing its micro-batches, so a run's evaluations read the same
    windows however many processes train it; recorded as config.json's ``resolved.eval_batch`` and kept by every
    resume (a resume that changes ``batch_size`` would otherwise compare its losses, and the best one, on other
    windows). Runs from before the record read ``batch_size x processes`` windows a batch (``grad_accum``
    ignored), and are measured and resumed so.

    Args:
        train: the :class:`~depthlab.config.TrainConfig` of this session.
        run_config: the run's config.json (a resume's, a view's), or None for a new run.

    Returns:
        The windows per evaluation batch, >= 1.

    Raises:
        DepthlabError: a recorded ``resolved.eval_batch`` that is not a whole number >= 1 (a hand edit: -3 read
            every loss as 0, which became the run's best).
    """
    resolved = (run_config or {}).get("resolved") if isinstance(run_config, dict) else None
    if isinstance(resolved, dict) and resolved.get("eval_batch") is not None:
        v = resolved["eval_batch"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise DepthlabError(f"config.json's resolved.eval_batch is {v!r}, not the whole number >= 1 depthlab "
                                "writes (edited by hand?): put back the windows per evaluation batch the run started "
                                "with (its first session's train.batch_size x train.grad_accum)")
        return v
    if isinstance(resolved, dict):  # a run from before the record: as it evaluated
        ran = (run_config.get("train") or {}).get("batch_size") or train.batch_size
        return int(ran) * int(resolved.get("processes") or 1)
    return train.batch_size * train.grad_accum


def micro_batches(x: torch.Tensor, y: torch.Tensor, size: Optional[int]):
    """``(x, y)`` (B, T) in row slices of at most ``size`` windows (None or 0: the whole batch), in order: an
    evaluation batch of ``batch_size x grad_accum`` windows read in the memory one training micro-batch needs.

    Yields:
        ``(x[j:j + size], y[j:j + size])``, each (<= size, T).
    """
    step = size or len(x)
    for j in range(0, len(x), step):
        yield x[j:j + step], y[j:j + step]


def eval_batches(data: np.ndarray, block_size: int, batch_size: int, seed: int, split: str, n_batches: int,
                 device: Optional[torch.device] = None, windows: str = "spaced", of_batches: Optional[int] = None):
    """The fixed windows of every evaluation (the one definition; ``depthlab layers`` / ``context`` read them too).

    ``spaced`` (``train.eval_windows``' default): the ``of_batches x batch_size`` windows start evenly over the
    split's M = N - block_size possible starts, window j at floor((j + 1/2) M / n), and window j goes to batch
    j mod ``of_batches``: every batch is itself an evenly spaced sample of the whole split (Mahalanobis's
    interpenetrating subsamples), so a prefix of the batches still spans it and the batch means are replicate
    estimates (:func:`window_se`). No seed: every run of a split with the same ``block_size``, batch and
    ``eval_iters`` reads the same windows, so two runs' evaluations are paired. A split shorter than the
    windows repeats starts, as a random draw would.

    ``random`` (runs before the field): each batch drawn by a generator seeded with ``(seed, 1, 0)`` for
    ``train`` and ``(seed, 1, 1)`` for ``val``; the training RNG is untouched.

    Args:
        data: the split's token ids (N,), N > block_size. block_size: T. batch_size: B, the global batch
            (:func:`eval_batch`). seed: ``train.seed`` (``random`` only). split: ``train`` or ``val``.
        n_batches: how many batches to yield. device: where to put them. windows: ``spaced`` or ``random``.
        of_batches: the evaluation's batches (``train.eval_iters``) the windows are laid out for; None =
            ``n_batches``. Fewer ``n_batches`` yields a prefix of the same sequence, either way.

    Yields:
        ``(x, y)``, each (B, T) int64; y is x shifted by one token.
    """
    if windows == "random":
        rng = np.random.default_rng([seed, 1, 0 if split == "train" else 1])
        for _ in range(n_batches):
            yield get_batch(data, block_size, batch_size, rng, device)
        return
    k = max(of_batches or n_batches, n_batches)
    n, starts = k * batch_size, len(data) - block_size
    ix = ((np.arange(n, dtype=np.float64) + 0.5) * starts / n).astype(np.int64)  # evenly spaced, in [0, starts)
    for b in range(n_batches):
        yield windows_at(data, ix[b::k], block_size, device)


#: The fewest batch means a standard error is computed from. From two (one degree of freedom) the estimate is
#: below a quarter of the true error in 1 evaluation of 5 (P(chi2_1 < 1/16) = 0.20; a user's eval_iters 2 run
#: printed +- 0.006 of a mean 0.085 off the whole split); from four, in 1 of 50 (P(chi2_3 < 3/16) = 0.02).
MIN_SE_BATCHES = 4


def window_se(batch_losses: torch.Tensor) -> Optional[float]:
    """The standard error (nats/token) of an evaluation's mean loss over where its windows fell: the standard
    deviation of the ``eval_iters`` batch means / sqrt(eval_iters), or None with fewer than
    :data:`MIN_SE_BATCHES` batches or a non-finite loss.

    ``random`` windows start at random places of the split, independently, so the batch means are independent
    draws and this is the usual error of a mean. ``spaced`` windows: each batch is an evenly spaced sample
    of the whole split with its own offset, and the spread of such replicate means estimates the error of
    their mean (interpenetrating subsamples; Wolter, *Introduction to Variance Estimation*, 2nd ed. 2007,
    ch. 2), on the high side for one evenly spaced sample, whose error is smaller than a random one's. A
    paired comparison of two evaluations on the same windows is far tighter either way. Measured: one run's
    best weights on 20 draws of the default 20 x 16 random windows of 128 characters of Tiny Shakespeare read
    1.5160 +- 0.0180 (sd) nats, 1.4801 to 1.5478; the whole split 1.5133.
    """
    n = batch_losses.numel()
    if n < MIN_SE_BATCHES or not bool(torch.isfinite(batch_losses).all()):
        return None
    return float(batch_losses.double().std(unbiased=True)) / math.sqrt(n)


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


class Evaluator:
    """Evaluation of one run and what it decides: the best weights, a reached target, lost patience.

    Args:
        cfg: the run's config (read only). corpus: its :class:`~depthlab.data.Corpus`.
        runtime: its :class:`~depthlab.training.runtime.Runtime`. port: its model port.

    Attributes:
        best_val, best_step: the lowest val loss (nats/token) and its step (inf, -1 before any).
        best_se: that evaluation's sampling error over where its windows fell (:func:`window_se`), or None.
        evals_without_improvement: evaluations in a row that did not lower ``best_val`` by ``min_delta``.
        patience_ref: ``(val_loss, step)`` of the evaluation that last did (the count runs from it), or None.
        last_eval: the latest evaluation record ({} before any).
        target_reached: ``(step, elapsed_s)`` of the first evaluation at or under ``target_val_loss``; on
            resume read from the run's evaluations with this session's target (an earlier session's too).
        patience_exhausted: ``patience`` evaluations passed without improvement (agreed by all processes);
            on resume the count carries over and is compared with this session's ``patience``.
        session_evals: evaluations judged in this session (0 at a resume: a rule met then was met before it).
        final_val: ``train.final_validation``'s result for the summary, or None.
    """

    def __init__(self, cfg, corpus, runtime, port, batch: Optional[int] = None):
        self.cfg, self.corpus, self.runtime, self.port = cfg, corpus, runtime, port
        self.batch = batch or eval_batch(cfg.train)  # windows per evaluation batch (resolved.eval_batch)
        self.best_val = float("inf")
        self.best_step = -1
        self.best_se: Optional[float] = None
        self.evals_without_improvement = 0
        self.patience_ref: Optional[tuple[float, int]] = None
        self.last_eval: dict = {}
        self.target_reached: Optional[tuple[int, float]] = None
        self.patience_exhausted = False
        self.session_evals = 0
        self.cut_at: Optional[int] = None  # the step whose evaluation a signal ended (evaluate's stop)
        self.final_cut = False  # a signal ended the final validation: summary.json says so, a resume runs it
        self.final_error: Optional[str] = None  # the model's forward failed on the final validation's batches
        self.final_val: Optional[dict] = None
        self.final_nonfinite = False  # agreed by every process: the main one's final validation was not finite
        self._val_chars_per_token: Optional[float] = None
        self._no_se: Optional[str] = None  # no_se_reason(), once known ("" = the batches can differ)
        self.first_batch_s: Optional[float] = None  # the latest evaluation's first forward batch, seconds
        self.batches_run = 0  # and its forward batches

    @property
    def best(self) -> tuple[int, float]:
        """``(best_step, best_val)``: the step of the lowest val loss and that loss in nats (-1, inf before any)."""
        return self.best_step, self.best_val

    def state_dict(self) -> dict:
        """``best_val_loss`` (nats/token), ``best_step``, ``evals_without_improvement`` for the resume state, and
        ``eval_cut_at``: the step whose evaluation a signal ended (:meth:`evaluate`), which a resume runs again."""
        return {"best_val_loss": self.best_val, "best_step": self.best_step,
                "evals_without_improvement": self.evals_without_improvement, "eval_cut_at": self.cut_at,
                "eval_batch": self.batch}

    def load_state_dict(self, st: dict, run_dir: Path, step: int) -> None:
        """Restore from a checkpoint's state at ``step``; the last evaluation is read from the run's records.

        Raises:
            DepthlabError: the checkpoint's evaluations read another batch of windows than config.json's
                ``resolved.eval_batch`` (edited by hand): its best loss would be compared with other windows' losses.
        """
        ran = st.get("eval_batch")  # None in checkpoints of before it was kept
        if ran is not None and int(ran) != self.batch:
            raise DepthlabError(f"config.json's resolved.eval_batch is {self.batch}, but the checkpoint of step {step} "
                                f"was evaluated with {int(ran)} windows a batch (edited by hand?): its best val loss "
                                f"would be compared with losses of other windows; put back {int(ran)}")
        self.best_val = float(st["best_val_loss"])
        self.best_step = int(st["best_step"])
        self.cut_at = st.get("eval_cut_at")  # None in checkpoints of before it was kept
        self.evals_without_improvement = int(st.get("evals_without_improvement", 0))
        evals = [r for r in RunDir(run_dir).evals if r["step"] <= step]
        self.last_eval = evals[-1] if evals else {}
        k = self.evals_without_improvement  # the evaluation before the last k reset the count
        ref = evals[-k - 1] if k < len(evals) else {}
        v = finite_or_none(ref.get("val_loss"))
        self.patience_ref = (float(v), int(ref["step"])) if v is not None else None
        self.best_se = next((finite_or_none(r.get("val_loss_se")) for r in evals if r["step"] == self.best_step), None)
        # the stop rules as this session states them, applied to what the run did before it: a target
        # already reached (or patience already lost) stops the run at once, as one uninterrupted run
        # would have stopped there, and the summary keeps the step it was first reached at
        t = self.cfg.train
        losses = [(r, finite_or_none(r.get("val_loss"))) for r in evals]
        hit = next((r for r, v in losses if t.target_val_loss > 0 and v is not None and v <= t.target_val_loss), None)
        agreed = self.runtime.agree(target=hit is not None,
                                    patience=0 < t.patience <= self.evals_without_improvement)
        if agreed["target"] and hit is not None:
            self.target_reached = (int(hit["step"]), float(hit.get("elapsed_s") or 0.0))
        self.patience_exhausted = agreed["patience"]

    @property
    def final_batches(self) -> int:
        """Forward batches of the final validation (0 when it is off or the val split is too short)."""
        t = self.cfg.train
        if not t.final_validation or len(self.corpus.val) < 2:
            return 0
        return evaluation.forward_batches(len(self.corpus.val), self.cfg.model.block_size, t.batch_size)

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, stop: Optional[Callable[[], bool]] = None) -> Optional[dict]:
        """Mean loss (nats/token) over ``eval_iters`` fixed batches of each split, in eval mode.

        The eval batches are :func:`eval_batches` of ``train.eval_windows``: every evaluation sees the same
        windows and the training RNG is untouched. ``stop()`` -> True between two batches (a Ctrl-C or SIGTERM
        the trainer caught) ends it there: a large model's evaluation on a CPU takes minutes, and a signal waited
        for all of it (seen: 10 minutes, a SIGTERM and two Ctrl-C unanswered).

        Returns:
            ``{"train": float, "val": float, "val_se": float or None}`` in nats per token: ``val_se`` is the
            sampling error of the val mean over where the windows fell (:func:`window_se`); None when ``stop``
            ended it.
        """
        t, rt = self.cfg.train, self.runtime
        was_training = model.training
        model.eval()
        out = {}
        t0, self.first_batch_s, self.batches_run = time.perf_counter(), None, 0
        for split, data in (("train", self.corpus.train), ("val", self.corpus.val)):
            # kept on the device and read once per split: a read per batch would make the host wait for
            # each batch's kernels before it queues the next batch's (on CUDA)
            losses = torch.zeros(t.eval_iters, device=rt.device)
            for i, (x, y) in enumerate(self._batches(split, data, rt.device)):
                for xm, ym in micro_batches(x, y, t.batch_size):  # the memory training needs
                    if stop is not None and stop():
                        model.train(was_training)
                        return None
                    with rt.ctx:
                        loss = self.port.loss(model, xm, ym)
                    losses[i] += loss.detach().float() * (len(xm) / len(x))
                    self.batches_run += 1
                    if self.first_batch_s is None:  # a first forward pays one-time costs: fit_to_time leaves it out
                        self.first_batch_s = time.perf_counter() - t0
            losses = losses.cpu()
            out[split] = losses.mean().item()
            if split == "val":  # batches of the same windows spread 0 by construction: that is no error bar
                out["val_se"] = window_se(losses) if self.no_se_reason() is None else None
        model.train(was_training)
        return out

    def _batches(self, split: str, data: np.ndarray, device: Optional[torch.device] = None):
        """Every evaluation's batches of ``split`` (:func:`eval_batches` of :attr:`batch` windows each)."""
        t = self.cfg.train
        return eval_batches(data, self.cfg.model.block_size, self.batch, t.seed, split, t.eval_iters, device,
                            t.eval_windows)

    def bpc(self, val_loss: float) -> float:
        """Bits per character of a val loss (mean nats/token over :meth:`evaluate`'s fixed val windows).

        total nats / characters of the evaluated text / ln 2 = loss / (characters per target token
        of those windows) / ln 2; a char run has one character per token, so loss / ln 2.
        """
        if self._val_chars_per_token is None:
            chars, tokens = self.corpus.tokenizer.token_chars, 0
            total = 0.0
            for _, y in self._batches("val", self.corpus.val):
                total += float(chars[y.numpy()].sum())
                tokens += y.numel()
            self._val_chars_per_token = total / tokens if total > 0 else 1.0
        return val_loss / self._val_chars_per_token / LN2

    def no_se_reason(self) -> Optional[str]:
        """Why the val loss has no sampling error (the done line's ±), or None when its batches can differ: fewer
        than :data:`MIN_SE_BATCHES` batches (``train.eval_iters``), or batches that all hold the same windows (a val
        split with room for only a few): their means agree by construction, and that ± 0 would be no error bar."""
        if self._no_se is None:
            n = self.cfg.train.eval_iters
            few = (f"{n} evaluation {agree(n, 'batch', 'batches')} (train.eval_iters {n}), and its error needs "
                   f"the spread of {MIN_SE_BATCHES} or more")
            self._no_se = few if n < MIN_SE_BATCHES else \
                "" if self._val_batches_differ() else "its evaluation batches are all the same windows"
        return self._no_se or None

    def _val_batches_differ(self) -> bool:
        """Whether two of :meth:`evaluate`'s val batches hold different windows (every evaluation has the same)."""
        first = None
        for x, y in self._batches("val", self.corpus.val):
            rows = sorted(w.tobytes() for w in torch.cat([x, y[:, -1:]], 1).numpy())  # a window: x and y's last
            first = rows if first is None else first
            if rows != first:
                return True
        return False

    def judge(self, losses: dict, step: int, tokens_seen: int, elapsed_s: float) -> tuple[dict, bool]:
        """Record one evaluation's ``losses`` at ``step``: best, patience and target (agreed by all processes).

        Returns:
            ``(record, is_best)``: the ``kind: eval`` metrics record, and whether it is the new best.
        """
        t = self.cfg.train
        tl, vl = losses["train"], losses["val"]
        rec = {"step": step, "train_loss": tl, "val_loss": vl, "val_loss_se": losses.get("val_se"),
               "val_bpc": self.bpc(vl), "val_ppl": val_perplexity(vl), "tokens_seen": tokens_seen,
               "elapsed_s": round(elapsed_s, 3)}
        improved = math.isfinite(vl) and vl < self.best_val - t.min_delta
        self.evals_without_improvement = 0 if improved else self.evals_without_improvement + 1
        self.patience_ref = (vl, step) if improved else self.patience_ref
        is_best = math.isfinite(vl) and vl < self.best_val
        if is_best:
            self.best_val, self.best_step, self.best_se = vl, step, losses.get("val_se")
        self.last_eval = rec
        self.session_evals += 1
        agreed = self.runtime.agree(target=t.target_val_loss > 0 and vl <= t.target_val_loss,
                                    patience=0 < t.patience <= self.evals_without_improvement)
        self.patience_exhausted = agreed["patience"]
        if agreed["target"] and self.target_reached is None:
            self.target_reached = (step, rec["elapsed_s"])
        return rec, is_best

    @staticmethod
    def describe(rec: dict) -> str:
        """The console line of one evaluation record."""
        p = rec["val_ppl"]
        vl = rec["val_loss"]
        if p is None:  # not written: a NaN loss has no perplexity (it was printed "inf"), an infinite one is inf
            ppl = "nan" if vl != vl else "inf"
        else:
            ppl = f"{p:.2f}" if p < 1e6 else f"{p:.3g}"  # 3.5e+18, not 19 digits
        return (f"eval step {rec['step']}: train {rec['train_loss']:.4f} val {rec['val_loss']:.4f} nats/token "
                f"({rec['val_bpc']:.3f} bits/char, ppl {ppl})")

    def final_validation(self, raw_model: torch.nn.Module, step: int, run_dir: Path, log, stop=None) -> None:
        """train.final_validation: the best weights on the whole val split, logged and kept for the summary.

        Only the main process evaluates; every process calls this and learns from it whether the loss was
        finite (``final_nonfinite``), so that under torchrun every process exits 3, not the main one alone.
        The weights are the model's own when the last evaluation was the best, else the verified best
        checkpoint's. ``stop()`` -> True (a Ctrl-C or SIGTERM the trainer caught) skips the rest of it.
        """
        self._final_validation(raw_model, step, run_dir, log, stop)
        bad = self.final_val is not None and not math.isfinite(self.final_val["val_loss"])
        self.final_nonfinite = self.runtime.agree(final_nonfinite=bad)["final_nonfinite"]

    def _final_validation(self, raw_model: torch.nn.Module, step: int, run_dir: Path, log, stop=None) -> None:
        if not (self.runtime.is_main and self.final_batches and math.isfinite(self.best_val)):
            return
        t0 = time.time()
        model = raw_model
        if self.best_step != step:
            model = copy.deepcopy(raw_model)
            path = ckpt.verified_best(run_dir)
            ckpt.load_into(model, ckpt.load_weights_file(path)[0], path)
        block = self.cfg.model.block_size
        try:
            res = evaluation.split_loss(model, self.corpus.val, block, self.cfg.train.batch_size,
                                        self.corpus.tokenizer.token_chars, self.runtime.device, self.runtime.ctx,
                                        loss_fn=self.port.loss, stop=stop)
        except evaluation.Stopped:  # a large val split takes minutes: a Ctrl-C there is heard, not queued
            self.final_cut = True
            log(f"final validation stopped by a signal after {time.time() - t0:.1f}s: skipped (summary.json's "
                f"final_validation is null); the training itself ended at step {step}, its checkpoints written")
            return
        except DepthlabError as e:
            # a model of the user's that takes only its training shape (B and T written into its code)
            # fails on the split's last, smaller batch: the run it trained is kept and finished all the same
            self.final_error = str(e)  # summary.json keeps it: diagnose's fixed_shape reads it
            log(f"final validation skipped: {e} (the whole val split is read in batches that may hold fewer "
                "or shorter windows than training's; --train.final_validation false skips this step)")
            return
        self.final_val = {"step": self.best_step, "val_loss": res.loss, "val_bpc": res.bpc,
                          "tokens": res.tokens, "of_tokens": res.of_tokens, "seconds": round(time.time() - t0, 3)}
        log(f"final validation, best weights (step {self.best_step}): "
            f"{evaluation.describe(res, block)}, {time.time() - t0:.1f}s")


def nonfinite_final_error(final: Optional[dict], best_val: float, source: Optional[str],
                          run_dir: Path, agreed: bool = False) -> Optional[NonFiniteError]:
    """The error a run ends with when its final validation is not finite (exit 3, as a non-finite training
    loss with train.on_nonfinite stop), or None: the same weights' periodic evaluation was finite, so the
    forward gives NaN/inf only for some of the whole split's inputs (its windows and batches can be shorter).
    ``agreed``: :attr:`Evaluator.final_nonfinite`, the only news of it a process that did not evaluate has."""
    if final is None and agreed:  # under torchrun: process 0 evaluated and says the whole of it
        return NonFiniteError(f"the final validation loss is not finite (process 0 evaluated it and names the "
                              f"cause); the run and its checkpoints are kept in {run_dir}")
    if final is None or math.isfinite(final["val_loss"]):
        return None
    where = (f"{check_command(source, run_dir)} tests the forward at many lengths and names where the first "
             "NaN/inf is made"
             if source else "look for an operation that makes NaN/inf only for some lengths or positions")
    return NonFiniteError(
        f"the final validation loss is not finite ({final['val_loss']} nats over the whole val split, best weights "
        f"of step {final['step']}), though their periodic evaluation gave {best_val:.4f}: the forward gives NaN/inf "
        f"for some inputs (the whole split is read in windows and batches that can be shorter than training's); "
        f"{where}; the run and its checkpoints are kept in {run_dir}")

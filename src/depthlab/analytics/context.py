"""Loss by position: does the model use its context?

The val loss of a trained model, split by the position t = 0 .. T-1 of the predicting token inside its
window, against the corpus baselines (:mod:`depthlab.analytics.baselines`). Position 0 sees one
character, so a causal model there is a one-character predictor and cannot go below the one-character
floor (the best such predictor of the val split, at or below the bigram baseline, which is fitted on
the train split) except by sampling noise; later positions well below the bigram line use context
before the current character. TransformerLens plots the same curve ("loss by position") on a
pretrained model; here it sits next to the baselines of the corpus the run trained on.

``context gain`` = loss at position 0 minus the mean loss over the last quarter of the positions
(``max(1, T // 4)`` of them), in nats; its standard error is that of the per-window differences.

Every number is measured on the run's own fixed evaluation windows (:func:`~depthlab.training.evaluator.
eval_batches`, the val windows each evaluation of the run read), a prefix of them capped at
``max_tokens`` target tokens so the command stays fast on a CPU; the output says how many.

The same curve of the final weights is recorded at the end of training (:class:`ContextCallback`, a
``kind: event`` record with ``event: context``) so ``depthlab diagnose`` judges it from the records
(:mod:`depthlab.analytics.rules.context`) without loading the model.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from .. import checkpoint as ckpt
from .. import resume_config, usermodel
from ..callbacks import Callback, RunView
from ..errors import DepthlabError
from ..units import counted, finite_or_none, plus_minus
from ..rundir import BASELINES, CHECKPOINTS, CONFIG, TOKENIZER, VOCAB, RunDir, read_json, read_metrics
from ..training.evaluator import eval_batch, eval_batches, micro_batches
from ..model import require_float32_default
from ..usermodel import forward_fault, full_logits, make_model
from .rules.context import CONTEXT_EVENT, MORE_WINDOWS, UNDECIDED, UNUSED, context_verdict, context_words
from .rules.evidence import unit_of
from .baselines import corpus_baselines, one_char_floor_nats
from .rules.evidence import Evidence, Thresholds

__all__ = ["DEFAULT_MAX_TOKENS", "VIEW_HELP", "ViewWindows", "ViewRun", "view_windows", "open_run", "load_weights",
           "kept_weights", "token_losses", "context_gain", "last_quarter_se", "position_curve", "run_context",
           "format_context", "ContextCallback"]

DEFAULT_MAX_TOKENS = 16384
"""Target tokens the depth views read by default: 8 of the default recipe's 20 evaluation batches of
16 x 128, 8 forwards of its model (0.29 s each measured on 2 shared CPU cores at load average 2.5;
``benchmarks/depth_views.py`` measures the commands)."""


VIEW_HELP = {
    "layers": "For each block of a trained run: the val loss when the residual stream after it is decoded through "
              "the model's final norm and head (logit lens), the change in val loss when the block is replaced by "
              "the identity (ablation) and its relative update ||out - in|| / ||in||; the lens of the embeddings "
              "alone; and the effective depth (blocks whose removal costs >= 0.01 nats). Losses in nats per token "
              "on the run's fixed val evaluation windows (float32). Needs the model's blocks, final norm and head "
              "(depthlab's GPT, or a model.source model with a final norm and head by GPT-2's or common names, such as "
              "transformer.ln_f or norm and lm_head or head, its blocks found as depthlab check finds them or named "
              "with --blocks).",
    "context": "Val loss by position 0..T-1 of a trained run against the unigram and bigram baselines, with the "
               "context gain (loss at position 0 minus the mean over the last quarter of positions, nats) of the "
               "chosen weights and of every checkpoint the run keeps. Position 0 sees one token (a character, or a "
               "BPE token), so it cannot go below the one-token floor (the best one-token predictor of the val "
               "split, at or below the bigram line); later positions below the bigram line show context the model "
               "uses. Works on any model.",
}
"""``--help`` text of ``depthlab layers`` and ``depthlab context``."""


@dataclass(frozen=True)
class ViewWindows:
    """A prefix of a run's fixed val evaluation windows.

    Attributes:
        batches: ``(x, y)`` pairs, each (B, T) int64 on the CPU.
        of_batches: the run's ``train.eval_iters`` (batches one evaluation reads).
        batch_size: B, the run's evaluation batch (:func:`~depthlab.training.evaluator.eval_batch`).
        block_size: T. seed: ``train.seed``.
        starts: the val split's possible window starts (N - T), or None when not known.
        micro: the most windows one forward reads (the run's ``train.batch_size``: the memory its training step
            needed; an evaluation batch of ``batch_size x grad_accum`` in one forward ran out of it), or None = B.
    """

    batches: list
    of_batches: int
    batch_size: int
    block_size: int
    seed: int
    starts: Optional[int] = None
    micro: Optional[int] = None

    def forward_batches(self):
        """The ``(x, y)`` batches in micro-batches of at most :attr:`micro` windows, in order
        (:func:`~depthlab.training.evaluator.micro_batches`).

        Yields:
            ``(x, y)``, each (<= micro, T) int64.
        """
        for x, y in self.batches:
            yield from micro_batches(x, y, self.micro)

    @property
    def windows(self) -> int:
        """Windows read (B x batches)."""
        return self.batch_size * len(self.batches)

    @property
    def tokens(self) -> int:
        """Target tokens read (windows x T)."""
        return self.windows * self.block_size

    @property
    def distinct(self) -> int:
        """How many of the windows differ (a short val split repeats its windows)."""
        return int(torch.unique(torch.cat([x for x, _ in self.batches]), dim=0).shape[0])

    def describe(self) -> str:
        """e.g. ``8 of the run's 20 fixed val evaluation batches: 128 windows x 128 = 16,384 tokens``."""
        part = "all" if len(self.batches) == self.of_batches else f"{len(self.batches)} of"
        distinct = self.distinct
        # repeated windows: the count alone read as that many independent tokens. A short val split repeats its
        # starts; short windows (block_size 1: at most V values) repeat their text at other starts
        short = self.starts is not None and self.starts < self.windows
        tokens = f"{self.block_size} token{'s' if self.block_size > 1 else ''}"
        why = "the val split is short, so windows repeat" if short else \
            f"windows of {tokens} repeat the same text at other places"
        repeats = f" (only {distinct} distinct: {why})" if distinct < self.windows else ""
        return (f"{part} the run's {self.of_batches} fixed val evaluation batches: {self.windows} windows x "
                f"{self.block_size} = {self.tokens:,} tokens{repeats}")


def view_windows(val: np.ndarray, block_size: int, batch_size: int, seed: int, eval_iters: int,
                 max_tokens: int = DEFAULT_MAX_TOKENS, windows: str = "spaced",
                 micro: Optional[int] = None) -> ViewWindows:
    """The first batches of the run's evaluation windows, as many as fit ``max_tokens`` (at least one).

    Args:
        val: the val split's token ids (N,). block_size: T. batch_size: the global evaluation batch B.
        seed: ``train.seed``. eval_iters: ``train.eval_iters``.
        max_tokens: most target tokens to read; 0 = all ``eval_iters`` batches.
        windows: ``train.eval_windows`` (:func:`~depthlab.training.evaluator.eval_batches`).
        micro: the most windows one forward reads (``train.batch_size``), None = a whole batch.

    Raises:
        DepthlabError: the val split is not longer than one window, or ``max_tokens`` is negative.
    """
    if max_tokens < 0:
        raise DepthlabError(f"--max_tokens must be >= 0 (0 = every evaluation batch), got {max_tokens}")
    if len(val) <= block_size:
        raise DepthlabError(f"the val split has {counted(len(val), 'token')}, not more than model.block_size "
                            f"{block_size}: no evaluation window fits; raise data.val_fraction or use a longer text")
    n = eval_iters if max_tokens == 0 else max(1, min(eval_iters, max_tokens // (batch_size * block_size)))
    batches = eval_batches(val, block_size, batch_size, seed, "val", n, windows=windows, of_batches=eval_iters)
    return ViewWindows(list(batches), eval_iters, batch_size, block_size, seed, len(val) - block_size, micro)


@dataclass(frozen=True)
class ViewRun:
    """What the depth views read of a run directory: its config, val windows and baselines.

    Attributes:
        run_dir: the run directory. config: config.json's content. windows: :class:`ViewWindows`.
        baselines: baselines.json's content (``unigram`` / ``bigram`` with ``nats``), recomputed from the corpus
            when the file is missing or damaged (as diagnose does), or None.
        baselines_from: where the baselines come from, as the console says it: ``baselines.json``, or
            ``recomputed from the corpus: baselines.json is missing`` (or ``damaged``).
    """

    run_dir: Path
    config: dict
    windows: ViewWindows
    baselines: Optional[dict]
    baselines_from: str = BASELINES

    @property
    def unit(self) -> str:
        """``character``, or ``token`` for a run whose tokenizer is not characters (:func:`unit_of`)."""
        return unit_of(self.config)

    def baseline(self, name: str) -> Optional[float]:
        """A corpus baseline in nats per token (``unigram``, ``bigram``), or None when the run has none."""
        b = (self.baselines or {}).get(name)
        v = b.get("nats") if isinstance(b, dict) else None
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def open_run(run_dir: str | Path, max_tokens: int = DEFAULT_MAX_TOKENS) -> ViewRun:
    """Read a run directory for ``depthlab layers`` / ``context``: its corpus's val windows and baselines.

    Raises:
        DepthlabError: not a run directory, a config this depthlab cannot read, the corpus is gone.
    """
    from ..config import RunConfig, as_ran
    from ..data import load_corpus

    rd = RunDir(run_dir).require("config")
    try:
        cfg = RunConfig.from_dict(as_ran(rd.config))  # fields newer than the run: as it ran
    except DepthlabError as e:
        raise DepthlabError(f"{rd.file(CONFIG)}: {e}") from None
    resume_config.refuse_edited_config(rd.path, "cannot measure")
    tok = rd.file(TOKENIZER)
    tok_json = tok.read_text(encoding="utf-8") if tok.is_file() else None
    if cfg.data.tokenizer == "bpe" and tok_json is None:  # the cache's tokenizer may be another one (another split)
        raise DepthlabError(f"{tok} is missing: the run's BPE tokenizer, without which its val split cannot be "
                            "tokenized as it trained, and layers and context measure that split: restore the file "
                            "(sample, export and --resume refuse the run without it too)")
    if cfg.data.path and not Path(cfg.data.path).expanduser().is_file():  # train's advice (leave it unset) is no fix
        raise DepthlabError(f"{rd.path}: the run's corpus {cfg.data.path} is missing (moved or deleted?), and layers "
                            "and context measure its val split: put the file back at that path (a resume that "
                            "trains on with --data.path NEW records a file's new place; one with nothing left to "
                            "train changes nothing)")
    try:
        corpus = load_corpus(cfg.data, seed=cfg.train.seed, tokenizer_json=tok_json)
        corpus.check_block_size(cfg.model.block_size)  # the val split training used (a short one is enlarged)
    except DepthlabError as e:
        raise DepthlabError(f"{rd.path}: the run's corpus cannot be read, and layers and context measure its "
                            f"val split: {e}") from None
    if single := corpus.one_symbol_words():  # nothing to measure: every position's loss is 0 whatever the weights
        raise DepthlabError(f"{rd.path}: {single}, so layers and context have nothing to measure; "
                            "train a run on a text with at least two distinct characters to look at")
    if rd.corpus_changed(corpus.sha256):
        raise DepthlabError(f"{rd.path}: the corpus {corpus.path} changed since training (its sha256 is not the one in "
                            f"{CONFIG}'s resolved.corpus_sha256), and layers and context measure the run's own "
                            "val split: restore the file the run was trained on")
    own = rd.vocab  # a character run's vocab.json: the ids its weights were trained on
    if cfg.data.tokenizer == "char" and own is not None and list(corpus.tokenizer.vocab) != list(own):
        raise DepthlabError(f"{rd.path}: the corpus {corpus.path} no longer has the characters of the run's "
                            f"{VOCAB} (changed since training), and layers and context measure the run's own "
                            "val split: restore the file the run was trained on")
    w = view_windows(corpus.val, cfg.model.block_size, eval_batch(cfg.train, rd.config), cfg.train.seed,
                     cfg.train.eval_iters, max_tokens, cfg.train.eval_windows, cfg.train.batch_size)
    V = len(corpus.tokenizer.vocab)
    if rd.baselines is not None:  # a baselines.json written before the floor was kept gets it here
        floor = rd.baselines.get("one_char_floor") or {"nats": one_char_floor_nats(corpus.val, V)}
        return ViewRun(rd.path, rd.config, w, {**rd.baselines, "one_char_floor": floor})
    base = corpus_baselines(corpus.train, corpus.val, V, corpus.val_chars_per_token)
    why = "damaged" if rd.file(BASELINES).exists() else "missing"
    return ViewRun(rd.path, rd.config, w, base, f"recomputed from the corpus: {BASELINES} is {why}")


def _model_from(run_dir: Path, path: Path) -> torch.nn.Module:
    """The model of the weights file ``path`` (depthlab's GPT or the run's model.source), in eval mode."""
    require_float32_default(f"loading the run {run_dir}")  # layers said "(float32, ...)" of a float64 model
    sd, meta = ckpt.load_weights_file(path)
    # the val split is tokenized with the run's tokenizer.json: the one these weights were trained with, or
    # nothing is measured (another file's merges gave "val loss 5.12" of a run at 3.96, and "no context used")
    ckpt.load_run_tokenizer(run_dir, meta, path)
    model = make_model(ckpt.model_config_from_meta(meta, path), run_dir)
    ckpt.load_into(model, sd, path)
    return model.eval()


def load_weights(run_dir: Path, which: str = "best") -> tuple[torch.nn.Module, str]:
    """``(model in eval mode, which weights: e.g. "best.safetensors (step 400, val loss 2.18 nats)")``.

    Raises:
        DepthlabError: as :func:`depthlab.checkpoint.select_weights` (no checkpoint, a corrupt best).
    """
    path = select_weights_warned(Path(run_dir), which)
    return _model_from(Path(run_dir), path), ckpt.describe_weights(Path(run_dir), path)


def select_weights_warned(run_dir: Path, which: str) -> Path:
    """:func:`depthlab.checkpoint.select_weights`, warning (``UserWarning``) when ``best`` is read from a step
    checkpoint because best.safetensors is gone (:func:`depthlab.checkpoint.best_fallback`), as sample does."""
    import warnings

    path = ckpt.select_weights(run_dir, which)
    fallback = ckpt.best_fallback(run_dir, path) if which == "best" else None
    if fallback:
        warnings.warn(fallback, ckpt.WeightsFallback, stacklevel=2)
    return path


def kept_weights(run_dir: Path) -> list[tuple[str, int, Path]]:
    """Every intact weights file the run keeps, oldest step first: ``(label, step, path)``.

    The step checkpoints the manifest lists whose sha256 matches, and ``best`` (labelled
    ``best = step N`` and listed once when its step is also a kept step checkpoint).
    """
    ckdir = Path(run_dir) / CHECKPOINTS
    manifest = read_json(ckdir / "manifest.json") or {}
    out: dict[int, tuple[str, int, Path]] = {}
    for entry in manifest.get("checkpoints") or []:
        name = f"{entry.get('name')}.safetensors"
        digest = (entry.get("files") or {}).get(name)
        if (ckdir / name).is_file() and ckpt.sha256_file(ckdir / name) == digest:
            out[int(entry["step"])] = (f"step {int(entry['step'])}", int(entry["step"]), ckdir / name)
    best = manifest.get("best") or {}
    if best:
        try:
            path = ckpt.verified_best(Path(run_dir))
            step = int(best.get("step", -1))
            out[step] = (f"best = step {step}", step, out[step][2] if step in out else path)
        except DepthlabError:
            pass  # a corrupt best is named by `--checkpoint best`; the curves of the intact ones still show
    return [out[s] for s in sorted(out)]


def window_logits(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, command: str) -> torch.Tensor:
    """:func:`~depthlab.usermodel.full_logits` (B, T, V) of one batch of a run's val windows for ``command`` (layers,
    context); a forward that raises, or returns logits of another batch or length, is one line: the batch is a
    micro-batch of ``train.batch_size`` windows (:meth:`ViewWindows.forward_batches`), which a model with its batch
    size written into its code fails on where the run's evaluation batch does not divide into them (a resume with
    another batch_size; a .view(B, -1, C) returns another (B, T) of the same size, read silently as the windows'
    logits)."""
    on = (f"idx of shape {tuple(x.shape)} (a micro-batch of the run's val evaluation windows: train.batch_size of "
          "them, or fewer where its evaluation batch, config.json resolved.eval_batch, does not divide into them)")
    fix = ("if the model has a batch size written into its code, make it accept any (depthlab check PATH.py:NAME on "
           "its file tests other batch sizes)")
    try:
        logits = full_logits(model, x, y)
    except DepthlabError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's forward: its error is theirs, in one line
        fault = forward_fault(model, e)
        raise DepthlabError(f"{command}: the model's forward failed on {on}: {fault}; {fix}") from None
    if logits.dim() != 3 or logits.shape[:2] != x.shape:
        raise DepthlabError(f"{command}: the model's forward returned logits of shape {tuple(logits.shape)}, not "
                            f"({x.size(0)}, {x.size(1)}, V), for {on}; {fix}")
    return logits


@torch.no_grad()
def token_losses(model: torch.nn.Module, batches) -> torch.Tensor:
    """Cross-entropy of every target token, float32, in eval mode (the mode is restored after).

    Args:
        model: any model of the protocol (``forward(idx)`` -> logits (B, T, V), or a tuple).
        batches: ``(x, y)`` pairs (B, T), each one forward (:meth:`ViewWindows.forward_batches`).

    Returns:
        (W, T) nats, W = the windows of all batches.
    """
    was = model.training
    model.eval()
    try:
        out = []
        for x, y in batches:
            logits = window_logits(model, x, y, "context").float()  # (B, T, V)
            out.append(F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1),
                                       reduction="none").view(y.shape).cpu())
    finally:
        model.train(was)
    return torch.cat(out)


def context_gain(losses: torch.Tensor) -> tuple[Optional[float], Optional[float]]:
    """``(gain, standard error)`` in nats: loss at position 0 minus the mean over the last quarter of positions.

    Args:
        losses: (W, T) per-token losses (:func:`token_losses`).

    Returns:
        ``(mean over windows of d, std(d) / sqrt(W))`` with ``d = l[:, 0] - mean(l[:, -max(1, T // 4):])``;
        ``(None, None)`` for T = 1 (no later position); the error is None for one window.
    """
    W, T = losses.shape
    if T < 2:
        return None, None
    d = losses[:, 0].double() - losses[:, -max(1, T // 4):].double().mean(dim=1)
    se = float(d.std(unbiased=True)) / math.sqrt(W) if W > 1 else None
    return float(d.mean()), se


def last_quarter_se(losses: torch.Tensor) -> Optional[float]:
    """Standard error (nats) of the mean loss over the last quarter of positions, from (W, T) ``losses``:
    ``std over windows of mean(l[:, -max(1, T // 4):]) / sqrt(W)``; None for one window. The windows are
    the sample, so positions of one window count once, as they are not independent."""
    W, T = losses.shape
    if W < 2:
        return None
    return float(losses[:, -max(1, T // 4):].double().mean(dim=1).std(unbiased=True)) / math.sqrt(W)


def position_curve(model: torch.nn.Module, windows: ViewWindows) -> dict:
    """The loss-by-position curve of ``model`` on ``windows``.

    Returns:
        ``{"loss_by_position": [T floats, nats], "position_se": [T standard errors], "val_loss": mean,
        "context_gain": g, "context_gain_se": se, "last_quarter_se": :func:`last_quarter_se`, "windows": W,
        "distinct_windows": how many of them differ (a val split one window long gives W copies of one window,
        whose spread of 0 is no sampling error: the errors are None then, as for one window), "tokens": W*T}``.
    """
    lo = token_losses(model, windows.forward_batches()).double()  # (W, T)
    W, distinct = lo.shape[0], windows.distinct
    one = distinct < 2  # copies of one window: nothing varies, so no error can be estimated
    se = (lo.std(dim=0, unbiased=True) / math.sqrt(W)).tolist() if W > 1 and not one else [None] * lo.shape[1]
    gain, gain_se = context_gain(lo)
    return {"loss_by_position": lo.mean(dim=0).tolist(), "position_se": se, "val_loss": float(lo.mean()),
            "context_gain": gain, "context_gain_se": None if one else gain_se,
            "last_quarter_se": None if one else last_quarter_se(lo), "windows": W, "distinct_windows": distinct,
            "tokens": int(lo.numel())}


def run_context(run_dir: str | Path, which: str = "best", max_tokens: int = DEFAULT_MAX_TOKENS) -> dict:
    """``depthlab context RUN``: the curve of the ``which`` weights and of every kept checkpoint.

    Returns:
        :func:`position_curve`'s keys for ``which`` (the JSON's top level) plus ``unigram``, ``bigram``
        (nats per token, None without baselines.json), ``weights`` (which file), ``windows_described``
        and ``checkpoints``: one ``{"label", "step", "loss_by_position", "context_gain", ...}`` per kept
        weights file, oldest first; ``leak_check``: the record of the causal leak test a ``model.source`` model
        had when its training started (``ok``, ``summary``), or None.

    Raises:
        DepthlabError: not a run, no checkpoint, the corpus is gone (:func:`open_run`).
    """
    run = open_run(run_dir, max_tokens)
    chosen = select_weights_warned(run.run_dir, which)
    curves, by_sha, steps = [], {}, {}
    for label, step, path in kept_weights(run.run_dir):
        c = position_curve(_model_from(run.run_dir, path), run.windows)
        sha = ckpt.sha256_file(path)
        by_sha[sha], steps[sha] = c, step  # best is a copy of a step checkpoint's bytes: measured once
        curves.append({"label": label, "step": step, **c})
    sha = ckpt.sha256_file(chosen)
    top = by_sha.get(sha) or position_curve(_model_from(run.run_dir, chosen), run.windows)
    return {**top, "unigram": run.baseline("unigram"), "bigram": run.baseline("bigram"),
            "one_char_floor": run.baseline("one_char_floor"), "step": steps.get(sha),
            "weights": ckpt.describe_weights(run.run_dir, chosen), "windows_described": run.windows.describe(),
            "all_windows": len(run.windows.batches) == run.windows.of_batches, "baselines_from": run.baselines_from,
            "run_dir": str(run.run_dir), "unit": run.unit, "checkpoints": curves,
            "leak_check": start_leak_record(run.run_dir)}


def start_leak_record(run_dir: Path) -> Optional[dict]:
    """The record of the causal leak test a ``model.source`` model had when its training started (``ok``,
    ``summary``: :class:`depthlab.analytics.check.LeakCheckCallback`), as diagnose reads it
    (:attr:`~depthlab.analytics.rules.evidence.Evidence.leak_check`), or None."""
    return Evidence(read_metrics(Path(run_dir), "event")).leak_check


def leak_caveat(res: dict, measures: str) -> Optional[str]:
    """The console line that says a run's model failed the leak test before its training (``res["leak_check"]``),
    so that what ``measures`` (the loss by position, the lens) shows is not what its context brings; None
    otherwise."""
    if (res.get("leak_check") or {}).get("ok") is not False:
        return None
    return (f"these numbers are not context: when its training started, depthlab check's causal_leak test found that "
            f"this model sees the tokens it predicts, so {measures} does not measure what its context brings: fix the "
            f"mask first "
            f"(depthlab diagnose {shlex.quote(str(res['run_dir']))} says where it leaks and how)")


def _shown_positions(T: int) -> list[int]:
    """Positions the text table shows (the figure and the JSON have every one)."""
    pts = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, T - 1}
    return sorted(p for p in pts if p < T)


def format_context(res: dict) -> str:
    """The console text of :func:`run_context`: a table of chosen positions, the gain per checkpoint,
    and what it means."""
    curve, se = res["loss_by_position"], res["position_se"]
    T, bg, ug, unit = len(curve), res.get("bigram"), res.get("unigram"), res.get("unit", "character")
    lines = [f"loss by position of {res['weights']} on {res['windows_described']} (nats/token)",
             "  position   loss    ± se" + ("   - bigram" if bg is not None else "")]
    for t in _shown_positions(T):
        err = f"{se[t]:6.3f}" if se[t] is not None else "     -"
        lines.append(f"  {t:8d} {curve[t]:7.3f} {err}" + (f" {curve[t] - bg:+10.3f}" if bg is not None else ""))
    if bg is not None:
        # not "cannot beat the bigram line": that line is fitted on the train split with add-one smoothing and lies
        # above the best one-token predictor of the val split, which position 0 may reach without any context
        fl = res.get("one_char_floor")
        floor = (f"the one-{unit} floor {fl:.3f} (the best any predictor that sees one {unit} does on this val "
                 "split; the bigram line, fitted on the train split, lies above it)" if fl is not None else
                 f"the best any predictor that sees one {unit} does (at or below the bigram line)")
        lines.append(f"  baselines: unigram {ug:.3f}, bigram {bg:.3f} ({res.get('baselines_from', BASELINES)}; "
                     f"position 0 sees one {unit}, so it cannot go below {floor} beyond its sampling error, ± se)")
    for c in res["checkpoints"]:
        g, gse = c["context_gain"], c["context_gain_se"]
        lines.append(f"  context gain, {c['label']}: " + ("-" if g is None else f"{g:.3f}{plus_minus(gse)} nats"))
    model = (RunDir(res["run_dir"]).config or {}).get("model") or {}
    lq_se = res.get("last_quarter_se")
    advice = MORE_WINDOWS if not res.get("all_windows") else "more windows: a run with a larger train.eval_iters"
    if res.get("distinct_windows", 2) < 2 < res.get("windows", 0):  # more of them would be more copies
        advice = ("its windows are all the same text, as a val split this short gives: a longer text or a larger "
                  "data.val_fraction gives different ones")
    verdict = dict(windows=res.get("distinct_windows", res.get("windows")), pos0_se=se[0], advice=advice,
                   floor=res.get("one_char_floor"),
                   unit=unit)
    caveat = leak_caveat(res, "its loss by position")
    if caveat is not None:  # the curve of a model that sees ahead measures no context: no verdict on it
        return "\n".join(lines + [caveat])
    src = model.get("source")
    check = usermodel.check_command(src, res["run_dir"]) if src else None  # diagnose's: a path that works anywhere
    leak_tested = (res.get("leak_check") or {}).get("ok") is True  # the test before training found no leak
    state, words = context_words(res["context_gain"], res["context_gain_se"], curve, bg, ug, model, lq_se,
                                 check=check, leak_tested=leak_tested, **verdict)
    lines.append(words)
    step, early = res.get("step"), Thresholds().bigram_min_steps
    gain = res["context_gain"]
    if step is not None and step < early and gain is not None and math.isfinite(gain) and state in (UNUSED, UNDECIDED):
        lines.append(f"  (these weights are from step {step}: a model first learns which {unit}s are common, "
                     f"then which follow which, and only then uses its context; depthlab diagnose waits for step "
                     f"{early} before naming a cause. Train longer (train.max_iters) and look again.)")
    return "\n".join(lines)


def _undecided(curve: dict, baselines: Optional[dict]) -> bool:
    """Whether :func:`position_curve`'s ``curve`` (finite) cannot tell whether the model uses its context
    (:func:`~depthlab.analytics.rules.context.context_verdict` against ``baselines``: baselines.json, or None), so
    that more windows may."""
    def nats(name: str) -> Optional[float]:
        return finite_or_none(((baselines or {}).get(name) or {}).get("nats"))

    gain = finite_or_none(curve["context_gain"])
    if gain is None:  # one position a window, or non-finite losses: more windows tell nothing more
        return False
    state, _ = context_verdict(gain, curve["context_gain_se"], curve["loss_by_position"], nats("bigram"),
                               nats("unigram"), lq_se=curve["last_quarter_se"], windows=curve["distinct_windows"],
                               pos0_se=curve["position_se"][0], floor=nats("one_char_floor"))
    return state == UNDECIDED


class ContextCallback(Callback):
    """At train end (main rank): the loss-by-position curve of the final weights, as a ``kind: event``
    record (``event: context``, ``loss_by_position``, ``context_gain``, ``context_gain_se``, ``last_quarter_se``,
    ``position0_se`` (position 0's standard error, which the verdict's "within twice its error" names),
    ``windows``, ``all_windows`` (whether they are every window of the run's evaluation), ``tokens``) that the
    ``context_unused`` rule reads. Costs the forwards (micro-batches of ``train.batch_size`` windows) over at most
    :data:`DEFAULT_MAX_TOKENS` of the val evaluation windows (at least one evaluation batch), and over all
    ``eval_iters`` batches of them when those cannot tell whether the model uses its context (as ``depthlab context
    RUN --max_tokens 0`` would read: diagnose has only this record).
    """

    def on_train_end(self, run: RunView, summary: dict) -> None:
        """Measure and record the curve (never fails the finished run: a problem is one log line)."""
        if not run.is_main:
            return
        step = int(summary.get("final_step", 0) or 0)
        if any(r.get("event") == CONTEXT_EVENT and r.get("step") == step for r in RunDir(run.run_dir).metrics("event")):
            return  # a resume that only finishes the run (its final validation, summary.json): these weights' curve
        t, m = run.cfg.train, run.cfg.model
        try:
            for max_tokens in (DEFAULT_MAX_TOKENS, 0):
                w = view_windows(run.corpus.val, m.block_size, getattr(run, "eval_batch", None) or eval_batch(t),
                                 t.seed, t.eval_iters, max_tokens, t.eval_windows, t.batch_size)
                w = ViewWindows([(x.to(run.device), y.to(run.device)) for x, y in w.batches], w.of_batches,
                                w.batch_size, w.block_size, w.seed, w.starts, w.micro)
                c = position_curve(run.raw_model, w)
                if len(w.batches) == w.of_batches or not _undecided(c, RunDir(run.run_dir).baselines):
                    break
        except DepthlabError as e:
            run.log(f"loss by position skipped: {e}")
            return
        run.metrics.log("event", {"step": step, "event": CONTEXT_EVENT, "loss_by_position": c["loss_by_position"],
                                  "context_gain": c["context_gain"], "context_gain_se": c["context_gain_se"],
                                  "last_quarter_se": c["last_quarter_se"], "position0_se": c["position_se"][0],
                                  "windows": c["windows"], "all_windows": len(w.batches) == w.of_batches,
                                  "distinct_windows": c["distinct_windows"], "tokens": c["tokens"]})

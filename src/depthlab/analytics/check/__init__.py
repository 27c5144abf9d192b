"""``depthlab check``: does a model the learner wrote compute what a GPT must, and can it learn?

Ten rules with fixed names (scripts rely on them), each giving a :class:`CheckResult`
(ok True = no problem found, False = a problem, None = could not run, with why), evidence with the
numbers, parameter names and positions, and a remedy naming the knob:

``shape``          the forward accepts the asked (B, T) and other sizes (with finite logits); a hard-coded
                   batch size or length is found (other B and T are tried) and named, with the line of the file
``vocab``          the logits' last dimension against the corpus vocabulary; every id goes through
``finite``         the logits, the loss and every gradient at initialisation are finite (a NaN would
                   pass the comparisons of the rules below); names where the first non-finite value is
                   made; when they are not, the rules that read them are not run
``bf16``           one small batch's forward and backward under the bf16 autocast that training uses
                   (``train.dtype auto`` on CUDA, and on CPUs with native bf16 where bf16 times faster): a
                   dtype mismatch with a float32 tensor of the model's, or a non-finite loss or gradient,
                   names the line and ``--train.dtype float32``
``causal_leak``    the token at position j is changed and the logits at every t < j compared (zero
                   up to float error); the first leaking offset j - t is named; a sequence computed
                   alone and within a batch must give the same logits (a mean/softmax/norm over the
                   batch leaks the other sequences), else the test runs one sequence at a time
``init_loss``      the loss at initialisation against ln V, with the logits' scale
``no_gradient``    parameters whose gradient is None, all zero (still after a few steps), or frozen
``overfit_batch``  one small batch memorised (loss near zero); past a first look it trains on only while the loss
                   keeps falling, up to a limit
``context_use``    after a short training on the corpus, the same targets scored at position 0 and at
                   a late position; against the bigram baseline (:mod:`depthlab.analytics.baselines`)
``gradient_flow``  depthlab's probe at initialisation on the model's blocks, with its verdicts

Everything runs on CPU in float32 (``bf16`` under bf16 autocast), seeded; each rule works on its own copy of the
model at initialisation, so their order does not change their results. The rules that train run on one CPU thread
(:data:`TRAINING_THREADS`), so their verdicts do not depend on the machine's thread count.
"""

from __future__ import annotations

import contextlib
import copy
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch
import torch.nn as nn

from ...callbacks import Callback, RunView, StepInfo
from ...errors import DepthlabError, api_errors
from ...training.protocol import ModelPort
from ...training.subnormals import subnormals_flushed
from ...usermodel import check_command, first_line, float32_weights
from ..rules.evidence import LEAK_CHECK_EVENT
from .bf16 import bf16_rule
from .finite import finite_rule
from .flow import find_blocks, gradient_flow_rule
from .forward import causal_leak_rule, init_loss_rule, no_gradient_rule, shape_rule, vocab_rule
from .learning import context_use_rule, overfit_batch_rule
from .outputs import BOUNDED, probs_floor
from .subject import CheckResult, ModelFault, Subject

__all__ = ["RULES", "CheckResult", "CheckReport", "check_model", "check_source", "find_blocks",
           "format_check_table", "DEFAULT_BATCH_SIZE", "DEFAULT_BLOCK_SIZE", "LeakCheckCallback", "LEAK_CHECK_EVENT"]

RULES = ("shape", "vocab", "finite", "bf16", "causal_leak", "init_loss", "no_gradient", "overfit_batch", "context_use",
         "gradient_flow")
TRAINING_RULES = ("bf16", "no_gradient", "overfit_batch", "context_use", "gradient_flow")
"""The rules that need a finite loss and finite gradients (not run when ``finite`` found them otherwise)."""
TRAINING_THREADS = 1
"""The torch CPU threads of the rules that train (:data:`PINNED_RULES`), whatever the process uses (``--threads``).

A training amplifies the last-bit differences that another thread count makes (matmul sums split differently) into
different verdicts. Measured (2-core CPU, T = 32, torch 2.13): depthlab's 2-block ``plain`` GPT memorises
overfit_batch's batch at step 136 with 1 thread, 137 with 2, and context_use fails it with 1 thread (paired gain
-0.001 nats) but passes it with 2 (0.050, the threshold 0.05); the forward-only numbers (causal_leak, init_loss,
gradient_flow's norms) differ in the 7th-12th digit, far inside their tolerances. The trainings' batches are small (4
sequences; ~1,024 tokens), so one thread costs little: on that CPU, shared with other jobs, overfit_batch + context_use
of the 2-block ReZero GPT at T = 64 took 5.4-7.9 s with 1 thread and 19.7-49.7 s with 2 (two runs each); a large
model on many idle cores trains these steps slower than it could."""
PINNED_RULES = ("no_gradient", "overfit_batch", "context_use")
"""The rules run on :data:`TRAINING_THREADS` threads: those whose verdicts come out of a training."""
DEFAULT_BATCH_SIZE = 16
DEFAULT_BLOCK_SIZE = 64
"""The length checked when none is asked and the model declares none (``block_size`` / ``config.block_size``)."""


@dataclass
class CheckReport:
    """The outcome of :func:`check_model`.

    Attributes:
        model: what was checked (source, class, parameters, sizes, blocks).
        checks: one :class:`CheckResult` per rule, in :data:`RULES` order.
    """

    model: dict
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def failed(self) -> list[str]:
        """Names of the rules that found a problem."""
        return [c.rule for c in self.checks if c.ok is False]

    @property
    def exit_code(self) -> int:
        """0 = no problem found, 1 = problems found."""
        return 1 if self.failed else 0

    def to_dict(self) -> dict:
        """``{"model": ..., "checks": [{"rule", "ok", "evidence", "remedy"}, ...]}``."""
        return {"model": self.model, "checks": [c.to_dict() for c in self.checks]}


MAX_DECLARED_LENGTH = 1024
"""The longest declared ``block_size`` checked as is: a longer one is checked at this length (a forward of
16 x 10**9 tokens would never finish); ``--block_size`` is not capped."""


def _declared(model: nn.Module) -> tuple[Optional[int], list[str]]:
    """The first positive int the model declares, and the declarations passed over (``"block_size='abc'"``).

    Looks at ``block_size``, ``config.block_size`` and ``get_block_size()`` in that order; a missing one is
    not passed over, a bool, a non-int or an int < 1 is.
    """
    skipped = []
    for where, get in (("block_size", lambda: model.block_size), ("config.block_size", lambda: model.config.block_size),
                       ("get_block_size()", lambda: model.get_block_size())):
        try:
            v = get()
        except Exception:  # noqa: BLE001 - an attribute the user's model may not have
            continue
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v, skipped
        skipped.append(f"{where}={v!r}"[:60])
    return None, skipped


def declared_block_size(model: nn.Module) -> Optional[int]:
    """The context length a model declares (``block_size``, ``config.block_size``, ``get_block_size()``)."""
    return _declared(model)[0]


def _check_length(model: nn.Module, block_size: Optional[int]) -> tuple[int, str, Optional[str]]:
    """The length T checked, where it comes from, and a sentence when the model's declaration was not used.

    Returns:
        ``(T, source, note)``: ``source`` names T's origin for error messages; ``note`` (None when the
        asked or declared length is used as is) says which length is checked and why, e.g. for a
        ``block_size`` of 10**9 or ``"abc"``.
    """
    if block_size:
        return block_size, "--block_size", None
    declared, skipped = _declared(model)
    ignored = (f"ignored the model's {', '.join(skipped)} (not an int >= 1); " if skipped else "")
    fix = "give --block_size N to check another length"
    if declared is not None and declared > MAX_DECLARED_LENGTH:
        return MAX_DECLARED_LENGTH, f"the cap for the model's block_size {declared}", (
            f"{ignored}the length asked is {MAX_DECLARED_LENGTH}, not the model's block_size {declared} (declared "
            f"lengths over {MAX_DECLARED_LENGTH} are capped); {fix}")
    if declared is not None:
        return declared, "the model's block_size", (f"{ignored}the length asked is its block_size {declared}; {fix}"
                                                   if skipped else None)
    if skipped:
        return DEFAULT_BLOCK_SIZE, "the default length", (
            f"{ignored}the length asked is the default {DEFAULT_BLOCK_SIZE}; {fix}")
    return DEFAULT_BLOCK_SIZE, "the default length", None


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    """torch's CPU thread count set to ``n`` inside, restored after."""
    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


@contextlib.contextmanager
def _quiet_numerics() -> Iterator[None]:
    """Flush subnormals to zero (a bare deep stack would crawl through them, as in the probe); restore after."""
    with subnormals_flushed():
        yield


def _timed(fn: Callable[[], CheckResult], rule: str, faults: bool = True) -> CheckResult:
    """``fn()`` with its wall time; with ``faults``, the user's code raising inside the rule is its finding."""
    t0 = time.perf_counter()
    try:
        res = fn()
    except ModelFault as e:
        if not faults:
            raise
        res = CheckResult(rule, False, {"summary": f"the model's code failed during this check: {e}"},
                          "fix the error above; the line named is where it happened")
    res.seconds = time.perf_counter() - t0
    return res


def check_model(model: nn.Module, corpus, rebuild: Optional[Callable[[], nn.Module]] = None,
                batch_size: int = DEFAULT_BATCH_SIZE, block_size: Optional[int] = None,
                blocks: Optional[str] = None, seed: int = 1337, name: Optional[str] = None,
                rules: tuple[str, ...] = RULES, log: Optional[Callable[[str], None]] = None,
                command_line: bool = False) -> CheckReport:
    """Run the rules on ``model`` (at initialisation; it is not changed: each rule uses a copy).

    Args:
        model: any ``nn.Module`` speaking the protocol (DESIGN.md, "The user's own model").
        corpus: a :class:`~depthlab.data.Corpus` (its vocabulary, text and bigram baseline).
        rebuild: builds the model again when a deep copy fails (default: copies only).
        batch_size, block_size: the sizes asked (``block_size`` None: the model's declared one, at most
            :data:`MAX_DECLARED_LENGTH`, else 64; the report's ``model["length_note"]`` says when the
            declared one was not used and why).
        blocks: the dotted name of the model's list of blocks (default: found, see :func:`find_blocks`).
        seed: seeds every rule. name: the model's name in the report. rules: a subset of :data:`RULES`.
        log: ``callable(str)`` told as each rule finishes.
        command_line: the caller is ``depthlab check``: errors name its flags (``--batch_size``); else this
            function's arguments (:func:`~depthlab.errors.api_words`).

    Returns:
        The :class:`CheckReport`.

    Raises:
        DepthlabError: bad sizes, an unknown rule or --blocks name (one line naming the problem). A forward
            that raises or returns the wrong shape at every size tried is a ``shape`` problem found, and the
            other rules are not run.
    """
    with contextlib.nullcontext() if command_line else api_errors():
        return _check_model(model, corpus, rebuild, batch_size, block_size, blocks, seed, name, rules, log)


def _check_model(model, corpus, rebuild, batch_size, block_size, blocks, seed, name, rules, log) -> CheckReport:
    """:func:`check_model`, its errors in the command line's words."""
    if not isinstance(model, nn.Module):
        raise DepthlabError(f"check needs the model as a torch.nn.Module, got {type(model).__name__}")
    if not hasattr(corpus, "tokenizer") or not hasattr(corpus, "train"):
        raise DepthlabError(f"check needs a corpus from depthlab.data.load_corpus, got {type(corpus).__name__}")
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        raise DepthlabError(f"unknown rule(s) {', '.join(unknown)}; the rules: {', '.join(RULES)}")
    _check_sizes(batch_size, block_size)
    float32_weights(model, name or type(model).__name__)  # train refuses it: said here first
    T, source, note = _check_length(model, block_size)
    _check_corpus_length(corpus, T, source)
    corpus.check_block_size(T)
    if blocks is not None:
        find_blocks(model, blocks)  # a bad --blocks is a usage error, before any work
    subject = Subject(model, rebuild, corpus, seed)
    info = {"name": name or type(model).__name__, "class": type(model).__name__,
            "parameters": ModelPort(model).num_params(), "corpus": str(corpus.path),
            "corpus_vocab_size": subject.vocab_size, "seed": seed, "training_threads": TRAINING_THREADS}
    if note:
        info["length_note"] = note
    # a length the model declares (its block_size) is asked too: a forward failing there is a PROBLEM (a mask buffer
    # of 32 in a model of block_size 64 passed, "the checks run at T=32", and train refused it)
    steps = _rule_table(subject, batch_size, T, block_size is not None or source == "the model's block_size", blocks)
    report = CheckReport(info)
    runs = True  # the forward gives logits at some size
    with _quiet_numerics():
        try:
            report.checks.append(_timed(steps["shape"], "shape", faults=False))
        except ModelFault as e:  # the model runs wrong or raises: a problem found, not a usage error
            report.checks.append(_unusable_forward(e))
            subject.unusable = "the forward gives no usable logits at any size tried (shape)"
            subject.B, subject.T, runs = batch_size, T, False  # the sizes asked, for the report's header
        if log:  # every rule says it ran, the first too
            log(f"shape: {report.checks[0].status} ({report.checks[0].seconds:.1f} s)")
        for rule in RULES[1:]:
            if rule not in rules and rule != "finite":  # finite always runs: the rules after it trust its numbers
                continue
            trained = subject.untrainable if rule in TRAINING_RULES else None
            skip = None if rule == "vocab" and runs else subject.unusable or trained
            if skip:
                res = CheckResult(rule, None, {"summary": f"not run: {skip}"})
            elif rule in PINNED_RULES:  # the same verdict whatever the machine's or --threads' thread count
                with _threads(TRAINING_THREADS):
                    res = _timed(steps[rule], rule)
            else:
                res = _timed(steps[rule], rule)
            report.checks.append(res)
            if log:
                log(f"{rule}: {res.status} ({res.seconds:.1f} s)")
    name_b, found = find_blocks(model, blocks)
    info.update({"batch_size": subject.B, "block_size": subject.T, "vocab_size": subject.model_vocab,
                 "blocks": f"{name_b} ({len(found)} x {type(found[0]).__name__})" if found else None})
    report.checks = [c for c in report.checks if c.rule in rules]
    return report


def _unusable_forward(e: ModelFault) -> CheckResult:
    """The ``shape`` PROBLEM of a forward that raises, or returns no (B, T, V) logits, at every size tried."""
    remedy = e.remedy or ("return the logits of every position from forward(idx): a floating-point tensor of "
                          "shape (B, T, V), or a tuple starting with it" if e.size_free else
                          "fix the error above (the line named is where it happened), or give the sizes the model is "
                          "built for with --batch_size and --block_size")
    return CheckResult("shape", False, {"summary": str(e), "size_free": e.size_free}, remedy)


def _check_corpus_length(corpus, T: int, source: str) -> None:
    """The corpus holds T + 1 tokens in each split, or one line naming check's own flags.

    Raises:
        DepthlabError: the corpus is shorter than 2 (T + 1) tokens.
    """
    n, need = len(corpus.tokens), 2 * (T + 1)
    if n >= need:
        return
    fits = n // 2 - 1  # the longest T whose T + 1 tokens fit in each split
    fix = f"give --block_size {fits} or a longer text" if fits >= 2 else "give a longer text"
    raise DepthlabError(f"the corpus {corpus.path} has {n} token{'s' if n != 1 else ''}, but checking at length "
                        f"T={T} ({source}) needs {need}, T + 1 in each of the train and validation splits; {fix} "
                        "(--data.path)")


def _rule_table(subject: Subject, B: int, T: int, length_asked: bool, blocks: Optional[str]
                ) -> dict[str, Callable[[], CheckResult]]:
    return {"shape": lambda: shape_rule(subject, B, T, length_asked),
            "vocab": lambda: vocab_rule(subject),
            "finite": lambda: finite_rule(subject),
            "bf16": lambda: bf16_rule(subject),
            "causal_leak": lambda: causal_leak_rule(subject),
            "init_loss": lambda: init_loss_rule(subject),
            "no_gradient": lambda: no_gradient_rule(subject),
            "overfit_batch": lambda: overfit_batch_rule(subject),
            "context_use": lambda: context_use_rule(subject),
            "gradient_flow": lambda: gradient_flow_rule(subject, blocks)}


def _check_sizes(batch_size: int, block_size: Optional[int]) -> None:
    """Refuse (DepthlabError) a batch size or length that is no int, or below 1."""
    for flag, v in (("--batch_size", batch_size), ("--block_size", block_size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise DepthlabError(f"{flag} must be a whole number >= 1, got {v!r}")
    if batch_size < 1:
        raise DepthlabError(f"--batch_size must be >= 1 (got {batch_size}): the sequences per forward, e.g. "
                            f"--batch_size {DEFAULT_BATCH_SIZE}")
    if block_size is not None and block_size < 1:
        raise DepthlabError(f"--block_size must be >= 1 (got {block_size}): the tokens per sequence, e.g. "
                            "--block_size 32; leave it out to use the model's own block_size")


def check_source(source: str, init=None, data=None, batch_size: int = DEFAULT_BATCH_SIZE,
                 block_size: Optional[int] = None, blocks: Optional[str] = None, seed: int = 1337,
                 log: Optional[Callable[[str], None]] = None, command_line: bool = False) -> CheckReport:
    """:func:`check_model` on ``PATH.py:NAME`` (see :mod:`depthlab.usermodel`), built with ``init``; its errors in
    the words of ``depthlab check``'s flags with ``command_line``, else of this function's arguments.

    Args:
        source: ``PATH.py:NAME``, or a bare ``PATH.py`` whose one nn.Module class is the model (said in one ``log``
            line). init: keyword arguments (a dict, JSON text or None).
        data: a :class:`~depthlab.config.DataConfig` (None = the embedded Tiny Shakespeare).

    Raises:
        DepthlabError: the file, the name or the construction fails (one line); a forward that fails
            everywhere is the ``shape`` problem of the report.
    """
    with contextlib.nullcontext() if command_line else api_errors():
        return _check_source(source, init, data, batch_size, block_size, blocks, seed, log)


def _check_source(source, init, data, batch_size, block_size, blocks, seed, log) -> CheckReport:
    """:func:`check_source`, its errors in the command line's words."""
    from ...config import DataConfig
    from ...data import load_corpus
    from ...usermodel import build_model, load_factory, parse_init, parse_source

    src = parse_source(source, option="check")
    kw = parse_init(init, option="--init")
    _check_sizes(batch_size, block_size)  # before the user's file runs: its lines came before this one error
    corpus = load_corpus(data or DataConfig())
    if single := corpus.one_symbol_words():  # every rule would read zeros: false problems on a correct model
        raise DepthlabError(f"check: {single}, so no rule can test the model on it: give "
                            "--data.path a text with at least two distinct characters")
    V = len(corpus.tokenizer.vocab)
    picked: list[str] = []  # a bare PATH.py: its one nn.Module class, said once it builds (not before its error)
    src, made = load_factory(src, picked.append)  # the file imported once

    def build() -> nn.Module:
        torch.manual_seed(seed)
        return build_model(src, kw, V, made)

    model = build()
    if blocks is not None:
        find_blocks(model, blocks)  # a bad --blocks is the one line said, not after the class notice
    for line in picked if log else ():
        log(line)
    report = _check_model(model, corpus, build, batch_size, block_size, blocks, seed, str(src), RULES, log)
    report.model = {"source": str(src), "init": kw, **{k: v for k, v in report.model.items() if k != "name"}}
    return report


def format_check_table(report: CheckReport, width: int = 110) -> str:
    """The report as text: one entry per rule (ok / PROBLEM / not run) with its evidence, and the fix when
    it found a problem or could not run; wrapped at ``width`` columns."""
    import textwrap

    from ...data import embedded_corpus_path

    m = report.model
    corpus = m["corpus"]
    if Path(corpus).resolve() == embedded_corpus_path().resolve():
        corpus = "the embedded Tiny Shakespeare"
    head = (f"depthlab check {m.get('source', m.get('name', ''))}: {m['class']}, {m['parameters']:,} parameters, "
            f"checked at batch {m.get('batch_size')} x length {m.get('block_size')} on {corpus} "
            f"(V={m['corpus_vocab_size']})")
    trained = [c.rule for c in report.checks if c.rule in PINNED_RULES and c.status != "not run"]
    if trained and m.get("training_threads"):
        n = m["training_threads"]
        head += (f"; {', '.join(trained)} train on {n} CPU thread{'s' if n != 1 else ''} (their verdicts do not "
                 "depend on the thread count)")
    indent = " " * 24
    lines = [textwrap.fill(head, width, subsequent_indent="  "), ""]
    if m.get("length_note"):
        lines[1:1] = [f"note: {m['length_note']}"]  # one line, unwrapped: a script can grep it
    for c in report.checks:
        status = c.status
        summary = c.summary[len("not run: "):] if c.summary.startswith("not run: ") else c.summary
        lines.append(textwrap.fill(summary, width, initial_indent=f"{c.rule:<14} {status:<8} ",
                                   subsequent_indent=indent, break_on_hyphens=False))
        if c.ok is not True and c.remedy:
            lines.append(textwrap.fill(c.remedy, width, initial_indent=f"{'':<14} {'fix:':<8} ",
                                       subsequent_indent=indent, break_on_hyphens=False))
    n = len(report.failed)
    lines += ["", f"{n} problem{'s' if n != 1 else ''} found" + (f": {', '.join(report.failed)}" if n else "")]
    return "\n".join(lines)


#: the longest sequences the start-of-training leak test uses: a mask that leaks does so within a few positions,
#: and the test's cost grows with T^2 (T + 2 sequences of T tokens per window)
LEAK_CHECK_T = 64


class LeakCheckCallback(Callback):
    """At train start (main rank, a ``model.source`` model): ``depthlab check``'s ``causal_leak`` test on the
    model as it starts (:func:`causal_leak_rule`, sequences of at most :data:`LEAK_CHECK_T` tokens of the val
    split, on a CPU copy, or the model itself on a CPU when it cannot be copied). A leak is one warning line
    naming the positions and the fix, and every outcome is a ``kind: event`` record (``event:
    causal_leak_check``, ``ok``, ``summary``, ``remedy``) that ``diagnose`` reads: a model that sees the tokens
    it predicts trains to a val loss that looks good and samples badly, and its loss by position shows the leak
    only once position 0 falls below the one-token floor.

    The training's random state is untouched (the test runs under ``torch.random.fork_rng``), so a resumed run
    continues bit for bit. It never fails the run: a test that cannot run is one warning line saying why.
    """

    def on_train_start(self, run: RunView, info: StepInfo) -> None:
        """Test the model and record the outcome (see the class)."""
        src = run.cfg.model.source
        if not run.is_main or not src:
            return
        live = run.raw_model
        was = live.training
        try:
            with torch.random.fork_rng(devices=[]):
                # on a CPU the rules' copies fall back to the model itself (only forwards in eval mode, no
                # gradients) when it cannot be deep-copied (a lock, an open file); elsewhere a CPU copy
                on_cpu = all(p.device.type == "cpu" for p in live.parameters())
                model = live if on_cpu else copy.deepcopy(live).to("cpu")
                report = check_model(model, run.corpus, rebuild=lambda: model, batch_size=2,
                                     block_size=min(run.cfg.model.block_size, LEAK_CHECK_T), seed=run.cfg.train.seed,
                                     rules=("shape", "causal_leak", "init_loss"))
        except Exception as e:  # noqa: BLE001 - the user's model: the training goes on, the reason is said
            run.log(f"warning: {src}: depthlab check's causal leak test before training could not run "
                    f"({first_line(e)}); diagnose sees a leak only once position 0 falls below the one-token floor")
            return
        finally:
            live.train(was)
        res = next((c for c in report.checks if c.rule == "causal_leak"), None)
        if res is None:  # the shape rule stopped it: the training's own forward already ran at these sizes
            return
        random = bool(res.evidence.get("random_in_eval"))  # no leak found: a forward random in eval mode
        shifted = bool(res.evidence.get("own_token_ignored"))  # no leak either: logits one position late
        if shifted:
            run.log(f"warning: {src}: {res.summary}; {res.remedy} ({check_command(src, run.run_dir)} runs every "
                    "check)")
        elif random:
            run.log(f"warning: {src}: {res.summary}; {res.remedy} (the causal leak test before training could not "
                    "run: diagnose sees a leak only once position 0 falls below the one-token floor)")
        elif res.ok is False:
            run.log(f"warning: {src}: the model sees the tokens it predicts: {res.summary}; {res.remedy} (its val "
                    f"loss will look better than it is; {check_command(src, run.run_dir)} runs every check)")
        elif res.ok is None:  # said as a warning: diagnose then judges a leak only from the loss by position
            run.log(f"warning: {src}: depthlab check's causal leak test before training did not run ({res.summary})"
                    "; diagnose sees a leak only once position 0 falls below the one-token floor")
        rec = {"step": info.step, "event": LEAK_CHECK_EVENT, "ok": None if random else True if shifted else res.ok,
               "summary": res.summary, "remedy": res.remedy, "random_in_eval": random, "own_token_ignored": shifted,
               **_bounded_output(report, run)}
        run.metrics.log("event", rec)


def _bounded_output(report: CheckReport, run: RunView) -> dict:
    """The ``output_*`` fields of the start-of-training record when ``init_loss`` found the forward's outputs squeezed
    into [0, 1] (softmax, sigmoid: :data:`~depthlab.analytics.check.outputs.BOUNDED`), said at once as a warning:
    such a loss cannot fall below :func:`~depthlab.analytics.check.outputs.probs_floor` whatever the training, and
    ``diagnose`` names it instead of "train longer". {} otherwise."""
    res = next((c for c in report.checks if c.rule == "init_loss"), None)
    kind = res.evidence.get("output_kind") if res is not None else None
    if kind not in BOUNDED:
        return {}
    V = int(res.evidence.get("vocab_size") or run.corpus.tokenizer.vocab_size)
    floor = probs_floor(V)
    what, fix, seen = BOUNDED[kind]
    summary = f"{what} ({seen})"
    run.log(f"warning: {run.cfg.model.source}: {summary}: its loss cannot fall below ln(1 + (V-1)/e) = {floor:.3f} "
            f"nats (V = {V}) whatever the training; {fix}")
    return {"output_kind": kind, "output_summary": summary, "output_remedy": fix, "output_floor": floor}

"""Autoregressive sampling: temperature, top-k, top-p (nucleus), greedy; loading a run to sample."""

from __future__ import annotations

import contextlib
import numbers
from pathlib import Path
import sys
from typing import Callable, Optional, Sequence

import torch

from . import checkpoint as ckpt
from .config import MAX_NEW_TOKENS, SAMPLE_DEFAULTS, ModelConfig, run_path
from .tokenizer import Tokenizer, control_ids
from .errors import DepthlabError, api_errors
from .model import GPT, require_float32_default
from .rundir import RunDir, export_origin
from .units import counted
from .usermodel import check_command, forward_fault, full_logits, make_model


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__



#: Most samples one ``depthlab sample`` generates: each is its own generation, one after the other, and every
#: text is kept to be returned, so 100,000,000 stalled for hours instead of saying so.
MAX_NUM_SAMPLES = 10_000


def check_sampling_args(temperature: float, top_k: Optional[int], top_p: Optional[float],
                        max_new_tokens: int = 0, num_samples: int = 1) -> None:
    """Validate sampling settings.

    Raises:
        DepthlabError: temperature < 0 or not finite, top_k < 0, top_p outside (0, 1],
            max_new_tokens < 0 or above :data:`MAX_NEW_TOKENS`, num_samples < 1 or above :data:`MAX_NUM_SAMPLES`,
            or num_samples x max_new_tokens above :data:`MAX_NEW_TOKENS`.
    """
    # bool is an int to Python: top_k=True reached torch.topk as a TypeError, temperature=True sampled at 1
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature != temperature \
            or temperature < 0 or temperature == float("inf"):
        raise DepthlabError(f"--temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
        raise DepthlabError(f"--top-k must be an integer >= 0 (0 = off), got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float))
                              or not 0.0 < top_p <= 1.0):  # "x" failed in the comparison with a TypeError
        raise DepthlabError(f"--top-p must be a number in (0, 1], got {top_p!r}")
    # 5.5 failed in torch's new_empty with a TypeError
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral):
        raise DepthlabError(f"--max-new-tokens must be an integer >= 0, got {max_new_tokens!r}")
    if max_new_tokens < 0:
        raise DepthlabError(f"--max-new-tokens must be >= 0, got {max_new_tokens!r}")
    if max_new_tokens > MAX_NEW_TOKENS:
        raise DepthlabError(f"--max-new-tokens {max_new_tokens} is more than depthlab samples in one call "
                            f"({MAX_NEW_TOKENS:,}: the output is held in memory, 8 bytes a token); ask for at most "
                            f"{MAX_NEW_TOKENS}, or sample again with the text so far as --prompt")
    _check_num_samples(num_samples, max_new_tokens)


def _check_num_samples(n: int, max_new_tokens: int) -> None:
    """``--num-samples`` within 1..:data:`MAX_NUM_SAMPLES`, and its texts within :data:`MAX_NEW_TOKENS` tokens."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):  # 2.0 failed in range() with a TypeError
        raise DepthlabError(f"--num-samples must be an integer >= 1, got {n!r}")
    if n < 1:
        raise DepthlabError(f"--num-samples must be >= 1, got {n}")
    if n > MAX_NUM_SAMPLES:
        raise DepthlabError(f"--num-samples {n} is more than depthlab samples in one call ({MAX_NUM_SAMPLES:,}: "
                            f"each sample is generated in turn and every text is kept); ask for at most "
                            f"{MAX_NUM_SAMPLES}, or sample again with another --seed for more")
    if n * max_new_tokens > MAX_NEW_TOKENS:
        raise DepthlabError(f"--num-samples {n} x --max-new-tokens {max_new_tokens} = {n * max_new_tokens:,} tokens "
                            f"is more than depthlab samples in one call ({MAX_NEW_TOKENS:,}: every text is held in "
                            "memory); lower either, or sample again with another --seed for more")


def filter_logits(logits: torch.Tensor, top_k: Optional[int] = None, top_p: Optional[float] = None
                  ) -> torch.Tensor:
    """Mask (to -inf) all but the top-k logits and/or the smallest nucleus of mass >= top_p.

    Args:
        logits: (B, V) already divided by the temperature.
        top_k: keep the k largest (k >= V or 0/None = no filtering).
        top_p: keep the smallest set whose probability sum reaches top_p (Holtzman et al. 2020);
            the most likely token is always kept.

    Returns:
        (B, V) logits with filtered entries set to -inf.
    """
    V = logits.size(-1)
    if top_k and top_k < V:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cum - sorted_logits.softmax(dim=-1) >= top_p  # mass before this token already enough
        drop[:, 0] = False
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return logits


#: Up to this many rows, a one-position cached step runs on one thread. Measured at the default
#: shape on 2 cores, ms per step with 1 vs 2 threads: rows 1: 0.54 vs 0.73, 4: 0.76 vs 1.44,
#: 16: 1.23 vs 1.84 with OMP_WAIT_POLICY=PASSIVE (what the command line sets); with spinning
#: threads 1: 0.54 vs 0.55, 4: 0.76 vs 0.80, 16: 1.23 vs 1.06; 64 rows are faster on 2 threads.
ONE_THREAD_ROWS = 8


def _next_logits_fn(model: torch.nn.Module, kv_cache: bool,
                    block_size: Optional[int] = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """A function ids (B, n) -> next-token logits (B, V) implementing one context policy.

    Without the cache: the last block_size ids, re-encoded in full for every token (nanoGPT).
    With it: only the ids not yet in the :class:`~depthlab.model.KVCache` are encoded. The first
    call encodes the last block_size ids of the prompt. When appending would pass block_size
    (learned absolute positions end there), the cache is emptied and the last
    ``max(1, block_size // 2)`` ids are re-encoded at positions 0.. (one half-window forward per
    half-window of new tokens). Until then both policies see the same context; past it the
    cached one sees between block_size/2 and block_size ids instead of always block_size, so
    sampled text differs from the cropped policy's there. Single-position steps of at most
    :data:`ONE_THREAD_ROWS` rows run on one thread (the caller's thread count is restored).

    A model that is not depthlab's GPT (``model.source``) has no cache: the last ``block_size`` ids
    are re-encoded for every token, and its ``forward(idx)`` gives the logits (or a tuple of them first).
    """
    if not isinstance(model, GPT):
        if block_size is None:
            raise DepthlabError("generating from a model that is not depthlab's GPT needs its block_size")

        def whole(idx: torch.Tensor) -> torch.Tensor:
            ctx = idx[:, -block_size:]
            try:
                # a print in the user's forward is not the sample's text; a forward that takes targets gets them, as
                # in training (one that requires them failed here only)
                with contextlib.redirect_stdout(sys.stderr):
                    logits = full_logits(model, ctx)
            except DepthlabError:
                raise
            except Exception as e:  # noqa: BLE001 - the user's forward: its error is theirs, in one line
                raise ForwardFailed(model, tuple(ctx.shape), block_size, e) from None
            # (8, 2, V) from (1, 16): a .view(8, -1, C); (B, 1, V) is nanoGPT's last position, asked without targets
            if logits.dim() != 3 or logits.size(0) != ctx.size(0) or logits.size(1) not in (ctx.size(1), 1):
                raise ForwardFailed(model, tuple(ctx.shape), block_size, returned=tuple(logits.shape))
            return logits[:, -1, :]

        return whole
    bs = model.config.block_size
    if not kv_cache:
        return lambda idx: model(idx[:, -bs:])[0][:, -1, :]
    keep = max(1, bs // 2)
    state: dict = {"cache": None, "seen": 0}  # seen = len(ids) at the previous call

    def step(idx: torch.Tensor) -> torch.Tensor:
        cache, n = state["cache"], idx.size(1)
        if cache is None:
            cache = state["cache"] = model.new_kv_cache(idx.size(0))
            ctx = idx[:, -bs:]
        elif n - state["seen"] > cache.free:
            cache.reset()
            ctx = idx[:, -keep:]
        else:
            ctx = idx[:, state["seen"]:]
        state["seen"] = n
        if ctx.size(1) > 1 or ctx.size(0) > ONE_THREAD_ROWS:
            return model.forward_cached(ctx, cache)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # one position: waking a second thread costs more than it saves
        try:
            return model.forward_cached(ctx, cache)
        finally:
            torch.set_num_threads(threads)

    return step


def draw(probs: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """One id per row drawn from ``probs`` (B, V) -> (B,) int64.

    argmax(p / E) with E ~ Exponential(1) i.i.d. picks index i with probability p_i (the
    exponential race; e.g. Devroye 1986, ch. 2). It consumes the generator exactly as
    ``torch.multinomial(probs, 1)`` does and returns the same ids (test), without multinomial's
    input checks, which cost 2/3 of a 65-way draw (22 vs 7 us).
    """
    return (probs / torch.empty_like(probs).exponential_(generator=generator)).argmax(dim=-1)


class NonFiniteLogits(DepthlabError):
    """The next-token logits hold NaN or inf; ``where`` says for which position (the prompt, or a later one).

    ``position`` (t): the ids the logits follow; the token being drawn is the sample's (t + 1)-th, prompt included.
    """

    def __init__(self, logits: torch.Tensor, t: int, prompt_len: int):
        self.kinds = " and ".join(k for k, bad in (("NaN", torch.isnan(logits).any()),
                                                   ("inf", torch.isinf(logits).any())) if bad)
        self.position = t
        self.where = ("for the prompt" if t == prompt_len else
                      f"while drawing token {t + 1} of the sample (from the logits after its first {t} tokens: the "
                      f"prompt's {counted(prompt_len, 'token')} and {t - prompt_len} generated)")
        super().__init__(f"the weights give non-finite logits ({self.kinds}) {self.where}")

    def refusal(self, run_dir: str | Path) -> DepthlabError:
        """The one line ``depthlab sample`` stops with, for ``run_dir``'s weights (a ``model.source`` run: its model,
        whose own forward may give them from finite weights; ``depthlab check`` tests that forward)."""
        more = "" if self.where == "for the prompt" else " more"
        source = ((RunDir(run_dir).config or {}).get("model") or {}).get("source")
        if source:
            return DepthlabError(f"{run_dir}'s model (model.source {source}) gives non-finite logits ({self.kinds}) "
                                 f"{self.where}; nothing{more} to sample (its forward or its weights: "
                                 f"{check_command(source, run_dir)} tests the forward; depthlab diagnose {run_dir} "
                                 "looks for where the run went non-finite)")
        return DepthlabError(f"{run_dir}'s weights give non-finite logits ({self.kinds}) {self.where}; nothing{more} "
                             f"to sample (depthlab diagnose {run_dir} looks for where the run went non-finite)")


class ForwardFailed(DepthlabError):
    """The forward of a model that is not depthlab's GPT raised on the ids sampling gave it, or returned logits of
    another batch or length: a model with a batch size or length written into its code (it trained on
    (train.batch_size, model.block_size) only) fails on the one sequence at a time, of the prompt's length and
    more, that ``depthlab sample`` gives it (``e``: what it raised; ``returned``: else the shape it returned)."""

    def __init__(self, model: torch.nn.Module, shape: tuple, block_size: int, e: Optional[BaseException] = None,
                 returned: Optional[tuple] = None):
        self.shape = shape
        self.block_size = block_size
        batch = "a batch of 1, one sample at a time" if shape[0] == 1 else f"a batch of {shape[0]}"
        runs = f"sampling runs it on {batch}, of the prompt's length growing up to model.block_size {block_size}"
        if e is not None:  # Type: first line (at file.py:LINE: code), as training says it
            self.why = f"the model's forward failed on idx of shape {shape} ({runs}): {forward_fault(model, e)}"
        else:
            self.why = (f"the model's forward returned logits of shape {returned} for idx of shape {shape}, not "
                        f"({shape[0]}, {shape[1]}, V) nor the last position's ({shape[0]}, 1, V) ({runs})")
        self.fix = f"make the model accept any batch size and any length up to {block_size}"
        super().__init__(f"{self.why}; {self.fix}")

    def refusal(self, run_dir: str | Path) -> DepthlabError:
        """The one line ``depthlab sample`` stops with for ``run_dir``'s model: the shape training ran it on, and
        the ``depthlab check`` command that tests other batch sizes and lengths."""
        cfg = RunDir(run_dir).config or {}
        source = (cfg.get("model") or {}).get("source")
        t, m = cfg.get("train") or {}, cfg.get("model") or {}
        trained = (f" (training ran it on ({t['batch_size']}, {m['block_size']}))"
                   if isinstance(t.get("batch_size"), int) and isinstance(m.get("block_size"), int) else "")
        check = f"; {check_command(source, run_dir)} tests other batch sizes and lengths" if source else ""
        return DepthlabError(f"{run_dir}: {self.why}; {self.fix}{trained}{check}")


def generate(model: torch.nn.Module, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: Optional[int] = None, top_p: Optional[float] = None,
             generator: Optional[torch.Generator] = None,
             on_token: Optional[Callable[[int], None]] = None, kv_cache: bool = True,
             block_size: Optional[int] = None, vocab_size: Optional[int] = None,
             never: Sequence[int] = ()) -> torch.Tensor:
    """Extend ``idx`` by ``max_new_tokens`` tokens.

    Args:
        model: a GPT (put in eval mode for the call; its previous mode is restored).
        idx: (B, T) integer prompt ids (int64, or int32), T >= 1.
        max_new_tokens: N, tokens to append.
        temperature: logits are divided by it; 0 (or < 1e-5) = greedy argmax (deterministic).
        top_k, top_p: see :func:`filter_logits`.
        generator: torch RNG for reproducible sampling.
        on_token: called with each new id of row 0 (streaming output).
        kv_cache: keep keys/values of past positions (one position's forward per token); False
            re-encodes the last block_size ids for every token (nanoGPT's crop). Both give the
            same logits (to float rounding, ~1e-6) while T + N <= block_size; past it the cache
            re-encodes the last half-window when full (see :func:`_next_logits_fn`).
        block_size: the context of a model that is not depthlab's GPT (its run's ``model.block_size``);
            such a model is sampled without a cache.
        vocab_size: the tokenizer's V: logits past it (a model's padded vocabulary, a byte-level head) are never
            drawn, as their ids decode to nothing. None: every logit is a token.
        never: ids never drawn: a BPE run's control token ``<|endoftext|>`` (id 0), which no corpus holds (its
            typed text is text) and an export's ``generate`` stops at; it printed as typed text, and the export's
            and depthlab's samples parted there.

    Returns:
        (B, T + N) ids of ``idx``'s dtype (a new tensor; ``idx`` is not changed).

    Raises:
        DepthlabError: invalid sampling settings; ``model`` not a module; ``idx`` not (B, T >= 1) integer ids
            within the vocabulary; ``vocab_size`` not an int >= 1; an id of ``never`` outside the vocabulary.
        NonFiniteLogits: the logits of a position are NaN or inf (the ids before it are already given to
            ``on_token``): a draw from them is noise, so sampling stops there.
        ForwardFailed: the forward of a model that is not depthlab's GPT raises on these ids, or returns logits of
            another batch or length (a batch size or length written into its code).
    """
    with api_errors():  # the arguments of this function, not sample's flags (sample_text checks them first)
        check_sampling_args(temperature, top_k, top_p, max_new_tokens)
    if not isinstance(model, torch.nn.Module):
        raise DepthlabError(f"generate needs model as a torch.nn.Module, got {type(model).__name__}")
    _check_ids(model, idx)
    _check_never(model, vocab_size, never)
    was_training = model.training
    model.eval()
    B, T = idx.shape
    try:
        with torch.inference_mode():  # no autograd bookkeeping at all: ~10 % of a cached token
            next_logits = _next_logits_fn(model, kv_cache, block_size)
            out = idx.new_empty((B, T + max_new_tokens))
            out[:, :T] = idx
            for t in range(T, T + max_new_tokens):
                logits = next_logits(out[:, :t])[:, :vocab_size].float()  # (B, V): the last position only
                if not bool(torch.isfinite(logits).all()):  # far cheaper than the forward; a NaN draw is noise
                    raise NonFiniteLogits(logits, t, T)
                if never:
                    logits[:, list(never)] = float("-inf")
                if temperature < 1e-5:  # below this, logits/T overflows float32: greedy is the limit anyway
                    nxt = logits.argmax(dim=-1)
                else:
                    nxt = draw(filter_logits(logits / temperature, top_k, top_p).softmax(dim=-1), generator)
                out[:, t] = nxt
                if on_token is not None:
                    on_token(nxt[0].item())
    finally:
        model.train(was_training)
    return out.clone()  # outside inference mode: an ordinary tensor callers may change in place


def _check_never(model: torch.nn.Module, vocab_size: Optional[int], never: Sequence[int]) -> None:
    """``vocab_size`` None or an integer >= 1 (and at most the model's V where it says it), and every id of ``never``
    one that can be drawn, leaving at least one: an id past V was an IndexError, a vocab_size of 0 an argmax over
    nothing, and banning every id drew id 0 anyway. Integers of numpy or torch count as integers."""
    model_v = getattr(getattr(model, "config", None), "vocab_size", None)
    if vocab_size is not None:
        v = _as_int(vocab_size)
        if v is None or v < 1 or (isinstance(model_v, int) and v > model_v):
            top = f" and at most the model's {model_v}" if isinstance(model_v, int) else ""
            raise DepthlabError(f"generate: vocab_size must be None or an int >= 1{top} (the tokenizer's V), got "
                                f"{vocab_size!r}")
        vocab_size = v
    V = vocab_size if vocab_size is not None else model_v
    ids = [_as_int(i) for i in (never.tolist() if isinstance(never, torch.Tensor) else list(never))]
    bad = [orig for orig, i in zip(never, ids) if i is None or i < 0 or (isinstance(V, int) and i >= V)]
    if bad:
        raise DepthlabError(f"generate: never holds {bad[0]!r}, not a token id"
                            + (f" of the vocabulary 0..{V - 1}" if isinstance(V, int) else " (an int >= 0)"))
    if isinstance(V, int) and len(set(ids)) >= V:
        raise DepthlabError(f"generate: never holds every id 0..{V - 1}, so no token can be drawn")


def _as_int(x) -> Optional[int]:
    """``x`` as an int when it is an integer (Python, numpy or a one-element torch integer), else None (bools and
    floats too)."""
    import operator

    if isinstance(x, bool) or (isinstance(x, torch.Tensor) and x.is_floating_point()):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def _check_ids(model: torch.nn.Module, idx: torch.Tensor) -> None:
    """``idx`` is (B, T >= 1) integer ids inside the model's vocabulary (when it says its size): an empty prompt, ids
    past V and float ids were IndexErrors from deep inside the model, and an id of -1 was read as the last row."""
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.size(0) < 1 or idx.size(1) < 1 \
            or idx.dtype not in (torch.int64, torch.int32):
        shown = (f"shape {tuple(idx.shape)}, dtype {idx.dtype}" if isinstance(idx, torch.Tensor)
                 else type(idx).__name__)
        raise DepthlabError(f"generate needs idx as a (B, T) tensor of int64 token ids with B, T >= 1 (a prompt of at "
                            f"least one token), got {shown}")
    V = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(V, int):
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= V:
            raise DepthlabError(f"generate: idx holds token ids outside the model's vocabulary 0..{V - 1} "
                                f"(smallest {lo}, largest {hi})")


def load_run(run_dir: str | Path, which: str = "best", device: str = "cpu",
             fallback_warning: bool = True) -> tuple[torch.nn.Module, Tokenizer]:
    """Load a trained model and its tokenizer from a run directory: :func:`_load_run` without the config, for a Python
    caller (its errors name this function's arguments; ``device`` may be ``auto``)."""
    with api_errors():
        device = _api_device(which, device)
        model, tok, _ = _load_run(run_dir, which, device, fallback_warning)
    return model, tok


def _api_device(which: str, device: str) -> str:
    """``device`` resolved (``auto``: cuda, else mps, else cpu) after ``which`` and ``device`` are checked in the
    words of the Python API (the command line checks its ``--checkpoint`` and ``--device`` before).

    Raises:
        DepthlabError: ``which`` not best/last; ``device`` no device name or not available here."""
    from .training.runtime import resolve_device

    if which not in ("best", "last"):
        raise DepthlabError(f"which must be 'best' (the lowest val loss) or 'last' (the newest step checkpoint), "
                            f"got {which!r}")
    return str(resolve_device(device, option="device", fix="use device='cpu'"))


def _load_run(run_dir: str | Path, which: str = "best", device: str = "cpu",
              fallback_warning: bool = True) -> tuple[torch.nn.Module, Tokenizer, ModelConfig]:
    """Load a trained model and its tokenizer from a run directory.

    Args:
        run_dir: a depthlab run directory.
        which: ``best`` (lowest val loss) or ``last`` (newest intact step checkpoint).
        device: where to put the model.
        fallback_warning: say on stderr when ``best`` is read from a step checkpoint because best.safetensors is
            gone (:func:`depthlab.checkpoint.best_fallback`).

    Returns:
        (model in eval mode: depthlab's GPT, or for a ``model.source`` run the model built from the
        run's copy of its file; tokenizer: the characters of the checkpoint, or the run's ``tokenizer.json``;
        the model config the checkpoint's metadata holds, block_size included).

    Raises:
        DepthlabError: missing folder, not a run, no checkpoint, corrupt checkpoint, missing or
            replaced ``tokenizer.json``.
    """
    _refuse_export(run_path(run_dir, "run_dir"))
    require_float32_default(f"loading the run {run_dir}")
    rd = RunDir(run_dir).require("checkpoints").path
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = ckpt.select_weights(rd, which)
    for w in caught:  # one clean line each, not Python's warning format
        print(f"depthlab: warning: {w.message}", file=sys.stderr)
    fallback = ckpt.best_fallback(rd, path) if which == "best" and fallback_warning else None
    if fallback:
        print(f"depthlab: warning: {fallback}", file=sys.stderr)
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as e:
        raise DepthlabError(f"--device {device} is not available here ({_first_line(e)}); use --device cpu") from None
    sd, meta = ckpt.load_weights_file(path)
    mcfg = ckpt.model_config_from_meta(meta, path)
    tok = ckpt.load_run_tokenizer(rd, meta, path)
    model = make_model(mcfg, rd)  # depthlab's GPT, or the run's own copy of its model.source
    ckpt.load_into(model, sd, path)
    return model.to(device).eval(), tok, mcfg


def _refuse_export(folder: Path) -> None:
    """Refuse a folder ``depthlab export`` wrote, naming the run it came from (its ``depthlab.json`` says which): it
    was refused as "not depthlab's (... a Hugging Face model folder?)", as if another program had written it."""
    origin = export_origin(folder)
    if origin is None:
        return
    run, there = origin
    if there:
        fix = f"depthlab sample {run} (the run it was exported from)"
    else:
        fix = "depthlab sample RUN on the run it was exported from" + (f" ({run}, no longer there)" if run else "")
    raise DepthlabError(f"{folder} is a Hugging Face export written by depthlab export, not a run directory; use "
                        f"{fix}, or transformers' pipeline('text-generation', model='{folder}')")


def sample_text(run_dir: str | Path, prompt: str = "", max_new_tokens: int = SAMPLE_DEFAULTS["max_new_tokens"],
                temperature: float = SAMPLE_DEFAULTS["temperature"], top_k: Optional[int] = SAMPLE_DEFAULTS["top_k"],
                top_p: Optional[float] = SAMPLE_DEFAULTS["top_p"], seed: int = 1337,
                num_samples: int = 1, which: str = "best", device: str = "cpu",
                stream: Optional[Callable[[str], None]] = None, kv_cache: bool = True) -> list[str]:
    """Generate ``num_samples`` texts from a run (each = prompt + max_new_tokens tokens).

    Args:
        stream: called with each piece of text as it is produced (prompt first; never with "").
            The pieces of a sample join to exactly the text returned for it (samples after the
            first are preceded by a ``"\n---------------\n"`` separator piece); a character
            split across tokens comes out whole with its last byte, and one left incomplete by the
            last token as the U+FFFD that the returned text has.
        kv_cache: see :func:`generate` (False = re-encode the cropped context for every token).

    Returns:
        The generated texts, prompt included (its CRLF and lone CR as ``\n``, as every corpus is read).

    Raises:
        DepthlabError: bad run directory, bad settings, prompt characters outside the vocabulary.
    """
    with api_errors():  # the command line checks these first, in its flags' words: only a Python caller gets here
        check_sampling_args(temperature, top_k, top_p, max_new_tokens, num_samples)
        device = _api_device(which, device)
    if prompt is not None and not isinstance(prompt, str):  # 5 failed in the vocabulary test with a TypeError
        raise DepthlabError(f"prompt must be a string (\"\" or None: start from a newline), got {prompt!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**63:
        raise DepthlabError(f"seed must be an integer from 0 to 2**63 - 1, got {seed!r}")  # was torch's RuntimeError
    # the context length comes from the checkpoint that built the model, not config.json: a damaged config.json
    # read as missing left a source model with no block_size and a refusal that did not name the file
    model, tok, mcfg = _load_run(run_dir, which, device)
    block_size = mcfg.block_size
    if prompt:
        # line ends as every corpus is read (data.py): a model never saw a CR, and a char run's "train on a corpus
        # that contains them" was false for one (a CRLF corpus is normalised too)
        if "\r" in prompt:
            try:  # a refusal names positions in the prompt as typed
                tok.encode(prompt.replace("\r", "\n"))
            except DepthlabError as e:  # its '\n' at a position that holds a typed '\r': said why
                raise DepthlabError(f"{e} (a '\\r' typed in the prompt, alone or before '\\n', is read as '\\n', as "
                                    "the corpus's line ends were; the positions are the typed prompt's)") from None
            prompt = normalise_newlines(prompt)
        ids = tok.encode(prompt)
    else:  # start from a newline when the corpus has one, else its first symbol
        prompt = "\n" if "\n" in tok.vocab else tok.vocab[0]
        ids = tok.encode(prompt)
    check_finite_logits(model, ids, block_size, run_dir, device)
    g = torch.Generator(device=device).manual_seed(seed)
    texts = []
    for i in range(num_samples):
        if stream:
            stream(("\n---------------\n" if i else "") + prompt)
        idx = torch.tensor([ids], dtype=torch.long, device=device)
        piece = tok.stream_decoder(prefix=ids)  # BPE: a character split across tokens prints once, whole
        try:
            out = generate(model, idx, max_new_tokens, temperature, top_k, top_p, generator=g,
                           on_token=(lambda i: _put(stream, piece(i))) if stream else None, kv_cache=kv_cache,
                           block_size=block_size, vocab_size=tok.vocab_size, never=control_ids(tok))
        except (NonFiniteLogits, ForwardFailed) as e:
            raise e.refusal(run_dir) from None
        if stream:  # what the last tokens left incomplete (U+FFFD each, as decode shows it)
            _put(stream, piece.flush())
        texts.append(tok.decode(out[0].tolist()))
    return texts


def normalise_newlines(text: str) -> str:
    """``text`` with CRLF and lone CR as ``\\n``, as :mod:`depthlab.data` reads every corpus (so no vocabulary,
    char or BPE, was trained on a CR)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def check_finite_logits(model: torch.nn.Module, ids: list[int], block_size: Optional[int], run_dir: str | Path,
                        device: str = "cpu") -> None:
    """Refuse weights whose next-token logits for the prompt are NaN/inf: every draw from them is noise.

    Raises:
        DepthlabError: the logits hold NaN or inf (named), before any text is printed.
    """
    with torch.inference_mode():
        try:
            logits = _next_logits_fn(model, False, block_size)(torch.tensor([ids], dtype=torch.long, device=device))
        except ForwardFailed as e:
            raise e.refusal(run_dir) from None
    if not bool(torch.isfinite(logits).all()):
        raise NonFiniteLogits(logits, len(ids), len(ids)).refusal(run_dir)


def _put(stream: Callable[[str], None], text: str) -> None:
    if text:
        stream(text)

"""What each block adds: the logit lens, block ablation and the relative update, per block.

For each block i of a trained model, on the run's fixed val evaluation windows
(:func:`depthlab.analytics.context.open_run`):

* **lens loss**: the val loss when the residual stream after block i is decoded through the model's
  own final norm and head (the "logit lens", nostalgebraist 2020; TransformerLens's
  ``accumulated_resid`` + ``apply_ln_to_stack``). The lens after the last block is the model's own loss;
  the lens of the embeddings alone (the stream before block 0) sees one character (and its position, where the
  model adds a learned table: ``model.position learned``).
* **ablation delta**: the val loss with block i replaced by the identity (its input passed on to
  block i + 1, every other block unchanged) minus the loss through the same final norm and head with
  every block in place, in nats. ``effective depth`` counts the blocks whose removal costs at least
  :data:`EFFECTIVE_DELTA` nats.
* **relative update**: ``||out - in|| / ||in||`` of block i, Frobenius norms over every (window,
  position, channel) of the windows (how far the block moves the stream, relative to its size).

Everything goes through the model's own modules (its list of blocks, its final norm, its head, each
block called with the arguments the model's forward gave it), so every ``model.variant`` and a user's
model that names them the GPT-2 way works unchanged. Losses are float32 on the CPU (no autocast), so
the lens after the last block equals the model's val loss on the same windows to float error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import DepthlabError
from ..rundir import BASELINES
from ..model import GPT
from ..usermodel import first_line, first_tensor
from .check.flow import find_blocks
from .context import DEFAULT_MAX_TOKENS, leak_caveat, load_weights, open_run, start_leak_record, window_logits
from .rules.advice import depth_setting

__all__ = ["EFFECTIVE_DELTA", "block_role", "LayerAccess", "layer_access", "measure_layers", "run_layers",
           "format_layers", "lens_meaning"]

EFFECTIVE_DELTA = 0.01
"""Nats: a block whose removal raises the val loss by at least this counts towards the effective depth."""


def block_role(delta: float) -> str:
    """What removing a block shows of it, from its ablation ``delta`` (nats; the loss without it less the loss
    with it), as printed to 4 decimals (a table's "+0.0100" and its sentence agree): ``used`` (removing it costs
    >= :data:`EFFECTIVE_DELTA`), ``harmful`` (removing it lowers the loss by that much or more) or ``idle``."""
    d = round(delta, 4)
    return "used" if d >= EFFECTIVE_DELTA else "harmful" if d <= -EFFECTIVE_DELTA else "idle"


#: Attribute names of a final norm and a head, tried in order on a model depthlab did not write
#: (GPT-2 / nanoGPT first, then common alternatives).
NORM_NAMES = ("transformer.ln_f", "ln_f", "lnf", "norm", "final_norm", "ln_final", "final_ln", "ln_out", "norm_f",
              "final_layernorm")
#: nanoGPT / GPT-2, "LLMs from scratch" (out_head), and other common spellings of the head.
HEAD_NAMES = ("lm_head", "head", "output", "out_head", "output_head", "to_logits", "fc_out")


@dataclass(frozen=True)
class LayerAccess:
    """The parts of a model the lens and the ablation call: its blocks, final norm and head.

    Attributes:
        blocks: the blocks in forward order. names: ``(blocks, norm, head)`` attribute names.
        norm: the final norm (``nn.Identity`` when the model has none). head: the LM head, (..., C) -> (..., V).
    """

    blocks: list
    norm: nn.Module
    head: nn.Module
    names: tuple[str, str, str]


def _get(model: nn.Module, names: tuple[str, ...]) -> Optional[tuple[str, nn.Module]]:
    for n in names:
        try:
            return n, model.get_submodule(n)
        except AttributeError:
            continue
    return None


class TiedHead(nn.Module):
    """A head tied to a token embedding: the stream (..., C) times its weight (V, C) transposed -> (..., V).

    What ``logits = x @ self.wte.weight.T`` (or ``F.linear(x, self.wte.weight)``) computes in a model that has
    no head module of its own, so that ``--head wte`` names that head.
    """

    def __init__(self, named: Any):
        """``named``: the nn.Embedding (its weight (V, C)) or the weight (V, C) itself, as ``--head`` named it."""
        super().__init__()
        self.named = named
        self.weight = named.weight if isinstance(named, nn.Embedding) else named

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.weight)


TIED_NOTE = "an nn.Embedding named as the head reads the stream through its weight, as a tied head does"


def _numbered(name: str) -> bool:
    return any(p.isdigit() for p in name.split("."))


def _candidates(model: nn.Module, kind: str) -> list[str]:
    """This model's modules that could be its final norm (a class named ...Norm) or head (its Linears outside any
    numbered list; when it has none, its Embeddings, as tied heads, and the Linears at numbered paths), for the
    refusals.

    Names outside any numbered list come first; those at numbered paths (a block's own norms and Linears,
    ``blocks.0.ln``; a Sequential's ``out.1``) follow, one entry per pattern: the name itself when one module
    has it, ``blocks.0.ln .. blocks.3.ln`` (the first and the last, each a valid name) when several do.
    """
    def fits(c: nn.Module) -> bool:
        return "norm" in type(c).__name__.lower() if kind == "norm" else isinstance(c, nn.Linear)

    names = [n for n, c in model.named_modules() if n and fits(c)]
    if kind == "head" and any(not _numbered(n) for n in names):  # a block's own Linears are not heads
        names = [n for n in names if not _numbered(n)]
    elif kind == "head":  # logits = x @ wte.weight.T: no head module
        names = [n for n, c in model.named_modules() if n and isinstance(c, nn.Embedding)] + names
    groups: dict[tuple, list[str]] = {}
    for n in names:
        groups.setdefault(tuple("N" if p.isdigit() else p for p in n.split(".")), []).append(n)
    plain = [g[0] for g in groups.values() if not _numbered(g[0])]
    listed = [g[0] if len(g) == 1 else f"{g[0]} .. {g[-1]}" for g in groups.values() if _numbered(g[0])]
    return plain + listed


def _seen(model: nn.Module, kind: str) -> str:
    """``"its heads: a, b"`` for a refusal (:func:`_candidates`, the first 8), with what an Embedding named as the
    head does when one is offered; "" when the model has none."""
    found = _candidates(model, kind)[:8]
    if not found:
        return ""
    tied = kind == "head" and any(isinstance(model.get_submodule(n.split(" ")[0]), nn.Embedding) for n in found)
    return f"its {kind}s: {', '.join(found)}" + (f" ({TIED_NOTE})" if tied else "")


def _as_module(value: Any, kind: str) -> Optional[nn.Module]:
    """The module a named head reads through: an Embedding or a 2-D weight (V, C) as a :class:`TiedHead`."""
    if kind == "head" and (isinstance(value, nn.Embedding) or isinstance(value, torch.Tensor) and value.dim() == 2):
        return TiedHead(value)
    return value if isinstance(value, nn.Module) else None


def _named(model: nn.Module, attr: str, kind: str) -> tuple[str, nn.Module]:
    """``(attr, module)`` for ``--norm ATTR`` / ``--head ATTR`` (``kind`` "norm" or "head"); a head named by an
    nn.Embedding or a 2-D weight (V, C) is read as a head tied to it (:class:`TiedHead`).

    Raises:
        DepthlabError: ``attr`` names no attribute of the model, or one that is not a module (a tensor, say),
            in one line with the model's candidates (:func:`_candidates`).
    """
    seen = _seen(model, kind)
    if not attr.strip():  # get_submodule("") is the model itself, which would pass for a norm or a head
        what = "final norm" if kind == "norm" else "head"
        raise DepthlabError(f"--{kind} {attr!r}: an empty name; give the dotted name of the model's {what}"
                            + (f" ({seen})" if seen else ""))
    owner, _, last = attr.rpartition(".")
    try:
        value = getattr(model.get_submodule(owner), last)
    except AttributeError:
        value, what = None, f"the model has no submodule {attr!r}"
    else:
        what = f"its {attr!r} is a {type(value).__name__}, not a module"
    module = _as_module(value, kind) if value is not None else None
    if module is None:
        raise DepthlabError(f"--{kind} {attr}: {what}" + (f"; {seen}" if seen else "")) from None
    return attr, module


def layer_access(model: nn.Module, blocks_attr: Optional[str] = None, norm_attr: Optional[str] = None,
                 head_attr: Optional[str] = None) -> LayerAccess:
    """The blocks, final norm and head of depthlab's GPT, or of a user's model that exposes them.

    Args:
        model: depthlab's GPT or any module.
        blocks_attr: the dotted name of the model's list of blocks (``--blocks``, e.g. ``encoder.layers``);
            None = found as ``depthlab check`` finds it (:func:`~depthlab.analytics.check.flow.find_blocks`).
        norm_attr, head_attr: the dotted names of the final norm and the head (``--norm``, ``--head``, e.g.
            ``encoder.norm``); None = found by :data:`NORM_NAMES` / :data:`HEAD_NAMES`.

    Raises:
        DepthlabError: a ``blocks_attr`` that names no list of blocks (find_blocks' refusals, as ``depthlab
            check --blocks`` says them), a ``norm_attr`` / ``head_attr`` that names no module, or a model without
            a list of blocks, a final norm or a head by those names (one line saying what ``depthlab layers``
            needs and the options that name them).
    """
    if isinstance(model, GPT) and blocks_attr is None and norm_attr is None and head_attr is None:
        return LayerAccess(list(model.transformer.h), model.transformer.ln_f, model.lm_head,
                           ("transformer.h", "transformer.ln_f", "lm_head"))
    blocks_name, blocks = find_blocks(model, blocks_attr)
    norm = _named(model, norm_attr, "norm") if norm_attr is not None else _get(model, NORM_NAMES)
    head = _named(model, head_attr, "head") if head_attr is not None else _get(model, HEAD_NAMES)
    if not blocks or norm is None or head is None:
        missing = [w for w, ok in (("a list of blocks (an nn.ModuleList of one block class)", bool(blocks)),
                                   (f"a final norm ({' or '.join(NORM_NAMES)})", norm is not None),
                                   (f"a head ({' or '.join(HEAD_NAMES)})", head is not None)) if not ok]
        seen = [x for k, got in (("norm", norm), ("head", head)) if got is None and (x := _seen(model, k))]
        raise DepthlabError(f"layers: the model ({type(model).__name__}) lacks {' and '.join(missing)}; the lens and "
                            "the ablation need its blocks plus the final norm and head that read the stream after the "
                            "last one, named as GPT-2 / nanoGPT do (transformer.h, transformer.ln_f, lm_head) or "
                            "named with --blocks, --norm and --head (e.g. --blocks encoder.layers --norm encoder.norm)"
                            + "".join(f"; {x}" for x in seen) + "; `depthlab context` works on any model")
    return LayerAccess(blocks, norm[1], head[1], (blocks_name, norm[0], head[0]))


def lens_meaning(model: nn.Module, acc: LayerAccess) -> str:
    """What the lens of this model reads, in one sentence (variant-aware for depthlab's GPT)."""
    variant = getattr(getattr(model, "config", None), "variant", None) if isinstance(model, GPT) else None
    blocks, norm, head = acc.names
    if isinstance(acc.norm, nn.Identity):
        how = (f"the stream after each block through {head} alone ({norm} is the identity: this variant ends each "
               "block in its norm, or has none)")
    else:
        how = f"the stream after each block through {norm} + {head} (the logit lens)"
    if isinstance(acc.head, TiedHead):
        w = head if isinstance(acc.head.named, torch.Tensor) else f"{head}.weight"
        how += f"; {head} read as a tied head: logits = stream @ {w}.T, {w} (V, C)"
    if variant == "plain":
        how += ("; model.variant plain has no shortcut, so no stream passes around the blocks: each block's "
                "output is all the next one sees, and the lens reads the representation at that depth (the head "
                "was trained to read the last one only)")
    return how


def _first(out: Any) -> torch.Tensor:
    """A block's residual stream (B, T, C): its output, or the first element of the tuple it returns.

    Raises:
        DepthlabError: neither (:func:`depthlab.usermodel.first_tensor`).
    """
    return first_tensor(out, "layers: a block",
                        "the lens needs blocks that return the stream (B, T, C), or a tuple starting with it")


def _ce_sum(logits: torch.Tensor, y: torch.Tensor) -> float:
    """Summed cross-entropy (nats) of logits (B, T, V) against y (B, T), in float32."""
    return float(F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum"))


def _capture(model: nn.Module, acc: LayerAccess, x: torch.Tensor, y: torch.Tensor):
    """One forward of the model that keeps each block's call (args, kwargs) and output; hooks removed after.

    Returns:
        (logits (B, T, V), calls: [(args, kwargs)] per block, outs: [output (B, T, C)] per block).
    """
    calls: list = [None] * len(acc.blocks)
    outs: list = [None] * len(acc.blocks)
    handles = []
    for i, b in enumerate(acc.blocks):
        handles.append(b.register_forward_pre_hook(lambda m, a, k, i=i: calls.__setitem__(i, (a, k)), with_kwargs=True))
        handles.append(b.register_forward_hook(lambda m, a, o, i=i: outs.__setitem__(i, _first(o))))
    try:
        logits = window_logits(model, x, y, "layers")
    finally:
        for h in handles:
            h.remove()
    if any(c is None for c in calls) or any(not c[0] for c in calls):
        raise DepthlabError(f"layers: the model's forward did not call every block of {acc.names[0]} with the stream "
                            "as its first argument; the lens and the ablation need blocks called in order on the "
                            f"stream (when {acc.names[0]} is not the model's list of blocks, name that with --blocks)")
    return logits, calls, outs


def _lens(model: nn.Module, acc: LayerAccess, vocab: int):
    """The lens: a stream (B, T, C) -> logits (B, T, ``vocab``) through the final norm and the head.

    Raises:
        DepthlabError: the norm and head (found, or named by --norm / --head) fail on the stream or give no
            (B, T, V) logits: a module that is not the final norm or the head (``--norm decoder``), which would
            otherwise end in an 'unexpected' error or in losses that are not the model's.
    """
    _, norm, head = acc.names

    def refuse(what: str) -> DepthlabError:
        found = [x for k in ("norm", "head") if (x := _seen(model, k))]
        return DepthlabError(f"layers: the lens {norm} + {head} {what}; --norm and --head name the final norm and the "
                             "head the model's forward applies to the stream after its last block"
                             + "".join(f"; {x}" for x in found))

    def read(h: torch.Tensor) -> torch.Tensor:
        try:
            out = acc.head(acc.norm(h))
        except Exception as e:  # noqa: BLE001 - a wrong module named: its error, in the one line
            raise refuse(f"fails on the stream {tuple(h.shape)} after a block: {first_line(e)}") from None
        if not isinstance(out, torch.Tensor) or out.shape != (*h.shape[:-1], vocab):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise refuse(f"gives {got} from the stream {tuple(h.shape)}, not logits {(*h.shape[:-1], vocab)}")
        return out

    return read


def _batch(model: nn.Module, acc: LayerAccess, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Summed losses and squared norms of one batch (see :func:`measure_layers`)."""
    L = len(acc.blocks)
    logits, calls, outs = _capture(model, acc, x, y)
    read = _lens(model, acc, logits.shape[-1])
    ins = [c[0][0] for c in calls]
    lens = [_ce_sum(read(h), y) for h in [ins[0], *outs]]
    ablated = []
    for i in range(L):
        h = ins[i]  # block i is the identity: its input goes on
        for j in range(i + 1, L):
            a, k = calls[j]
            h = _first(acc.blocks[j](h, *a[1:], **k))
        ablated.append(_ce_sum(read(h), y))
    return {"model": _ce_sum(logits, y), "lens": lens, "ablated": ablated,
            "diff2": [float(((o.double() - i.double()) ** 2).sum()) for i, o in zip(ins, outs)],
            "in2": [float((i.double() ** 2).sum()) for i in ins]}


@torch.no_grad()
def measure_layers(model: nn.Module, batches, blocks_attr: Optional[str] = None,
                   norm_attr: Optional[str] = None, head_attr: Optional[str] = None) -> dict:
    """Logit lens, ablation and relative update of every block of ``model`` on ``batches``.

    Args:
        model: depthlab's GPT or a model :func:`layer_access` accepts.
        batches: ``(x, y)`` pairs (B, T) int64 (the run's val windows), each one forward (an iterable).
        blocks_attr: the dotted name of the list of blocks (``--blocks``); None = found (:func:`layer_access`).

    Returns:
        ``{"val_loss", "embedding_lens_loss", "blocks": [{"block", "lens_loss", "ablation_delta",
        "relative_update"}], "effective_depth", "n_layer", "lens", "embedding_has_position"}``: losses in
        nats per token (the model's own forward for ``val_loss``, final norm + head for the lens and the
        ablations); ``embedding_has_position`` is False for depthlab's GPT with rotary positions.

    Raises:
        DepthlabError: as :func:`layer_access`, blocks that do not return the stream, or a final norm and head
            that give no logits from it (:func:`_lens`).
    """
    acc = layer_access(model, blocks_attr, norm_attr, head_attr)
    was = model.training
    model.eval()
    tot: Optional[dict] = None
    n = 0
    try:
        for x, y in batches:
            b = _batch(model, acc, x, y)
            tot = b if tot is None else {k: (tot[k] + v if not isinstance(v, list) else
                                             [s + t for s, t in zip(tot[k], v)]) for k, v in b.items()}
            n += y.numel()
    finally:
        model.train(was)
    L, last = len(acc.blocks), tot["lens"][-1] / n
    _check_lens_reproduces(model, acc, last, tot["model"] / n)
    blocks = [{"block": i, "lens_loss": tot["lens"][i + 1] / n, "ablation_delta": tot["ablated"][i] / n - last,
               "relative_update": math.sqrt(tot["diff2"][i] / tot["in2"][i]) if tot["in2"][i] > 0 else None}
              for i in range(L)]
    return {"val_loss": tot["model"] / n, "embedding_lens_loss": tot["lens"][0] / n, "blocks": blocks,
            "lens_gap": last - tot["model"] / n,
            "effective_depth": sum(1 for b in blocks if block_role(b["ablation_delta"]) == "used"), "n_layer": L,
            "lens": lens_meaning(model, acc), "lens_head_only": isinstance(acc.norm, nn.Identity),
            # rotary positions enter inside attention: the stream before block 0 holds the token alone
            "embedding_has_position": not (isinstance(model, GPT) and model.config.position == "rope")}


LENS_GAP_GPT = 1e-3
"""Nats: the most float rounding moves the lens after depthlab's GPT's last block from its own loss."""
LENS_GAP = 0.05
"""Nats: how far the lens after the last block may be from the model's own val loss before ``layers`` refuses: a
final norm and head that do not reproduce the model's output (``--head emb`` on a model with its own head: 19.5
against 2.39) make every lens loss and ablation delta another model's, while a forward that scales its logits a
little after the head stays within it."""


def _check_lens_reproduces(model: nn.Module, acc: LayerAccess, last: float, val: float) -> None:
    """Refuse a lens whose loss after the last block is more than :data:`LENS_GAP` from the model's own (nats).

    Raises:
        DepthlabError: naming both losses, the modules used and the ones seen."""
    # depthlab's GPT applies exactly its ln_f and head after its last block: another norm's 0.03 nats was a
    # wrong --norm let through (the effective depth moved 3 -> 4); a user's model may add a little more
    if abs(last - val) <= (LENS_GAP_GPT if isinstance(model, GPT) else LENS_GAP):
        return
    _, norm, head = acc.names
    found = [x for k in ("norm", "head") if (x := _seen(model, k))]
    raise DepthlabError(f"layers: the lens {norm} + {head} does not reproduce the model's output: after the last "
                        f"block it gives a val loss of {last:.4f} nats, the model's own forward {val:.4f}, so every "
                        "lens loss and ablation delta would be another model's; --norm and --head name the final "
                        "norm and the head the model's forward applies to the stream after its last block"
                        + "".join(f"; {x}" for x in found))


def run_layers(run_dir: str | Path, which: str = "best", max_tokens: int = DEFAULT_MAX_TOKENS,
               blocks_attr: Optional[str] = None, norm_attr: Optional[str] = None,
               head_attr: Optional[str] = None) -> dict:
    """``depthlab layers RUN``: :func:`measure_layers` of the run's ``which`` weights on its val windows
    (``blocks_attr``, ``norm_attr``, ``head_attr``: ``--blocks``, ``--norm``, ``--head``, the dotted names of the
    model's list of blocks, final norm and head; None = found).

    Returns:
        :func:`measure_layers`'s keys plus ``unigram``, ``bigram`` (nats, None without baselines.json),
        ``weights`` (which file), ``windows``, ``tokens``, ``windows_described``, ``run_dir``, ``leak_check``
        (the record of the leak test before training, :func:`~depthlab.analytics.context.start_leak_record`),
        and ``source``, ``init`` (the run's ``model.source`` and ``model.init``).

    Raises:
        DepthlabError: not a run, no checkpoint, the corpus is gone, a model without blocks/norm/head (or an
            option that names none).
    """
    run = open_run(run_dir, max_tokens)
    leak = start_leak_record(run.run_dir)
    if isinstance(leak, dict) and leak.get("output_kind") and leak.get("output_summary"):
        # the lens decodes the stream into logits: a forward that ends in softmax was said to fail --norm/--head
        raise DepthlabError(f"layers: {leak['output_summary']} (the test before training found it), so no final norm "
                            "and head reproduce its output and the lens and ablation cannot read it: "
                            f"{leak.get('output_remedy') or 'return logits'}, and train it again")
    model, weights = load_weights(run.run_dir, which)
    res = measure_layers(model, run.windows.forward_batches(), blocks_attr, norm_attr, head_attr)
    model_cfg = run.config.get("model") if isinstance(run.config.get("model"), dict) else {}
    return {**res, "unigram": run.baseline("unigram"), "bigram": run.baseline("bigram"), "weights": weights,
            "leak_check": leak, "run_dir": str(run.run_dir),
            "baselines_from": run.baselines_from, "unit": run.unit,
            # what sets the depth of a model.source model is its code or --model.init, not model.n_layer
            "source": model_cfg.get("source"), "init": model_cfg.get("init"),
            "windows": run.windows.windows, "tokens": run.windows.tokens,
            "windows_described": run.windows.describe()}


def _vs(v: float, bg: Optional[float]) -> str:
    return f"{v - bg:+9.3f}" if bg is not None else ""


def _roles_words(res: dict) -> list[str]:
    """The lines of :func:`format_layers` on the blocks whose removal costs less than :data:`EFFECTIVE_DELTA`
    (:func:`block_role` ``idle``) or lowers the loss (``harmful``), and on embeddings that beat the whole model."""
    def which(blocks: list[dict]) -> str:
        return f"block {blocks[0]['block']}" if len(blocks) == 1 else \
            f"any one of blocks {', '.join(str(b['block']) for b in blocks)}"

    lines, knob = [], depth_setting(res)[0]
    idle = [b for b in res["blocks"] if block_role(b["ablation_delta"]) == "idle"]
    harmful = [b for b in res["blocks"] if block_role(b["ablation_delta"]) == "harmful"]
    if idle:
        lines.append(f"  removing {which(idle)} alone changes the loss by less than {EFFECTIVE_DELTA:g} nats on these "
                     "windows: the loss does not use what it computes (each measured alone, the others in place; "
                     f"`depthlab diagnose` shows whether the gradients there vanish, and {knob} sets the depth)")
    if harmful:
        by = ", ".join(f"{-b['ablation_delta']:.4f}" for b in harmful)
        lines.append(f"  removing {which(harmful)} alone lowers the loss (by {by} nats): what "
                     f"{'it computes makes' if len(harmful) == 1 else 'each computes makes'} the predictions worse "
                     "(each measured alone, the others in place; `depthlab diagnose` looks at how the run trained, "
                     f"and {knob} sets the depth)")
    gap = res["val_loss"] - res["embedding_lens_loss"]
    if round(gap, 3) >= EFFECTIVE_DELTA:
        lines.append(f"  the embeddings alone ({res['embedding_lens_loss']:.3f}) predict better than the whole model "
                     f"({res['val_loss']:.3f}): its blocks together make the predictions {gap:.3f} nats worse")
    return lines


def format_layers(res: dict) -> str:
    """The console text of :func:`run_layers`: one row per block, the effective depth and how to read it."""
    bg, ug, L = res.get("bigram"), res.get("unigram"), res["n_layer"]
    lines = [f"layers of {res['weights']} on {res['windows_described']}",
             f"val loss {res['val_loss']:.4f} nats/token (float32, these windows)"
             + (f"; baselines unigram {ug:.3f}, bigram {bg:.3f}" if bg is not None else "")
             + (f" ({res['baselines_from']})" if bg is not None and res.get("baselines_from", BASELINES) != BASELINES
                else ""),
             f"lens: {res['lens']}",
             "  block     lens" + ("  - bigram" if bg is not None else "") + "  ablation Δ  ‖out−in‖/‖in‖",
             f"  embed {res['embedding_lens_loss']:8.3f}{_vs(res['embedding_lens_loss'], bg)}           -            -"]
    for b in res["blocks"]:
        ru = f"{b['relative_update']:12.3f}" if b["relative_update"] is not None else "           -"
        lens = f"{b['lens_loss']:8.3f}{_vs(b['lens_loss'], bg)}"
        delta = b["ablation_delta"] if abs(b["ablation_delta"]) >= 5e-5 else 0.0  # "-0.0000" read as a loss
        lines.append(f"  {b['block']:5d} {lens}  {delta:+10.4f} {ru}")
    lines.append(f"effective depth: {res['effective_depth']} of {L} blocks cost >= {EFFECTIVE_DELTA:g} nats "
                 "when removed")
    lines += _roles_words(res)
    gap = res.get("lens_gap")
    if gap is not None and abs(gap) >= 5e-4:  # shown to 4 decimals: a lens that is not quite the model's output
        lines.append(f"  the lens after the last block reads {res['val_loss'] + gap:.4f} nats, the model's own forward "
                     f"{res['val_loss']:.4f} ({gap:+.4f}): the lens is not exactly the model's output, so each lens "
                     "loss and delta is off by about that much (--norm and --head name what the forward applies)")
    if bg is not None:
        where = " (and its position)" if res.get("embedding_has_position", True) else ""
        lines.append(f"  the embedding lens sees one {res.get('unit', 'character')}{where}, so it "
                     "cannot go below the best one-token predictor of the val split (at or below the bigram "
                     "line, which is fitted on the train split); a lens below that is context that the blocks up to "
                     "there have brought in")
    caveat = leak_caveat(res, "a lens below that line")
    return "\n".join(lines + ([f"  {caveat}"] if caveat else []))

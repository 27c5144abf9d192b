"""gradient_flow: depthlab's probe at initialisation on the blocks of a model depthlab did not write.

The blocks are the longest ``ModuleList`` / ``Sequential`` / ``ModuleDict`` whose entries are all
modules of one class, with parameters, and which is not inside another such container (so the
attention heads inside each block do not win over the blocks), or the container named by
``--blocks ATTR``. Per block, as ``depthlab probe`` measures them: the L2 norm of the gradient over
the block's parameters, the mean |grad|, the weight norm, and of the block's output the RMS, the
rank measure and the token cosine (:mod:`depthlab.analytics.activations`). The verdicts are the
probe's own (:func:`depthlab.analytics.probe.probe_verdicts`: vanishing or exploding gradients,
activations that underflow, grow or shrink, rank collapse).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn

from ...errors import DepthlabError
from ..activations import rank_measure, rms, token_cosine
from ..probe import PROBE_BATCH_SIZE, PROBE_BATCHES, RANK_DROP, RANK_LOW, probe_verdicts  # noqa: F401
from .finite import nonfinite_result
from .subject import CheckResult, Subject, call_user

__all__ = ["find_blocks", "gradient_flow_rule"]

_CONTAINERS = (nn.ModuleList, nn.Sequential, nn.ModuleDict)


def _entries(m: nn.Module) -> list[nn.Module]:
    return list(m.values()) if isinstance(m, nn.ModuleDict) else list(m.children())


def _uniform(m: nn.Module) -> bool:
    e = _entries(m)
    return bool(e) and all(type(c) is type(e[0]) for c in e) and all(any(True for _ in c.parameters()) for c in e)


def find_blocks(model: nn.Module, attr: Optional[str] = None) -> tuple[Optional[str], list[nn.Module]]:
    """(name, blocks): the model's stack of blocks, or (None, []) when there is none.

    Args:
        model: any module.
        attr: the container's dotted name (``transformer.h``) instead of the search.

    Raises:
        DepthlabError: ``attr`` names no submodule, one without entries, or no container of modules of one class.
    """
    if attr == "":  # get_submodule('') is the model itself: "GPT '' is one module" named no empty flag
        lists = [n for n, c in model.named_modules() if n and isinstance(c, _CONTAINERS) and _uniform(c)]
        raise DepthlabError("--blocks '': an empty name; give the dotted name of the ModuleList, Sequential or "
                            "ModuleDict of the blocks" + (f" (this model's: {', '.join(lists[:8])})" if lists else ""))
    if attr is not None:
        try:
            m = model.get_submodule(attr)
        except AttributeError:
            # only lists that --blocks takes: a block's MLP Sequential (Linear, GELU, Linear) would be refused
            names = [n for n, c in model.named_modules() if isinstance(c, _CONTAINERS) and n and _uniform(c)]
            raise DepthlabError(f"--blocks {attr}: the model has no submodule {attr!r}"
                                + (f"; its containers: {', '.join(names[:8])}" if names else "")) from None
        blocks = _entries(m)
        if not blocks:
            raise DepthlabError(f"--blocks {attr}: {type(m).__name__} {attr!r} has no entries; name the list of blocks")
        kinds = sorted({type(b).__name__ for b in blocks})
        if not isinstance(m, _CONTAINERS) or len(kinds) > 1:
            # one module's parts (a block's norms, attention and MLP) are no stack: "block 0 .. 4" would be untrue
            what = "is one module, not a list of blocks" if not isinstance(m, _CONTAINERS) else \
                f"holds modules of {len(kinds)} classes ({', '.join(kinds)}), not one block repeated"
            lists = [n for n, c in model.named_modules() if n and isinstance(c, _CONTAINERS) and _uniform(c)]
            raise DepthlabError(f"--blocks {attr}: {type(m).__name__} {attr!r} {what}; name the ModuleList, "
                                "Sequential or ModuleDict of the blocks"
                                + (f" (this model's: {', '.join(lists[:8])})" if lists else ""))
        return attr, blocks
    found = [(n, c) for n, c in model.named_modules() if isinstance(c, _CONTAINERS) and _uniform(c)]
    outer = [(n, c) for n, c in found if not any(o != n and (o == "" or n.startswith(o + ".")) for o, _ in found)]
    if not outer:
        return None, []
    name, best = max(outer, key=lambda nc: len(_entries(nc[1])))  # max keeps the first of equal lengths
    return name or "(the model itself)", _entries(best)


def _output(out) -> Optional[torch.Tensor]:
    if isinstance(out, (tuple, list)) and out:
        out = out[0]
    return out if isinstance(out, torch.Tensor) else None


def _measure(subject: Subject, model: nn.Module, blocks: list[nn.Module]) -> dict:
    """Probe-shaped result: loss and per-block gradient and activation statistics (means over batches)."""
    L, n = len(blocks), PROBE_BATCHES
    acts: dict[int, torch.Tensor] = {}
    hooks = [b.register_forward_hook(lambda _m, _i, out, i=i: acts.__setitem__(i, _output(out))) for i, b in
             enumerate(blocks)]
    acc = {k: [0.0] * L for k in ("act_rms", "rank_measure", "token_cosine")}
    undefined = [False] * L
    loss_sum = 0.0
    rng = subject.rng(8)
    try:
        for _ in range(n):
            x, y = subject.batch(subject.free_batch(PROBE_BATCH_SIZE), subject.T, rng)
            acts.clear()
            loss = subject.loss(model, x, y)
            if loss.requires_grad:
                call_user((loss / n).backward)
            loss_sum += float(loss.detach())
            for i in range(L):
                a = acts.get(i)
                rm = rank_measure(a) if a is not None and a.dim() == 3 else math.nan
                tc = token_cosine(a) if a is not None and a.dim() == 3 else math.nan
                acc["act_rms"][i] += (rms(a) if a is not None else math.nan) / n
                undefined[i] |= not (math.isfinite(rm) and math.isfinite(tc))
                acc["rank_measure"][i] += (rm if math.isfinite(rm) else 0.0) / n
                acc["token_cosine"][i] += (tc if math.isfinite(tc) else 0.0) / n
    finally:
        for h in hooks:
            h.remove()
    layers = []
    for i, b in enumerate(blocks):
        ps = list(b.parameters())
        g = [p.grad.detach().float() if p.grad is not None else torch.zeros(()) for p in ps]
        layers.append({"block": i, "grad_norm": math.sqrt(sum(float(t.pow(2).sum()) for t in g)),
                       "mean_abs_grad": sum(float(t.abs().sum()) for t in g) / max(1, sum(p.numel() for p in ps)),
                       "weight_norm": math.sqrt(sum(float(p.detach().float().pow(2).sum()) for p in ps)),
                       "act_rms": acc["act_rms"][i], "attn_out_rms": None, "mlp_out_rms": None,
                       "rank_measure": None if undefined[i] else acc["rank_measure"][i],
                       "token_cosine": None if undefined[i] else acc["token_cosine"][i]})
    return {"loss": loss_sum / n, "layers": layers}


def _native_config(model: nn.Module) -> dict:
    """depthlab's own GPT: the config fields the probe's verdicts read (ReZero's gates, the norm's eps)."""
    cfg = getattr(model, "config", None)
    keys = ("variant", "norm", "n_layer", "n_embd", "init")
    if cfg is None or not all(hasattr(cfg, k) for k in keys) or type(model).__name__ != "GPT":
        return {}
    return {k: getattr(cfg, k) for k in keys}


def _norm_eps(model: nn.Module) -> Optional[float]:
    for m in model.modules():
        if isinstance(m, (nn.LayerNorm, nn.RMSNorm)):
            return float(m.eps) if m.eps is not None else float(torch.finfo(torch.float32).eps)
    return None


def gradient_flow_rule(subject: Subject, blocks_attr: Optional[str] = None) -> CheckResult:
    """The init probe on the model's blocks: per-block gradient norm, activation RMS, rank measure, verdicts."""
    torch.manual_seed(subject.seed)
    model = subject.fresh().eval()
    name, blocks = find_blocks(model, blocks_attr)
    if not blocks:
        return CheckResult("gradient_flow", None, {
            "summary": "not run: no blocks found (no ModuleList, Sequential or ModuleDict of modules of one class); "
                       "name the list of blocks with --blocks ATTR"},
            "keep the blocks in an nn.ModuleList (self.blocks = nn.ModuleList(Block(...) for _ in range(n_layer))) "
            "or give --blocks ATTR")
    result = _measure(subject, model, blocks)
    result["config"], result["norm_eps"] = _native_config(model), _norm_eps(model)
    lay = result["layers"]
    desc = f"{name} ({len(blocks)} x {type(blocks[0]).__name__})"
    bad = [r["block"] for r in lay if not all(math.isfinite(r[k]) for k in ("grad_norm", "act_rms"))]
    if bad or not math.isfinite(result["loss"]):
        # the probe's verdicts would call this a depth problem; a NaN says nothing about depth
        return nonfinite_result("gradient_flow", f"{desc}: at initialisation the loss is {result['loss']:.4g} and "
                                                 f"the gradient norm or activation RMS of block(s) {bad[:8]} is not "
                                                 "finite", {"blocks": desc, "loss": result["loss"]})
    problems, fine = probe_verdicts(result)
    big = max(r["act_rms"] for r in lay)
    if big > LARGE_INIT_RMS and not problems:  # level across depth, so no verdict of the probe's saw it
        problems = [f"the blocks' outputs start at RMS up to {big:.3g}, where small-init weights (GPT-2's std 0.02, "
                    "or nn.Linear's default) keep the stream near 1 or below: weights initialised far too large "
                    "(std 1.0 makes every layer multiply the scale by about sqrt(fan_in))"]
    ev = {"blocks": desc, "loss": result["loss"], "verdicts": problems or fine,
          "layers": [{k: r[k] for k in ("block", "grad_norm", "act_rms", "rank_measure", "token_cosine")} for r in lay]}
    head = (f"{desc}: gradient norm {lay[0]['grad_norm']:.2e} (block 0) .. {lay[-1]['grad_norm']:.2e} "
            f"(block {len(lay) - 1}), activation RMS {lay[0]['act_rms']:.3g} .. {lay[-1]['act_rms']:.3g}")
    if not problems:
        return CheckResult("gradient_flow", True, {"summary": f"{head}; " + "; ".join(fine) + " in range", **ev})
    text = " ".join(problems)
    remedy = SHORTCUT_FIX
    cut = _cut_graph(lay)
    if cut and len(cut) == len(lay):  # not depth: nothing flows back through the graph at all
        text = (f"every block's gradient is exactly 0 (loss {result['loss']:.3f} nats): no gradient reaches the "
                "blocks, so none of them can learn")
        remedy = CUT_GRAPH_FIX
    elif cut:  # some blocks only, every output alive: a .detach() after them, not depth (the model has shortcuts)
        text = (f"the gradient is exactly 0 in block{'s' if len(cut) > 1 else ''} {', '.join(map(str, cut))} while "
                "every block's output is alive: the graph is cut after them, so they cannot learn")
        remedy = CUT_GRAPH_FIX.replace("in every block means the blocks' output is cut",
                                       "in a block whose output is alive means its output is cut").replace(
            "between the blocks and the head", "after that block (in it, or between it and the head)")
    elif text.startswith("the blocks' outputs start at RMS"):
        remedy = ("initialise every weight small: nn.init.normal_(m.weight, std=0.02) on each nn.Linear and "
                  "nn.Embedding (GPT-2's init), or leave nn.Linear's default; not std=1.0")
    elif text.startswith("exploding") or "grow" in text.split(":")[0]:
        remedy = "scale the blocks' initial weights down (e.g. std 0.02) and normalise the stream (pre-norm)"
    return CheckResult("gradient_flow", False, {"summary": f"{head}; {text}", **ev}, remedy)


LARGE_INIT_RMS = 30.0
"""A block output RMS at initialisation above this is weights initialised far too large: GPT-2's std 0.02 or
nn.Linear's default keep the stream near 1 or below (nn.Embedding's default std 1 gives about 1); std 1.0 on every
Linear of a 64-wide model measured 112 to 153."""

ALIVE_RMS = 1e-3
"""A block output RMS above this is a signal, not one that underflowed on its way down a deep stack."""


def _cut_graph(lay: list[dict]) -> list[int]:
    """The blocks whose gradient is exactly 0 while every block's output is alive (RMS above :data:`ALIVE_RMS`):
    the gradient is not lost to depth (a deep stack without shortcuts underflows its activations to 0 first), the
    graph is cut between them and the loss; [] when none (or some output is not alive)."""
    if not all(r["act_rms"] > ALIVE_RMS for r in lay):
        return []
    return [r["block"] for r in lay if r["grad_norm"] == 0]


SHORTCUT_FIX = ("give each sublayer a shortcut so the signal and the gradient have a path that does not shrink with "
                "depth: x = x + attn(norm(x)); x = x + mlp(norm(x)) (pre-norm); or fewer blocks")
CUT_GRAPH_FIX = ("not the depth: a gradient of exactly 0 in every block means the blocks' output is cut from the "
                 "graph on its way to the loss: look for .detach(), torch.no_grad(), .data, or a tensor rebuilt from "
                 ".tolist() / .numpy() / .item() between the blocks and the head (see no_gradient)")

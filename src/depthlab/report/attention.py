"""The attention-pattern figure of a run: the best checkpoint's attention weights on a short text.

The one run figure that loads the model (the others read only the records); written like every
figure through :mod:`depthlab.figures`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from ..errors import DepthlabError
from ..figures import MAX_W, drawable, new_figure, panel_grid, save_run_figure
from .run_data import RunData, as_run_data

__all__ = ["plot_attention", "HEADS_PER_ROW"]


def _show_char(c: str) -> str:
    """A tick label for the character ``c``: a sign for white space, ``·`` for a control character, the code
    point (``U+4E16``) for one the monospace font cannot draw (:func:`~depthlab.figures.drawable`)."""
    return {"\n": "↵", " ": "␣", "\t": "⇥"}.get(c, drawable(c, "monospace", brackets=False) if c.isprintable()
                                                 else "·")


def _val_snippet(run: RunData, tok, length: int) -> Optional[str]:
    """``length`` characters of the validation split, starting after its first line break."""
    from ..config import RunConfig, as_ran
    from ..data import load_corpus

    from ..rundir import RunDir

    try:
        cfg = RunConfig.from_dict(as_ran(run.config))
        corpus = load_corpus(cfg.data, seed=cfg.train.seed)
        corpus.check_block_size(cfg.model.block_size)  # the val split training used (a short one is enlarged)
    except Exception:  # noqa: BLE001 - corpus moved or config from another version: no snippet
        return None
    if RunDir.corpus_changed_in(run.config, corpus.sha256):  # an edited corpus's text is not the run's val split
        return None
    val = corpus.val
    head = corpus.tokenizer.decode([int(i) for i in val[: 400 + length]])
    start = head.find("\n") + 1 if "\n" in head[:200] else 0
    text = head[start: start + length]
    if len(text) < 2 or any(c not in tok.stoi for c in text):
        return None
    return text


def plot_attention(run: str | Path | RunData, snippet: Optional[str] = None,
                   max_len: int = 24) -> Optional[Path]:
    """Attention weights, one heatmap per head, of the first and the last block on a short text.

    Loads the best checkpoint, registers forward hooks on ``transformer.h[i].attn.hook_pattern``
    (removed afterwards) and runs one forward pass; rows are query positions, columns the keys
    they attend to, both labelled with the snippet's characters (↵ newline, ␣ space).

    Args:
        run: a run directory or its :class:`RunData`.
        snippet: text to look at; default: up to ``max_len`` characters of the validation split.
        max_len: longest snippet, in characters (also capped by the model's block_size).

    Returns:
        ``run_dir/plots/attention.png``, or ``None`` without a checkpoint, or when no snippet
        can be encoded with the run's vocabulary.

    Raises:
        DepthlabError: ``run`` is not a run directory.
    """
    import torch

    from ..sample import load_run

    run = as_run_data(run)
    if ((run.config or {}).get("model") or {}).get("source"):
        return None  # the attention pattern is read from depthlab's GPT's hook points only
    try:
        model, tok = load_run(run.run_dir, "best", fallback_warning=False)  # the report's own warning says it
    except DepthlabError:
        return None
    if not hasattr(tok, "stoi"):  # the labels are characters: a BPE run gets no attention figure (yet)
        return None
    T = min(max_len, model.config.block_size)
    text = snippet[:T] if snippet else (_val_snippet(run, tok, T) if run.config else None)
    if text is None or len(text) < 1 or any(c not in tok.stoi for c in text):
        return None
    blocks = sorted({0, model.config.n_layer - 1})
    pats: dict[int, torch.Tensor] = {}
    handles = []
    try:
        for b in blocks:
            def hook(_m, _inp, out, b=b):
                pats[b] = out.detach().float().cpu()
            handles.append(model.transformer.h[b].attn.hook_pattern.register_forward_hook(hook))
        with torch.no_grad():
            model(torch.tensor([tok.encode(text)], dtype=torch.long))
    finally:
        for h in handles:
            h.remove()
    if not pats:
        return None
    fig = _attention_grid(pats, blocks, model.config.n_head, text)
    shown = text.replace("\n", "↵")
    return save_run_figure(fig, run.run_dir, "attention", f"Attention patterns, first and last block — {run.title()}",
                           f"best checkpoint on the validation text “{shown}”; causal: no weight above the diagonal")


HEADS_PER_ROW = 4
"""Attention heads side by side; more heads wrap onto further rows, so the figure fits ``MAX_W``."""


def _attention_grid(pats: dict, blocks: list[int], nh: int, text: str):
    """A figure of one heatmap per (block, head), at most :data:`HEADS_PER_ROW` heads per row.

    Args:
        pats: block index -> attention weights (1, nh, T, T).
        blocks: the blocks to show, in order.
        nh: heads per block.
        text: the snippet (T characters) labelling both axes.

    Returns:
        The figure, at most :data:`MAX_W` inches wide.
    """
    per_row = min(nh, HEADS_PER_ROW)
    rows_per_block = math.ceil(nh / per_row)
    cell = min(0.11 * len(text) + 0.7, (MAX_W - 1.3) / per_row)  # inches per heatmap
    font = 7 if cell >= 0.1 * len(text) + 0.4 else 6
    labels = [_show_char(c) for c in text]
    nrows = len(blocks) * rows_per_block
    fig = new_figure((min(1.3 + cell * per_row, MAX_W), 0.9 + (cell + 0.25) * nrows))
    axes = panel_grid(fig, nrows=nrows, ncols=per_row)
    im = None
    for k, b in enumerate(blocks):
        P = pats[b][0]  # (nh, T, T)
        for h in range(nh):
            r, c = k * rows_per_block + h // per_row, h % per_row
            ax = axes[r, c]
            ax.grid(False)
            im = ax.imshow(P[h].numpy(), cmap="cividis", vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks(range(len(text)), labels, fontsize=font, family="monospace",
                          rotation=90 if max(map(len, labels)) > 1 else 0)  # U+XXXX labels would overlap
            ax.set_yticks(range(len(text)), labels, fontsize=font, family="monospace")
            ax.tick_params(length=0, pad=1)
            ax.set_title(f"block {b}, head {h}", fontsize=9)
            if c == 0:
                ax.set_ylabel("query (predicting after this char)", fontsize=8)
            if r == nrows - 1 or (h // per_row == rows_per_block - 1 and k == len(blocks) - 1):
                ax.set_xlabel("key (attended-to char)", fontsize=8)
        for h in range(nh, rows_per_block * per_row):  # empty slots of the last row
            axes[k * rows_per_block + h // per_row, h % per_row].set_axis_off()
    cb = fig.colorbar(im, ax=axes, pad=0.01, fraction=0.03, shrink=0.8)
    cb.set_label("attention weight (rows sum to 1)")
    return fig

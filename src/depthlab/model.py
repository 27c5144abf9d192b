"""A GPT (decoder-only transformer) whose residual/norm wiring is a config value.

Notation used in shape comments:
    B  batch size            T  sequence length (<= block_size)
    C  n_embd (residual width)  nh n_head   hs head size = C // nh
    V  vocab_size            L  n_layer

State-dict names follow GPT-2 (``transformer.wte``, ``.wpe``, ``.h.{i}.ln_1``, ``attn.c_attn``,
``attn.c_proj``, ``ln_2``, ``mlp.c_fc``, ``mlp.c_proj``, ``transformer.ln_f``, ``lm_head``) so a
pre-LN model maps to Hugging Face's GPT-2 with only the usual Conv1D transposes; Peri-LN's output
norms, which GPT-2 lacks, are ``ln_1_out`` / ``ln_2_out``, and the embedding scale (``model.embed_scale``)
is ``transformer.emb_scale.scale``.
Hook points (identity modules, TransformerLens names) let observers read activations without
changing the maths; see :mod:`depthlab.analytics.activations`.

Generation may keep the keys and values of the positions already seen in a :class:`KVCache`
(:meth:`GPT.forward_cached`), so each new token costs one position's forward instead of the
whole context's; the logits are the same function as :meth:`GPT.forward`'s (tests: 1e-5).
"""

from __future__ import annotations

import math
from functools import lru_cache, partial
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig
from .errors import DepthlabError

__all__ = ["ModelConfig", "HookPoint", "CausalSelfAttention", "MLP", "Block", "GPT", "KVCache", "DecodePlan",
           "make_norm", "wire", "branch_scale", "norm_factor", "DyT", "DYT_ALPHA0", "EmbedScale",
           "FINAL_NORM_VARIANTS", "require_float32_default"]


def require_float32_default(what: str) -> None:
    """Refuse to build a model while torch's default dtype is not float32: depthlab's models, checkpoints and
    records are float32 (``train.dtype`` autocasts from there), and a process-wide ``torch.set_default_dtype(
    torch.float64)`` silently trained float64 weights while every record said float32.

    Raises:
        DepthlabError: naming ``what`` was asked and the fix.
    """
    dtype = torch.get_default_dtype()
    if dtype != torch.float32:
        raise DepthlabError(f"{what}: torch's default dtype is {dtype} in this process (torch.set_default_dtype), and "
                            "depthlab builds its models in float32 (train.dtype sets the training's precision); "
                            "call torch.set_default_dtype(torch.float32) first")


#: DyT's initial alpha (Zhu et al. 2025's default for its non-LLM models)
DYT_ALPHA0 = 0.5
#: the variants whose residual stream is never normalised inside the blocks, so the GPT ends in ``ln_f``
FINAL_NORM_VARIANTS = ("prenorm", "periln")


class HookPoint(nn.Module):
    """Identity module: a named place where forward hooks may observe a tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``x`` unchanged (any shape)."""
        return x


class RMSNorm(nn.RMSNorm):
    """RMSNorm (Zhang & Sennrich 2019) computed in float32: y = x / sqrt(mean(x^2) + eps) * weight.

    Under bf16 autocast torch runs LayerNorm in float32 but leaves ``rms_norm`` to mixed dtypes
    (bf16 input, fp32 weight), which cannot use the fused kernel and warns on every call. Casting
    the input to float32 here gives the fused kernel, the same precision as LayerNorm under
    autocast, and a float32 output (B, T, C) like LayerNorm's.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` (..., C) over C; returns float32 (..., C)."""
        w = self.weight.float() if self.weight is not None else None
        return F.rms_norm(x.float(), self.normalized_shape, w, self.eps)


class DyT(nn.Module):
    """Dynamic Tanh, a normalisation layer without statistics: y = weight * tanh(alpha * x) + bias.

    Zhu, Chen, He, LeCun & Liu 2025, "Transformers without Normalization" (eq. 1): alpha is one
    learnable scalar per layer, initialised to alpha0 = 0.5 (the paper's default for its non-LLM
    models); weight (gamma) starts at ones and bias (beta) at zeros, per channel. For LLaMA the
    authors tune alpha0 per site and width (the 7B model: 0.8 before attention, 0.2 before the MLP
    and at the final norm; smaller for wider models); at depthlab's widths the default 0.5 is used
    everywhere. ``bias`` follows ``model.bias``, as LayerNorm's does here, so DyT and LayerNorm
    runs have the same affine parameters.

    Args:
        n_embd: C, the channels. bias: whether beta exists. alpha0: alpha's initial value.
    """

    def __init__(self, n_embd: int, bias: bool, alpha0: float = DYT_ALPHA0):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), alpha0))
        self.weight = nn.Parameter(torch.ones(n_embd))
        self.bias = nn.Parameter(torch.zeros(n_embd)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (..., C). Returns: (..., C), each element squashed into weight * (-1, 1) + bias."""
        y = torch.tanh(self.alpha * x) * self.weight
        return y if self.bias is None else y + self.bias


class EmbedScale(nn.Module):
    """The embedding output times one learnable scalar (``model.embed_scale``, see :class:`ModelConfig`).

    ``scale`` is a 0-dim parameter; :class:`GPT` initialises it to 1 / the RMS of its initial token embeddings so
    the residual stream starts at RMS ~1, as the DyT authors' LLaMA code does (its embeddings at std n_embd^-1/2
    times sqrt(n_embd)). It takes no weight decay (a scalar, as the norms' gains).
    """

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (..., C). Returns: x * scale, same shape."""
        return x * self.scale


def make_norm(cfg: ModelConfig) -> nn.Module:
    """The configured normalisation over the last dim C: LayerNorm, RMSNorm, DyT or identity."""
    if cfg.norm == "layernorm":
        return nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.n_embd)
    if cfg.norm == "dyt":
        return DyT(cfg.n_embd, cfg.bias)
    return nn.Identity()


def branch_scale(cfg: ModelConfig) -> float:
    """The factor s each branch is multiplied by (``cfg.residual_scale``; see :class:`Block`): 1 or 1/sqrt(2L)."""
    return 1.0 / math.sqrt(2 * cfg.n_layer) if cfg.residual_scale == "depth" else 1.0


def norm_factor(cfg: ModelConfig, layer: int) -> float:
    """Block ``layer``'s (0-based) norm-output factor (``cfg.norm_scale``): 1, or 1/sqrt(layer + 1)."""
    return 1.0 / math.sqrt(layer + 1) if cfg.norm_scale == "depth" else 1.0


def _times(fn: Callable[[torch.Tensor], torch.Tensor], c: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """``fn`` followed by multiplication by ``c`` (``fn`` itself when c is 1, so defaults stay bit-identical)."""
    return fn if c == 1.0 else (lambda x: fn(x) * c)


class KVCache:
    """Keys and values of the positions already encoded, one buffer pair per block (generation only).

    Position ``t`` of the sequence being generated is stored at index ``t`` of every buffer, so
    with learned absolute positions the cache holds at most ``block_size`` positions; what a
    generator does when it is full is its choice (see :func:`depthlab.sample.generate`).

    Args:
        cfg: the model's config (n_layer, n_head, block_size, head_size).
        batch_size: B, rows generated together.
        device, dtype: where and in which dtype to keep the buffers (the model's parameters').

    Attributes:
        k, v: per block, (B, nh, block_size, hs); only ``[:, :, :pos]`` is meaningful.
        pos: number of positions encoded so far (0 <= pos <= block_size).
    """

    def __init__(self, cfg: ModelConfig, batch_size: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32):
        shape = (batch_size, cfg.n_head, cfg.block_size, cfg.head_size)  # (B, nh, T_max, hs)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layer)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layer)]
        self.block_size = cfg.block_size
        self.pos = 0
        self.decode_plan: Optional[DecodePlan] = None  # made by GPT.forward_cached at the first single-id step

    @property
    def free(self) -> int:
        """Positions still free (block_size - pos)."""
        return self.block_size - self.pos

    def reset(self) -> None:
        """Forget every position (the buffers are reused, not cleared: pos bounds what is read)."""
        self.pos = 0

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Block ``i``'s (k buffer, v buffer, pos) for :meth:`CausalSelfAttention.forward`."""
        return self.k[i], self.v[i], self.pos


def causal_bias(T: int, S: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(T, S) additive causal mask: 0 where query i (position S - T + i) may see key j, -inf elsewhere.

    Made once per shape, dtype and device and shared (callers only read it): building it took five
    small ops per block and step, ~2 % of a step at nanoGPT's CPU shape (torch.profiler, Zen 4). Built
    in place while torch.compile traces (a graph constant there, not a Python cache).
    """
    if torch.compiler.is_compiling():
        return _causal_bias(T, S, dtype, device)
    return _cached_causal_bias(T, S, dtype, device)


def _causal_bias(T: int, S: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    keep = torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)
    return torch.zeros(T, S, device=device).masked_fill_(~keep, float("-inf")).to(dtype)


@lru_cache(maxsize=16)
def _cached_causal_bias(T: int, S: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    with torch.inference_mode(False), torch.no_grad():  # a plain tensor even when first asked for in sampling
        return _causal_bias(T, S, dtype, device)


#: the base of the rotary angles, theta_i = base^(-2i / hs) (Su et al. 2021; GPT-NeoX and Llama use it too)
ROPE_BASE = 10000.0


def rotary_table(n: int, hs: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles p * theta_i for positions p = 0..n-1, each (n, hs // 2).

    theta_i = ROPE_BASE^(-2i / hs), i = 0..hs/2 - 1 (Su et al. 2021, RoFormer, eq. 15), computed in float32 and
    cast to ``dtype``. Made once per size, dtype and device and shared, as :func:`causal_bias` is.
    """
    if torch.compiler.is_compiling():
        return _rotary_table(n, hs, dtype, device)
    return _cached_rotary_table(n, hs, dtype, device)


def _rotary_table(n: int, hs: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    theta = ROPE_BASE ** (-torch.arange(0, hs // 2, dtype=torch.float32, device=device) / (hs // 2))  # (hs/2,)
    angle = torch.arange(n, dtype=torch.float32, device=device)[:, None] * theta[None, :]  # (n, hs/2)
    return angle.cos().to(dtype), angle.sin().to(dtype)


@lru_cache(maxsize=16)
def _cached_rotary_table(n: int, hs: int, dtype: torch.dtype, device: torch.device
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.inference_mode(False), torch.no_grad():
        return _rotary_table(n, hs, dtype, device)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each head vector's coordinate pairs (j, j + hs/2) by its position's angles.

    Args:
        x: (..., T, hs), queries or keys; cos, sin: (T, hs/2), the rows of :func:`rotary_table` for x's positions.

    Returns:
        (..., T, hs). Pairs (j, j + hs/2) rather than RoFormer's (2j, 2j + 1): the same rotation of permuted
        coordinates, as GPT-NeoX and Llama pair them, so q.k depends on the positions only through their distance.
        The same numbers as :func:`rotate` with :func:`rotary_rows`' tables, which the model uses.
    """
    return rotate(x, torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1))


def rotary_rows(n: int, hs: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rotary_table` laid out for :func:`rotate`: ``(cat(cos, cos), cat(-sin, sin))``, each (n, hs).

    Made once per size, dtype and device and shared, as :func:`rotary_table` is.
    """
    if torch.compiler.is_compiling():
        return _rotary_rows(n, hs, dtype, device)
    return _cached_rotary_rows(n, hs, dtype, device)


def _rotary_rows(n: int, hs: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = _rotary_table(n, hs, dtype, device)
    return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)


@lru_cache(maxsize=16)
def _cached_rotary_rows(n: int, hs: int, dtype: torch.dtype, device: torch.device
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.inference_mode(False), torch.no_grad():
        return _rotary_rows(n, hs, dtype, device)


def rotate(x: torch.Tensor, cos2: torch.Tensor, sin2: torch.Tensor) -> torch.Tensor:
    """:func:`apply_rotary` with :func:`rotary_rows`' tables: x cos2 + (x2 | x1) sin2, x = (x1 | x2).

    Args:
        x: (..., T, hs), any strides; cos2, sin2: (T, hs), the rows of :func:`rotary_rows` for x's positions.

    Returns:
        (..., T, hs), contiguous: x1 cos - x2 sin | x2 cos + x1 sin, bit for bit (a - b and a + (-b) round
        alike). Four ops where the two halves' form takes seven: at nanoGPT's CPU shape the queries and keys,
        rotated together, had cost ~60 small ops per step, each ~10-25 us on a CPU whatever its size.
    """
    x1, x2 = x.chunk(2, dim=-1)
    # the contiguous operand first: the sum takes its layout (x may be a permuted view)
    return torch.cat((x2, x1), dim=-1) * sin2 + x * cos2


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention (Vaswani et al. 2017), fused q/k/v projection.

    Uses ``F.scaled_dot_product_attention(is_causal=True)`` unless the weights are observed
    (a hook on ``hook_pattern``) or ``explicit`` is set; then softmax(q k^T / sqrt(hs)) with a
    -inf causal mask is computed by hand. Both paths agree to ~1e-6.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head, self.n_embd, self.dropout = cfg.n_head, cfg.n_embd, cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.hook_pattern = HookPoint()
        self.explicit = False
        self.rope, self.block_size = cfg.position == "rope", cfg.block_size

    def forward(self, x: torch.Tensor, kv: Optional[tuple[torch.Tensor, torch.Tensor, int]] = None
                ) -> torch.Tensor:
        """Causal attention of the T new positions over themselves and any cached ones.

        Args:
            x: (B, T, C), the new positions.
            kv: None (x is the whole sequence), or ``(k_buf, v_buf, pos)`` from
                :meth:`KVCache.layer`: x holds positions pos..pos+T-1; their keys and values are
                written into the buffers (B, nh, block_size, hs) and attention reads
                positions 0..pos+T-1.

        Returns:
            (B, T, C).
        """
        B, T, C = x.shape
        nh, hs = self.n_head, C // self.n_head
        qk, v = self.c_attn(x).split((2 * C, C), dim=2)
        qk = qk.view(B, T, 2, nh, hs).permute(2, 0, 3, 1, 4)  # (2, B, nh, T, hs): queries and keys, a view
        v = v.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        if self.rope:  # rotated at their absolute positions, before a cache stores the keys
            pos0 = kv[2] if kv is not None else 0
            cos2, sin2 = rotary_rows(self.block_size, hs, qk.dtype, qk.device)
            qk = rotate(qk, cos2[pos0:pos0 + T], sin2[pos0:pos0 + T])  # both at once: half the ops
        q, k = qk.unbind(0)  # (B, nh, T, hs) each
        if kv is not None:
            k_buf, v_buf, pos = kv
            k_buf[:, :, pos:pos + T] = k
            v_buf[:, :, pos:pos + T] = v
            k, v = k_buf[:, :, :pos + T], v_buf[:, :, :pos + T]  # (B, nh, S, hs), S = pos + T
        S = k.size(2)  # key positions; query i (absolute position S - T + i) sees keys 0..S - T + i
        if self.explicit or self.hook_pattern._forward_hooks:
            y = self._explicit(q, k, v)
        else:
            p = self.dropout if self.training else 0.0
            if S == T or T == 1:  # whole causal square, or one query that sees every key
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=S == T)
            else:
                mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.c_proj(y)

    def _explicit(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(hs) + causal -inf mask) v by hand, the pattern through ``hook_pattern``.

        Args: q (B, nh, T, hs); k, v (B, nh, S, hs), S >= T (query i is position S - T + i).
        Returns: (B, nh, T, hs).

        One ``baddbmm`` adds the additive mask and applies the scale inside the matmul: measured on a
        2-core EPYC (Zen 4) under bf16 autocast, forward + backward of the scores at the default shape
        took 3.9 ms against 6.9 ms for matmul, then scale, then ``masked_fill`` (each a pass over the
        (B, nh, T, S) scores).
        """
        B, nh, T, hs = q.shape
        S = k.size(2)
        att = torch.baddbmm(causal_bias(T, S, q.dtype, q.device), q.reshape(B * nh, T, hs),
                            k.reshape(B * nh, S, hs).transpose(1, 2), alpha=1.0 / math.sqrt(hs))  # (B * nh, T, S)
        att = self.hook_pattern(att.softmax(dim=-1).view(B, nh, T, S))  # (B, nh, T, S)
        return self.attn_dropout(att) @ v  # (B, nh, T, hs)


class MLP(nn.Module):
    """Position-wise feed-forward: Linear(C, ff_mult*C) -> GELU/ReLU -> Linear(ff_mult*C, C)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, cfg.ff_mult * cfg.n_embd, bias=cfg.bias)
        self.act = nn.GELU() if cfg.activation == "gelu" else nn.ReLU()
        self.c_proj = nn.Linear(cfg.ff_mult * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.hook_post = HookPoint()  # hidden activations (B, T, ff_mult*C), for dead-unit counts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (B, T, C). Returns: (B, T, C)."""
        return self.c_proj(self.hook_post(self.act(self.c_fc(x))))


def wire(variant: str, x: torch.Tensor, sub: Callable[[torch.Tensor], torch.Tensor],
         ln: Callable[[torch.Tensor], torch.Tensor], alpha: Optional[torch.Tensor], deepnorm_alpha: float,
         ln_out: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
         join: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> torch.Tensor:
    """One sublayer ``sub`` joined to the residual stream ``x`` as ``variant`` says (see :class:`Block`).

    Args:
        variant: plain | postnorm | prenorm | rezero | deepnorm | periln.
        x: (..., C) residual stream.
        sub: the sublayer (attention or MLP, dropout included), (..., C) -> (..., C).
        ln: the sublayer's (input) norm, (..., C) -> (..., C), LayerNorm Scaling's factor included.
        alpha: ReZero's gate (1,) or None; deepnorm_alpha: DeepNorm's a = (2L)^(1/4) (Wang et al. 2022).
        ln_out: Peri-LN's output norm (periln only).
        join: applied to the branch term where it joins the stream (residual_scale's factor, the hook).

    Returns:
        (..., C), the stream after the sublayer.
    """
    if variant == "prenorm":
        return x + join(sub(ln(x)))
    if variant == "periln":
        return x + join(ln_out(sub(ln(x))))
    s = join(sub(x))
    if variant == "postnorm":
        return ln(x + s)
    if variant == "plain":
        return ln(s)
    if variant == "rezero":
        return x + alpha * s
    return ln(deepnorm_alpha * x + s)  # deepnorm


class Block(nn.Module):
    """One transformer block: attention sublayer A then feed-forward sublayer F.

    Each sublayer S in {A, F} is wired to the residual stream x by ``cfg.variant``
    (LN = ``cfg.norm``; dropout is applied to S's output)::

        plain     x -> S -> LN -> x'                         x' = LN(S(x))        (no shortcut)
        postnorm  x -+-> S --(+)-> LN -> x'                  x' = LN(x + S(x))    Vaswani et al. 2017
                     +---------^
        prenorm   x -+-> LN -> S --(+)-> x'                  x' = x + S(LN(x))    GPT-2; Xiong et al. 2020
                     +-----------------^
        rezero    x -+-> S -> *alpha --(+)-> x'              x' = x + alpha*S(x)  Bachlechner et al. 2020
                     +---------------------^                 (alpha init 0, no LN)
        deepnorm  x -> *a -+                                 x' = LN(a*x + S(x))  Wang et al. 2022
                  x -> S --(+)-> LN -> x'                    a = (2L)^(1/4)
        periln    x -+-> LN -> S -> LN' --(+)-> x'           x' = x + LN'(S(LN(x)))  Kim et al. 2025
                     +-----------------------^               (LN' = ln_1_out / ln_2_out)

    ``periln`` (Peri-LN, Kim et al. 2025, "Peri-LN: Revisiting Layer Normalization in the Transformer
    Architecture") normalises each sublayer's input and output; the stream itself is never
    normalised, so like ``prenorm`` it ends in the final norm ``ln_f``. The embeddings enter the
    stream un-normalised, as in ``prenorm`` (the formula above is the paper's sublayer rule; no
    embedding norm is added). The input norms keep GPT-2's names ``ln_1`` / ``ln_2``.

    ``cfg.norm`` ``dyt`` makes every LN above (and ``ln_f``) a :class:`DyT`. ``cfg.norm_scale``
    ``depth`` (``prenorm`` only) is LayerNorm Scaling, Sun et al. 2025, "The Curse of Depth in Large
    Language Models": block l's (1-based) norm outputs are multiplied by 1/sqrt(l), x' = x +
    S(LN(x)/sqrt(l)), which the paper shows turns pre-LN's exponential growth of the output variance with
    depth into a polynomial one, so deep blocks stay more than near-identities; ``ln_f`` is not scaled.

    ``cfg.residual_scale`` ``depth`` multiplies every branch S(.) by s = 1/sqrt(2L) before it is wired
    (S above reads s*S; ``1``: s = 1): the depth-muP branch scaling x_{i+1} = x_i + (1/sqrt(N)) S_i(x_i)
    of Bordelon et al. 2023 ("Depthwise hyperparameter transfer in residual networks: dynamics and
    scaling limit") and Yang et al. 2023 ("Tensor Programs VI: feature learning in infinite-depth
    neural networks", Depth-muP, block depth 1), N = the number of residual branches summed into the
    stream. Each sublayer here is its own branch (the stream after the last block is x_0 plus 2L
    branch outputs), so N = 2L, the count GPT-2's c_proj init divides by too: with O(1) branch
    outputs the stream's variance then stays O(1) as L grows. The same s multiplies S in every
    variant (in ``plain`` + a norm it cancels up to the norm's eps).

    Hook points: hook_resid_pre, hook_attn_out, hook_resid_mid, hook_mlp_out, hook_resid_post
    (all (B, T, C); hook_attn_out / hook_mlp_out see the branch term that joins the stream: s*S, or
    s*LN'(S) in ``periln``; ReZero's alpha is applied after them); ``attn.hook_pattern`` (B, nh, T, T).

    Args:
        cfg: the model config. layer: this block's 0-based index (LayerNorm Scaling's l - 1).
    """

    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        self.variant = cfg.variant
        self.ln_1 = make_norm(cfg) if cfg.variant != "rezero" else nn.Identity()
        self.attn = CausalSelfAttention(cfg)
        if cfg.variant == "periln":
            self.ln_1_out = make_norm(cfg)
        self.ln_2 = make_norm(cfg) if cfg.variant != "rezero" else nn.Identity()
        self.mlp = MLP(cfg)
        if cfg.variant == "periln":
            self.ln_2_out = make_norm(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        if cfg.variant == "rezero":
            self.alpha_attn = nn.Parameter(torch.zeros(1))
            self.alpha_mlp = nn.Parameter(torch.zeros(1))
        self.deepnorm_alpha = (2.0 * cfg.n_layer) ** 0.25
        self.branch_scale = branch_scale(cfg)
        self.norm_factor = norm_factor(cfg, layer)
        for name in ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post"):
            setattr(self, name, HookPoint())

    def _sublayer(self, x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor], ln: nn.Module,
                  hook: HookPoint, alpha: Optional[torch.Tensor], ln_out: Optional[nn.Module]) -> torch.Tensor:
        s = self.branch_scale
        join = hook if s == 1.0 else (lambda t: hook(t * s))
        return wire(self.variant, x, lambda h: self.drop(fn(h)), _times(ln, self.norm_factor), alpha,
                    self.deepnorm_alpha, ln_out, join)

    def forward(self, x: torch.Tensor, kv: Optional[tuple[torch.Tensor, torch.Tensor, int]] = None
                ) -> torch.Tensor:
        """Args: x (B, T, C) residual stream; kv: see :meth:`CausalSelfAttention.forward`. Returns: (B, T, C)."""
        attn = self.attn if kv is None else partial(self.attn, kv=kv)
        x = self.hook_resid_pre(x)
        x = self._sublayer(x, attn, self.ln_1, self.hook_attn_out, getattr(self, "alpha_attn", None),
                           getattr(self, "ln_1_out", None))
        x = self.hook_resid_mid(x)
        x = self._sublayer(x, self.mlp, self.ln_2, self.hook_mlp_out, getattr(self, "alpha_mlp", None),
                           getattr(self, "ln_2_out", None))
        return self.hook_resid_post(x)


class GPT(nn.Module):
    """Token + position embeddings -> n_layer Blocks -> final norm (prenorm, periln) -> LM head.

    With ``position: rope`` there is no position table (``transformer.wpe``): each block's attention rotates
    its queries and keys instead (:func:`apply_rotary`). With ``cfg.embed_scaled`` (``model.embed_scale``; DyT's
    default) the embeddings are multiplied by ``transformer.emb_scale`` (:class:`EmbedScale`) before block 0.

    Args:
        cfg: model config; ``cfg.vocab_size`` must be set (> 0).

    Raises:
        DepthlabError: if ``cfg.vocab_size`` is 0.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        from .errors import DepthlabError

        if cfg.vocab_size <= 0:
            raise DepthlabError("model.vocab_size must be set (> 0) before building a GPT")
        self.config = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            **({"wpe": nn.Embedding(cfg.block_size, cfg.n_embd)} if cfg.position == "learned" else {}),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList([Block(cfg, i) for i in range(cfg.n_layer)]),
            # pre-LN and Peri-LN leave the stream un-normalised; the other variants end in LN (or have none)
            ln_f=make_norm(cfg) if cfg.variant in FINAL_NORM_VARIANTS else nn.Identity(),
            **({"emb_scale": EmbedScale()} if cfg.embed_scaled else {}),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.transformer.wte.weight = self.lm_head.weight  # Press & Wolf 2017
        self._init_weights()

    @torch.no_grad()
    def _init_weights(self) -> None:
        cfg = self.config
        if cfg.init == "gpt2":
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif p.dim() >= 2:
                    std = 0.02
                    if name.endswith("c_proj.weight"):  # GPT-2 paper: scale residual projections
                        std = 0.02 / math.sqrt(2 * cfg.n_layer)
                    nn.init.normal_(p, 0.0, std)
        if cfg.variant == "deepnorm":
            # Wang et al. 2022 (DeepNet), decoder-only: Xavier-normal, gain beta on v, out-proj, MLP
            beta = (8.0 * cfg.n_layer) ** -0.25
            C = cfg.n_embd
            for blk in self.transformer.h:
                w = blk.attn.c_attn.weight  # (3C, C): rows q | k | v
                for i, gain in enumerate((1.0, 1.0, beta)):
                    nn.init.xavier_normal_(w[i * C:(i + 1) * C], gain=gain)
                for lin in (blk.attn.c_proj, blk.mlp.c_fc, blk.mlp.c_proj):
                    nn.init.xavier_normal_(lin.weight, gain=beta)
        if "emb_scale" in self.transformer:
            self.transformer.emb_scale.scale.fill_(1.0 / self.transformer.wte.weight.float().pow(2).mean().sqrt())

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count, tied weights counted once; minus position embeddings if ``non_embedding``."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and "wpe" in self.transformer:
            n -= self.transformer.wpe.weight.numel()
        return n

    def forward(self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Logits for every position, and the mean cross-entropy if targets are given.

        Args:
            idx: token ids (B, T), int64, T <= block_size.
            targets: next-token ids (B, T) or None.

        Returns:
            (logits (B, T, V), loss in nats per token or None).

        Raises:
            ValueError: if T > block_size.
        """
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        x = self.transformer.wte(idx)  # (B, T, C)
        if "wpe" in self.transformer:
            x = x + self.transformer.wpe(torch.arange(T, device=idx.device))
        if "emb_scale" in self.transformer:
            x = self.transformer.emb_scale(x)
        x = self.transformer.drop(x)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))
        return logits, loss

    def new_kv_cache(self, batch_size: int) -> KVCache:
        """An empty :class:`KVCache` for ``batch_size`` rows, on the device and in the dtype of the weights."""
        w = self.lm_head.weight
        return KVCache(self.config, batch_size, w.device, w.dtype)

    def forward_cached(self, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Next-token logits after appending ``idx`` to the positions in ``cache`` (generation only).

        Computes the same function as ``forward(all ids so far)[0][:, -1]`` (the cache holds the
        keys/values of positions 0..cache.pos-1), but only for the T new positions, and the head
        only for the last one. Advances ``cache.pos`` by T.

        Args:
            idx: (B, T) int64, the ids at positions cache.pos .. cache.pos + T - 1.
            cache: from :meth:`new_kv_cache` (same B).

        Returns:
            logits (B, V) of the last new position (float, the head's dtype).

        Raises:
            ValueError: if cache.pos + T > block_size (absolute positions end there).

        One new position in eval mode with no hooks registered and SDPA attention goes through
        the cache's :class:`DecodePlan` (the same function without module calls).
        """
        B, T = idx.shape
        pos0 = cache.pos
        if T > cache.free:
            raise ValueError(f"{T} new positions after {pos0} exceed block_size {self.config.block_size}")
        if T == 1:
            plan = cache.decode_plan = cache.decode_plan or DecodePlan(self)
            if plan.usable():
                return plan(idx[:, 0], cache)
        x = self.transformer.wte(idx)  # (B, T, C)
        if "wpe" in self.transformer:
            x = x + self.transformer.wpe.weight[pos0:pos0 + T]  # (T, C): rows = positions (a slice, no lookup op)
        if "emb_scale" in self.transformer:
            x = self.transformer.emb_scale(x)
        x = self.transformer.drop(x)
        for i, block in enumerate(self.transformer.h):
            x = block(x, kv=cache.layer(i))
        cache.pos = pos0 + T
        x = self.transformer.ln_f(x[:, -1, :])  # (B, C): the head only where the next token is read
        return self.lm_head(x)  # (B, V)


def _plain_fn(m: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """Module ``m``'s forward as a plain function of its input (no module call, live parameters)."""
    if isinstance(m, nn.LayerNorm):
        shape, w, b, eps = m.normalized_shape, m.weight, m.bias, m.eps
        return lambda x: F.layer_norm(x, shape, w, b, eps)
    if isinstance(m, nn.Identity):
        return lambda x: x
    if isinstance(m, nn.GELU):
        return partial(F.gelu, approximate=m.approximate)
    if isinstance(m, nn.ReLU):
        return F.relu
    return m.forward  # RMSNorm: its own forward (float32 cast)


def _block_step(blk: "Block") -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]:
    """``step(x (B, C), k_buf, v_buf, pos) -> (B, C)``: ``blk.forward`` of one position with a cache."""
    a, mlp, variant, da = blk.attn, blk.mlp, blk.variant, blk.deepnorm_alpha
    nh, Wa, ba, Wo, bo = a.n_head, a.c_attn.weight, a.c_attn.bias, a.c_proj.weight, a.c_proj.bias
    Wf, bf, Wp, bp, act = mlp.c_fc.weight, mlp.c_fc.bias, mlp.c_proj.weight, mlp.c_proj.bias, _plain_fn(mlp.act)
    ln_1, ln_2 = _times(_plain_fn(blk.ln_1), blk.norm_factor), _times(_plain_fn(blk.ln_2), blk.norm_factor)
    outs = [_plain_fn(getattr(blk, n)) if hasattr(blk, n) else None for n in ("ln_1_out", "ln_2_out")]
    alpha_attn, alpha_mlp = getattr(blk, "alpha_attn", None), getattr(blk, "alpha_mlp", None)
    s = blk.branch_scale
    join = (lambda t: t) if s == 1.0 else (lambda t: t * s)
    rot = rotary_rows(a.block_size, Wa.size(1) // nh, Wa.dtype, Wa.device) if a.rope else None

    def attn(h: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, pos: int) -> torch.Tensor:
        # method calls, not tensor[...] indexing: parsing an index tuple costs more than the copy
        B, C = h.shape
        qkv = F.linear(h, Wa, ba).view(B, 3, nh, 1, C // nh)  # (B, 3, nh, 1, hs)
        qk = qkv.narrow(1, 0, 2)  # (B, 2, nh, 1, hs)
        if rot is not None:  # rotated at position pos, as CausalSelfAttention.forward rotates them
            qk = rotate(qk, rot[0].narrow(0, pos, 1), rot[1].narrow(0, pos, 1))  # tables (1, hs)
        q, k = qk.select(1, 0), qk.select(1, 1)  # (B, nh, 1, hs)
        k_buf.narrow(2, pos, 1).copy_(k)
        v_buf.narrow(2, pos, 1).copy_(qkv.select(1, 2))
        # one query sees every cached key: no mask (CausalSelfAttention.forward's T == 1 branch)
        y = F.scaled_dot_product_attention(q, k_buf.narrow(2, 0, pos + 1),
                                           v_buf.narrow(2, 0, pos + 1))  # (B, nh, 1, hs)
        return F.linear(y.view(B, C), Wo, bo)  # heads side by side, as forward's

    def step(x: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, pos: int) -> torch.Tensor:
        x = wire(variant, x, lambda h: attn(h, k_buf, v_buf, pos), ln_1, alpha_attn, da, outs[0], join)
        return wire(variant, x, lambda h: F.linear(act(F.linear(h, Wf, bf)), Wp, bp), ln_2, alpha_mlp, da,
                    outs[1], join)

    return step


class DecodePlan:
    """A GPT's forward for one new position per row as plain function calls (generation with a KVCache).

    At one position the arithmetic is smaller than ``nn.Module``'s call machinery (hooks, dropout
    and identity modules, attribute lookups): at the default shape (4 x 128) a cached token took
    1.36 ms through the modules (no_grad) and 0.55 ms through this plan (inference_mode). It
    computes :meth:`GPT.forward_cached`'s function (tests: 1e-5) with the same operators, and
    holds references to the model's parameters, so in-place updates (optimizer steps,
    ``load_state_dict``) are seen; parameters replaced by new objects are not: make a new cache.

    Args:
        model: the GPT to run.
    """

    def __init__(self, model: "GPT"):
        self.model = model
        self._observed = any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()) \
            or any(b.attn.explicit for b in model.transformer.h)
        tr = model.transformer
        self._wte, self._wpe = tr.wte.weight, (tr.wpe.weight if "wpe" in tr else None)
        self._scale = tr.emb_scale.scale if "emb_scale" in tr else None
        self._steps = [_block_step(b) for b in tr.h]
        self._ln_f, self._head = _plain_fn(tr.ln_f), model.lm_head.weight

    def usable(self) -> bool:
        """True when the model's own forward would run no dropout, no hooks and SDPA attention.

        Otherwise :meth:`GPT.forward_cached` takes the module path, so observers see generation
        and ``explicit`` attention is honoured. Hooks on modules and ``explicit`` are read when the
        plan is made (a cache's first single-id step): a first version that walked the modules on
        every token measured 0.22 ms of a ~0.6 ms token.
        """
        mm = nn.modules.module
        return not (self._observed or self.model.training or mm._global_forward_hooks
                    or mm._global_forward_pre_hooks)

    def __call__(self, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Logits (B, V) after appending ids ``idx`` (B,) at position ``cache.pos``; advances it by 1."""
        pos = cache.pos
        x = self._wte[idx] if self._wpe is None else self._wte[idx] + self._wpe[pos]  # (B, C)
        if self._scale is not None:
            x = x * self._scale
        for i, step in enumerate(self._steps):
            x = step(x, cache.k[i], cache.v[i], pos)
        cache.pos = pos + 1
        return F.linear(self._ln_f(x), self._head)  # (B, V)

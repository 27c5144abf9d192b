"""depthlab.benchmarking: the FLOP count of a training step."""


import pytest
import torch

from depthlab.benchmarking import flops_per_token



@pytest.mark.parametrize("n_layer,n_embd,block_size,bias", [(2, 16, 8, False), (3, 24, 12, True)])
def test_flops_per_token_formula(n_layer, n_embd, block_size, bias):
    """6N + 12·L·T·C against FLOPs counted by torch on one forward + backward of the real model.

    N = the parameters that take part in matrix multiplies (every 2-D weight except the position
    table, which is a lookup; the tied token table counts once, as the output head), taken from the
    model's named parameters. The attention term: per layer and token, q·kᵀ and att·v each cost
    2·T·C multiply-adds forward and twice that backward, so 3 × 4·T·C = 12·T·C (PaLM, Chowdhery et al.
    2022, appendix B, with H·Q = C; Kaplan et al. 2020 count 2·L·T·C forward). Counted on the
    explicit attention path (full T×T scores, as the formula assumes; torch's CPU flash kernel has no
    FLOP formula). Biases and norms are not matmuls: FlopCounterMode counts only the mm part.
    """
    from torch.utils.flop_counter import FlopCounterMode

    from conftest import tiny_gpt

    model = tiny_gpt(n_layer=n_layer, n_head=2, n_embd=n_embd, block_size=block_size, bias=bias)
    for blk in model.transformer.h:
        blk.attn.explicit = True
    n_matmul = sum(p.numel() for name, p in model.named_parameters()
                   if p.dim() == 2 and name != "transformer.wpe.weight")
    assert n_matmul == model.transformer.wte.weight.numel() + n_layer * 12 * n_embd ** 2  # 4C² attn + 8C² MLP
    batch = 3
    idx = torch.randint(0, model.config.vocab_size, (batch, block_size))
    with FlopCounterMode(display=False) as counter:
        _, loss = model(idx, idx)
        loss.backward()
    measured = counter.get_total_flops() / (batch * block_size)
    assert flops_per_token(n_matmul, n_layer, block_size, n_embd) == pytest.approx(measured, rel=1e-12)

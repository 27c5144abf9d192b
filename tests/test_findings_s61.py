"""Findings of the seventeenth session (an Intel Xeon with AMX): the rotary rotation in four ops, ..."""

from __future__ import annotations

import pytest
import torch

from depthlab.model import apply_rotary, rotary_rows, rotary_table, rotate


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotate_is_the_two_halves_rotation_bit_for_bit_on_a_permuted_view(dtype):
    torch.manual_seed(0)
    T, hs = 7, 8
    # laid out as the fused projection gives queries and keys: (B, T, 2, nh, hs) seen as (2, B, nh, T, hs)
    x = torch.randn(3, T, 2, 4, hs).to(dtype).permute(2, 0, 3, 1, 4)
    cos, sin = rotary_table(T, hs, dtype, x.device)
    x1, x2 = x.chunk(2, dim=-1)
    want = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    got = rotate(x, *rotary_rows(T, hs, dtype, x.device))
    assert torch.equal(got, want)
    assert got.is_contiguous()  # the queries and keys reach the attention matmuls without a copy
    assert torch.equal(apply_rotary(x, cos, sin), want)
    cos2, sin2 = rotary_rows(T, hs, dtype, x.device)
    assert torch.equal(cos2[:, : hs // 2], cos) and torch.equal(sin2[:, : hs // 2], -sin)
    assert torch.equal(sin2[:, hs // 2:], sin)

"""depthlab.evaluation: the whole val split, every target token once."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from depthlab import evaluation

from conftest import tiny_gpt


@pytest.mark.parametrize("n,T", [(10, 4), (9, 4), (17, 16), (2, 8), (1000, 7)])
def test_windows_read_every_target_once(n, T):
    starts = evaluation.split_windows(n, T)
    targets = [t for s in starts for t in range(s + 1, min(s + T, n - 1) + 1)]
    assert targets == list(range(1, n))  # each target position 1..n-1 once, in order


def test_windows_past_the_cap_are_evenly_spaced_full_windows():
    starts = evaluation.split_windows(10_001, 10, max_tokens=1_000)
    assert len(starts) == 100 and starts[0] == 0 and starts[-1] == 9_990  # the last full window
    gaps = np.diff(starts)
    assert gaps.min() >= 10 and gaps.max() - gaps.min() <= 10  # no overlap, even spacing
    with pytest.raises(ValueError, match="nothing to predict"):
        evaluation.split_windows(1, 8)


def test_split_loss_is_the_token_weighted_cross_entropy():
    model = tiny_gpt(seed=3)  # V 11, block 8
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 11, (8 * 5 + 4,), generator=g).numpy()  # 5 full windows and one of 3 targets
    res = evaluation.split_loss(model, tokens, 8, 2, np.ones(11, dtype=np.int64), torch.device("cpu"))
    model.eval()
    nats, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(tokens) - 1, 8):
            x = torch.from_numpy(tokens[s:s + 8][: len(tokens) - 1 - s]).long()[None]
            y = torch.from_numpy(tokens[s + 1:s + 9]).long()[None]
            logits, _ = model(x)
            nats += F.cross_entropy(logits[0], y[0], reduction="sum").item()
            count += y.numel()
    assert (res.tokens, res.of_tokens) == (count, len(tokens) - 1) == (43, 43)
    assert evaluation.forward_batches(len(tokens), 8, 2) == 4  # 5 full windows 2 at a time, then the short one
    assert res.loss == pytest.approx(nats / count, rel=1e-6)
    assert res.bpc == pytest.approx(res.loss / math.log(2), rel=1e-6)  # one character per token
    res2 = evaluation.split_loss(model, tokens, 8, 2, np.full(11, 2), torch.device("cpu"))
    assert res2.bpc == pytest.approx(res.bpc / 2, rel=1e-6)  # two characters per token: half the bits each

"""depthlab check on a model whose output does not depend on its input (a learned bias broadcast to (B, T, V)):
no PyTorch warning about a tensor that requires grad turned into a number, and one parameter counted in the
singular."""

import warnings

import pytest
import torch
import torch.nn as nn

from depthlab.analytics.check import check_model
from depthlab.config import DataConfig
from depthlab.data import load_corpus


class IgnoresInput(nn.Module):
    """Logits = one learned bias, the same at every position of every sequence: a view of the parameter."""

    def __init__(self, vocab_size: int = 65):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, idx):
        B, T = idx.shape
        return self.bias.expand(B, T, -1)


@pytest.fixture
def corpus(tmp_path_factory):
    return load_corpus(DataConfig(cache_dir=str(tmp_path_factory.getbasetemp() / "check-cache")))


def test_a_model_that_ignores_its_input_checks_without_a_torch_warning_and_says_the_1_parameter(corpus):
    """A new user's pass: "depthlab: warning: Converting a tensor with requires_grad=True to a scalar ... (Triggered
    internally at /__w/pytorch/...)" from the finite rule (float() of logits that are a view of the bias keep
    requires_grad under no_grad), and "all 1 parameters get a non-zero gradient"."""
    was = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # torch says it once a process: another test may have used it up
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rep = check_model(IgnoresInput(), corpus, block_size=16, rules=("shape", "finite", "no_gradient"))
    finally:
        torch.set_warn_always(was)
    assert [str(w.message) for w in caught if "requires_grad" in str(w.message)] == []
    checks = {c.rule: c for c in rep.checks}
    assert checks["finite"].ok is True
    assert "max |logit| 0)" in checks["finite"].evidence["summary"]  # the bias starts at zero: all logits 0
    assert checks["no_gradient"].ok is True
    assert checks["no_gradient"].evidence["summary"] == "the 1 parameter gets a non-zero gradient"
    assert checks["no_gradient"].evidence["trainable"] == 1


class _Two(nn.Module):
    def __init__(self, vocab_size: int = 65):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        self.unused = nn.Parameter(torch.zeros(3))

    def forward(self, idx):
        B, T = idx.shape
        return self.bias.expand(B, T, -1)


def test_one_parameter_without_a_gradient_is_said_in_the_singular_and_several_in_the_plural(corpus):
    rep = check_model(_Two(), corpus, block_size=16, rules=("shape", "no_gradient"))
    ng = rep.checks[-1]
    assert ng.ok is False
    assert ng.evidence["summary"] == ("1 of 2 parameters gets no gradient at all (grad None: it never reaches the "
                                      "loss): unused")
    assert ng.evidence["no_grad"] == ["unused"]

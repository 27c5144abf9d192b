"""KV cache for generation: the cached forward computes the plain forward's function.

Tolerances: fp32 logits of the cached path equal the full forward's at every position to
atol 1e-5 (measured differences are ~1e-7: only the summation order of the matmuls differs).
"""

import pytest
import torch

from depthlab.cli import main
from depthlab.model import GPT, DecodePlan
from depthlab.sample import ONE_THREAD_ROWS, generate

from conftest import TINY_TEXT, tiny_cli_args, tiny_gpt

VARIANTS = ["prenorm", "postnorm", "plain", "rezero", "deepnorm"]
ATOL = 1e-5


def _bigger_logits(m: GPT) -> GPT:
    """Scale the head so logits spread over several nats (a random init is near-uniform; untie first
    or the embeddings grow too)."""
    with torch.no_grad():
        m.lm_head.weight.mul_(20.0)
    return m.eval()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("chunks", [[1] * 8, [3, 1, 1, 1, 2], [8], [5, 3]])
def test_cached_logits_equal_full_forward_at_every_position(variant, explicit, chunks):
    norm = "rmsnorm" if variant == "plain" else "layernorm"
    m = _bigger_logits(tiny_gpt(1, tie_weights=False, variant=variant, norm=norm))
    for blk in m.transformer.h:
        blk.attn.explicit = explicit
    idx = torch.randint(0, 11, (3, 8), generator=torch.Generator().manual_seed(2))
    full, _ = m(idx)  # (B, T, V)
    cache, t = m.new_kv_cache(3), 0
    for n in chunks:
        got = m.forward_cached(idx[:, t:t + n], cache)  # (B, V) of position t + n - 1
        t += n
        assert cache.pos == t
        torch.testing.assert_close(got, full[:, t - 1], atol=ATOL, rtol=0)
    assert t == 8


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("norm,activation,bias", [("layernorm", "gelu", False), ("rmsnorm", "relu", True),
                                                  ("none", "gelu", True), ("layernorm", "relu", True)])
def test_decode_plan_computes_the_full_forward_one_position_at_a_time(variant, norm, activation, bias):
    m = _bigger_logits(tiny_gpt(3, tie_weights=False, variant=variant, norm=norm, activation=activation,
                                bias=bias))
    with torch.no_grad():  # biases start at 0 (GPT-2 init): make them count
        for name, p in m.named_parameters():
            if name.endswith("bias") or "alpha" in name:
                p.normal_(0.0, 0.5)
    idx = torch.randint(0, 11, (3, 8), generator=torch.Generator().manual_seed(1))
    full, _ = m(idx)
    cache = m.new_kv_cache(3)
    m.forward_cached(idx[:, :2], cache)  # module path writes positions 0, 1; the plan reads them
    for t in range(2, 8):
        got = m.forward_cached(idx[:, t:t + 1], cache)
        torch.testing.assert_close(got, full[:, t], atol=ATOL, rtol=0)
    assert isinstance(cache.decode_plan, DecodePlan) and cache.decode_plan.usable()


def test_decode_plan_is_not_used_in_training_mode_or_with_hooks_or_explicit_attention():
    m = tiny_gpt(2).eval()
    idx = torch.zeros(1, 1, dtype=torch.long)
    cache = m.new_kv_cache(1)
    m.forward_cached(idx, cache)
    assert cache.decode_plan.usable()
    m.train()
    assert not cache.decode_plan.usable()
    m.eval()
    m.transformer.h[0].attn.explicit = True
    assert not DecodePlan(m).usable()
    m.transformer.h[0].attn.explicit = False
    h = m.transformer.h[1].hook_mlp_out.register_forward_hook(lambda *a: None)
    assert not DecodePlan(m).usable()
    h.remove()
    h = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        assert not DecodePlan(m).usable()
    finally:
        h.remove()
    assert DecodePlan(m).usable()


def test_decode_plan_sees_in_place_weight_updates():
    m = tiny_gpt(8).eval()
    idx = torch.randint(0, 11, (2, 4), generator=torch.Generator().manual_seed(0))
    cache = m.new_kv_cache(2)
    m.forward_cached(idx[:, :1], cache)  # makes the plan
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(1.5)
    cache.reset()
    for t in range(4):
        got = m.forward_cached(idx[:, t:t + 1], cache)
    torch.testing.assert_close(got, m(idx)[0][:, -1], atol=ATOL, rtol=0)


def test_single_position_steps_run_on_one_thread_and_the_thread_count_is_restored(monkeypatch):
    m = tiny_gpt(9).eval()
    seen = []
    real = GPT.forward_cached

    def spy(self, idx, cache):
        seen.append((idx.shape, torch.get_num_threads()))
        return real(self, idx, cache)

    monkeypatch.setattr(GPT, "forward_cached", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        generate(m, torch.zeros(1, 3, dtype=torch.long), 4, temperature=0)
        assert torch.get_num_threads() == 2
        generate(m, torch.zeros(ONE_THREAD_ROWS + 1, 1, dtype=torch.long), 2, temperature=0)
    finally:
        torch.set_num_threads(before)
    assert seen == [((1, 3), 2)] + [((1, 1), 1)] * 3 + [((ONE_THREAD_ROWS + 1, 1), 2)] * 2


def test_attention_pattern_under_cache_is_the_full_patterns_row():
    m = tiny_gpt(3).eval()
    idx = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(0))
    seen = []
    h = m.transformer.h[1].attn.hook_pattern.register_forward_hook(lambda mod, i, o: seen.append(o))
    try:
        m(idx)
        cache = m.new_kv_cache(2)
        m.forward_cached(idx[:, :5], cache)
        m.forward_cached(idx[:, 5:6], cache)
    finally:
        h.remove()
    full, prefill, one = seen
    assert prefill.shape == (2, 2, 5, 5) and one.shape == (2, 2, 1, 6)
    torch.testing.assert_close(prefill, full[:, :, :5, :5], atol=ATOL, rtol=0)
    torch.testing.assert_close(one[:, :, 0], full[:, :, 5, :6], atol=ATOL, rtol=0)


def test_cache_refuses_positions_past_block_size():
    m = tiny_gpt().eval()
    cache = m.new_kv_cache(1)
    m.forward_cached(torch.zeros(1, 6, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="exceed block_size 8"):
        m.forward_cached(torch.zeros(1, 3, dtype=torch.long), cache)
    cache.reset()
    assert cache.pos == 0 and m.forward_cached(torch.zeros(1, 8, dtype=torch.long), cache).shape == (1, 11)


def _cropped_reference(m, idx, n):
    """nanoGPT's loop: greedy, re-encoding the last block_size ids for every token."""
    for _ in range(n):
        logits, _ = m(idx[:, -m.config.block_size:])
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return idx


def _half_window_reference(m, idx, n):
    """The cache's documented policy with the plain forward: the window starts at the prompt's last
    block_size ids; when it would pass block_size it restarts at the last block_size // 2 ids."""
    bs, start = m.config.block_size, max(0, idx.size(1) - m.config.block_size)
    for _ in range(n):
        if idx.size(1) - start > bs:
            start = idx.size(1) - bs // 2
        logits, _ = m(idx[:, start:])
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return idx


@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_identical_with_and_without_cache_within_block_size(variant):
    m = _bigger_logits(tiny_gpt(4, variant=variant, tie_weights=False))
    prompt = torch.tensor([[1, 5, 2], [7, 7, 0]])
    a = generate(m, prompt, 5, temperature=0)  # 3 + 5 = 8 = block_size
    b = generate(m, prompt, 5, temperature=0, kv_cache=False)
    assert torch.equal(a, b) and torch.equal(b, _cropped_reference(m, prompt, 5))
    assert len(set(a[:, 3:].flatten().tolist())) > 1  # not one repeated token: the comparison means something


def test_sampling_same_seed_identical_with_and_without_cache_within_block_size():
    m = _bigger_logits(tiny_gpt(5, tie_weights=False))
    prompt = torch.zeros(4, 1, dtype=torch.long)
    a = generate(m, prompt, 7, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(9))
    b = generate(m, prompt, 7, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(9), kv_cache=False)
    assert torch.equal(a, b)


@pytest.mark.parametrize("prompt_len", [1, 3, 8, 13])
def test_past_block_size_cache_follows_half_window_policy_and_no_cache_crops(prompt_len):
    m = _bigger_logits(tiny_gpt(6, tie_weights=False))
    prompt = torch.randint(0, 11, (2, prompt_len), generator=torch.Generator().manual_seed(prompt_len))
    n = 30  # several refills of the 8-position cache
    cached = generate(m, prompt, n, temperature=0)
    assert torch.equal(cached, _half_window_reference(m, prompt, n))
    assert torch.equal(generate(m, prompt, n, temperature=0, kv_cache=False), _cropped_reference(m, prompt, n))


def test_generate_leaves_the_model_usable_for_training_forward():
    m = tiny_gpt(7)
    m.train()
    generate(m, torch.zeros(1, 2, dtype=torch.long), 10, temperature=0)
    assert m.training
    idx = torch.randint(0, 11, (2, 8))
    logits, loss = m(idx, idx)
    assert logits.shape == (2, 8, 11) and loss.requires_grad


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("kv")
    p = d / "t.txt"
    p.write_text(TINY_TEXT)
    assert main(["train", *tiny_cli_args(p, d / "run", train__max_iters=40)]) == 0
    return d / "run"


def test_cli_no_kv_cache_takes_the_cropping_path_and_greedy_text_is_identical(trained_run, capsys, monkeypatch):
    args = ["sample", str(trained_run), "--prompt", "First", "--temperature", "0", "--max-new-tokens", "11"]
    assert main(args) == 0
    with_cache = capsys.readouterr().out

    def refuse(*a, **k):
        raise AssertionError("forward_cached called with --no-kv-cache")

    monkeypatch.setattr(GPT, "forward_cached", refuse)
    assert main([*args, "--no-kv-cache"]) == 0  # block_size 16 = 5 prompt + 11 new
    assert capsys.readouterr().out == with_cache and len(with_cache.rstrip("\n")) == 16
    assert main(args) != 0 and "forward_cached called" in capsys.readouterr().err  # the spy works


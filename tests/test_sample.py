"""depthlab.sample: seeds, filters, draws, prompts; generation with and without the KV cache; any
sampler settings either work or are one DepthlabError."""

import functools
import math

import pytest
import torch
from hypothesis import example, given, settings, strategies as st

from depthlab import train
from depthlab.cli import main
from depthlab.config import ModelConfig
from depthlab.errors import DepthlabError
from depthlab.model import GPT
from depthlab.rundir import RunDir
from depthlab.sample import ONE_THREAD_ROWS, check_sampling_args, draw, filter_logits, generate, load_run, sample_text

from conftest import QUIET, TINY_TEXT, bigger_logits, tiny_cli_args, tiny_config, tiny_gpt


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("s")
    p = d / "t.txt"
    p.write_text(TINY_TEXT)
    return train(tiny_config(d / "run", p, model=dict(dropout=0.2), train=dict(max_iters=30)), **QUIET)


def test_greedy_is_seed_independent(run):
    outs = {sample_text(run, "First", 40, temperature=0, seed=s)[0] for s in (1, 2, 3)}
    assert len(outs) == 1


def test_same_seed_same_text_and_different_seed_differs(run):
    a = sample_text(run, "First", 60, temperature=1.0, seed=5)
    b = sample_text(run, "First", 60, temperature=1.0, seed=5)
    c = sample_text(run, "First", 60, temperature=1.0, seed=6)
    assert a == b and a != c


def test_draw_picks_the_same_ids_as_torch_multinomial_and_never_a_zero_probability_id():
    for seed in range(100):
        g = torch.Generator().manual_seed(seed)
        probs = filter_logits(torch.randn(4, 65, generator=g) * 3, top_k=5).softmax(-1)
        want = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed))[:, 0]
        got = draw(probs, torch.Generator().manual_seed(seed))
        assert torch.equal(got, want) and bool((probs.gather(1, got[:, None]) > 0).all())


def test_draw_frequencies_follow_the_probabilities():
    probs = torch.tensor([[0.5, 0.3, 0.2, 0.0]]).expand(20000, 4)
    counts = torch.bincount(draw(probs, torch.Generator().manual_seed(0)), minlength=4) / 20000
    torch.testing.assert_close(counts, torch.tensor([0.5, 0.3, 0.2, 0.0]), atol=0.015, rtol=0)  # ~4 sd


def test_generate_returns_an_ordinary_tensor_and_leaves_the_prompt_alone():
    m = GPT(ModelConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16))
    prompt = torch.tensor([[1, 2]])
    out = generate(m, prompt, 3, temperature=0)
    assert not out.is_inference() and torch.equal(prompt, torch.tensor([[1, 2]])) and out.shape == (1, 5)
    out[0, 0] = 7  # in place: allowed on an ordinary tensor


def test_top_k_larger_than_vocab_is_no_filter():
    logits = torch.randn(3, 65)
    assert torch.equal(filter_logits(logits, top_k=200), logits)
    assert torch.equal(filter_logits(logits, top_k=65), logits)
    k5 = filter_logits(logits, top_k=5)
    assert (torch.isfinite(k5).sum(dim=1) == 5).all()


def test_top_p_keeps_smallest_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(filter_logits(logits, top_p=0.7))
    assert kept.tolist() == [[True, True, False, False]]
    kept = torch.isfinite(filter_logits(logits, top_p=0.1))
    assert kept.tolist() == [[True, False, False, False]]
    assert torch.isfinite(filter_logits(logits, top_p=1.0)).all()


def test_long_prompt_is_cropped_and_output_is_prompt_plus_n(run):
    prompt = ("Speak, speak. " * 10)[:100]
    text = sample_text(run, prompt, 200, temperature=0.8, seed=1)[0]
    assert text.startswith(prompt) and len(text) == 300


def test_prompt_outside_vocab_is_named(run):
    with pytest.raises(DepthlabError) as e:
        sample_text(run, "Café ☕", 5)
    assert "'é' at position 3" in str(e.value) and "'☕' at position 5" in str(e.value)


def test_generate_restores_training_mode_and_ids_in_range(run):
    model, tok = load_run(run)
    model.train()
    g = torch.Generator().manual_seed(0)
    out = generate(model, torch.zeros(2, 1, dtype=torch.long), 20, temperature=1.5, top_k=3, top_p=0.9, generator=g)
    assert model.training and out.shape == (2, 21)
    assert int(out.min()) >= 0 and int(out.max()) < tok.vocab_size


def test_no_prompt_starts_from_a_vocab_char(run):
    text = sample_text(run, "", 10, seed=1)[0]
    assert text.startswith("\n") and len(text) == 11


def test_stream_receives_exactly_the_text(run):
    pieces = []
    texts = sample_text(run, "All", 25, seed=3, num_samples=2, stream=pieces.append)
    assert "".join(pieces) == texts[0] + "\n---------------\n" + texts[1]


def test_no_newline_no_space_corpus_samples_without_prompt(tmp_path):
    p = tmp_path / "dense.txt"
    p.write_text("abcabcabdabc" * 40)
    run = train(tiny_config(tmp_path / "r", p, train=dict(max_iters=5)), **QUIET)
    text = sample_text(run, "", 20, seed=0)[0]
    assert len(text) == 21 and set(text) <= set("abcd")


@pytest.mark.parametrize("checkpoint", ["best", "last"])
def test_a_run_of_the_previous_release_samples(old_run, capsys, checkpoint):
    rc = main(["sample", str(old_run), "--prompt", "First", "--max_new_tokens", "20", "--seed", "1",
               "--checkpoint", checkpoint, "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("First")
    text = out[:-1] if out.endswith("\n") else out
    assert len(text) == len("First") + 20
    assert set(text) <= set(RunDir(old_run).vocab)


@functools.cache
def _sampler_model():
    return tiny_gpt(vocab_size=7, block_size=4, n_layer=1, n_head=1, n_embd=8).eval()


@settings(max_examples=150, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True, width=32), st.one_of(st.none(), st.integers(-5, 300)),
       st.one_of(st.none(), st.floats(-1, 2), st.just(float("nan"))))
@pytest.mark.slow
@example(0.8, 200, None).via("the CLI defaults")
@example(0.0, None, None).via("greedy")
@example(1.5, 1, 0.3).via("top-k 1")
@example(1.0, 0, 1.0).via("top-k off, top-p no filter")
def test_fuzz_sampler_settings(temperature, top_k, top_p):
    valid = (math.isfinite(temperature) and temperature >= 0 and (top_k is None or top_k >= 0)
             and (top_p is None or 0 < top_p <= 1))  # the documented ranges, checked independently
    if not valid:
        with pytest.raises(DepthlabError):
            check_sampling_args(temperature, top_k, top_p)
        return
    check_sampling_args(temperature, top_k, top_p)  # valid settings are accepted
    model = _sampler_model()
    start = torch.zeros(1, 1, dtype=torch.long)
    out = generate(model, start, 6, temperature, top_k, top_p, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 7) and int(out.min()) >= 0 and int(out.max()) < 7 and out[0, 0] == 0
    if temperature == 0 or top_k == 1:  # one token left: the greedy continuation, whatever the seed
        greedy = start
        with torch.no_grad():
            for _ in range(6):
                logits, _ = model(greedy[:, -4:])
                greedy = torch.cat([greedy, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        assert torch.equal(out, greedy)


# ------------------------------------------------------------------------------------- with and without the KV cache
VARIANTS = ["prenorm", "postnorm", "plain", "rezero", "deepnorm"]


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
    m = bigger_logits(tiny_gpt(4, variant=variant, tie_weights=False))
    prompt = torch.tensor([[1, 5, 2], [7, 7, 0]])
    a = generate(m, prompt, 5, temperature=0)  # 3 + 5 = 8 = block_size
    b = generate(m, prompt, 5, temperature=0, kv_cache=False)
    assert torch.equal(a, b) and torch.equal(b, _cropped_reference(m, prompt, 5))
    assert len(set(a[:, 3:].flatten().tolist())) > 1  # not one repeated token: the comparison means something


def test_sampling_same_seed_identical_with_and_without_cache_within_block_size():
    m = bigger_logits(tiny_gpt(5, tie_weights=False))
    prompt = torch.zeros(4, 1, dtype=torch.long)
    a = generate(m, prompt, 7, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(9))
    b = generate(m, prompt, 7, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(9), kv_cache=False)
    assert torch.equal(a, b)


@pytest.mark.parametrize("prompt_len", [1, 3, 8, 13])
def test_past_block_size_cache_follows_half_window_policy_and_no_cache_crops(prompt_len):
    m = bigger_logits(tiny_gpt(6, tie_weights=False))
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


# ------------------------------------------- issue 23 case 1: what is streamed is what is returned
MULTIBYTE_LINES = ["café 世界 你好 🙂", "naïve Ünïcödé — “quotes” €", "ελληνικά 한국어 日本語 ✓"]


@pytest.fixture(scope="module")
def bpe_run(tmp_path_factory):
    """A BPE run (vocab 300) on TINY_TEXT with multi-byte lines: its samples often cut a character at the end."""
    d = tmp_path_factory.mktemp("bpe_sample")
    lines = TINY_TEXT.split("\n")
    p = d / "mb.txt"
    p.write_text("\n".join(x for i, line in enumerate(lines) for x in
                           ([line, MULTIBYTE_LINES[i % 3]] if i % 5 == 4 else [line])), encoding="utf-8")
    cfg = tiny_config(d / "run", p, train=dict(max_iters=30))
    cfg.data.tokenizer, cfg.data.vocab_size = "bpe", 300
    return train(cfg, **QUIET)


@pytest.mark.slow
def test_streamed_sample_equals_returned_text_for_every_seed(bpe_run):
    differ, cut, empty = [], 0, 0
    for seed in range(1, 41):
        pieces = []
        text = sample_text(bpe_run, "café 世", 12, temperature=1.5, top_k=None, seed=seed, stream=pieces.append)[0]
        if "".join(pieces) != text:
            differ.append((seed, "".join(pieces), text))
        cut += text.endswith("\ufffd")
        empty += "" in pieces
    assert differ == []  # was 16 of 40 on the corpus: the last incomplete character never printed
    assert cut >= 3  # the case that differed: the last token left a character incomplete (checked, not assumed)
    assert empty == 0  # the stream is never called with nothing


def test_cli_sample_prints_the_returned_text(bpe_run, capsys):
    for seed in (2, 5, 6, 11):
        assert main(["sample", str(bpe_run), "--prompt", "café 世", "--max-new-tokens", "12", "--temperature", "1.5",
                     "--top-k", "0", "--seed", str(seed), "--device", "cpu"]) == 0
        want = sample_text(bpe_run, "café 世", 12, temperature=1.5, top_k=None, seed=seed)[0]
        assert capsys.readouterr().out == want + "\n"


def test_bpe_prompt_with_a_typed_endoftext_and_bytes_that_are_not_utf8(bpe_run):
    text = sample_text(bpe_run, "a <|endoftext|> b", 5, seed=1)[0]
    assert text.startswith("a <|endoftext|> b")
    with pytest.raises(DepthlabError, match="not valid Unicode text"):
        sample_text(bpe_run, "caf\udce9", 5)  # was TypeError: TextInputSequence must be str


def test_an_absurd_max_new_tokens_is_one_line_not_an_allocation_error(trained_run, capsys):
    from depthlab.sample import MAX_NEW_TOKENS

    check_sampling_args(1.0, None, None, MAX_NEW_TOKENS)  # the bound itself is accepted
    for n in (MAX_NEW_TOKENS + 1, 2**63 - 1, 10**20):
        assert main(["sample", str(trained_run), "--max-new-tokens", str(n)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--max-new-tokens" in err and "unexpected" not in err, err


def _sample_threads(run, flag: list[str]) -> int:
    """Sample 5 tokens of ``run`` with ``flag``; the thread count it set (this process's own count restored)."""
    before = torch.get_num_threads()
    try:
        assert main(["sample", str(run), "--prompt", "First", "--max-new-tokens", "5", *flag]) == 0
        return torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("raw, flag", [("abc", []), ("0", []), ("", []), ("4,2", []), ("abc", ["--threads", "1"])])
def test_sample_warns_once_of_an_omp_num_threads_that_is_not_a_count_in_train_s_words(run, monkeypatch, capsys,
                                                                                        raw, flag):
    """``depthlab train`` said it; ``sample`` (and every command setting threads through the same helper) said
    nothing. The wording is the one of train's warning (test_training_autotune), with what sets the threads."""
    monkeypatch.setenv("OMP_NUM_THREADS", raw)
    used = _sample_threads(run, flag)
    cap = capsys.readouterr()
    instead = ("lets --threads 1 set the thread count" if flag else
               f"runs with {used} thread{'s' if used != 1 else ''}, torch's default")
    assert [x for x in cap.err.splitlines() if "OMP_NUM_THREADS" in x] == [
        f"depthlab: warning: OMP_NUM_THREADS={raw!r} is not a thread count (a positive integer): depthlab ignores it "
        f"and {instead}; set it to a number (OMP_NUM_THREADS=1) or unset it"]
    assert "OMP_NUM_THREADS" not in cap.out and cap.out.startswith("First")


@pytest.mark.parametrize("flag", [[], ["--threads", "CORES+1"]])
def test_sample_honours_and_warns_of_more_threads_than_cores_in_train_s_words(run, monkeypatch, capsys, flag):
    """``OMP_NUM_THREADS=999 depthlab train`` warned (and ran 999 threads); ``sample`` (every command setting threads
    through cli_parser.set_threads) said nothing. Now the same warning (machine.oversubscribed_threads), the same
    count run."""
    import os

    cores = os.cpu_count() or 1
    monkeypatch.setenv("OMP_NUM_THREADS", str(cores + 1))
    flag = [f if f != "CORES+1" else str(cores + 1) for f in flag]
    used = _sample_threads(run, flag)
    said, fix = ((f"--threads {cores + 1}", f"--threads {cores}, or 0") if flag else
                 (f"OMP_NUM_THREADS={cores + 1}", f"OMP_NUM_THREADS={cores}, or unset it"))
    assert used == cores + 1
    assert [x for x in capsys.readouterr().err.splitlines() if "warning" in x] == [
        f"depthlab: warning: {said} is more than this machine's {cores} cores; oversubscribed threads make each "
        f"step slower (try {fix})"]


@pytest.mark.parametrize("raw", ["1", None])
def test_sample_gives_no_thread_warning_for_a_count_or_no_omp_num_threads(run, monkeypatch, capsys, raw):
    if raw is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", raw)
    assert main(["sample", str(run), "--prompt", "First", "--max-new-tokens", "5"]) == 0
    assert "warning" not in capsys.readouterr().err


class _NaNBeyond(torch.nn.Module):
    """A tiny model.source-style model whose logits are NaN at positions >= k (finite before)."""

    def __init__(self, k: int, vocab_size: int = 65):
        super().__init__()
        self.k = k
        self.emb = torch.nn.Embedding(vocab_size, vocab_size)

    def forward(self, idx):
        logits = self.emb(idx)
        logits[:, self.k:] = float("nan")
        return logits


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_generate_stops_at_the_first_position_whose_logits_are_nan(temperature):
    """The prompt's logits are finite (position 2 of 3 < k = 5), so the prompt check passes; the token drawn at
    position 6 (the sample's 7th token) comes from the logits at position 5: NaN. It printed noise (or newlines,
    greedy) and exit 0; the refusal said "at position 6", read as the 6th token, which was drawn fine."""
    from depthlab.sample import NonFiniteLogits

    seen = []
    with pytest.raises(NonFiniteLogits) as e:
        generate(_NaNBeyond(5), torch.tensor([[1, 2, 3]]), 10, temperature=temperature,
                 generator=torch.Generator().manual_seed(0), on_token=seen.append, block_size=64)
    assert e.value.position == 6 and len(seen) == 3  # positions 3, 4, 5 drawn from finite logits
    assert str(e.value) == ("the weights give non-finite logits (NaN) while drawing token 7 of the sample (from the "
                            "logits after its first 6 tokens: the prompt's 3 tokens and 3 generated)")


def test_sample_refuses_in_one_line_when_the_logits_turn_nan_after_the_prompt(run, monkeypatch, capsys):
    import depthlab.sample as sample_mod

    real = sample_mod._next_logits_fn

    def nan_after_7(model, kv_cache, block_size=None):
        f = real(model, kv_cache, block_size)
        return lambda idx: f(idx) * (float("nan") if idx.size(1) > 7 else 1.0)

    monkeypatch.setattr(sample_mod, "_next_logits_fn", nan_after_7)
    rc = main(["sample", str(run), "--prompt", "First", "--max-new-tokens", "20", "--seed", "3"])
    out, err = capsys.readouterr()
    assert rc == 2
    assert err.splitlines()[-1] == (f"depthlab: error: {run}'s weights give non-finite logits (NaN) while drawing "
                                    "token 9 of the sample (from the logits after its first 8 tokens: the prompt's 5 "
                                    "tokens and 3 generated); nothing more to sample "
                                    f"(depthlab diagnose {run} looks for where the run went non-finite)")
    assert "Traceback" not in err and len(err.splitlines()) == 2  # the "sampling from" line and the refusal
    assert out.startswith("First") and out.endswith("\n") and len(out) == 5 + 3 + 1  # 3 tokens, then the line ends


def test_the_nan_refusal_counts_one_prompt_token_and_names_check_for_a_source_models_run(tmp_path):
    """A new user's pass: "after the prompt's 1 tokens"; a model.source run whose forward gives NaN from finite
    weights was sent to diagnose (which found nothing) instead of to check, which tests the forward."""
    import json

    from depthlab.sample import NonFiniteLogits

    nan = torch.full((1, 65), float("nan"))
    e = NonFiniteLogits(nan, 3, 1)
    assert e.where == ("while drawing token 4 of the sample (from the logits after its first 3 tokens: the prompt's "
                       "1 token and 2 generated)")
    (tmp_path / "config.json").write_text(json.dumps({"model": {"source": "mine.py:MyGPT"}, "train": {}}))
    assert str(e.refusal(tmp_path)) == (
        f"{tmp_path}'s model (model.source mine.py:MyGPT) gives non-finite logits (NaN) while drawing token 4 of the "
        "sample (from the logits after its first 3 tokens: the prompt's 1 token and 2 generated); nothing more to "
        "sample (its forward or its weights: depthlab "
        f"check mine.py:MyGPT tests the forward; depthlab diagnose {tmp_path} looks for where the run went non-finite)")

import pytest
import torch

from depthlab.config import ModelConfig
from depthlab.errors import DepthlabError
from depthlab.model import GPT
from depthlab.sample import draw, filter_logits, generate, load_run, sample_text
from depthlab import train

from conftest import QUIET, TINY_TEXT, tiny_config


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

"""model.position rope: rotary position embedding (Su et al. 2021) in place of GPT-2's learned position table.

The cache paths (forward_cached, DecodePlan) are checked with the other wirings in test_model.py (CACHED)."""

import json
import math

import pytest
import torch

from depthlab.config import ModelConfig
from depthlab.errors import DepthlabError
from depthlab.model import apply_rotary, rotary_table

from conftest import assert_clean_error, run_cli, tiny_cli_args, tiny_gpt


def test_rotary_table_is_position_times_base_to_the_minus_2i_over_hs():
    cos, sin = rotary_table(5, 8, torch.float32, torch.device("cpu"))
    assert cos.shape == sin.shape == (5, 4)
    for p, i in ((0, 0), (1, 0), (3, 1), (4, 3)):
        angle = p * 10000.0 ** (-2 * i / 8)
        assert cos[p, i].item() == pytest.approx(math.cos(angle), abs=1e-6)
        assert sin[p, i].item() == pytest.approx(math.sin(angle), abs=1e-6)


def test_rotated_scores_depend_on_the_distance_only_and_norms_are_kept():
    cos, sin = rotary_table(32, 16, torch.float32, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16, generator=g), torch.randn(1, 1, 1, 16, generator=g)

    def at(x, p):
        return apply_rotary(x, cos[p:p + 1], sin[p:p + 1])

    score = (at(q, 5) * at(k, 2)).sum()
    assert (at(q, 29) * at(k, 26)).sum().item() == pytest.approx(score.item(), abs=1e-5)  # both 3 apart
    assert (at(q, 9) * at(k, 2)).sum().item() != pytest.approx(score.item(), abs=1e-3)  # 7 apart
    assert at(q, 17).norm().item() == pytest.approx(q.norm().item(), rel=1e-6)  # a rotation
    assert torch.equal(at(q, 0), q)  # position 0: angle 0


def test_a_rope_gpt_has_no_position_table_and_its_logits_move_with_position():
    m = tiny_gpt(0, position="rope", block_size=16, n_layer=1).eval()
    assert not any("wpe" in k for k in m.state_dict())
    assert tiny_gpt(0, block_size=16, n_layer=1).num_params() == m.num_params()  # non-embedding counts agree
    with torch.no_grad():
        m.lm_head.weight.mul_(20.0)
        for blk in m.transformer.h:  # sharp attention: at the init's 0.02 every key weighs about the same
            blk.attn.c_attn.weight.mul_(30.0)
        idx = torch.tensor([[3, 4, 5, 6, 7, 8]])
        logits, _ = m(idx)
        swapped, _ = m(torch.tensor([[4, 3, 5, 6, 7, 8]]))
        cut, _ = m(torch.tensor([[3, 4, 5, 6, 0, 0]]))
    # one block's attention without positions sees the earlier tokens as a set: the order reaches position 2's
    # logits only by the rotation
    assert not torch.allclose(swapped[0, 2], logits[0, 2], atol=1e-3)
    with torch.no_grad():
        m.transformer.h[0].attn.rope = False
        assert torch.allclose(m(torch.tensor([[4, 3, 5, 6, 7, 8]]))[0][0, 2], m(idx)[0][0, 2], atol=1e-5)
    assert torch.allclose(cut[0, :4], logits[0, :4], atol=1e-6)  # and no future token leaks back


def test_an_odd_head_size_or_an_unknown_position_is_refused():
    with pytest.raises(DepthlabError, match=r"head size n_embd / n_head must be even \(it is 3\)"):
        ModelConfig(vocab_size=5, n_embd=6, n_head=2, position="rope")
    with pytest.raises(DepthlabError, match="model.position must be one of learned, rope; got 'alibi'"):
        ModelConfig(vocab_size=5, position="alibi")


@pytest.mark.slow
def test_train_sample_and_export_of_a_rope_run(tmp_path, capsys, tiny_text_file):
    run = tmp_path / "run"
    rc, out, err = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run, model__position="rope",
                                                          train__max_iters=30, train__warmup_iters=5))
    assert rc == 0, err
    evals = [ln for ln in out.splitlines() if ln.startswith("eval step")]
    first, last = (float(ln.split(" val ")[1].split()[0]) for ln in (evals[0], evals[-1]))
    assert last < first - 0.3, evals  # it learns
    from depthlab.report.html import run_cards
    from depthlab.report.run_data import RunData

    card = {label: note for label, _, note in run_cards(RunData(run))}["parameters"]
    assert card == "token embedding (tied to the head) included (rotary positions)"  # no table to leave out
    rc, text, err = run_cli(capsys, "sample", str(run), "--max_new_tokens", "40")
    assert rc == 0, err
    assert len(text.rstrip("\n")) >= 40, text
    rc, _, err = run_cli(capsys, "export", str(run), str(tmp_path / "hf"))  # was refused: now GPT-NeoX
    assert rc == 0, err
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "gpt_neox"
    # a learned-position run's weights do not fit a rope model: refused as a change of shape
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, tmp_path / "new"), "--init-from", str(run),
                         "--model.position", "learned")
    assert_clean_error(rc, err, "its weights do not fit this model", "model.position 'rope' there, 'learned' here")
    # a run whose config.json predates model.position has a learned table: named as such, not "unexpected wpe"
    old = tmp_path / "old"
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, old, train__max_iters=2,
                                                          model__position="learned"))
    assert rc == 0, err
    cfg = json.loads((old / "config.json").read_text())
    del cfg["model"]["position"]
    (old / "config.json").write_text(json.dumps(cfg))
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, tmp_path / "new"), "--init-from", str(old),
                         "--model.position", "rope")
    assert_clean_error(rc, err, "its weights do not fit this model (model.position 'learned' there, 'rope' here)")
    assert not (tmp_path / "new").exists()
    # without the flag, the new run takes the old run's learned table, and the old run resumes as it trained
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, tmp_path / "new"), "--init-from", str(old))
    assert rc == 0, err
    assert json.loads((tmp_path / "new" / "config.json").read_text())["model"]["position"] == "learned"
    # a resume asking for rope: refused, and the new run it offers trains from scratch (the weights do not fit;
    # it had offered --init-from, "the same weights, by name and shape", judging the old model as rope)
    rc, _, err = run_cli(capsys, "train", "--resume", str(old), "--train.max_iters", "4", "--model.position", "rope")
    assert_clean_error(rc, err, "model.position 'learned' -> 'rope'",
                       "train the changed model as a new run from scratch")
    rc, _, err = run_cli(capsys, "train", "--resume", str(old), "--train.max_iters", "4")
    assert rc == 0, err
    assert json.loads((old / "config.json").read_text())["model"]["position"] == "learned"
    for cmd in (("sample", str(old), "--max_new_tokens", "5"), ("layers", str(old)), ("context", str(old))):
        rc, _, err = run_cli(capsys, *cmd)
        assert rc == 0, (cmd, err)


def test_layers_and_the_report_do_not_credit_the_embedding_of_a_rope_model_with_a_position():
    from depthlab.analytics.layers import format_layers, measure_layers

    batches = [(torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(i)),) * 2 for i in range(2)]
    for position, said in (("learned", True), ("rope", False)):
        res = measure_layers(tiny_gpt(0, position=position, block_size=8), batches)
        assert res["embedding_has_position"] is said
        text = format_layers({**res, "unigram": 2.4, "bigram": 2.3, "windows_described": "2 windows",
                              "weights": "best", "tokens": 32})
        assert ("the embedding lens sees one character (and its position)" in text) is said, text
        assert ("the embedding lens sees one character, so it cannot" in text) is not said, text


def test_rope_with_a_model_of_your_own_is_refused_as_its_code_deciding_positions():
    # was: "...; set the model's own sizes with --model.init JSON": a position scheme is no size
    with pytest.raises(DepthlabError) as e:
        ModelConfig(source="m.py:Net", position="learned")  # rope is the default, which stays silent
    assert str(e.value) == ("model.position 'learned': this describes depthlab's GPT and does not apply to "
                            "model.source m.py:Net; your model's code decides it: set its own keyword arguments "
                            "(its sizes, say) with --model.init JSON")


def test_coordchecks_attention_logits_of_a_rope_model_are_the_rotated_ones():
    # the logits the softmax sees: q and k rotated at their positions (the same rows, other dot products)
    from depthlab.analytics.activations import record_activations
    from depthlab.analytics.coordcheck import attention_logits_rms

    m = tiny_gpt(0, position="rope", block_size=16, n_layer=1).eval()
    with torch.no_grad():
        m.transformer.h[0].attn.c_attn.weight.mul_(30.0)
    x = torch.randint(0, 11, (2, 16), generator=torch.Generator().manual_seed(0))
    pattern = {}
    m.transformer.h[0].attn.explicit = True
    h = m.transformer.h[0].attn.hook_pattern.register_forward_hook(lambda mod, i, o: pattern.setdefault("p", o))
    with torch.no_grad(), record_activations(m, ["transformer.h.0.attn.c_attn"]) as acts:
        m(x)
    h.remove()
    qkv = acts["transformer.h.0.attn.c_attn"]
    rotated, plain = attention_logits_rms(qkv, 2, rope=True), attention_logits_rms(qkv, 2)
    # the model's own pattern is the softmax of the rotated logits: rebuild it from them
    B, T, C3 = qkv.shape
    q, k, _ = qkv.split(C3 // 3, dim=2)
    q, k = (t.view(B, T, 2, -1).transpose(1, 2) for t in (q, k))
    cos, sin = rotary_table(T, q.size(-1), q.dtype, q.device)
    att = (apply_rotary(q, cos, sin) @ apply_rotary(k, cos, sin).transpose(-2, -1)) / math.sqrt(q.size(-1))
    att = att.masked_fill(torch.ones(T, T).tril() == 0, float("-inf")).softmax(-1)
    assert torch.allclose(att, pattern["p"], atol=1e-5)
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    logits = (apply_rotary(q, cos, sin) @ apply_rotary(k, cos, sin).transpose(-2, -1)) / math.sqrt(q.size(-1))
    assert rotated == pytest.approx(logits[..., visible].pow(2).mean().sqrt().item(), rel=1e-5)
    assert rotated != pytest.approx(plain, rel=1e-3)

"""rank_collapse (and uniform_attention) are not judged where the probe's stream holds one token at every
position: on a corpus of one distinct character (V = 1), where every loss is 0 whatever the weights, and where
the rank measure is already 0 up to float rounding after block 0. Was, on 101 x "a": "[rank_collapse] ... falls
from 0.000 (block 0) to 5.62e-08 (block 1 ...)", blaming train.muon_lr and train.warmup_iters."""

import pytest

from depthlab.analytics.diagnose import diagnose
from depthlab.analytics.rules import LEARNABLE, Evidence, NotJudged
from depthlab.analytics.rules.training import rank_collapse, uniform_attention

from conftest import SHAKESPEARE_BASELINES as BASE
from conftest import probe_record as probe
from conftest import run_cli

FLAT = probe(60, [4.8e-08, 5.6e-08], ent=[[2.5487, 2.5487]] * 2, u=2.5487, cos=[1.0, 1.0])  # as 101 x "a" gave
ONE = {"uniform": {"nats": 0.0}, "unigram": {"nats": 0.0}, "bigram": {"nats": 0.0}, "vocab_size": 1}


def test_a_one_token_corpus_is_not_judged_by_any_rule_and_says_why():
    """Every rule, not only rank_collapse: on 5,000 x "a" diagnose found unigram_stuck ("at the uniform level ln V =
    0.000"), no_gradient (softmax over one class has no gradient) and plateau, of a corpus with nothing to learn."""
    d = diagnose(Evidence([FLAT], {"model": {"vocab_size": 1, "variant": "prenorm", "norm": "layernorm"}}, ONE))
    assert [f.rule for f in d.findings] == []
    (line,) = d.without_data()
    names = line[:line.index(" (")].split(", ")
    assert len(names) == len(set(names))  # bigram_stuck, given by two rules, once
    assert {"rank_collapse", "uniform_attention", "no_gradient", "unigram_stuck", "bigram_stuck", "plateau"} <= {*names}
    assert line[len(", ".join(names)):].startswith(" (the corpus has one distinct character (V = 1): "), line
    assert "every loss and every gradient is 0 whatever the weights" in line and "(data.path)" in line
    v = rank_collapse(Evidence([FLAT], {"model": {"vocab_size": 1}}, ONE))
    assert isinstance(v, NotJudged) and v.needs[0] == LEARNABLE
    assert rank_collapse(Evidence([FLAT], {"model": {"vocab_size": 2}}, {**ONE, "vocab_size": 2})).needs[0] != LEARNABLE


def test_a_stream_that_is_one_vector_from_block_0_on_is_not_judged():
    ev = Evidence([FLAT], {"model": {"vocab_size": 65, "variant": "prenorm", "norm": "layernorm"}}, BASE)
    d = diagnose(ev)
    assert "rank_collapse" not in [f.rule for f in d.findings]
    (line,) = [w for w in d.without_data() if w.startswith("rank_collapse")]
    assert "at step 60 the rank measure after block 0 is 4.8e-08, 0 up to float rounding" in line, line
    assert isinstance(uniform_attention(ev), NotJudged)


def test_a_collapse_the_blocks_make_is_still_found():
    ev = Evidence([probe(0, [0.9, 0.9]), probe(500, [0.6, 0.001])], {"model": {"vocab_size": 65}}, BASE)
    f = rank_collapse(ev)
    assert f is not None and f.rule == "rank_collapse" and "falls from 0.600 (block 0) to 1.00e-03" in f.evidence
    assert rank_collapse(Evidence([probe(500, [1e-4, 1e-5])], {"model": {"vocab_size": 65}}, BASE)).rule == \
        "rank_collapse"  # above float rounding after block 0: judged


@pytest.mark.slow  # about a second: the fast tier stays under 3 min
def test_diagnose_of_a_real_one_character_run(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("a" * 101)
    rc, out, err = run_cli(capsys, "train", "--data.path", str(tmp_path / "a.txt"), "--train.max_iters", "60",
                           "--train.max_time", "0", "--model.n_layer", "2", "--model.n_embd", "32", "--model.n_head",
                           "2", "--model.block_size", "32", "--train.threads", "1", "--train.tensorboard", "false",
                           "--train.out_dir", str(tmp_path / "run"))
    assert rc == 0 and "nothing to learn" in out + err
    rc, out, err = run_cli(capsys, "diagnose", str(tmp_path / "run"))
    assert rc == 0 and "[rank_collapse]" not in out and "train.muon_lr" not in out, out
    assert out.startswith("diagnosis: no rule could judge this run\n  not judged: "), out
    assert "uniform_attention, " in out and "plateau, " in out
    assert "(the corpus has one distinct character (V = 1)" in out
    # the views and check: refused in one line (they said the blocks go unused, a short val split, no_gradient ...)
    single = "holds a single distinct character ('a'): every loss and every gradient is 0 whatever the weights"
    for cmd in ("context", "layers"):
        rc, out, err = run_cli(capsys, cmd, str(tmp_path / "run"))
        assert rc == 2 and err.count("\n") == 1 and single in err and "have nothing to measure" in err, err
    (tmp_path / "m.py").write_text("import torch.nn as nn\nclass M(nn.Module):\n    def __init__(self, vocab_size, "
                                   "block_size):\n        super().__init__()\n        self.e = nn.Embedding("
                                   "vocab_size, vocab_size)\n    def forward(self, idx):\n        return self.e(idx)\n")
    rc, out, err = run_cli(capsys, "check", f"{tmp_path / 'm.py'}:M", "--data.path", str(tmp_path / "a.txt"))
    assert rc == 2 and err.count("\n") == 1 and single in err and "no rule can test the model on it" in err, err


def test_a_one_block_collapse_and_a_tiny_first_measure_are_said_as_they_are():
    """A new user's 1-block plain run: "falls from 0.000 (block 0) to 1.04e-04 (block 0)" - one value, written two
    ways, read as a rise within one block."""
    one = rank_collapse(Evidence([probe(60, [1.035e-4])], {"model": {"vocab_size": 65, "variant": "plain"}}, BASE))
    assert one.evidence.startswith("at step 60 the rank measure after block 0, the only block measured, is 1.03e-04")
    two = rank_collapse(Evidence([probe(60, [1.035e-4, 2e-6])], {"model": {"vocab_size": 65}}, BASE))
    assert "falls from 1.03e-04 (block 0) to 2.00e-06 (block 1" in two.evidence, two.evidence

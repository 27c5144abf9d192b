"""--init-from a BPE run takes the source's trained tokenizer: a data.vocab_size other than the source's trained
with its vocabulary while config.json recorded the other size; it is refused in one line, as another tokenizer is."""

import json

import pytest

from depthlab.cli import main

from conftest import TINY_TEXT, assert_clean_error, run_cli, tiny_cli_args


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("vocab")
    (d / "t.txt").write_text(TINY_TEXT)
    assert main(["train", *tiny_cli_args(d / "t.txt", d / "bpe", train__max_iters=10, data__tokenizer="bpe",
                                         data__vocab_size=300)]) == 0
    assert main(["train", *tiny_cli_args(d / "t.txt", d / "char", train__max_iters=10)]) == 0
    return d


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
@pytest.mark.parametrize("with_config", [True, False])
def test_init_from_a_bpe_run_with_another_vocab_size_is_refused(runs, tmp_path, capsys, with_config):
    """Before: exit 0, trained with the source's 300 tokens while config.json said data.vocab_size 400."""
    src = runs / "bpe"
    head = ["-c", str(src / "config.json")] if with_config else []
    rc, _, err = run_cli(capsys, "train", *head, "--init-from", str(src),
                         *tiny_cli_args(runs / "t.txt", tmp_path / "new", data__tokenizer="bpe", data__vocab_size=400,
                                        train__resume="false"))
    assert_clean_error(rc, err, f"--init-from {src}: data.vocab_size 300 there, 400 here;",
                       "drop --data.vocab_size to keep the source's tokenizer, or drop --init-from to train a new "
                       "tokenizer from scratch")
    assert not (tmp_path / "new").exists()


def test_init_from_a_bpe_run_with_its_own_or_no_vocab_size_trains(runs, tmp_path, capsys):
    src = runs / "bpe"
    for name, more in (("same", {"data__vocab_size": 300}), ("none", {})):
        rc, _, err = run_cli(capsys, "train", "--init-from", str(src),
                             *tiny_cli_args(runs / "t.txt", tmp_path / name, data__tokenizer="bpe", train__max_iters=2,
                                            **more))
        assert rc == 0, err
        cfg = json.loads((tmp_path / name / "config.json").read_text())
        assert cfg["model"]["vocab_size"] == json.loads((src / "config.json").read_text())["model"]["vocab_size"]


@pytest.mark.slow  # about a second per case: the fast tier stays under 3 min
@pytest.mark.parametrize("run, flag, value", [("char", "--data.tokenizer", "bpe"), ("bpe", "--data.vocab_size", "400")])
def test_resume_refusal_for_a_tokenizer_change_advises_a_command_that_works(runs, tmp_path, capsys, run, flag, value):
    """Before: it advised `--init-from RUN ...`, which --init-from then refused (another tokenizer)."""
    import shlex

    src = runs / run
    before = sorted(p.name for p in src.rglob("*"))
    rc, _, err = run_cli(capsys, "train", "--resume", str(src), flag, value)
    key = flag[2:]
    assert_clean_error(rc, err, f"or train a new run from scratch ({key} changes the tokenizer, whose ids the run's "
                       "weights are trained on, so --init-from cannot reuse them): ")
    command = err.strip().split("cannot reuse them): ", 1)[1]
    assert command == (f"depthlab train -c {src / 'config.json'} {flag} {value} --train.resume false "
                       "--train.out_dir NEW_DIR")
    argv = shlex.split(command.replace("NEW_DIR", str(tmp_path / "new")))[1:] + ["--train.max_iters", "2"]
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 0, err
    data = json.loads((tmp_path / "new" / "config.json").read_text())["data"]
    assert str(data[key[5:]]) == value
    assert sorted(p.name for p in src.rglob("*")) == before

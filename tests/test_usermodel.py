"""A model the learner wrote: loading PATH.py:NAME, and training it with the same loop (train --model.source)."""

import json
from pathlib import Path

import numpy as np

import pytest
import torch
from conftest import QUIET, assert_clean_error
from depthlab.cli import main
from depthlab.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from depthlab.errors import DepthlabError
from depthlab.trainer import Interrupted, Trainer
from depthlab.usermodel import build_model, parse_source

MODEL = '''
import torch, torch.nn as nn, torch.nn.functional as F

class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)
    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(B, T, C)))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))

class MyGPT(nn.Module):
    def __init__(self, vocab_size=65, n_embd=16, n_head=2, block_size=16, n_layer=2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln, self.head = nn.LayerNorm(n_embd), nn.Linear(n_embd, vocab_size)
    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x)), None   # nanoGPT's (logits, loss) with no targets

def factory(vocab_size):
    return MyGPT(vocab_size, n_layer=1)

NOT_A_MODEL = 3
def not_a_module():
    return "a string"
'''


@pytest.fixture
def model_file(tmp_path):
    p = tmp_path / "mine.py"
    p.write_text(MODEL)
    return p


def _cfg(out, text, source, **train):
    t = dict(out_dir=str(out), batch_size=4, max_iters=40, eval_interval=10, eval_iters=2, log_interval=5,
             warmup_iters=2, learning_rate=3e-3, progress=False, tensorboard=False, grad_log_interval=0,
             probe_interval=0, dtype="float32", max_time=0.0, seed=5)
    t.update(train)
    return RunConfig(DataConfig(path=str(text)), ModelConfig(block_size=16, source=source, init={"n_layer": 2}),
                     TrainConfig(**t))


def test_build_gives_the_corpus_vocabulary_to_a_class_or_a_function(model_file):
    m = build_model(parse_source(f"{model_file}:MyGPT"), {"n_layer": 3}, vocab_size=11)
    assert len(m.blocks) == 3 and m.head.out_features == 11
    f = build_model(parse_source(f"{model_file}:factory"), None, vocab_size=7)
    assert len(f.blocks) == 1 and f.head.out_features == 7


@pytest.mark.parametrize("spec,init,words", [
    ("{f}:Missing", None, "defines no 'Missing' (it defines Block, MyGPT, factory, not_a_module)"),
    ("{f}:NOT_A_MODEL", None, "NOT_A_MODEL is not a class or a function (its type is int)"),
    ("{f}:not_a_module", None, "returned an object of type str, not a torch.nn.Module"),
    ("{f}:MyGPT", {"depth": 2}, "MyGPT(depth=2, vocab_size=11) failed: TypeError:"),
    ("{d}/nothere.py:M", None, "nothere.py not found"),
    ("{f}:", None, "must be PATH.py:NAME"),
])
def test_each_loading_problem_is_one_line_naming_file_and_name(model_file, spec, init, words):
    with pytest.raises(DepthlabError) as e:
        build_model(parse_source(spec.format(f=model_file, d=model_file.parent)), init, vocab_size=11)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_arguments_that_do_not_fit_the_constructor_name_its_parameters_and_the_init_knob(tmp_path):
    """A missing or misspelled argument said only Python's TypeError; the line now gives the fix too."""
    f = tmp_path / "ctor.py"
    f.write_text("import torch.nn as nn\nclass G(nn.Module):\n    def __init__(self, n_layer, vocab_size=5):\n"
                 "        super().__init__()\n        self.e = nn.Embedding(vocab_size, n_layer)\n"
                 "def make(n):\n    raise TypeError('bad n')\n")
    with pytest.raises(DepthlabError) as e:
        build_model(parse_source(f"{f}:G"), None, vocab_size=11)
    assert str(e.value).endswith("missing 1 required positional argument: 'n_layer'; it takes (n_layer, vocab_size): "
                                 "give its keyword arguments as a JSON object, --model.init '{\"n_layer\": ...}' "
                                 "(depthlab check: --init)")
    with pytest.raises(DepthlabError) as e:  # a TypeError from the body, with arguments that fit: no such advice
        build_model(parse_source(f"{f}:make"), {"n": 1})
    assert str(e.value).endswith("failed: TypeError: bad n (at ctor.py:7: raise TypeError('bad n')); the arguments "
                                 "fit its signature, so its own code raised this: check the value given in model.init "
                                 "(n; depthlab check: --init) against what that line needs")


def test_a_missing_model_file_says_where_it_was_looked_for_and_what_is_there(tmp_path):
    """A new user's pass: a typo in the file name said only "file godo.py not found", with no fix."""
    (tmp_path / "good.py").write_text("")
    with pytest.raises(DepthlabError) as e:
        parse_source(f"{tmp_path / 'godo.py'}:MyGPT")
    assert str(e.value) == (f"model.source {tmp_path / 'godo.py'}:MyGPT: file {tmp_path / 'godo.py'} not found in "
                            f"{tmp_path.resolve()}; give the path of the model's .py file, relative to this folder or "
                            f"absolute ({tmp_path.resolve()} holds good.py)")


def test_a_file_that_does_not_import_says_so_with_its_first_line(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("import torch\nraise RuntimeError('half-written model\\nsecond line')\n")
    with pytest.raises(DepthlabError, match=r"broken.py:M: importing .*broken.py failed: RuntimeError: "
                                            r"half-written model \(at broken\.py:2: raise RuntimeError\(.*\)\); "
                                            r"fix broken\.py:2, or what it calls$"):
        build_model(parse_source(f"{bad}:M"))


@pytest.mark.parametrize("text, fix", [
    # each was the problem alone: "importing x.py failed: SyntaxError: invalid syntax (x.py, line 2)", no fix
    ("import torch\ndef f(:\n", "fix line 2 of {f}"),
    ("import no_such_module_here\n", "install the module no_such_module_here in the Python that runs depthlab ("),
    ("import helper_with_typo\n", "fix line 1 of {h} (imported by {f})"),  # the line of the file at fault
])
def test_a_file_that_does_not_import_says_what_to_fix(tmp_path, capsys, monkeypatch, text, fix):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "helper_with_typo.py").write_text("x = (\n")
    f = tmp_path / "m.py"
    f.write_text(text)
    rc = main(["check", "m.py:GPT"])
    err = capsys.readouterr().err
    assert_clean_error(rc, err, "error: m.py:GPT: importing m.py failed: ",
                       "; " + fix.format(f="m.py", h=tmp_path / "helper_with_typo.py"))
    assert f.read_text() == text


def test_a_script_that_exits_at_import_is_one_line_naming_the_main_guard(tmp_path, capsys):
    """A learner's file that parses its own arguments at module level exited depthlab with argparse's usage,
    which named depthlab (a new user's pass); sys.exit(3) exited with status 3 and no message."""
    import sys

    script = tmp_path / "argp.py"
    script.write_text("import argparse\np = argparse.ArgumentParser()\np.add_argument('data')\np.parse_args()\n"
                      "class M:\n    pass\n")  # a required argument: exits 2 when run bare
    argv = list(sys.argv)
    with pytest.raises(DepthlabError, match=r"argp.py:M: importing .*argp.py exited \(SystemExit\(2\).*"
                                            r"if __name__ == \"__main__\""):
        build_model(parse_source(f"{script}:M"))
    assert sys.argv == argv and "usage: argp.py" in capsys.readouterr().err  # its message names the file
    # an argparse with defaults only imports as when the file runs bare: depthlab's own arguments are not its
    (tmp_path / "argd.py").write_text("import argparse, sys\np = argparse.ArgumentParser()\np.add_argument('--n', "
                                      "default=2)\nN = p.parse_args().n\nARGV = list(sys.argv)\n"
                                      "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n"
                                      "        super().__init__()\n        self.w = torch.nn.Linear(1, 1)\n"
                                      "    def forward(self, idx):\n        return self.w(idx)\n")
    sys.argv[1:] = ["check", "--train.max_iters", "5"]
    try:
        build_model(parse_source(f"{tmp_path / 'argd.py'}:M"))
        mod = sys.modules["depthlab_user_argd"]
        assert mod.N == 2 and mod.ARGV == [str(tmp_path / "argd.py")]
        assert sys.argv[1:] == ["check", "--train.max_iters", "5"]
    finally:
        sys.argv[:] = argv
    (tmp_path / "ex3.py").write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(DepthlabError, match=r"ex3.py exited \(SystemExit\(3\)"):
        build_model(parse_source(f"{tmp_path / 'ex3.py'}:M"))


def test_a_constructor_that_calls_sys_exit_is_one_line_not_a_silent_exit_status(tmp_path, capsys):
    """`depthlab check f.py:M` on a constructor doing sys.exit(3) ended with status 3 (depthlab's "final validation
    not finite") and no word (new user nu60); it is now a usage error naming the call and the fix."""
    f = tmp_path / "ex.py"
    f.write_text("import sys, torch\nclass M(torch.nn.Module):\n    def __init__(self, vocab_size, n_head=3):\n"
                 "        super().__init__()\n        sys.exit(3)\n")
    assert main(["check", f"{f}:M"]) == 2
    err = capsys.readouterr().err
    assert err == (f"depthlab: error: {f}:M: M(vocab_size=65) exited (SystemExit(3), any lines just above are its "
                   "own): raise an exception (e.g. ValueError) instead of calling sys.exit, so that the caller can say "
                   "what was wrong\n")


@pytest.mark.parametrize("body, said", [
    ("sys.exit(4)", "the model's code called sys.exit(4) (fx.py:7); raise an exception (e.g. ValueError) there "
                    "instead, so that depthlab can say what was wrong"),
    ("raise KeyboardInterrupt", "the model's code raised KeyboardInterrupt itself (fx.py:7; no Ctrl-C was pressed); "
                                "raise another exception (e.g. ValueError) there instead, so that depthlab can say "
                                "what was wrong")])
def test_a_forward_that_exits_or_raises_keyboardinterrupt_is_one_line_naming_its_line(tmp_path, capsys, body, said):
    """A forward doing sys.exit(4) ended `depthlab check` and `train` with status 4 and no word; one raising
    KeyboardInterrupt itself was called 'interrupted' (exit 130) though no Ctrl-C came (new user nu60)."""
    f = tmp_path / "fx.py"
    f.write_text("import sys, torch\nclass M(torch.nn.Module):\n    def __init__(self, vocab_size):\n"
                 "        super().__init__()\n        self.e = torch.nn.Embedding(vocab_size, vocab_size)\n"
                 f"    def forward(self, idx):\n        {body}\n")
    assert main(["check", f"{f}:M"]) == 2
    assert capsys.readouterr().err == f"depthlab: error: {said}\n"
    with pytest.raises(SystemExit) as e:  # depthlab's own exits (--help) keep their status
        main(["check", "--help"])
    assert e.value.code == 0


def test_os_exit_and_input_at_import_are_one_line_and_restored_after(tmp_path):
    """A new user's pass: os._exit(4) at import ended `depthlab check` silently with status 4; input() at import
    failed with EOFError glued to the file's prompt."""
    import builtins
    import os

    exit_, input_ = os._exit, builtins.input
    (tmp_path / "ex4.py").write_text("import os\nos._exit(4)\n")
    with pytest.raises(DepthlabError, match=r"ex4.py exited \(os._exit\(4\).*__main__"):
        build_model(parse_source(f"{tmp_path / 'ex4.py'}:M"))
    (tmp_path / "ask.py").write_text("n = int(input('layers? '))\n")
    with pytest.raises(DepthlabError, match=r"ask.py asks for input \(input\('layers\? '\)\).*__main__"):
        build_model(parse_source(f"{tmp_path / 'ask.py'}:M"))
    assert (os._exit, builtins.input) == (exit_, input_)


def test_gpt_only_fields_are_refused_with_a_source_naming_them():
    with pytest.raises(DepthlabError, match=r"model.n_layer 8, model.variant 'plain': these describe depthlab's GPT"):
        ModelConfig(source="m.py:M", n_layer=8, variant="plain")
    with pytest.raises(DepthlabError, match="applies to model.source only"):
        ModelConfig(init={"n_layer": 2})
    assert ModelConfig(source="m.py:M", init='{"n_layer": 2}').init == {"n_layer": 2}  # JSON text is read


def test_train_attention_is_refused_with_a_source_and_the_run_records_the_models_own(tmp_path, tiny_text_file,
                                                                                     model_file):
    """A new user's pass: --train.attention sdpa with model.source was accepted and reported, though the user's
    forward computes its own attention (losses bit-identical to explicit); auto said 'explicit' or 'sdpa'."""
    src = f"{model_file}:MyGPT"
    for attention in ("sdpa", "explicit"):
        with pytest.raises(DepthlabError, match=rf"train.attention '{attention}': this chooses depthlab's GPT's "
                                                rf"attention code and does not apply to model.source .*mine.py:MyGPT"):
            _cfg(tmp_path / "x", tiny_text_file, src, attention=attention)
    assert RunConfig(train=TrainConfig(attention="sdpa")).train.attention == "sdpa"  # depthlab's GPT: as before
    Trainer(_cfg(tmp_path / "A", tiny_text_file, src, max_iters=2, eval_interval=2), **QUIET).fit()
    resolved = json.loads((tmp_path / "A" / "config.json").read_text())["resolved"]
    assert resolved["attention"] == "own" and resolved["tuning"]["setting"]["attention"] == "own"


def _evals(run):
    return [(r["step"], r["train_loss"], r["val_loss"]) for r in map(json.loads, (run / "metrics.jsonl").open())
            if r.get("kind") == "eval"]


class _StopAfter:
    def __init__(self, step):
        self.step = step

    def __getattr__(self, name):
        return lambda *a, **k: None

    def on_step_end(self, run, info):
        if info.step == self.step:
            run.request_stop()


def test_a_source_model_resumes_on_exactly_the_uninterrupted_trajectory(tmp_path, tiny_text_file, model_file):
    src = f"{model_file}:MyGPT"
    whole = Trainer(_cfg(tmp_path / "A", tiny_text_file, src), **QUIET)
    whole.fit()
    with pytest.raises(Interrupted):
        Trainer(_cfg(tmp_path / "B", tiny_text_file, src), callbacks=[_StopAfter(17)], **QUIET).fit()
    again = Trainer(_cfg(tmp_path / "B", tiny_text_file, src, resume=True), **QUIET)
    assert again.step == 17 and not again.port.native
    again.fit()
    assert _evals(tmp_path / "A") == _evals(tmp_path / "B") and len(_evals(tmp_path / "A")) == 5
    for (k, a), (_, b) in zip(whole.raw_model.state_dict().items(), again.raw_model.state_dict().items()):
        assert torch.equal(a, b), k
    c = json.loads((tmp_path / "B" / "config.json").read_text())
    copy = tmp_path / "B" / "source" / "mine.py"
    assert copy.read_text() == MODEL and c["model"]["source"] == src and c["model"]["init"] == {"n_layer": 2}
    import hashlib

    assert c["resolved"]["source_sha256"] == hashlib.sha256(MODEL.encode()).hexdigest()


def test_the_run_uses_its_own_copy_and_says_when_the_file_changed(tmp_path, tiny_text_file, model_file, capsys):
    src = f"{model_file}:MyGPT"
    Trainer(_cfg(tmp_path / "r", tiny_text_file, src, max_iters=10), **QUIET).fit()
    model_file.write_text(MODEL.replace("4 * d", "2 * d"))  # the learner edits the file after training
    lines = []
    t = Trainer(_cfg(tmp_path / "r", tiny_text_file, src, max_iters=20, resume=True), log=lines.append)
    assert any("changed since this run copied it" in x and "run's own copy" in x for x in lines)
    assert t.raw_model.blocks[0].fc.out_features == 64  # built from the copy: 4 x 16
    t.fit()
    assert main(["sample", str(tmp_path / "r"), "--prompt", "Speak", "--max-new-tokens", "8", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Speak") and len(out.rstrip("\n")) >= len("Speak") + 1
    assert main(["export", str(tmp_path / "r"), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("depthlab: error: cannot export a model.source model") and err.count("\n") == 1
    assert not (tmp_path / "hf").exists()


def test_a_deleted_model_file_is_said_on_resume_and_the_runs_copy_trains(tmp_path, tiny_text_file, model_file):
    src = f"{model_file}:MyGPT"
    Trainer(_cfg(tmp_path / "r", tiny_text_file, src, max_iters=10), **QUIET).fit()
    model_file.unlink()  # the learner tidies the file away after training
    lines = []
    t = Trainer(_cfg(tmp_path / "r", tiny_text_file, src, max_iters=20, resume=True), log=lines.append)
    said = [x for x in lines if "since this run copied it" in x]
    assert len(said) == 1 and said[0].startswith(f"warning: {model_file} was deleted since") and "own copy" in said[0]
    t.fit()
    assert t.step == 20


def test_a_changed_copy_in_the_run_is_named_not_the_users_file(tmp_path, tiny_text_file, model_file, capsys):
    """A new user's pass: the run's source/ copy replaced by `raise SystemExit(5)`: resume warned that the user's
    (unchanged) file had changed, then blamed the file for running a script at import."""
    from conftest import assert_clean_error

    src = f"{model_file}:MyGPT"
    Trainer(_cfg(tmp_path / "r", tiny_text_file, src, max_iters=10), **QUIET).fit()
    copy = tmp_path / "r" / "source" / "mine.py"
    copy.write_text("raise SystemExit(5)\n")
    with pytest.raises(DepthlabError, match=r"mine.py does not match the sha256 .*config.json recorded for it .*"
                                            r"the run's own copy of its model file was changed or damaged"):
        Trainer(_cfg(tmp_path / "r", tiny_text_file, src, max_iters=20, resume=True), **QUIET)
    for argv in (["sample", str(tmp_path / "r")], ["context", str(tmp_path / "r")]):
        assert_clean_error(main(argv), capsys.readouterr().err, "does not match the sha256")
    assert main(["report", str(tmp_path / "r")]) == 0  # the report is drawn, and says what it leaves out
    assert "does not match the sha256" in capsys.readouterr().err
    copy.unlink()  # a missing copy whose original is unchanged: the fix names the original
    with pytest.raises(DepthlabError, match=r"holds no copy of its file .*missing\); copy .*mine.py there "
                                            r"\(its sha256 is"):
        Trainer(_cfg(tmp_path / "r", tiny_text_file, src, max_iters=20, resume=True), **QUIET)


@pytest.mark.parametrize("init,block,words", [
    ({"n_layer": 2}, 32, "forward(idx) failed on idx of shape (4, 32) (train.batch_size, model.block_size): "
                         "IndexError: index out of range in self"),
    ({"n_layer": 2, "vocab_size": 5}, 16, "returned logits of shape (4, 16, 5), not (4, 16, "),
])
def test_a_model_that_cannot_run_at_the_run_sizes_is_refused_before_training(tmp_path, tiny_text_file, model_file,
                                                                               init, block, words):
    cfg = _cfg(tmp_path / "x", tiny_text_file, f"{model_file}:MyGPT")
    cfg.model = ModelConfig(block_size=block, source=cfg.model.source, init=init)  # (building the config)
    with pytest.raises(DepthlabError) as e:
        Trainer(cfg, **QUIET)
    assert words in str(e.value) and not (tmp_path / "x").exists()  # the run folder it made is gone again


def test_probe_refuses_a_source_model_instead_of_probing_the_default_gpt(capsys, model_file):
    # it printed a healthy "prenorm, 4 blocks" probe of depthlab's default GPT for the user's model
    assert main(["probe", "--model.source", f"{model_file}:MyGPT"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("depthlab: error: probe builds depthlab's GPT") and "depthlab check" in err
    assert err.count("\n") == 1


FIXED_BATCH = MODEL + '''
class FixedBatch(MyGPT):
    """A learner's model with the batch size written into its code (as README's example file has)."""
    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        x = x.view(4, idx.shape[1], -1)  # B = 4, always
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))
'''


def test_a_model_that_takes_only_its_training_batch_finishes_its_run_without_the_final_validation(tmp_path,
                                                                                                   tiny_text_file):
    """The whole val split ends in a smaller batch; such a model fails there. The run is finished all the same
    (summary written, resumable as done) and the log says why the whole-split figure is missing."""
    src = tmp_path / "fixed.py"
    src.write_text(FIXED_BATCH)
    lines = []
    t = Trainer(_cfg(tmp_path / "r", tiny_text_file, f"{src}:FixedBatch", max_iters=10, final_validation=True),
                log=lines.append)
    assert t.evaluator.final_batches > 0
    t.fit()
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["final_step"] == 10 and not summary.get("final_validation")
    skipped = [x for x in lines if x.startswith("final validation skipped: ")]
    assert len(skipped) == 1 and "train.final_validation=False" in skipped[0]  # a Python Trainer: the API's words


def test_a_keyboardinterrupt_the_file_raises_is_not_read_as_ctrl_c(tmp_path):
    """A file that raises KeyboardInterrupt at import read as the user's Ctrl-C ("depthlab: interrupted", 130); a
    real SIGINT during the import still interrupts, and the SIGINT handler is restored."""
    import signal

    handler = signal.getsignal(signal.SIGINT)
    (tmp_path / "ki.py").write_text("raise KeyboardInterrupt\n")
    with pytest.raises(DepthlabError,
                       match=r"ki.py raised KeyboardInterrupt itself \(no Ctrl-C was pressed\).*__main__"):
        build_model(parse_source(f"{tmp_path / 'ki.py'}:M"))
    (tmp_path / "sig.py").write_text("import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)\n")
    with pytest.raises(KeyboardInterrupt):
        build_model(parse_source(f"{tmp_path / 'sig.py'}:M"))
    assert signal.getsignal(signal.SIGINT) is handler


@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
def test_a_source_run_whose_config_records_an_attention_resumes_without_a_false_line(tmp_path, tiny_text_file,
                                                                                       model_file, capsys, attention):
    # a model.source run made before --train.attention was refused with model.source: its config.json says
    # train.attention explicit (resolved.attention too); resuming it was refused, or said "attention explicit -> own"
    run = tmp_path / "A"
    src = f"{model_file}:MyGPT"
    Trainer(_cfg(run, tiny_text_file, src, max_iters=10, eval_interval=5), **QUIET).fit()
    cfg = json.loads((run / "config.json").read_text())
    cfg["train"]["attention"] = cfg["resolved"]["attention"] = cfg["resolved"]["tuning"]["setting"]["attention"] = \
        attention
    (run / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--train.max_iters", "20"]) == 0
    out, err = capsys.readouterr()
    assert f"resuming {run} from step 10" in out
    assert "attention" not in err, err
    after = json.loads((run / "config.json").read_text())
    assert after["train"]["attention"] == "auto" and after["resolved"]["attention"] == "own"
    assert _evals(run)[-1][0] == 20
    for argv in (["--resume", str(run), "--train.max_iters", "30", "--train.attention", attention],  # asked: judged
                 ["--data.path", str(tiny_text_file), "--model.source", src, "--train.attention", attention,
                  "--train.out_dir", str(tmp_path / "new")]):
        assert main(["train", *argv]) == 2
        err = capsys.readouterr().err
        assert f"depthlab: error: --train.attention '{attention}': this chooses depthlab's GPT's attention code" in err
        assert "--resume reads" not in err and "by hand" not in err  # the flag's value, not config.json's
    assert not (tmp_path / "new").exists() and _evals(run)[-1][0] == 20


def test_train_names_flattened_logits_as_the_loss_flattening_them():
    """`--model.source` with a forward returning logits.view(-1, V): the refusal said only "(B, T, V)"."""
    from depthlab.usermodel import check_forward

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.head = torch.nn.Embedding(65, 8), torch.nn.Linear(8, 65)

        def forward(self, idx):
            return self.head(self.tok(idx)).reshape(-1, 65)

    with pytest.raises(DepthlabError) as e:
        check_forward(Flat(), "m.py:Flat", 4, 16, 65)
    assert str(e.value) == (
        "m.py:Flat: forward(idx) on (4, 16) returned logits of shape (64, 65), not (4, 16, 65) (B, T, V with the "
        "corpus's 65 tokens); (64, 65) is the logits flattened to (B*T, V) (4 x 16 = 64 rows), as a loss flattens "
        "them: return them before the .view(-1, V) / .reshape (depthlab computes the loss itself)")



def test_the_forward_check_before_training_names_the_line_of_the_models_file(tmp_path):
    """A new user's pass: --model.init '{"d": 30}' with 4 heads failed the forward before training with "shape
    '[16, 32, 4, 7]' is invalid" alone, where check and a training step name the line of the file."""
    from depthlab.usermodel import check_forward

    f = tmp_path / "heads.py"
    f.write_text("import torch, torch.nn as nn\nclass M(nn.Module):\n    def __init__(self, vocab_size=5, d=6):\n"
                 "        super().__init__()\n"
                 "        self.e, self.h = nn.Embedding(vocab_size, d), nn.Linear(d, vocab_size)\n"
                 "    def forward(self, idx):\n        B, T = idx.shape\n        x = self.e(idx).view(B, T, 4, -1)\n"
                 "        return self.h(x.view(B, T, -1))\n")
    model = build_model(parse_source(f"{f}:M"))
    with pytest.raises(DepthlabError) as e:
        check_forward(model, "heads.py:M", 2, 3, 5)
    assert ("(train.batch_size, model.block_size): RuntimeError: shape '[2, 3, 4, -1]' is invalid for input of size 36 "
            "(at heads.py:8: x = self.e(idx).view(B, T, 4, -1));") in str(e.value)

class _KarpathyBigram(torch.nn.Module):
    """"Let's build GPT"'s bigram model: without targets it returns (B, T, C), with them logits.view(B*T, C)."""

    def __init__(self):
        super().__init__()
        self.token_embedding_table = torch.nn.Embedding(65, 65)

    def forward(self, idx, targets=None):
        logits = self.token_embedding_table(idx)
        if targets is None:
            return logits, None
        B, T, C = logits.shape
        logits = logits.view(B * T, C)
        return logits, torch.nn.functional.cross_entropy(logits, targets.view(B * T))


def test_flattened_logits_of_a_forward_given_targets_say_that_depthlab_passed_them():
    """A new user's pass: Karpathy's bigram model was refused as 'forward(idx) ... returned (64, 65)'; its author's
    forward(idx) returns (4, 16, 65), and nothing said that depthlab had called forward(idx, targets)."""
    from depthlab.usermodel import check_forward

    assert _KarpathyBigram()(torch.zeros(4, 16, dtype=torch.long))[0].shape == (4, 16, 65)
    with pytest.raises(DepthlabError) as e:
        check_forward(_KarpathyBigram(), "bigram.py:BigramLanguageModel", 4, 16, 65)
    assert str(e.value).endswith(
        "(64, 65) is the logits flattened to (B*T, V) (4 x 16 = 64 rows) when the forward is given targets: depthlab "
        "calls forward(idx, targets) on a forward that takes them (nanoGPT returns the last position alone without "
        "them), so return the (B, T, V) logits with targets too: flatten a copy for the loss, e.g. "
        "F.cross_entropy(logits.view(B*T, C), targets.view(B*T)) (depthlab computes the loss itself)")


NAN_SHORT = '''
import torch, torch.nn as nn

class NanShort(nn.Module):
    """Finite logits at the training length only: NaN for any shorter input (the whole split's last window)."""
    def __init__(self, vocab_size, block_size=16):
        super().__init__()
        self.emb, self.head, self.block_size = nn.Embedding(vocab_size, 8), nn.Linear(8, vocab_size), block_size
    def forward(self, idx):
        x = self.head(self.emb(idx))
        return x if idx.shape[1] == self.block_size else x * float("nan")
'''


@pytest.mark.slow
def test_a_nan_final_validation_ends_the_run_with_exit_3_and_a_finding_not_no_problems(tmp_path, tiny_text_file,
                                                                                       capsys):
    """Every periodic evaluation is finite, the whole-split final validation is NaN: the run is kept, but the
    diagnosis (at train end and from `depthlab diagnose`) names it and the run exits 3, as a non-finite training
    loss does, pointing at `depthlab check`, which flags the NaN at the shorter lengths."""
    src = tmp_path / "nanshort.py"
    src.write_text(NAN_SHORT)
    run = tmp_path / "r"
    argv = ["train", "--data.path", str(tiny_text_file), "--model.source", f"{src}:NanShort", "--model.block_size",
            "16", "--train.out_dir", str(run), "--train.max_iters", "10", "--train.eval_interval", "5",
            "--train.max_time", "0", "--train.batch_size", "4", "--train.progress", "false"]
    assert main(argv) == 3
    out, err = capsys.readouterr()
    assert "no problems" not in out + err
    assert "(whole val split nan)" in out
    last = err.strip().splitlines()[-1]
    assert last.startswith("depthlab: error: the final validation loss is not finite (nan nats over the whole val "
                           "split, best weights of step 10)"), last
    assert f"depthlab check {src}:NanShort tests the forward at many lengths" in last and str(run) in last
    summary = json.loads((run / "summary.json").read_text())
    # NaN, written as metrics.jsonl writes it ("nan": a bare NaN is no JSON); the run is kept
    assert summary["final_step"] == 10 and summary["final_validation"]["val_loss"] == "nan"
    found = json.loads((run / "diagnosis.json").read_text())["findings"]
    assert [f["rule"] for f in found] == ["exploding"] and "final validation loss is not finite" in found[0][
        "evidence"] and found[0]["remedy"].startswith("not the learning rate: depthlab check")
    assert main(["diagnose", str(run)]) == 0
    out = capsys.readouterr().out
    assert "no problems" not in out and "[exploding] the final validation loss is not finite" in out
    assert main(["check", f"{src}:NanShort", "--data.path", str(tiny_text_file), "--block_size", "16",
                 "--init", '{"block_size": 16}']) == 1
    out = " ".join(capsys.readouterr().out.split())  # the report wraps its lines
    assert "T=8, 15 fail (the logits hold NaN/inf)" in out and "hard-coded" not in out


def test_a_process_that_did_not_run_the_final_validation_exits_3_when_process_0_found_it_not_finite(tmp_path):
    """Under torchrun only process 0 evaluates the whole split; the others learn the outcome from the agreed flag
    (Evaluator.final_nonfinite) and end with exit 3 too, not 0 (was: rank 0 exited 3, the others 0)."""
    from types import SimpleNamespace

    from depthlab.errors import NonFiniteError
    from depthlab.trainer import fit_checked

    def run(final_nonfinite):
        ev = SimpleNamespace(final_val=None, best_val=3.02, final_nonfinite=final_nonfinite)
        return SimpleNamespace(fit=lambda: tmp_path, evaluator=ev, cfg=SimpleNamespace(model=SimpleNamespace(
            source=None)))

    assert fit_checked(run(False)) == tmp_path
    with pytest.raises(NonFiniteError) as e:
        fit_checked(run(True))
    assert str(e.value) == ("the final validation loss is not finite (process 0 evaluated it and names the cause); "
                            f"the run and its checkpoints are kept in {tmp_path}")


@pytest.mark.slow
def test_under_torchrun_every_process_exits_3_on_a_nan_final_validation(tmp_path, tiny_text_file):
    import os
    import shutil
    import subprocess
    import sys

    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    src = tmp_path / "nanshort.py"
    src.write_text(NAN_SHORT)
    # a monitor interval longer than the ranks' gap in ending: torchrun sees both exit codes, not one and a SIGTERM
    p = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", "--monitor-interval", "2", "--redirects",
                        "3", "--log-dir", str(tmp_path / "logs"), "-m", "depthlab", "train", "--data.path",
                        str(tiny_text_file), "--model.source", f"{src}:NanShort", "--model.block_size", "16",
                        "--train.out_dir", str(tmp_path / "r"), "--train.max_iters", "10", "--train.eval_interval",
                        "5", "--train.max_time", "0", "--train.batch_size", "4", "--train.grad_accum", "2",
                        "--train.progress", "false"], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode != 0
    codes = sorted(line.split(":")[1].split()[0] for line in p.stderr.splitlines() if "exitcode  :" in line)
    assert codes == ["3", "3"], p.stderr[-3000:]
    last = {int(f.parent.name): f.read_text().strip().splitlines()[-1] for f in (tmp_path / "logs").rglob("stderr.log")}
    assert last[0].startswith("depthlab: error: the final validation loss is not finite (nan nats over the whole")
    assert last[1] == ("depthlab: error: the final validation loss is not finite (process 0 evaluated it and names "
                       f"the cause); the run and its checkpoints are kept in {tmp_path / 'r'}")


def test_a_model_importing_a_sibling_module_checks_trains_and_loads_after_its_folder_moves(tmp_path, tiny_text_file,
                                                                                          capsys):
    """`from dl_sib_layers import Block` beside the model: the run keeps a copy of dl_sib_layers.py too, so that
    sample loads the run after the learner's folder is renamed (the recorded ORIGIN no longer has it)."""
    import shutil
    import sys

    folder = tmp_path / "mine"
    folder.mkdir()
    block, rest = MODEL.split("class MyGPT", 1)
    (folder / "dl_sib_layers.py").write_text(block + "from dl_sib_util import WIDTH\n")
    (folder / "dl_sib_util.py").write_text("WIDTH = 4\n")
    (folder / "model.py").write_text("import torch, torch.nn as nn\nfrom dl_sib_layers import Block\n\n"
                                     "class MyGPT" + rest)
    made = build_model(parse_source(f"{folder / 'model.py'}:MyGPT"), vocab_size=65)  # as `depthlab check` loads it
    assert type(made.blocks[0]).__module__ == "dl_sib_layers" and made.head.out_features == 65
    run = tmp_path / "r"
    Trainer(_cfg(run, tiny_text_file, f"{folder / 'model.py'}:MyGPT", max_iters=4), **QUIET).fit()
    assert sorted(p.name for p in (run / "source").glob("*.py")) == ["dl_sib_layers.py", "dl_sib_util.py",
                                                                      "model.py"]
    shutil.move(str(folder), str(tmp_path / "moved"))
    for name in ("dl_sib_layers", "dl_sib_util"):  # a later process would not have them imported
        sys.modules.pop(name, None)
    sys.path[:] = [p for p in sys.path if p != str(folder)]
    capsys.readouterr()
    assert main(["sample", str(run), "--prompt", "Speak", "--max-new-tokens", "4", "--seed", "1"]) == 0
    assert capsys.readouterr().out.startswith("Speak")


def test_a_resume_names_a_changed_sibling_module_and_refuses_a_damaged_copy_of_one(tmp_path, tiny_text_file):
    """config.json records the sha256 of each sibling module copied into source/, as of the model's file: a resume
    whose original sibling changed says so in one warning line (and uses the copy); a copy that no longer matches
    its recorded sha256 is refused, as the model file's own copy is."""
    import hashlib
    import sys

    folder = tmp_path / "mine"
    folder.mkdir()
    block, rest = MODEL.split("class MyGPT", 1)
    (folder / "dl_sibh_layers.py").write_text(block)
    (folder / "model.py").write_text("import torch, torch.nn as nn\nfrom dl_sibh_layers import Block\n\n"
                                     "class MyGPT" + rest)
    run, src = tmp_path / "r", f"{folder / 'model.py'}:MyGPT"
    Trainer(_cfg(run, tiny_text_file, src, max_iters=4, eval_interval=2), **QUIET).fit()
    c = json.loads((run / "config.json").read_text())
    assert c["resolved"]["source_siblings_sha256"] == {"dl_sibh_layers.py": hashlib.sha256(block.encode()).hexdigest()}
    (folder / "dl_sibh_layers.py").write_text(block.replace("4 * d", "2 * d"))  # edited after training
    sys.modules.pop("dl_sibh_layers", None)
    lines = []
    t = Trainer(_cfg(run, tiny_text_file, src, max_iters=6, eval_interval=2, resume=True), log=lines.append)
    warned = [x for x in lines if x.startswith("warning:")]
    assert warned == [f"warning: {folder / 'dl_sibh_layers.py'} (a module model.py imports) changed since this run "
                      f"copied it; resuming with the run's own copy {run / 'source' / 'dl_sibh_layers.py'} (sha256 "
                      f"{hashlib.sha256(block.encode()).hexdigest()[:12]}...)"]
    assert t.raw_model.blocks[0].fc.out_features == 64  # the copy's 4 x 16, not the edited 2 x 16
    (folder / "dl_sibh_layers.py").unlink()  # a deleted original was not said at all
    sys.modules.pop("dl_sibh_layers", None)
    lines = []
    t = Trainer(_cfg(run, tiny_text_file, src, max_iters=6, eval_interval=2, resume=True), log=lines.append)
    assert [x for x in lines if x.startswith("warning:")] == [
        f"warning: {folder / 'dl_sibh_layers.py'} (a module model.py imports) was deleted since this run copied it; "
        f"resuming with the run's own copy {run / 'source' / 'dl_sibh_layers.py'} (sha256 "
        f"{hashlib.sha256(block.encode()).hexdigest()[:12]}...)"]
    t.fit()
    assert json.loads((run / "config.json").read_text())["resolved"]["source_siblings_sha256"] == \
        c["resolved"]["source_siblings_sha256"]
    (run / "source" / "dl_sibh_layers.py").write_text(block + "\n# damaged\n")
    with pytest.raises(DepthlabError, match=r"dl_sibh_layers.py does not match the sha256 .*config.json recorded "
                                            r"for it \(.*the run's own copy of dl_sibh_layers.py, a module its model "
                                            r"file imports"):
        Trainer(_cfg(run, tiny_text_file, src, max_iters=8, eval_interval=2, resume=True), **QUIET)


def test_a_bare_file_names_its_one_module_class_or_lists_them_importing_it_once(tmp_path, tiny_text_file, capsys,
                                                                               monkeypatch):
    """`depthlab check model.py` / `--model.source model.py` (no :NAME) was refused; a file that defines one
    nn.Module class now gives it, said in one line, from the import that builds the model (the file runs once), and
    the run records model.py:NAME; several classes are listed with the one no other uses as the name to give."""
    import functools

    import depthlab.analytics.check as check
    from depthlab.config import DataConfig

    # two quick rules: what is tested is how the model is found and built, not the rules
    monkeypatch.setattr(check, "check_model", functools.partial(check.check_model, rules=("shape", "vocab")))
    block, rest = MODEL.split("class MyGPT", 1)
    (tmp_path / "dl_bare_layers.py").write_text(block)
    one = tmp_path / "one.py"
    one.write_text(f"open({str(tmp_path / 'imports.log')!r}, 'a').write('x')\nimport torch, torch.nn as nn\n"
                   "from dl_bare_layers import Block\n\nclass MyGPT" + rest)
    lines = []
    report = check.check_source(str(one), data=DataConfig(path=str(tiny_text_file)), block_size=16, log=lines.append)
    assert report.model["source"] == f"{one}:MyGPT" and report.exit_code == 0
    assert lines[0] == f"one.py defines one nn.Module class, MyGPT: it is the model ({one}:MyGPT)"
    assert (tmp_path / "imports.log").read_text() == "x"  # once: the class is found by the import that builds it
    Trainer(_cfg(tmp_path / "r", tiny_text_file, str(one), max_iters=2, eval_interval=2), log=lines.append).fit()
    assert f"one.py defines one nn.Module class, MyGPT: it is the model ({one}:MyGPT)" in lines
    assert (tmp_path / "imports.log").read_text() == "xx"  # the run imported it once more, not twice
    assert json.loads((tmp_path / "r" / "config.json").read_text())["model"]["source"] == f"{one}:MyGPT"
    assert (tmp_path / "r" / "source" / "one.py").read_text() == one.read_text()
    several = tmp_path / "several.py"
    several.write_text("import torch.nn as nn\nclass Head(nn.Module):\n    pass\nclass GPT(nn.Module):\n"
                       "    def __init__(self):\n        super().__init__()\n        self.b = Block()\n"
                       "class Block(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                       "        self.h = Head()\n")
    assert main(["check", str(several)]) == 2
    assert capsys.readouterr().err == (f"depthlab: error: several.py defines Head, GPT, Block: name the model as "
                                       f"{several}:GPT\n")
    # a model beside a class no other uses (a second model, a test module): both are offered, neither guessed
    (tmp_path / "pair.py").write_text("import torch.nn as nn\nclass Block(nn.Module):\n    pass\n"
                                      "class MyGPT(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                                      "        self.b = Block()\nclass Other(nn.Module):\n    pass\n")
    assert main(["check", str(tmp_path / "pair.py")]) == 2
    assert capsys.readouterr().err == (f"depthlab: error: pair.py defines Block, MyGPT, Other: name the model as "
                                       f"{tmp_path / 'pair.py'}:MyGPT or {tmp_path / 'pair.py'}:Other\n")
    (tmp_path / "none.py").write_text("import torch.nn as nn\ndef make():\n    return nn.Linear(2, 2)\n")
    assert main(["train", "--model.source", str(tmp_path / "none.py")]) == 2
    assert capsys.readouterr().err.endswith(f"none.py defines no nn.Module class (it defines make); name the model "
                                            f"as {tmp_path / 'none.py'}:NAME, with NAME the function in it that "
                                            "returns the model\n")
    # a file that imports its model from a module beside it is pointed at that class, not at a function only
    (tmp_path / "dl_reexported.py").write_text("import torch.nn as nn\nclass Net(nn.Module):\n    pass\n")
    (tmp_path / "reexport.py").write_text("import torch.nn as nn\nfrom dl_reexported import Net\n")
    assert main(["check", str(tmp_path / "reexport.py")]) == 2
    assert capsys.readouterr().err == (f"depthlab: error: {tmp_path / 'reexport.py'} defines no nn.Module class (it "
                                       f"imports Net); name the model as {tmp_path / 'reexport.py'}:NAME, with NAME "
                                       "the function in it that returns the model or the class it imports\n")


_FORWARD = "    def forward(self, idx):\n        return self.emb(idx)\n"
_INIT = "    def __init__(self):\n        super().__init__()\n        self.emb = nn.Embedding(65, 65)\n"


@pytest.mark.parametrize("text,offered", [
    # a model and a subclass of it: both are models (the base was taken for a part of the subclass and left out)
    ("class Base(nn.Module):\n" + _INIT + _FORWARD + "class GPT(Base):\n    pass\n", ["Base", "GPT"]),
    # a part (Block, in GPT's body), a model and its subclass: the two models, not the part
    ("class Block(nn.Module):\n" + _INIT + _FORWARD + "class GPT(nn.Module):\n" + _INIT.replace("nn.Embedding(65, 65)",
     "Block()") + _FORWARD + "class BigGPT(GPT):\n    pass\n", ["GPT", "BigGPT"]),
    # two classes no other uses, each with a forward (a model beside a second one): both offered, neither guessed
    ("class A(nn.Module):\n" + _INIT + _FORWARD + "class B(nn.Module):\n" + _INIT + _FORWARD, ["A", "B"])])
def test_a_bare_file_offers_every_model_class_a_subclass_included(tmp_path, capsys, text, offered):
    """`depthlab check FILE.py` with `class GPT(Base)` offered only GPT: a base class counted as a part of its subclass
    (used in it, like Block in GPT). Both are models; a base with no forward is not."""
    f = tmp_path / "sub.py"
    f.write_text("import torch.nn as nn\n" + text)
    assert main(["check", str(f)]) == 2
    classes = [line.split("(")[0][6:] for line in text.splitlines() if line.startswith("class ")]
    assert capsys.readouterr().err == (f"depthlab: error: sub.py defines {', '.join(classes)}: name the model as "
                                       + " or ".join(f"{f}:{n}" for n in offered) + "\n")


@pytest.mark.parametrize("text,classes", [
    # parts used by the model (Block in GPT's body; Head in Block's): the model is the one class no other uses
    ("class Head(nn.Module):\n" + _INIT + _FORWARD + "class Block(nn.Module):\n"
     + _INIT.replace("nn.Embedding(65, 65)", "Head()") + _FORWARD + "class GPT(nn.Module):\n"
     + _INIT.replace("nn.Embedding(65, 65)", "Block()") + _FORWARD, "Head, Block, GPT"),
    # a base without a forward (shared code; the subclass calls Base.__init__) and a helper module without one
    ("class Base(nn.Module):\n" + _INIT + "class Scale(nn.Module):\n    pass\nclass GPT(Base):\n"
     "    def __init__(self):\n        Base.__init__(self)\n" + _FORWARD, "Base, Scale, GPT")])
def test_a_bare_file_whose_one_candidate_is_the_model_is_taken(tmp_path, monkeypatch, text, classes):
    """`depthlab check FILE.py` refused a file of several nn.Module classes even when only one of them can be the
    model (the others its parts, or without a forward), naming it ('name the model as sub.py:GPT'): it is taken, as
    a file's one class is, and the line says why."""
    import functools

    import depthlab.analytics.check as check
    from depthlab.config import DataConfig

    # two quick rules: what is tested is how the model is found, not the rules
    monkeypatch.setattr(check, "check_model", functools.partial(check.check_model, rules=("shape", "vocab")))
    f = tmp_path / "sub.py"
    f.write_text("import torch.nn as nn\n" + text)
    (tmp_path / "t.txt").write_text("hello world, " * 200)
    lines = []
    rep = check.check_source(str(f), data=DataConfig(path=str(tmp_path / "t.txt")), block_size=8, log=lines.append)
    assert rep.model["source"] == f"{f}:GPT" and rep.model["class"] == "GPT"
    assert lines[0] == (f"sub.py defines {classes}; GPT is the only one with a forward that no other uses as a part: "
                        f"it is the model ({f}:GPT)")


def test_a_resume_naming_the_runs_model_file_another_way_is_the_same_model(tmp_path, tiny_text_file, model_file,
                                                                             monkeypatch, capsys):
    """`--resume RUN --model.source mine.py` (bare, relative) of a run config.json records as '/abs/mine.py:MyGPT'
    was refused as a changed model.source; the same file written another way, and the bare PATH.py whose one class
    the run recorded, are the run's model (config.json keeps its value). Another class is still refused."""
    run = tmp_path / "A"
    recorded = f"{model_file}:MyGPT"
    Trainer(_cfg(run, tiny_text_file, recorded, max_iters=10, eval_interval=5), **QUIET).fit()
    monkeypatch.chdir(model_file.parent)
    for step, asked in ((20, "mine.py"), (30, "./mine.py:MyGPT")):
        capsys.readouterr()
        assert main(["train", "--resume", str(run), "--train.max_iters", str(step), "--model.source", asked]) == 0
        assert "changed model.source" not in capsys.readouterr().err
        assert json.loads((run / "config.json").read_text())["model"]["source"] == recorded
    assert _evals(run)[-1][0] == 30
    assert main(["train", "--resume", str(run), "--train.max_iters", "40", "--model.source", "mine.py:factory"]) == 2
    err = capsys.readouterr().err
    assert f"changed model.source '{recorded}' -> 'mine.py:factory'" in err
    assert ("train the changed model as a new run from scratch (model.source is other model code, whose weights "
            f"cannot be compared with the run's before it is built; --init-from {run} would check them and refuse "
            "weights that do not fit): depthlab train") in err  # was: 'may change the model's weights'


def test_a_resume_leaves_the_callers_config_as_it_was(tmp_path, tiny_text_file, model_file):
    """A resume asked with the run's model file written another way (a bare or relative PATH.py) set the caller's
    RunConfig to the run's 'PATH.py:NAME' (check_resume wrote it there), so a notebook or sweep reusing the object saw
    it change; the Trainer now works on its own copy."""
    import copy

    run, recorded = tmp_path / "A", f"{model_file}:MyGPT"
    Trainer(_cfg(run, tiny_text_file, recorded, max_iters=2, eval_interval=2), **QUIET).fit()
    for source in (str(model_file), f"{model_file.parent}/./mine.py:MyGPT"):
        cfg = _cfg(run, tiny_text_file, source, max_iters=2, eval_interval=2, resume=True)
        asked = copy.deepcopy(cfg)
        t = Trainer(cfg, **QUIET)
        assert t.cfg.model.source == recorded and t.cfg.model.vocab_size == len(t.corpus.tokenizer.vocab)
        assert cfg == asked and cfg.model.source == source and cfg.model.vocab_size == asked.model.vocab_size


def test_a_source_run_with_a_damaged_config_json_samples_from_the_checkpoints_block_size(tmp_path, tiny_text_file,
                                                                                          model_file, capsys):
    """A new user's pass: sampling such a run warned that it used the checkpoint's copy, then refused with
    "generating from a model that is not depthlab's GPT needs its block_size", naming neither file nor fix."""
    run = tmp_path / "r"
    Trainer(_cfg(run, tiny_text_file, f"{model_file}:MyGPT", max_iters=2, eval_interval=2), **QUIET).fit()
    assert main(["sample", str(run), "--max-new-tokens", "8", "--temperature", "0"]) == 0
    before = capsys.readouterr().out
    (run / "config.json").write_text("{damaged")
    assert main(["sample", str(run), "--max-new-tokens", "8", "--temperature", "0"]) == 0
    out = capsys.readouterr()
    assert out.out == before and len(before) == 1 + 8 + 1  # the newline prompt, 8 characters, the closing newline
    assert "config.json is not the JSON depthlab wrote" in out.err and "error" not in out.err


def test_a_training_steps_forward_error_names_the_line_of_the_models_file(tmp_path):
    """A new user's pass: a forward that failed only in training (a .view under autocast) said the error alone,
    with no place in the file to look, where every other error of the user's code names its line."""
    from depthlab.training.protocol import ModelPort

    f = tmp_path / "boom.py"
    f.write_text("import torch, torch.nn as nn\nclass M(nn.Module):\n    def __init__(self, vocab_size=5):\n"
                 "        super().__init__()\n        self.e = nn.Embedding(vocab_size, vocab_size)\n"
                 "    def forward(self, idx):\n        raise ValueError('boom in training')\n")
    model = build_model(parse_source(f"{f}:M"))
    x = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(DepthlabError) as e:
        ModelPort(model).loss(model, x, x)
    assert str(e.value) == ("the model's forward failed on idx of shape (2, 3): ValueError: boom in training "
                            "(at boom.py:7: raise ValueError('boom in training'))")


def test_a_forward_that_views_its_idx_trains(tmp_path, tiny_text_file):
    """A new user's pass: `self.tok(idx.view(-1))` passed depthlab check, then failed the first training step
    (RuntimeError: view size is not compatible...), because the trainer's batch was a strided view of its windows."""
    from depthlab.data import get_batch

    x, y = get_batch(np.arange(100), 8, 3, np.random.default_rng(0))
    assert x.is_contiguous() and y.is_contiguous() and (y[:, :-1] == x[:, 1:]).all()
    f = tmp_path / "viewer.py"
    f.write_text(MODEL.replace("    def forward(self, idx):\n",
                               "    def forward(self, idx):\n        idx = idx.view(-1).view(idx.shape)\n"))
    assert "idx.view(-1)" in f.read_text()
    Trainer(_cfg(tmp_path / "r", tiny_text_file, f"{f}:MyGPT", max_iters=2, eval_interval=2), **QUIET).fit()
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["final_step"] == 2


def test_a_folder_given_alone_as_the_model_is_said_to_be_a_folder(tmp_path, capsys):
    """`depthlab check adir` (a folder, no :NAME) was told it 'must be PATH.py:NAME' (final new-user pass)."""
    d = tmp_path / "adir"
    d.mkdir()
    (d / "gpt.py").write_text("import torch\n")
    assert main(["check", str(d)]) == 2
    assert capsys.readouterr().err == (f"depthlab: error: check {d}: {d} is a folder (it holds gpt.py); give the .py "
                                       f"file in it that defines the model (e.g. {d / 'gpt.py'})\n")


def test_a_run_folder_given_as_the_model_names_its_copy_of_the_model_file(tmp_path, capsys):
    """`depthlab check RUN` of a --model.source run suggested RUN/model.py, a file no run has; the run's own copy
    of the file it trained with is RUN/source/FILE.py (named with the class its config.json records)."""
    run = tmp_path / "run"
    (run / "source").mkdir(parents=True)
    (run / "source" / "mine.py").write_text("import torch\n")
    (run / "config.json").write_text(json.dumps({"model": {"source": "/elsewhere/mine.py:TinyGPT",
                                                           "init": {"block_size": 32}}}))
    assert main(["check", str(run)]) == 2
    # with the --init it was built with (a fresh-install pass: the copy alone failed, "missing 'block_size'")
    assert capsys.readouterr().err == (f"depthlab: error: check {run}: {run} is a run folder; give the model file it "
                                       f"trained with, e.g. its copy {run / 'source' / 'mine.py'}:TinyGPT --init "
                                       "'{\"block_size\": 32}'\n")
    (run / "config.json").write_text(json.dumps({"model": {"source": None}}))  # depthlab's own GPT: no model file
    assert main(["check", str(run)]) == 2
    assert capsys.readouterr().err == (f"depthlab: error: check {run}: {run} is a run of depthlab's own GPT (it has no "
                                       "model file of yours); give a model file you wrote, PATH.py:NAME\n")


@pytest.mark.parametrize("flag", ["{d}:GPT", "{d}/:GPT", "{d}"])
@pytest.mark.parametrize("command", [["train", "--train.out_dir", "out"],
                                     ["sweep", "--grid", "train.learning_rate=0.1,0.2", "--out_dir", "out"]])
def test_a_folder_as_model_source_names_the_py_file_to_give(tmp_path, capsys, monkeypatch, flag, command):
    """`depthlab train --model.source adir:GPT` was "--model.source 'adir:GPT' must be PATH.py:NAME ...": no word
    that adir is a folder, nor of the file in it to give (the config's check wanted a path ending in .py)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir" / "m.py").write_text("import torch\n")
    source = flag.format(d="adir")
    rc = main([*command, "--model.source", source])
    gpt, what = (":GPT", "GPT") if ":" in source else ("", "the model")
    assert_clean_error(rc, capsys.readouterr().err, "model.source ", f" {source}: {source.split(':')[0]} is a "
                       f"folder (it holds m.py); give the .py file in it that defines {what} (e.g. adir/m.py{gpt})")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]


@pytest.mark.parametrize("name,init,words", [
    ("Missing", {"n_layer": 2}, "defines no 'Missing'"),
    ("MyGPT", {"depth": 2}, "failed: TypeError:"),
])
def test_the_model_line_is_said_only_once_the_source_model_is_built(tmp_path, tiny_text_file, model_file, name,
                                                                    init, words):
    """'model: mine.py:Missing (your code, ...)' was said before the source was refused: no model was loaded."""
    lines = []
    cfg = _cfg(tmp_path / "r", tiny_text_file, f"{model_file}:{name}")
    cfg.model.init = init
    with pytest.raises(DepthlabError, match=words):
        Trainer(cfg, log=lines.append)
    assert not [x for x in lines if x.startswith("model:")]
    cfg = _cfg(tmp_path / "ok", tiny_text_file, f"{model_file}:MyGPT")
    Trainer(cfg, log=lines.append)
    assert f"model: {model_file}:MyGPT (your code, run as Python because model.source names it)" in lines


def test_a_source_runs_config_json_and_print_config_leave_out_depthlabs_gpt_fields(tmp_path, tiny_text_file,
                                                                                   model_file, capsys):
    """config.json and --print_config listed n_layer 4, variant prenorm, ... for a model.source run, as if they
    described the user's model; the model section now holds only what does (as the report's table shows it)."""
    from conftest import cli_print_config

    run, src = tmp_path / "r", f"{model_file}:MyGPT"
    Trainer(_cfg(run, tiny_text_file, src, max_iters=4, eval_interval=2), **QUIET).fit()
    model = json.loads((run / "config.json").read_text())["model"]
    assert model == {"vocab_size": model["vocab_size"], "block_size": 16, "init": {"n_layer": 2}, "source": src}
    assert model["vocab_size"] > 0
    lines = []
    Trainer(_cfg(run, tiny_text_file, src, max_iters=6, eval_interval=2, resume=True), log=lines.append).fit()
    assert not [x for x in lines if "differs" in x or x.startswith("warning")]  # the omitted fields are no edit
    out = cli_print_config(capsys, "train", "--model.source", src, "--print_config")
    assert f"model:\n  block_size: 128\n  source: {src}\ntrain:\n" in out  # vocab_size: the corpus's, not printed
    assert "n_layer" in cli_print_config(capsys, "train", "--print_config")  # depthlab's GPT keeps them


def test_a_forward_failing_under_bf16_autocast_says_so_and_names_train_dtype_float32(tmp_path):
    """A new user's pass: a forward that built a float32 tensor met by torch.lerp failed train.dtype auto's bf16
    timing with 'expected dtype float ... BFloat16' alone: no word of autocast, nor of --train.dtype float32."""
    from depthlab.training.protocol import ModelPort

    f = tmp_path / "lerp.py"
    f.write_text("import torch, torch.nn as nn\nclass M(nn.Module):\n    def __init__(self, vocab_size=5):\n"
                 "        super().__init__()\n        self.e = nn.Embedding(vocab_size, 4)\n"
                 "        self.h = nn.Linear(4, vocab_size)\n    def forward(self, idx):\n"
                 "        x = self.e(idx)\n        g = torch.ones(x.shape, dtype=torch.float32)\n"
                 "        return torch.lerp(x, self.h(x)[..., :4], g)\n")
    model = build_model(parse_source(f"{f}:M"))
    x = torch.zeros(2, 3, dtype=torch.long)
    assert ModelPort(model).loss(model, x, x).dtype == torch.float32  # float32: fine, and no clause
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(DepthlabError) as e:
        ModelPort(model).loss(model, x, x)
    msg = str(e.value)
    assert msg.startswith("the model's forward failed on idx of shape (2, 3): RuntimeError: expected dtype float")
    assert "(at lerp.py:10: return torch.lerp(x, self.h(x)[..., :4], g))" in msg
    assert msg.endswith("; it ran under bf16 autocast (train.dtype auto or bfloat16): make the tensor that line "
                        "builds follow the activations (dtype=x.dtype), or train with --train.dtype float32 "
                        "(depthlab check's bf16 rule tests this)")


def test_init_from_a_source_run_builds_its_own_copy_not_the_file_edited_since(tmp_path, tiny_text_file, model_file,
                                                                              monkeypatch, capsys):
    """A new user's pass: `train --init-from runs/ok --train.out_dir other` (runs/ok a model.source run) built the
    file as it is now (edited: the weights did not fit) and said "because model.source names it", never typed."""
    monkeypatch.chdir(tmp_path)
    flags = ["--data.path", str(tiny_text_file), "--model.block_size", "16", "--train.batch_size", "4",
             "--train.max_iters", "4", "--train.eval_interval", "2", "--train.eval_iters", "1", "--train.threads", "1",
             "--train.tensorboard", "false"]
    assert main(["train", *flags, "--model.source", "mine.py:MyGPT", "--model.init", '{"n_layer": 1}',
                 "--train.out_dir", "runs/ok"]) == 0
    kept = (tmp_path / "runs/ok/source/mine.py").read_bytes()
    model_file.write_text(MODEL.replace("4 * d", "2 * d"))  # the learner edits the file after training
    capsys.readouterr()
    assert main(["train", *flags, "--init-from", "runs/ok", "--train.out_dir", "other"]) == 0
    out, err = capsys.readouterr()
    assert ("model: mine.py:MyGPT (your code, run as Python because the --init-from run's model.source names it; "
            f"built from that run's copy {Path('runs/ok/source/mine.py')})") in out
    assert "because model.source names it" not in out
    assert f"warning: {model_file} changed since runs/ok copied it; the new run starts from that run's own copy" in err
    other = json.loads((tmp_path / "other/config.json").read_text())
    ok = json.loads((tmp_path / "runs/ok/config.json").read_text())
    assert other["model"]["source"] == "mine.py:MyGPT" and other["model"]["init"] == {"n_layer": 1}
    assert (tmp_path / "other/source/mine.py").read_bytes() == kept  # the new run keeps the code it trained
    assert other["resolved"]["source_sha256"] == ok["resolved"]["source_sha256"]
    assert (tmp_path / "other/source/ORIGIN").read_text() == str(tmp_path)  # the original's folder, not runs/ok's
    # naming the file again builds it as it is now: the edited model, whose weights do not fit, is refused, and
    # the refusal names the edit and the way back to the run's copy
    rc = main(["train", *flags, "--init-from", "runs/ok", "--model.source", "mine.py:MyGPT", "--train.out_dir", "o2"])
    out, err = capsys.readouterr()
    assert rc == 2 and "model: mine.py:MyGPT (your code, run as Python because model.source names it)" in out
    assert err.startswith("depthlab: error: checkpoint runs/ok does not fit this model: shape mismatch ")
    assert err.endswith(" (mine.py changed since runs/ok copied it: drop --model.source mine.py:MyGPT to start from "
                        "that run's own copy, the code its weights were trained with)\n") and err.count("\n") == 1
    assert not (tmp_path / "o2").exists()


def test_init_from_with_model_init_that_changes_a_weight_shape_names_it_and_the_fix(tmp_path, tiny_text_file,
                                                                                      model_file, monkeypatch, capsys):
    """nu80: the run recorded no model.init, so the new --model.init was not compared and the refusal was only
    'checkpoint runs/ok does not fit this model: shape mismatch W (a) vs (b)', with no fix."""
    monkeypatch.chdir(tmp_path)
    flags = ["--data.path", str(tiny_text_file), "--model.block_size", "16", "--train.batch_size", "4",
             "--train.max_iters", "2", "--train.eval_interval", "2", "--train.eval_iters", "1", "--train.threads", "1",
             "--train.tensorboard", "false"]
    assert main(["train", *flags, "--model.source", "mine.py:MyGPT", "--train.out_dir", "runs/ok"]) == 0
    capsys.readouterr()
    rc = main(["train", *flags, "--init-from", "runs/ok", "--model.init", '{"n_embd": 32}', "--train.out_dir", "o2"])
    err = capsys.readouterr().err
    assert_clean_error(rc, err, "--init-from runs/ok: its weights do not fit this model (model.init None there, "
                       "{'n_embd': 32} here: shape mismatch tok.weight (33, 16) saved vs (33, 32) in this model, ",
                       "); drop those --model flags to take the source run's shape, or drop --init-from: a model of "
                       "this shape is a new model and trains from scratch")
    assert not (tmp_path / "o2").exists()

"""Findings of the 2026-12-06 session (second): a ``-c`` value that is inline YAML but no mapping is said as such
(it was "file not found"), and a command option's bad value given by a ``-c`` file or mapping is named as coming
from it (it named the flag, which was never typed)."""

import pytest

from conftest import TINY_TEXT, cli_err, trained_tiny_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return trained_tiny_run(tmp_path_factory, "s54", TINY_TEXT, steps=4)


@pytest.mark.parametrize("value, said", [
    ("[1,2]", "-c [1,2]: inline YAML is a list, not a mapping; give a mapping such as -c "
              "'{model: {n_layer: 4}}' (or the path of a YAML config file)"),
    ("{train: {seed: 1}", "-c {train: {seed: 1}: inline YAML does not parse (check its braces, brackets and colons)"),
])
def test_inline_yaml_that_is_no_mapping_is_not_called_a_missing_file(capsys, value, said):
    err = cli_err(capsys, "train", "-c", value, "--print_config")
    assert said in err and "file not found" not in err, err


def test_a_plain_word_that_is_no_file_is_still_a_missing_file(capsys, tmp_path):
    err = cli_err(capsys, "train", "-c", str(tmp_path / "no.yaml"), "--print_config")
    assert "no.yaml: file not found" in err, err


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
@pytest.mark.parametrize("command, key", [("layers", "max_tokens"), ("context", "max_tokens"),
                                          ("sample", "max_new_tokens")])
def test_a_bad_value_from_an_inline_mapping_names_the_mapping_not_a_flag(capsys, run, command, key):
    err = cli_err(capsys, command, str(run), "-c", f"{{{key}: -1}}")
    assert err.startswith(f"depthlab: error: -c {{{key}: -1}}: {key} must be >= 0"), err
    assert "--" not in err.split(":")[2], err


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_bad_value_from_a_file_names_the_file_and_a_typed_flag_wins(capsys, run, tmp_path):
    f = tmp_path / "l.yaml"
    f.write_text("max_tokens: -1\n")
    assert cli_err(capsys, "layers", str(run), "-c", str(f)).startswith(
        f"depthlab: error: {f}: max_tokens must be >= 0 (0 = every evaluation batch), got -1"), f
    err = cli_err(capsys, "layers", str(run), "-c", str(f), "--max-tokens", "-2")
    assert err.startswith("depthlab: error: --max-tokens must be >= 0 (0 = every evaluation batch), got -2"), err


# ------------------------------------------------------------------------- a stop before step 1, said once
_STOP_IN_BANNER = ("import os, signal, sys; import depthlab.trainer as t; from depthlab.cli import main\n"
                   "real = t.banner\n"
                   "def banner(*a, **k):\n"
                   "    os.kill(os.getpid(), getattr(signal, sys.argv[1]))\n"
                   "    return real(*a, **k)\n"
                   "t.banner = banner\n"
                   "sys.exit(main(sys.argv[2:]))\n")


@pytest.mark.slow  # two short subprocess runs
@pytest.mark.parametrize("sig, code, verb", [("SIGTERM", 143, "terminated (SIGTERM)"), ("SIGINT", 130, "interrupted")])
def test_a_stop_before_the_first_step_is_one_line_on_stderr_naming_its_signal(tmp_path, sig, code, verb):
    """A fresh-install pass: a stop while the run started printed "interrupted before the first step: ..." on stdout,
    then "depthlab: terminated (SIGTERM)" on stderr: two final lines, and a SIGTERM called an interruption."""
    import subprocess
    import sys

    from conftest import tiny_cli_args

    (tmp_path / "t.txt").write_text(TINY_TEXT)
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-c", _STOP_IN_BANNER, sig, "train",
                        *tiny_cli_args(tmp_path / "t.txt", out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == code, p.stderr
    assert p.stderr.strip().splitlines()[-1] == (f"depthlab: {verb} before the first step: nothing was trained, and "
                                                 f"the new run folder {out} was removed"), p.stderr
    assert "interrupted" not in p.stdout and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    assert not out.exists()


def test_a_sigterm_in_training_or_the_final_validation_is_called_so():
    import signal
    from pathlib import Path

    from depthlab.trainer import Interrupted

    assert str(Interrupted(signal.SIGTERM, Path("r"), 4)) == (
        "terminated (SIGTERM) at step 4; checkpoint written. Resume with: depthlab train --resume r")
    assert str(Interrupted(signal.SIGINT, Path("r"), 4)).startswith("interrupted at step 4; checkpoint written.")
    assert str(Interrupted.at_the_end(signal.SIGTERM, Path("r"), 4)).startswith(
        "terminated (SIGTERM) during the final validation, after the last step (4): the run is finished")


# ------------------------------------------------------------------------- a Trainer(overwrite=True) never fit
_NEVER_FIT = ("import sys; from depthlab.config import DataConfig, ModelConfig, RunConfig, TrainConfig\n"
              "from depthlab.trainer import Trainer\n"
              "cfg = RunConfig(data=DataConfig(path=sys.argv[1]), model=ModelConfig(n_layer=1, n_head=2, n_embd=16,"
              " block_size=16), train=TrainConfig(out_dir=sys.argv[2], max_iters=2, batch_size=4, eval_iters=1,"
              " tensorboard=False, threads=1))\n"
              "t = Trainer(cfg, overwrite=True, log=lambda s: None)\n"
              "if sys.argv[3] == 'fit': t.fit()\n")


@pytest.mark.slow  # three subprocesses
def test_a_python_trainer_with_overwrite_never_fit_puts_the_old_run_back_at_exit(tmp_path):
    """Note 26: ``Trainer(cfg, overwrite=True)`` that is never ``fit()`` left the old run in a hidden
    ``.NAME.replaced-*`` folder and RUN holding the new run's first files; fit, the new run replaces it."""
    import json
    import subprocess
    import sys

    (tmp_path / "t.txt").write_text(TINY_TEXT)
    run = tmp_path / "run"

    def python(mode):
        p = subprocess.run([sys.executable, "-c", _NEVER_FIT, str(tmp_path / "t.txt"), str(run), mode],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr

    python("fit")
    before = {q.relative_to(run).as_posix(): q.read_bytes() for q in run.rglob("*") if q.is_file()}
    python("build only")
    assert {q.relative_to(run).as_posix(): q.read_bytes() for q in run.rglob("*") if q.is_file()} == before
    assert sorted(q.name for q in tmp_path.iterdir()) == ["run", "t.txt"]  # no .run.replaced-* left
    python("fit")  # fit: the new run is there, the old one gone
    assert json.loads((run / "summary.json").read_text()) != json.loads(before["summary.json"])
    assert sorted(q.name for q in tmp_path.iterdir()) == ["run", "t.txt"]


# ------------------------------------------------------------------------- --ray_address: something else listens
def _server(reply):
    """A listener on 127.0.0.1 that answers each connection with ``reply(conn)``; its HOST:PORT."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
                reply(conn)
            except OSError:  # the test closed the listener
                return

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{srv.getsockname()[1]}", srv


_held = []


@pytest.mark.parametrize("reply, heard", [
    (_held.append, "no reply within 0.5s"),  # accepts and never answers: ray.init waited on it for minutes
    (lambda c: c.close(), "it closed the connection"),
    (lambda c: (c.recv(64), c.sendall(b"HTTP/1.1 505 HTTP Version Not Supported\r\n\r\n"), c.close()),
     "its reply is not gRPC's"),
])
def test_a_ray_address_where_something_else_listens_is_refused_in_one_line(reply, heard):
    from depthlab.errors import DepthlabError
    from depthlab.sweep.ray import check_reachable

    address, srv = _server(reply)
    with srv, pytest.raises(DepthlabError) as e:
        check_reachable(address, timeout_s=0.5)
    assert str(e.value).startswith(f"something listens at --ray_address {address} but it is not a Ray cluster "
                                   f"({heard}); start it there with `ray start --head`"), str(e.value)


def test_a_ray_address_that_answers_as_a_grpc_server_does_passes():
    from depthlab.sweep.ray import check_reachable

    settings = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # an HTTP/2 server's preface: an empty SETTINGS frame
    address, srv = _server(lambda c: (c.sendall(settings), c.recv(64), c.close()))
    with srv:
        check_reachable(address, timeout_s=5)


_TYPO_THEN_FIX = ("import sys; from depthlab.config import DataConfig, ModelConfig, RunConfig, TrainConfig\n"
                  "from depthlab.trainer import Trainer, train\n"
                  "cfg = RunConfig(data=DataConfig(path=sys.argv[1]), model=ModelConfig(n_layer=1, n_head=2, "
                  "n_embd=16, block_size=16), train=TrainConfig(out_dir=sys.argv[2], max_iters=3, batch_size=4, "
                  "eval_iters=1, tensorboard=False, threads=1))\n"
                  "if sys.argv[3] == 'typo':\n"
                  "    cfg.model.n_embd = 15  # set after construction: refused before the folder is touched\n"
                  "    try:\n"
                  "        train(cfg, overwrite=True, log=lambda s: None)\n"
                  "    except Exception as e:\n"
                  "        print('refused:', e)\n"
                  "    import os; print(sorted(os.listdir(sys.argv[2])))\n"
                  "    cfg.model.n_embd = 16\n"
                  "else:\n"
                  "    Trainer(cfg, overwrite=True, log=lambda s: None)  # built, never fit\n"
                  "train(cfg, overwrite=True, log=lambda s: None)\n")


@pytest.mark.slow  # subprocesses
@pytest.mark.parametrize("first", ["typo", "never fit"])
def test_a_run_trained_after_an_unstarted_overwrite_is_kept_at_exit(tmp_path, first):
    """A new user's pass of 097e8de: a notebook's typo (or a Trainer never fit) with overwrite=True, then the fixed
    call trained the folder anew; at exit the first call's set-aside run was put back, deleting the new run."""
    import json
    import subprocess
    import sys

    (tmp_path / "t.txt").write_text(TINY_TEXT)
    run = tmp_path / "R"
    p = subprocess.run([sys.executable, "-c", _NEVER_FIT, str(tmp_path / "t.txt"), str(run), "fit"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and json.loads((run / "summary.json").read_text())["final_step"] == 2, p.stderr
    p = subprocess.run([sys.executable, "-c", _TYPO_THEN_FIX, str(tmp_path / "t.txt"), str(run), first],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    if first == "typo":  # refused before the old run was touched
        assert p.stdout.startswith("refused: model.n_embd (15) must be divisible by model.n_head (2)"), p.stdout
        assert "'summary.json'" in p.stdout.splitlines()[1], p.stdout
    assert json.loads((run / "summary.json").read_text())["final_step"] == 3  # the new run, after the exit
    assert sorted(q.name for q in tmp_path.iterdir()) == ["R", "t.txt"]  # and no run left aside


# ------------------------------------------------------------------------- a sweep folder: nothing lost
@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A finished two-run sweep (n_layer 1, 2) and its report; the tests copy it."""
    from depthlab import sweep
    from depthlab.report.sweep import build_sweep_report

    from conftest import TINY_SWEEP

    d = tmp_path_factory.mktemp("swept")
    (d / "t.txt").write_text(TINY_TEXT)
    spec = sweep.build_spec(None, None, ["model.n_layer=1,2"], {**TINY_SWEEP, "data.path": str(d / "t.txt")}, None)
    sweep.run_sweep(spec, d / "sw", workers=1, threads=1, log=lambda s: None)
    build_sweep_report(d / "sw")
    return d


def _sweep_argv(d, sw, *more):
    from conftest import TINY_SWEEP

    flags = [x for k, v in {**TINY_SWEEP, "data.path": str(d / "t.txt")}.items() if k != "model.n_layer"
             for x in (f"--{k}", str(v))]
    return ["sweep", "--grid", "model.n_layer=1,2", *flags, "--workers", "1", "--threads", "1", "--out_dir", str(sw),
            *more]


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow  # a sweep's copy and two refused reruns
def test_a_refused_sweep_rerun_loses_nothing(swept, tmp_path, capsys):
    """A new user's pass: `sweep --overwrite` deleted runs/n_layer-2 (finished) before refusing runs/n_layer-1 for
    the user's notes.txt in it; a rerun refused for a user's figure in plots/ had rewritten results.md first."""
    import shutil

    sw = tmp_path / "sw"
    shutil.copytree(swept / "sw", sw)
    (sw / "runs" / "n_layer-1" / "notes.txt").write_text("my notes")
    before = _files(sw)
    err = cli_err(capsys, *_sweep_argv(swept, sw, "--overwrite"))
    assert "n_layer-1 holds files depthlab did not write (notes.txt)" in err, err
    assert _files(sw) == before
    (sw / "runs" / "n_layer-1" / "notes.txt").unlink()
    (sw / "plots" / "sweep_curves.png").write_bytes(b"\x89PNG\r\n\x1a\nmy figure")
    before = _files(sw)
    err = cli_err(capsys, *_sweep_argv(swept, sw))
    assert "sweep_curves.png exists and was not written by depthlab report" in err, err
    assert _files(sw) == before  # refused before its runs, results.md and aggregates untouched


@pytest.mark.slow  # the module's sweep
def test_a_results_file_edited_by_hand_is_kept_aside_with_a_warning(swept, tmp_path, capsys):
    import shutil

    from depthlab.cli import main

    sw = tmp_path / "sw"
    shutil.copytree(swept / "sw", sw)
    written = (sw / "results.md").read_bytes()
    (sw / "results.md").write_bytes(written + b"\nmy hand note\n")
    assert main(_sweep_argv(swept, sw, "--no-report")) == 0  # nothing to run: the results are written anew
    out, err = capsys.readouterr()
    kept = [p.name for p in sw.glob("results.edited-*.md")]
    assert len(kept) == 1 and (sw / kept[0]).read_bytes() == written + b"\nmy hand note\n", kept
    assert (sw / "results.md").read_bytes() == written
    assert err == (f"depthlab: warning: {sw / 'results.md'} was edited since depthlab wrote it: your version is kept "
                   f"as {kept[0]} beside it, and the file is written anew from the runs\n"), err
    assert main(_sweep_argv(swept, sw, "--no-report")) == 0  # as depthlab wrote it: rewritten, no copy
    assert capsys.readouterr().err == "" and len(list(sw.glob("results.edited-*"))) == 1


@pytest.mark.slow  # the report's figures
def test_a_sweep_report_annotated_by_hand_is_kept_aside(swept, tmp_path):
    import shutil

    from depthlab.report.sweep import build_sweep_report

    sw = tmp_path / "sw"
    shutil.copytree(swept / "sw", sw)
    page = (sw / "report.html").read_bytes()
    (sw / "report.html").write_bytes(page + b"<!-- my annotation -->")
    with pytest.warns(UserWarning, match="report.html was edited since depthlab wrote it"):
        build_sweep_report(sw)
    kept = list(sw.glob("report.edited-*.html"))
    assert len(kept) == 1 and kept[0].read_bytes() == page + b"<!-- my annotation -->"
    assert b"my annotation" not in (sw / "report.html").read_bytes()


# ------------------------------------------------------------------------- diagnose: a corpus the model has solved
def test_a_model_that_predicts_almost_perfectly_is_not_called_stuck():
    """A new user's pass: 'abc' repeated (the current character fixes the next: bigram line 0.000), val 0.0024
    nats at step 300. diagnose said bigram_stuck ("uses less than the current character tells ... train longer"),
    context_unused and uniform_attention: no fault of a model with nothing left to learn."""
    from depthlab.analytics.diagnose import Evidence, diagnose

    from conftest import context_record, eval_records, probe_record

    base = {"uniform": {"nats": 1.099}, "unigram": {"nats": 1.099}, "bigram": {"nats": 0.0}, "vocab_size": 3}
    records = (eval_records([1.1, 0.3, 0.02, 0.003, 0.0024], every=100) + [probe_record(400, [0.5, 0.5],
               ent=[[3.4, 3.4], [3.4, 3.4]], u=3.466)] + [context_record(400, [0.0024] * 32)])
    d = diagnose(Evidence(records, {"model": {"vocab_size": 3, "block_size": 32}}, base))
    assert d.findings == (), d.findings
    assert (
        "bigram_stuck, unigram_stuck, context_unused, rank_collapse, uniform_attention (the best val loss 0.0024 nats "
        "is within 0.05 of 0, the least a loss can be: the model predicts the val split almost perfectly, with nothing "
        "left to learn)") in d.without_data(), d.without_data()
    # the same curves 0.1 nats up are judged as before: a loss at a bigram line of 0.1 is stuck there
    up = {**base, "bigram": {"nats": 0.1}}
    records = eval_records([1.1, 0.4, 0.12, 0.103, 0.1024], every=100) + [context_record(400, [0.1024] * 32)]
    assert "bigram_stuck" in [f.rule for f in diagnose(Evidence(records, {"model": {"vocab_size": 3}}, up)).findings]


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_second_fit_is_refused_in_words(tmp_path, tiny_text_file):
    """A new user's pass: ``fit()`` twice said the run's start again, then failed with AttributeError."""
    from depthlab.errors import DepthlabError
    from depthlab.trainer import Trainer

    from conftest import tiny_config

    lines = []
    tr = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=2)), log=lines.append)
    tr.fit()
    n, before = len(lines), (tmp_path / "r" / "metrics.jsonl").read_bytes()
    with pytest.raises(DepthlabError) as e:
        tr.fit()
    assert str(e.value).startswith(f"this Trainer has trained {tmp_path / 'r'} already (fit() runs once); to "
                                   f"train on, make a new Trainer(RunConfig.from_run({str(tmp_path / 'r')!r}))")
    assert len(lines) == n and (tmp_path / "r" / "metrics.jsonl").read_bytes() == before
    # the advice works (the next session's note: a RunConfig of defaults with resume true was refused for every
    # field the run had set otherwise)
    import json

    from depthlab.config import RunConfig

    cfg = RunConfig.from_run(tmp_path / "r")
    cfg.train.max_iters = 4
    Trainer(cfg, log=lines.append).fit()
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["final_step"] == 4


@pytest.mark.parametrize("command", [["train"], ["sweep", "--grid", "model.n_layer=1", "--dry_run"]])
def test_overwrite_is_not_printed_into_a_config_nor_taken_from_one(capsys, tmp_path, command):
    """A new user's pass: ``--overwrite --print_config > my.yaml`` kept ``overwrite: true``, and every later ``-c
    my.yaml`` replaced the run without a word."""
    from conftest import cli_print_config

    printed = cli_print_config(capsys, *command, "--train.out_dir", str(tmp_path / "r"), "--overwrite",
                               "--print_config") if command == ["train"] else \
        cli_print_config(capsys, *command[:3], "--overwrite", "--print_config")
    assert not [x for x in printed.splitlines() if x.startswith("overwrite")], printed
    f = tmp_path / "my.yaml"
    f.write_text("overwrite: true\n")
    assert cli_err(capsys, *command, "-c", str(f)) == (
        f"depthlab: error: {f}: overwrite: true: --overwrite deletes what the folder holds, so it is given on the "
        "command line each time, not kept in a config file (reused, it would delete the run every time); delete the "
        "line and give --overwrite on the command line\n")


@pytest.mark.slow  # the module's sweep
def test_a_bpe_sweeps_results_md_says_per_token(swept, tmp_path):
    """A new user's pass: a BPE sweep's results.md said "Losses in nats per character" (they are per token: a
    reader's bits per character came out 34 % off)."""
    import json
    import shutil

    from depthlab.sweep.results import write_results

    sw = tmp_path / "sw"
    shutil.copytree(swept / "sw", sw)
    assert "Losses in nats per character; `best_val_bpc` in bits per character." in (sw / "results.md").read_text()
    meta = json.loads((sw / "sweep.json").read_text())
    meta["runs"][0]["config"]["data"]["tokenizer"] = "bpe"
    (sw / "sweep.json").write_text(json.dumps(meta))
    write_results(sw)
    # best_val_bpc stays bits per character (nats per token / ln 2 / characters per token): "bits per token" was false
    assert "Losses in nats per token; `best_val_bpc` in bits per character." in (sw / "results.md").read_text()


@pytest.mark.slow  # a run and two resumes
def test_a_resume_of_a_run_a_stop_rule_ended_changes_nothing(tmp_path, tiny_text_file, capsys):
    """A new user's pass: a run stopped by train.target_val_loss, resumed with a larger max_iters, trained nothing
    yet rewrote config.json (max_iters 300 -> 400), lowered summary's wall_time_s, appended a second probe and
    context record at its step, and the next resume blamed a hand edit for the config.json it had written."""
    from depthlab.cli import main

    from conftest import tiny_cli_args

    run = tmp_path / "r"
    args = tiny_cli_args(tiny_text_file, run, train__max_iters=40, train__target_val_loss=3.9,
                         train__probe_interval=5)
    assert main(["train", *args]) == 0
    summary = (run / "summary.json").read_text()
    assert '"stopped_by": "target_val_loss"' in summary, summary
    before = _files(run)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--train.max_iters", "60"]) == 0
    cap = capsys.readouterr()
    assert "depthlab: nothing to train: stopped at step 0: val loss reached train.target_val_loss 3.9 at step 0, " \
           "before this resume; nothing more was trained; --train.target_val_loss 0 (off) or a lower value trains " \
           "on. Nothing was changed." in cap.err and "stopped" not in cap.out, cap
    assert _files(run) == before
    assert main(["train", "--resume", str(run), "--train.max_iters", "60", "--train.target_val_loss", "0"]) == 0
    assert "config.json holds a schedule" not in capsys.readouterr().err  # it trains on, and no false cause


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_last_with_no_intact_step_checkpoint_names_the_best_weights(run, tmp_path, capsys):
    """A new user's pass: ``sample RUN --checkpoint last`` with the step checkpoints deleted said "train the run
    again", though ``--checkpoint best`` (the default) read the run's best weights."""
    import shutil

    r = tmp_path / "r"
    shutil.copytree(run, r)
    for f in (r / "checkpoints").glob("step-*"):
        f.unlink()
    err = cli_err(capsys, "sample", str(r), "--checkpoint", "last", "--max-new-tokens", "3")
    assert "; --checkpoint best reads the run's best.safetensors; or restore " in err, err
    from depthlab.cli import main

    assert main(["sample", str(r), "--max-new-tokens", "3"]) == 0


def test_resume_true_in_a_config_file_is_not_taken_for_a_folder_named_true(capsys, tmp_path):
    f = tmp_path / "res.yaml"
    f.write_text("model:\n  n_layer: 2\nresume: true\n")
    err = cli_err(capsys, "train", "-c", str(f))
    assert "(depthlab train --resume RUN_DIR)" in err and "out_dir: RUN_DIR under train:" in err, err
    f.write_text("resume: runs/a\n")
    assert "(depthlab train --resume runs/a)" in cli_err(capsys, "train", "-c", str(f))


def test_the_context_verdict_at_train_end_names_position_0s_own_error():
    """A new user's pass: the end-of-training context_unused said "position 0 is at the unigram line (within twice
    its error, 0.794)", twice the *gain's* error, where `depthlab context` on the same weights said 0.561, twice
    position 0's. The record now keeps position 0's error."""
    from depthlab.analytics.diagnose import Evidence
    from depthlab.analytics.rules.context import record_verdict

    from conftest import SHAKESPEARE_BASELINES, context_record, eval_records

    rec = {**context_record(400, [3.40] + [3.41] * 31), "context_gain_se": 0.397, "position0_se": 0.280}
    ev = Evidence(eval_records([4.1, 3.5, 3.4, 3.4, 3.4]) + [rec], {"model": {"vocab_size": 65}},
                  SHAKESPEARE_BASELINES)
    assert "position 0 is at the unigram line (within twice its error, 0.560)" in record_verdict(ev)[1]
    del rec["position0_se"]  # a record of before: the gain's error stands in, as it did
    assert "(within twice its error, 0.794)" in record_verdict(ev)[1]


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_an_inline_mapping_resuming_a_run_reads_its_config_as_a_file_does(run, tmp_path, capsys):
    """A new user's pass: ``-c '{train: {resume: true, out_dir: RUN}}'`` was refused as a change of every field the
    mapping left out (the defaults), where the same YAML in a file reads the run's config.json first."""
    from conftest import cli_print_config

    f = tmp_path / "res.yaml"
    f.write_text(f"train:\n  resume: true\n  out_dir: {run}\n")
    inline = cli_print_config(capsys, "train", "-c", f"{{train: {{resume: true, out_dir: {run}}}}}", "--print_config")
    assert inline == cli_print_config(capsys, "train", "-c", str(f), "--print_config")
    assert "  n_layer: 2\n" in inline and "  n_embd: 32\n" in inline, inline  # the run's, not the defaults


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_signal_during_an_evaluation_ends_it_at_the_next_batch(tmp_path, tiny_text_file):
    """A new user's pass: Ctrl-C and SIGTERM waited for the whole evaluation (``--preset nanogpt-gpu`` on a CPU: 10
    minutes, then SIGKILL); a smaller run trained a step and evaluated again before it stopped, and called its stop
    ``max_time`` and "during the final validation". A stop in evaluation 0 trained nothing: the start is undone,
    and a run ``--overwrite`` was replacing is put back (the fresh-install pass: it had been deleted)."""
    import signal

    from depthlab.trainer import Trainer, train

    from conftest import tiny_config

    def stopping(tr, calls):
        real = tr.evaluator.port.loss

        def loss(model, x, y):
            calls.append(1)
            if len(calls) == 3:  # the signal lands during evaluation 0, before the first step
                tr.stop.request(signal.SIGINT)
            return real(model, x, y)
        return loss

    calls = []
    tr = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=20, eval_iters=50)),
                 log=lambda s: None)
    tr.evaluator.port.loss = stopping(tr, calls)
    with pytest.raises(KeyboardInterrupt) as e:
        tr.fit()
    assert len(calls) == 3  # not 100 batches, then a step
    assert str(e.value) == (f"interrupted before the first step: nothing was trained, and the new run folder "
                            f"{tmp_path / 'r'} was removed")
    assert not (tmp_path / "r").exists()
    old = train(tiny_config(tmp_path / "old", tiny_text_file, train=dict(max_iters=2)), log=lambda s: None)
    before = {q.relative_to(old).as_posix(): q.read_bytes() for q in old.rglob("*") if q.is_file()}
    tr = Trainer(tiny_config(old, tiny_text_file, train=dict(max_iters=20, eval_iters=50)), overwrite=True,
                 log=lambda s: None)
    tr.evaluator.port.loss = stopping(tr, [])
    with pytest.raises(KeyboardInterrupt) as e:
        tr.fit()
    assert str(e.value).endswith(f"the run --overwrite was replacing is back in {old}")
    assert {q.relative_to(old).as_posix(): q.read_bytes() for q in old.rglob("*") if q.is_file()} == before
    assert not [q.name for q in tmp_path.iterdir() if q.name.startswith(".")]


def test_the_gpu_preset_on_a_cpu_says_so_before_its_long_evaluations(tmp_path, capsys, monkeypatch):
    """A new user's pass: ``--preset nanogpt-gpu --train.max_time 20`` on a CPU printed nothing for 40 s, then only
    that timing its settings may take 11,127 s; its first evaluation ran 10 minutes."""
    import torch

    from depthlab.cli_expand import expand_presets, gpu_recipe_on_cpu

    expand_presets(["--preset", "nanogpt-gpu"])
    said = gpu_recipe_on_cpu(torch.device("cpu"))
    assert said.startswith("--preset nanogpt-gpu is a GPU recipe (nanoGPT's: 6 x 384, 64 x 256 tokens a step, "
                           "evaluations of 2 x 200 batches): on a CPU each evaluation alone takes minutes"), said
    assert gpu_recipe_on_cpu(torch.device("cuda")) is None
    expand_presets(["--preset", "fast-cpu"])
    assert gpu_recipe_on_cpu(torch.device("cpu")) is None
    expand_presets([])
    assert gpu_recipe_on_cpu(torch.device("cpu")) is None


def test_a_muon_runs_adamw_rate_too_low_is_lr_too_low_naming_train_learning_rate():
    """A new user's pass: learning_rate 1e-7 under the default optimizer (Muon for the blocks, AdamW for the
    embeddings and head): val 3.94, above the unigram line; diagnose said "train longer", never the rate, though the
    records held the embeddings' update ratio, 3.1e-6 per step."""
    from depthlab.analytics.diagnose import Evidence, diagnose

    from conftest import SHAKESPEARE_BASELINES, eval_records, grad_record

    def grads(emb):
        return [{**grad_record(s, [0.5, 0.5], upd=[2e-3, 2e-3]),  # Muon's blocks: healthy
                 "update_ratio_component": {"embeddings": emb, "attn.c_attn": 2e-3}} for s in (100, 150, 200, 250)]

    config = {"model": {"vocab_size": 65}, "train": {"optimizer": "muon", "learning_rate": 1e-7, "muon_lr": 0.02,
                                                      "warmup_iters": 10}}
    d = diagnose(Evidence(eval_records([4.17, 4.0, 3.95, 3.94]) + grads(3.1e-6), config, SHAKESPEARE_BASELINES))
    low = [f for f in d.findings if f.rule == "lr_too_low"]
    assert len(low) == 1 and low[0].evidence.startswith(
        "median update/weight ratio of the embeddings and head 3.10e-06 per step (AdamW, train.learning_rate 1e-07; "
        "the blocks' matrices are Muon's, at train.muon_lr)"), d.findings
    assert low[0].remedy.startswith("raise train.learning_rate (now 1e-07) (AdamW's rate"), low[0].remedy
    stuck = next(f for f in d.findings if f.rule == "unigram_stuck")
    assert "raise train.learning_rate (now 1e-07)" in stuck.remedy and "muon_lr" not in stuck.remedy, stuck.remedy
    healthy = diagnose(Evidence(eval_records([4.17, 4.0, 3.95, 3.94]) + grads(3e-2), config, SHAKESPEARE_BASELINES))
    assert "lr_too_low" not in [f.rule for f in healthy.findings]


def test_a_high_dropout_is_named_and_a_rising_val_loss_is_no_converged_plateau():
    """A new user's pass: model.dropout 0.9 (the same run at 0.0 reached 2.395): val 3.396 -> 3.604, above the
    unigram line; no finding named model.dropout, and plateau said "the model has converged ... grow the model"."""
    from depthlab.analytics.diagnose import Evidence, diagnose

    from conftest import SHAKESPEARE_BASELINES, eval_records

    vals = [4.17, 3.40, 3.45, 3.50, 3.55, 3.58, 3.60]
    config = {"model": {"vocab_size": 65, "dropout": 0.9}, "train": {"optimizer": "adamw", "min_lr": 1e-4,
                                                                    "learning_rate": 1e-3}}
    d = {f.rule: f for f in diagnose(Evidence(eval_records(vals, every=50), config, SHAKESPEARE_BASELINES)).findings}
    assert d["unigram_stuck"].remedy.startswith("lower model.dropout (now 0.9: while training, each activation it "
                                                "applies to is zeroed with probability 0.9, so 10% of the signal")
    assert d["plateau"].evidence.endswith("best recent 3.4500 vs 3.4000 before (worse, not only flat)")
    assert d["plateau"].remedy.startswith("lower model.dropout (now 0.9") and "converged" not in d["plateau"].remedy
    config["model"]["dropout"] = 0.1  # usual: not named; the rise is still no convergence
    d = {f.rule: f for f in diagnose(Evidence(eval_records(vals, every=50), config, SHAKESPEARE_BASELINES)).findings}
    assert "dropout" not in d["unigram_stuck"].remedy
    assert d["plateau"].remedy.startswith("the val loss rose above its best, so the model did not converge")


def test_the_warmup_a_run_followed_is_read_from_its_records_when_a_later_plan_says_more():
    """A new user's pass: a run planned a 44-step warmup, was resumed twice (the second time with a new max_iters,
    which planned a 50-step warmup into config.json); diagnose then said "the run has 2" gradient records after the
    warmup, where its 3 (steps 50, 100, 150) all came after the 44 steps it warmed up for."""
    from depthlab.analytics.diagnose import Evidence

    plan = {"max_iters": 180, "lr_decay_iters": 180, "warmup_iters": 50, "max_iters_asked": 180,
            "lr_decay_iters_asked": 180, "warmup_iters_asked": 50, "s_per_step": 0.1, "s_per_eval": 1.0,
            "at_step": 120}
    lrs = [(s, min(1.0, s / 44) * 1e-3) for s in (10, 20, 30, 40, 44, 60, 80)]
    records = [{"kind": "train", "step": s, "lr": lr, "loss": 3.0} for s, lr in lrs]
    ev = Evidence(records, {"model": {"vocab_size": 65}, "train": {"warmup_iters": 50},
                            "resolved": {"plan": plan}})
    assert ev.planned_warmup == 50 and ev.warmup_iters == 44


@pytest.mark.parametrize("kw, said", [({"model": {"n_layer": 2}}, "RunConfig(model=...) takes a ModelConfig, got dict"),
                                      ({"train": None}, "RunConfig(train=...) takes a TrainConfig, got NoneType")])
def test_a_runconfig_section_of_another_type_is_refused_in_words(kw, said):
    """A new user's pass: ``RunConfig(model={"n_layer": 2})`` raised AttributeError ('dict' object has no attribute
    'source'); ``RunConfig(train=None)`` was taken, and train() failed inside with AttributeError."""
    from depthlab.config import ConfigError, RunConfig

    with pytest.raises(ConfigError) as e:
        RunConfig(**kw)
    assert str(e.value).startswith(said), str(e.value)


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_run_shorter_than_its_log_interval_still_records_its_last_step(tmp_path, tiny_text_file):
    """A new user's pass: 60 steps with train.log_interval 100 wrote no train record (step, loss, lr, tokens/s)."""
    import json

    from depthlab.trainer import train

    from conftest import tiny_config

    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=7, log_interval=100)),
                log=lambda s: None)
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if r["kind"] == "train"] == [7]
    assert [r["step"] for r in recs if r["kind"] == "train" and r["tokens_per_sec"] > 0] == [7]


def test_uniform_attention_of_a_high_dropout_run_names_model_dropout_first():
    from depthlab.analytics.diagnose import Evidence, diagnose

    from conftest import SHAKESPEARE_BASELINES, eval_records, probe_record

    records = eval_records([4.17, 3.40, 3.45]) + [probe_record(300, [0.5, 0.5], ent=[[3.9, 3.9], [3.9, 3.9]], u=4.0)]
    config = {"model": {"vocab_size": 65, "dropout": 0.9}}
    f = next(f for f in diagnose(Evidence(records, config, SHAKESPEARE_BASELINES)).findings
             if f.rule == "uniform_attention")
    assert f.remedy.startswith("lower model.dropout (now 0.9"), f.remedy


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_run_left_aside_beside_an_untrained_stub_is_named(run, tmp_path, capsys):
    """The fresh-install pass: a Python ``Trainer(cfg, overwrite=True)`` killed by SIGTERM before its first step left
    the old run in ``.NAME.replaced-*`` and a stub in NAME; sample said "restore it from a copy or train again"."""
    import shutil

    r = tmp_path / "r"
    aside = tmp_path / ".r.replaced-abc" / "r"
    shutil.copytree(run, aside)
    r.mkdir()
    shutil.copy(run / "config.json", r / "config.json")
    (r / "metrics.jsonl").write_text("")
    err = cli_err(capsys, "sample", str(r))
    assert f"the run that was there is in {aside}" in err and f"mv {aside} {r}" in err, err


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_an_evaluation_a_signal_cut_short_is_run_again_by_the_resume(tmp_path, tiny_text_file):
    """The fresh-install pass: after a signal cut an evaluation short, the resumed run never evaluated that step (a
    Ray sweep's resumed run lacked its step-4 evaluation)."""
    import json
    import signal

    from depthlab.trainer import Interrupted, Trainer

    from conftest import tiny_config

    cfg = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=20, eval_interval=5, eval_iters=4))
    tr = Trainer(cfg, log=lambda s: None)
    real = tr.evaluator.port.loss

    def loss(model, x, y):
        if not model.training and tr.step == 10:  # in the step-10 evaluation
            tr.stop.request(signal.SIGTERM)
        return real(model, x, y)

    tr.evaluator.port.loss = loss
    with pytest.raises(Interrupted) as e:
        tr.fit()
    assert e.value.step == 10 and str(e.value).startswith("terminated (SIGTERM) at step 10; checkpoint written")
    resumed = tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=20, eval_interval=5, eval_iters=4,
                                                                     resume=True))
    Trainer(resumed, log=lambda s: None).fit()
    recs = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if r["kind"] == "eval"] == [0, 5, 10, 15, 20]

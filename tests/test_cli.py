"""The command line: every command, its one grammar, clean one-line errors, exit codes."""

import json
import re

import pytest

from depthlab.cli import COMMANDS, main
from depthlab.cli_args import Grammar

from conftest import RUN_FIGURES, assert_clean_error, cli_err, run_cli, tiny_cli_args


TINY = ["--model.n_layer", "1", "--model.n_head", "2", "--model.n_embd", "16", "--model.block_size", "8",
        "--train.batch_size", "4", "--train.max_iters", "10", "--train.eval_interval", "5",
        "--train.eval_iters", "2", "--train.log_interval", "5", "--train.tensorboard", "false",
        "--train.grad_log_interval", "0", "--train.probe_interval", "0"]


def test_train_smoke_and_sample(tmp_path, capsys, tiny_text_file):
    out = tmp_path / "run"
    rc, stdout, _ = run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--train.out_dir", str(out))
    assert rc == 0 and "eval step 10" in stdout
    s = json.loads((out / "summary.json").read_text())
    ev = [json.loads(l) for l in open(out / "metrics.jsonl") if "val_loss" in l]
    assert s["final_step"] == 10 and ev[-1]["val_loss"] < ev[0]["val_loss"]
    rc, stdout, _ = run_cli(capsys, "sample", str(out), "--prompt", "First", "--max-new-tokens", "30", "--seed", "1")
    assert rc == 0 and stdout.startswith("First") and len(stdout.rstrip("\n")) >= 35


def test_config_file_and_dotted_override(tmp_path, capsys, tiny_text_file):
    cfgf = tmp_path / "c.yaml"
    cfgf.write_text(f"data:\n  path: {tiny_text_file}\nmodel:\n  n_layer: 3\n  n_embd: 16\n  n_head: 2\n"
                    f"  block_size: 8\ntrain:\n  max_iters: 4\n  eval_interval: 2\n  eval_iters: 1\n"
                    f"  batch_size: 2\n  tensorboard: false\n  out_dir: {tmp_path / 'r'}\n")
    rc, _, err = run_cli(capsys, "train", "-c", str(cfgf), "--model.n_layer", "2", "--train.max_iters", "6")
    assert rc == 0, err
    c = json.loads((tmp_path / "r" / "config.json").read_text())
    assert c["model"]["n_layer"] == 2 and c["train"]["max_iters"] == 6 and c["model"]["n_embd"] == 16


def test_print_config(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--model.n_layer", "7", "--print_config"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "n_layer: 7" in out and "learning_rate" in out


@pytest.mark.parametrize("argv, error", [
    (["train", "--train.max_iters", "-1"], "--train.max_iters must be a positive integer, got -1"),
    (["train", "--model.n_head", "3"], "model.n_embd (128) must be divisible by --model.n_head (3); try n_head 2"),
    (["probe", "--model.n_layer", "0"], "--model.n_layer must be a positive integer, got 0")])
def test_print_config_refuses_a_config_that_train_refuses(capsys, argv, error):
    # it printed max_iters: -1 and exited 0, as if the config were fine; train then refused the same flags
    assert main([*argv, "--print_config"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"depthlab: error: {error}\n"


def test_help_documents_fields_with_units(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "--model.n_embd" in out and "--train.max_time" in out and "seconds" in out


def test_unknown_yaml_key_is_named(tmp_path, capsys):
    cfgf = tmp_path / "c.yaml"
    cfgf.write_text("model:\n  n_layers: 3\n")
    rc, _, err = run_cli(capsys, "train", "-c", str(cfgf))
    assert_clean_error(rc, err, "n_layers")


@pytest.mark.parametrize("case", ["missing", "empty", "dir", "cp1252", "short", "heads", "neg", "zero",
                                  "unknown_flag", "bad_type", "preset"])
def test_train_bad_input(tmp_path, capsys, case):
    args = {"missing": ["--data.path", str(tmp_path / "nope.txt")],
            "empty": ["--data.path", str(tmp_path / "empty.txt")],
            "dir": ["--data.path", str(tmp_path)],
            "cp1252": ["--data.path", str(tmp_path / "w.txt")],
            "short": ["--data.path", str(tmp_path / "short.txt"), "--model.block_size", "64"],
            "heads": ["--model.n_embd", "30", "--model.n_head", "4"],
            "neg": ["--model.n_layer", "-2"],
            "zero": ["--train.batch_size", "0"],
            "unknown_flag": ["--model.n_layers", "3"],
            "bad_type": ["--model.n_layer", "many"],
            "preset": ["--preset", "no-such-preset"]}[case]
    needles = {"missing": ["not found"], "empty": ["empty"], "dir": ["directory"],
               "cp1252": ["0x92", "data.encoding"], "short": ["30", "65"], "heads": ["n_embd", "n_head"],
               "neg": ["model.n_layer"], "zero": ["train.batch_size"], "unknown_flag": ["n_layers"],
               "bad_type": ["model.n_layer"], "preset": ["no-such-preset"]}[case]
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "w.txt").write_bytes(b"caf\x92 ok text " * 50)
    (tmp_path / "short.txt").write_text("x" * 30)
    rc, _, err = run_cli(capsys, "train", *args, "--train.out_dir", str(tmp_path / "out"))
    assert_clean_error(rc, err, *needles)
    assert not (tmp_path / "out").exists()


def test_existing_out_dir_refused_and_untouched(tmp_path, capsys, tiny_text_file):
    out = tmp_path / "run"
    assert run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--train.out_dir", str(out))[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    rc, _, err = run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--train.out_dir", str(out))
    assert_clean_error(rc, err, "already exists", "--overwrite")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_overwrite_under_a_read_only_folder_is_one_line_and_keeps_the_run(tmp_path, capsys, tiny_text_file,
                                                                        monkeypatch):
    import tempfile

    out = tmp_path / "run"
    assert run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--train.out_dir", str(out))[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}

    def denied(dir=None, prefix=None, **kw):  # the tests run as root, which chmod cannot stop: the refusal it gets
        raise PermissionError(13, "Permission denied", f"{dir}/{prefix}x")

    monkeypatch.setattr(tempfile, "mkdtemp", denied)
    rc, _, err = run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--train.out_dir", str(out),
                         "--overwrite")
    assert_clean_error(rc, err, f"cannot replace train.out_dir {out}: its folder {tmp_path} is not writable "
                       "(Permission denied); nothing was changed")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("extra,needle", [(["--temperature", "-1"], "temperature"), (["--top-p", "1.5"], "top-p"),
                                          (["--top-p", "0"], "top-p"), (["--top-k", "-3"], "top-k"),
                                          (["--seed", str(2**64)], "--seed must be an integer from 0 to 2**63 - 1"),
                                          (["--seed", "-1"], "--seed must be")])
def test_sample_bad_settings(tmp_path, capsys, tiny_text_file, extra, needle):
    out = tmp_path / "run"
    assert run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--train.out_dir", str(out))[0] == 0
    rc, _, err = run_cli(capsys, "sample", str(out), *extra)
    assert_clean_error(rc, err, needle)


def test_sample_not_a_run(tmp_path, capsys):
    assert_clean_error(*run_cli(capsys, "sample", str(tmp_path / "missing"))[::2], "not found")
    assert_clean_error(*run_cli(capsys, "sample", str(tmp_path))[::2], "not a depthlab run")


def test_unknown_command(capsys):
    rc, _, err = run_cli(capsys, "trian")
    assert rc == 2 and err.startswith("depthlab: error: unknown command 'trian'; did you mean train? choose from train")
    rc, _, err = run_cli(capsys, "--versoin")  # a new user's typo: the option is offered as a command is
    assert rc == 2 and "did you mean --version?" in err and err.count("\n") == 1
    rc, _, err = run_cli(capsys, "zzz")
    assert rc == 2 and "did you mean" not in err
    rc, _, err = run_cli(capsys, "train", "--lr", "0.01")  # the name most trainers give it
    assert rc == 2 and err == "depthlab: error: train: unknown option --lr (did you mean --train.learning_rate?)\n"


@pytest.mark.slow
def test_module_entry_point_subprocess(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "depthlab", "sample", str(tmp_path / "x")], capture_output=True,
                       text=True)
    assert r.returncode == 2 and r.stderr.startswith("depthlab: error:") and "Traceback" not in r.stderr


@pytest.mark.slow
def test_sample_into_closed_pipe_exits_cleanly(tmp_path, capsys, tiny_text_file):
    import subprocess
    import sys

    out = tmp_path / "run"
    assert run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--train.out_dir", str(out))[0] == 0
    p = subprocess.Popen([sys.executable, "-m", "depthlab", "sample", str(out), "--max-new-tokens", "20000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.read(10)
    p.stdout.close()  # like `| head`: the reader goes away mid-stream
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and "Traceback" not in err  # SIGPIPE's status, as `yes | head` (s60)


def test_failed_init_from_leaves_no_empty_runs_folder(tmp_path, monkeypatch, capsys, tiny_text_file):
    (tmp_path / "notrun").mkdir()
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--init-from", "notrun")
    assert_clean_error(rc, err, "--init-from notrun")
    assert not (tmp_path / "runs").exists()  # a new user's report: the default runs/ was left behind, empty
    (tmp_path / "runs" / "other").mkdir(parents=True)  # a runs/ holding something else is not touched
    rc, _, err = run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--init-from", "notrun")
    assert rc == 2 and [p.name for p in (tmp_path / "runs").iterdir()] == ["other"]


def test_sample_error_is_one_line_and_info_line_only_when_text_starts(tmp_path, tiny_text_file, capsys):
    out = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=5, train__eval_interval=5)]) == 0
    capsys.readouterr()
    assert main(["sample", str(out), "--prompt", "東京"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "vocabulary" in err
    assert main(["sample", str(out), "--device", "cuda:7"]) == 2
    assert "----device" not in capsys.readouterr().err


def test_no_command_says_one_is_needed(capsys):
    # was: the usage on stderr and exit 2, with no line saying what was wrong; then the usage before the line
    rc, out, err = run_cli(capsys)
    assert rc == 2 and out == ""
    assert err == (f"depthlab: error: a command is needed: choose from {', '.join(COMMANDS)} (e.g. `depthlab train`; "
                   "`depthlab --help` says what each does)\n")


# ------------------------------------------------------------------- one grammar for every command (issues 9 and 14)
def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_shares_the_common_options(name):
    opts = set(Grammar(COMMANDS[name].build(), {}).options)
    assert {"-c", "--config", "--print_config", "--debug"} <= opts


@pytest.mark.parametrize("name", ["sample", "probe", "diagnose", "report", "sweep", "layers", "context"])
def test_every_computing_command_takes_threads(name):
    assert "--threads" in Grammar(COMMANDS[name].build(), {}).options


@pytest.mark.parametrize("name", ["sample", "diagnose", "report", "layers", "context"])
def test_run_dir_commands_name_it_the_same(name):
    g = Grammar(COMMANDS[name].build(), {})
    assert "run_dir" in {a.dest for a in [*g.slots, *g.options.values()]}


def test_sample_options_have_dashed_aliases(tmp_path, capsys):
    err = cli_err(capsys, "sample", str(tmp_path / "none"), "--max-new-tokens", "5", "--top-k", "3")
    assert "not found" in err  # parsed fine; the run directory is what is missing


@pytest.mark.slow  # several seconds on 2 cores: the fast tier stays under 3 min
def test_command_line_sets_passive_openmp_before_torch_loads():
    import subprocess
    import sys

    code = ("import os, sys; import depthlab.cli as c; assert 'torch' not in sys.modules; "
            "c.main(['presets']); import torch; print(os.environ['OMP_WAIT_POLICY'])")
    env = {k: v for k, v in __import__("os").environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "PASSIVE"
    env["OMP_WAIT_POLICY"] = "ACTIVE"  # the user's choice wins
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "ACTIVE"


def test_sample_says_which_checkpoint_it_loaded(tmp_path, tiny_text_file, capsys):
    from conftest import tiny_cli_args

    out = tmp_path / "r"
    assert main(["train", *tiny_cli_args(tiny_text_file, out, train__max_iters=10, train__eval_interval=5)]) == 0
    val = {json.loads(line)["step"]: json.loads(line)["val_loss"]
           for line in (out / "metrics.jsonl").read_text().splitlines() if '"val_loss"' in line}
    best = json.loads((out / "checkpoints" / "manifest.json").read_text())["best"]["step"]
    capsys.readouterr()
    assert main(["sample", str(out), "--max_new_tokens", "5"]) == 0
    captured = capsys.readouterr()
    assert f"sampling from best.safetensors (step {best}, val loss {val[best]:.4f} nats)" in captured.err
    assert "sampling from" not in captured.out  # stdout stays the text alone


# --------------------------------------------------------------------------------------------------- depthlab report
@pytest.mark.slow
def test_report_cli(report_run, tmp_path, capsys):
    out = tmp_path / "r.html"
    skip = ["--skip", *(n for n in RUN_FIGURES if n != "loss")]  # one figure is enough here (speed)
    assert main(["report", str(report_run), "--out", str(out), *skip]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert out.read_text(encoding="utf-8").count("data:image/png") == 1
    assert main(["report", str(report_run), "--out", str(out), *skip]) == 0  # written by us: may be replaced

    mine = tmp_path / "notes.html"
    mine.write_text("my notes")
    for argv, msg in ((["report", str(tmp_path / "missing")], "not found"),
                      (["report", str(tmp_path)], "neither a depthlab run directory"),
                      (["report", str(report_run), "--out", str(mine)], "refusing to overwrite"),
                      (["report", str(report_run), "--out", str(tmp_path)], "is a folder"),
                      (["report", str(report_run), "--out", str(mine / "x.html")],  # was "File exists"
                       f"{mine} is a file, not a folder"),
                      # nu36: a mistyped folder was made (mkdir -p) and the report written there, exit 0
                      (["report", str(report_run), "--out", str(tmp_path / "typo" / "sub" / "r.html")],
                       f"report: the folder of --out {tmp_path / 'typo' / 'sub' / 'r.html'} does not exist; create "
                       "it or choose another path"),
                      (["report"], "run_dir")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("depthlab: error:") and msg in err and "Traceback" not in err
    assert mine.read_text() == "my notes"
    assert not (tmp_path / "typo").exists()


def test_report_listed_in_help(capsys):
    assert main(["--help"]) == 0
    assert re.search(r"^\s+report\s+write a self-contained HTML report", capsys.readouterr().out, re.M)


# ---------------------------------------------------------------------------------------------------- depthlab sweep
@pytest.mark.parametrize("flag,value", [("--batches", "0"), ("--batches", "-1"), ("--probe_batch_size", "0")])
def test_probe_nonpositive_counts_name_their_flag(capsys, tmp_path, monkeypatch, flag, value):
    """nu36: ``probe --batches 0`` (or -1, or --probe_batch_size 0) said "probe needs at least one batch of at
    least one sequence", naming neither flag; and nothing is written."""
    from conftest import assert_clean_error

    monkeypatch.chdir(tmp_path)
    rc = main(["probe", "--model.n_layer", "1", "--model.n_embd", "32", "--model.n_head", "2", flag, value])
    assert_clean_error(rc, capsys.readouterr().err, f"probe: {flag} must be at least 1, got {value}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_cli_sweep_with_a_missing_corpus_leaves_no_folder(capsys, tmp_path, monkeypatch):
    """nu36: a sweep refused for a --data.path (or grid data.path) that does not exist had already written
    OUT_DIR/sweep.json (or sweeps/sweep-<hash>/ in the current folder, unasked); nothing is left now."""
    from conftest import assert_clean_error

    monkeypatch.chdir(tmp_path)
    for extra in (["--out_dir", "s"], []):
        rc = main(["sweep", "--grid", "model.n_layer=1", "--data.path", str(tmp_path / "nope.txt"),
                   "--train.max_iters", "2", "--workers", "1", *extra])
        assert_clean_error(rc, capsys.readouterr().err, f"data.path {tmp_path / 'nope.txt'} not found")
        assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_cli_bad_grid_is_one_line_exit_2(capsys, tmp_path):
    rc = main(["sweep", "--grid", "model.n_layer", "--out-dir", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("depthlab: error:") and "model.n_layer" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()
    assert main(["sweep", "--grid", "model.n_layer=1,two", "--out-dir", str(tmp_path / "s")]) == 2
    assert "model.n_layer: cannot use 'two' (expected an integer)" in capsys.readouterr().err


def test_cli_nothing_to_sweep(capsys):
    assert main(["sweep"]) == 2
    assert "nothing to sweep" in capsys.readouterr().err


def test_cli_bad_override_and_invalid_point(capsys, tmp_path):
    assert main(["sweep", "--grid", "model.n_layer=1,2", "--train.max_iterz", "3"]) == 2
    assert "max_iterz" in capsys.readouterr().err
    # n_embd 30 is not divisible by 4 heads: the error names the run and the field, before any run starts
    assert main(["sweep", "--grid", "model.n_embd=32,30", "--model.n_head", "4",
                 "--out-dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "n_embd-30" in err and "model.n_embd" in err
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_cli_dry_run_lists_runs(capsys, tmp_path):
    assert main(["sweep", "--profile", "quick", "--dry-run", "--out-dir", str(tmp_path / "q")]) == 0
    out = capsys.readouterr().out
    assert out.count("variant-") == 10 and "min on" in out
    assert not (tmp_path / "q").exists()


def test_cli_backend_choices(tmp_path):
    from depthlab.cli import main

    assert main(["sweep", "--grid", "model.n_layer=1", "--backend", "spark", "--out-dir", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_init_from_takes_the_source_runs_shape_and_names_a_mismatch(tmp_path, capsys, tiny_text_file):
    # issue 23 case 11: the new run needed the source's shape retyped (2 blocks vs the default 4)
    src = tmp_path / "src"
    rc, _, _ = run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--model.n_layer", "2",
                       "--train.out_dir", str(src))
    assert rc == 0
    rc, out, _ = run_cli(capsys, "train", "--data.path", str(tiny_text_file), "--init-from", str(src),
                         "--train.max_iters", "2", "--train.max_time", "0", "--train.out_dir", str(tmp_path / "new"))
    new = json.loads((tmp_path / "new" / "config.json").read_text())["model"]
    assert rc == 0 and new == json.loads((src / "config.json").read_text())["model"]
    rc, _, err = run_cli(capsys, "train", "--data.path", str(tiny_text_file), "--init-from", str(src),
                         "--model.n_layer", "3", "--train.max_time", "0", "--train.out_dir", str(tmp_path / "bad"))
    assert_clean_error(rc, err, "model.n_layer 2 there, 3 here")
    assert not (tmp_path / "bad").exists()

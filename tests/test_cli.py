import json

import pytest

from depthlab.cli import main

TINY = ["--model.n_layer", "1", "--model.n_head", "2", "--model.n_embd", "16", "--model.block_size", "8",
        "--train.batch_size", "4", "--train.max_iters", "10", "--train.eval_interval", "5",
        "--train.eval_iters", "2", "--train.log_interval", "5", "--train.tensorboard", "false",
        "--train.grad_log_interval", "0", "--train.probe_interval", "0"]


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_clean_error(rc, err, *needles):
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("depthlab: error:"), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


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


@pytest.mark.parametrize("extra,needle", [(["--temperature", "-1"], "temperature"), (["--top-p", "1.5"], "top-p"),
                                          (["--top-p", "0"], "top-p"), (["--top-k", "-3"], "top-k")])
def test_sample_bad_settings(tmp_path, capsys, tiny_text_file, extra, needle):
    out = tmp_path / "run"
    assert run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--train.out_dir", str(out))[0] == 0
    rc, _, err = run_cli(capsys, "sample", str(out), *extra)
    assert_clean_error(rc, err, needle)


def test_sample_not_a_run(tmp_path, capsys):
    assert_clean_error(*run_cli(capsys, "sample", str(tmp_path / "missing"))[::2], "not found")
    assert_clean_error(*run_cli(capsys, "sample", str(tmp_path))[::2], "not a depthlab run")


def test_resume_not_a_run(tmp_path, capsys):
    missing = tmp_path / "missing"
    assert_clean_error(*run_cli(capsys, "train", "--resume", str(missing))[::2], "missing not found")
    assert not missing.exists()  # the refused resume made no folder
    assert_clean_error(*run_cli(capsys, "train", "--resume", str(tmp_path))[::2], "not a depthlab run directory")


def test_unknown_command(capsys):
    rc, _, err = run_cli(capsys, "trian")
    assert rc == 2 and err.startswith("depthlab: error:")


def test_module_entry_point_subprocess(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "depthlab", "sample", str(tmp_path / "x")], capture_output=True,
                       text=True)
    assert r.returncode == 2 and r.stderr.startswith("depthlab: error:") and "Traceback" not in r.stderr


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
    assert p.wait(timeout=120) == 0 and "Traceback" not in err


def test_failed_init_from_leaves_no_empty_runs_folder(tmp_path, monkeypatch, capsys, tiny_text_file):
    (tmp_path / "notrun").mkdir()
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--init-from", "notrun")
    assert_clean_error(rc, err, "--init-from notrun")
    assert not (tmp_path / "runs").exists()  # a new user's report: the default runs/ was left behind, empty
    (tmp_path / "runs" / "other").mkdir(parents=True)  # a runs/ holding something else is not touched
    rc, _, err = run_cli(capsys, "train", "--data.path", str(tiny_text_file), *TINY, "--init-from", "notrun")
    assert rc == 2 and [p.name for p in (tmp_path / "runs").iterdir()] == ["other"]

"""Config files as a new user writes them: a key given twice is refused (PyYAML kept the last one silently), what
``--print_config`` prints reads back with ``-c`` to the same config, and a malformed ``-c`` file is one line naming
the file and the fix."""

import subprocess
import sys

import pytest
import yaml

from depthlab.cli_expand import list_presets, preset_path

from conftest import cli_err, cli_print_config, run_cli


def _file(tmp_path, text, name="my.yaml"):
    f = tmp_path / name
    f.write_text(text)
    return f


# ------------------------------------------------------------------------- 1. a key given twice
LR_TWICE = "train:\n  max_iters: 3\n  learning_rate: 0.1\n  learning_rate: 0.2\n"
TRAIN_TWICE = "train:\n  max_iters: 3\nmodel:\n  n_layer: 2\ntrain:\n  seed: 5\n"


@pytest.mark.parametrize("command", [["train"], ["sweep", "--grid", "model.n_layer=1,2", "--dry_run"]])
@pytest.mark.parametrize("text, said", [
    # was: trained (or swept) with learning_rate 0.2, the first line ignored without a word
    (LR_TWICE, "line 4: key 'train.learning_rate' appears twice (lines 3 and 4); keep one"),
    # was: the first train: section (max_iters 3) dropped whole, the run took 5000 steps
    (TRAIN_TWICE, "line 5: key 'train' appears twice (lines 1 and 5); keep one"),
])
def test_a_config_file_giving_a_key_twice_is_refused_naming_both_lines(tmp_path, capsys, command, text, said):
    f = _file(tmp_path, text)
    argv = [*command, "-c", str(f), "--out_dir", str(tmp_path / "sw")] if command[0] == "sweep" else \
        [*command, "-c", str(f), "--print_config"]
    assert cli_err(capsys, *argv) == f"depthlab: error: config file {f} {said}\n"


def test_a_key_twice_in_a_model_file_and_in_inline_yaml_is_refused(tmp_path, capsys):
    m = _file(tmp_path, "n_layer: 2\nn_embd: 32\nn_layer: 3\n", "m.yaml")
    # was: --model m.yaml built 3 layers
    assert cli_err(capsys, "train", "--model", str(m), "--print_config") == \
        f"depthlab: error: --model file {m} line 3: key 'n_layer' appears twice (lines 1 and 3); keep one\n"
    assert cli_err(capsys, "train", "-c", "{train: {seed: 1, seed: 2}}", "--print_config") == \
        "depthlab: error: train: -c {train: {seed: 1, seed: 2}}: key 'train.seed' appears twice; keep one\n"


@pytest.mark.parametrize("spelling", ["-c{}", "-c={}"])
def test_a_config_file_joined_to_c_is_checked_as_any_other(tmp_path, capsys, spelling):
    """``-cFILE`` was read by jsonargparse alone: its keys, values and repeats went unchecked by depthlab."""
    f = _file(tmp_path, LR_TWICE)
    assert cli_err(capsys, "train", spelling.format(f), "--print_config") == \
        f"depthlab: error: config file {f} line 4: key 'train.learning_rate' appears twice (lines 3 and 4); keep one\n"
    g = _file(tmp_path, "model:\n  max_iters: 3\n", "g.yaml")  # was: "unknown key(s) in model: max_iters"
    assert cli_err(capsys, "train", spelling.format(g), "--print_config") == \
        f"depthlab: error: {g}: unknown key(s) model.max_iters (did you mean train.max_iters?): edit or remove it\n"


def test_a_merge_key_may_be_overridden_and_keys_are_named_from_the_top():
    from depthlab.config import key_twice

    assert key_twice("train:\n  <<: {max_iters: 4}\n  max_iters: 3\n") is None  # YAML's own override
    assert key_twice("a:\n  - {b: 1, b: 2}\n") == ("a.b", 2, 2)
    assert key_twice("x: 1\ny: 2\n") is None
    assert key_twice("x: [1\n") is None  # not YAML: its reader says so
    for name in list_presets():  # the shipped files hold no repeat either
        assert key_twice(preset_path(name).read_text()) is None, name


@pytest.mark.slow  # a second or more: the fast tier stays under 3 min
def test_a_key_twice_exits_2_in_one_line_from_the_command(tmp_path):
    f = _file(tmp_path, LR_TWICE)
    p = subprocess.run([sys.executable, "-m", "depthlab", "train", "-c", str(f)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == f"depthlab: error: config file {f} line 4: key 'train.learning_rate' appears twice (lines 3 " \
                       "and 4); keep one\n"


# ------------------------------------------------------------------------- 2. --print_config reads back
@pytest.mark.parametrize("argv", [[], ["--preset", "fast-cpu", "--model.n_layer", "3"],
                                  ["--model.source", "mine.py:MyGPT", "--train.max_iters", "9"]])
def test_print_config_reads_back_to_the_same_config_without_what_a_file_does_not_set(tmp_path, capsys, argv):
    printed = cli_print_config(capsys, "train", *argv, "--print_config")
    d = yaml.safe_load(printed)
    # was printed: debug (a switch a file does not set), preset: fast-cpu (a file's preset: is never applied),
    # resume, and model.vocab_size: 0 (replaced by the corpus's vocabulary when training starts)
    assert not {"debug", "preset", "resume"} & set(d), sorted(d)
    assert "vocab_size" not in d["model"] and "vocab_size" in d["data"]  # data.vocab_size: BPE's, the user's
    f = _file(tmp_path, printed, "printed.yaml")
    assert cli_print_config(capsys, "train", "-c", str(f), "--print_config") == printed


@pytest.mark.slow
def test_a_sweeps_print_config_reads_back(tmp_path, capsys):
    """It printed train.out_dir: null and model.n_layer: 4 beside its grid; read back, the sweep was refused: "the
    sweep sets each run's out_dir", then the n_layer the grid replaces."""
    printed = cli_print_config(capsys, "sweep", "--grid", "model.n_layer=1,2", "--train.max_iters", "7",
                               "--print_config")
    d = yaml.safe_load(printed)
    assert "out_dir" not in d["train"] and "n_layer" not in d["model"] and d["train"]["max_iters"] == 7
    f = _file(tmp_path, printed, "sweep.yaml")
    assert cli_print_config(capsys, "sweep", "-c", str(f), "--print_config") == printed
    rc, out, err = run_cli(capsys, "sweep", "-c", str(f), "--dry_run", "--out_dir", str(tmp_path / "sw"))
    assert rc == 0 and "2 runs" in out, err


def test_an_older_printed_configs_empty_options_still_read(tmp_path, capsys):
    f = _file(tmp_path, "debug: false\npreset: null\nresume: null\nmodel:\n  vocab_size: 0\n  n_layer: 3\n")
    assert yaml.safe_load(cli_print_config(capsys, "train", "-c", str(f), "--print_config"))["model"]["n_layer"] == 3


@pytest.mark.parametrize("text, said", [
    # each was taken by the parser and read by nothing: the defaults trained, a new run, no traceback, ...
    ("preset: fast-cpu\n", "preset: fast-cpu: a preset is chosen on the command line, not in a config file (which "
                           "would train without it); delete the line and give --preset fast-cpu"),
    ("resume: runs/a\n", "resume: runs/a: --resume is given on the command line (depthlab train --resume runs/a), "
                         "not in a config file (which would start a new run); delete the line, or write resume: true "
                         "and out_dir: runs/a under train:"),
    ("debug: true\n", "debug: true: --debug is a command-line switch, which a config file does not set; delete the "
                      "line and give --debug on the command line"),
    # was: the other file read by jsonargparse alone ("unknown key(s) in model: max_iters")
    ("config: other.yaml\n", "config: other.yaml: a config file does not name another (its keys would go "
                             "unchecked); delete the line and give each file with -c, in order: -c other.yaml -c"),
    ("print_config: true\n", "print_config: --print_config is a command-line flag; delete the line and give it there"),
])
def test_a_command_line_option_in_a_config_file_is_refused(tmp_path, capsys, text, said):
    f = _file(tmp_path, text)
    _file(tmp_path, "model:\n  max_iters: 3\n", "other.yaml")
    assert cli_err(capsys, "train", "-c", str(f), "--print_config").startswith(f"depthlab: error: {f}: {said}")


# ------------------------------------------------------------------------- 3. malformed -c files
@pytest.mark.parametrize("content, needles", [
    # was: "at line 3, column 1" of a 2-line file
    (b"train:\n  max_iters: [3\n", ["is not valid YAML at the end of the file (line 2, column 16)",
                                    "fix the file (keys and values"]),
    # was: "got a list" and no word of what to write instead
    (b"- a\n- b\n", ["must be a mapping with sections data:, model:, train:, got a list; write keys and values as "
                     "`section:` then indented `field: value` lines"]),
    (b"just words\n", ["got a str; write keys and values"]),
    # was: "found character '\\t' that cannot start any token" and a fix that did not name the tab
    (b"train:\n\tmax_iters: 3\n", ["line 2, column 1", "replace the tab on line 2 with spaces"]),
    (b"train:\n  max_iters:\t3\n", ["replace the tab on line 2 with spaces"]),
    # was: "but found another document", the fix silent about the --- line
    (b"train:\n  max_iters: 3\n---\nmodel:\n  n_layer: 2\n",
     ["a config file is one YAML document: delete the `---` line on line 3"]),
    (b"", ["is empty; give it sections data:, model:, train: (or drop -c)"]),
    (b"# nothing but a comment\n", ["is empty; give it sections"]),
    (b"train:\n  seed: \xff\xfe\n", ["is not UTF-8 text (byte 0xff at position 15); save it as UTF-8"]),
    (b"train: 3\n", ["section train: must hold fields (`train:` then an indented `field: value` per line), got 3"]),
    # was: "model.max_iters: edit or remove it", no word of where it belongs
    (b"model:\n  max_iters: 3\n", ["unknown key(s) model.max_iters (did you mean train.max_iters?): edit or remove"]),
    (b"n_layer: 2\n", ["unknown key(s) n_layer (belongs under model:)"]),
    (b"train:\n  max_iters: three\n", ["train.max_iters: expected an integer, got 'three'"]),
    (b"train:\n  max_iters: !!python/object:os.system ls\n", ["is not valid YAML at line 2, column 14"]),
])
@pytest.mark.parametrize("command", [["train"], ["sweep", "--grid", "model.n_layer=1,2"]])
def test_a_malformed_config_file_is_one_line_naming_the_file_and_the_fix(tmp_path, capsys, content, needles,
                                                                          command):
    f = tmp_path / "bad.yaml"
    f.write_bytes(content)
    err = cli_err(capsys, *command, "-c", str(f), "--print_config")
    assert str(f) in err
    for n in needles:
        assert n in err, (n, err)


def test_a_folder_a_missing_file_and_an_unreadable_one(tmp_path, capsys, monkeypatch):
    assert cli_err(capsys, "train", "-c", str(tmp_path), "--print_config") == \
        f"depthlab: error: train: -c {tmp_path}: is a folder; give a YAML file\n"
    assert cli_err(capsys, "train", "-c", str(tmp_path / "no.yaml"), "--print_config").startswith(
        f"depthlab: error: train: -c {tmp_path / 'no.yaml'}: file not found; give the path of an existing YAML")
    f = _file(tmp_path, "train:\n  max_iters: 3\n", "locked.yaml")
    real = type(f).read_text

    def read_text(self, *a, **k):  # chmod 000 does not stop root, who runs these tests in CI
        if self.name == "locked.yaml":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(type(f), "read_text", read_text)
    # was: "PermissionError: [Errno 13] Permission denied: '...' (check the paths given and their permissions/...)"
    assert cli_err(capsys, "train", "-c", str(f), "--print_config") == \
        f"depthlab: error: config file {f} cannot be read (Permission denied); make it readable (chmod u+r {f}) " \
        "or give another file\n"


def test_a_model_file_that_is_a_device_or_has_a_tab_says_so(tmp_path, capsys):
    # was: "--model /dev/zero: no such file"
    assert cli_err(capsys, "train", "--model", "/dev/zero", "--print_config").startswith(
        "depthlab: error: --model /dev/zero is not a regular file (a device, pipe or socket); --model FILE reads")
    assert cli_err(capsys, "train", "-c", "/dev/zero", "--print_config") == \
        "depthlab: error: config file /dev/zero is not a regular file (a device, pipe or socket); give a YAML file\n"
    m = _file(tmp_path, "n_layer: 2\n\tn_embd: 32\n", "m.yaml")
    assert "; replace the tab on line 2 with spaces (YAML indents with spaces" in \
        cli_err(capsys, "train", "--model", str(m), "--print_config")


def test_a_sweep_file_giving_a_key_twice_is_refused(tmp_path, capsys):
    # was: a sweep -f file (or a profile) read by config.read_yaml alone kept the second grid silently
    f = _file(tmp_path, "grid:\n  train.seed: [1, 2]\ngrid:\n  train.seed: [3]\n", "sw.yaml")
    assert cli_err(capsys, "sweep", "-f", str(f), "--dry_run", "--out_dir", str(tmp_path / "sw")) == \
        f"depthlab: error: sweep file {f} line 3: key 'grid' appears twice (lines 1 and 3); keep one\n"


def test_a_sweep_files_workers_is_used_and_the_flag_wins(tmp_path, capsys):
    # was: `workers: 1` in a sweep file was accepted and ignored (one worker per core ran)
    f = _file(tmp_path, "workers: 1\nbase:\n  model: {n_embd: 16, n_head: 2, n_layer: 1}\n  train: {max_iters: 5}\n"
                        "grid:\n  train.seed: [1, 2]\n", "sw.yaml")
    args = ("sweep", "-f", str(f), "--dry_run", "--out_dir", str(tmp_path / "sw"))
    rc, out, err = run_cli(capsys, *args)
    assert rc == 0 and " on 1 worker x " in out, out + err
    rc, out, err = run_cli(capsys, *args, "--workers", "2")
    assert rc == 0 and " on 2 workers x 1 thread" in out, out + err
    f.write_text(f.read_text().replace("workers: 1", "workers: -3"))
    assert cli_err(capsys, *args) == (
        f"depthlab: error: sweep file {f}: workers must be a whole number >= 0 (0 = one per core, 1 = in the sweep's "
        "own process), got -3; fix it, or leave it out and give --workers\n")


def test_a_sweep_takes_a_model_file_as_train_does(tmp_path, capsys):
    # was: "sweep: unknown key(s) in model: __path__" (jsonargparse's own words)
    m = _file(tmp_path, "n_layer: 1\nn_embd: 16\nn_head: 2\n", "m.yaml")
    printed = yaml.safe_load(cli_print_config(capsys, "sweep", "--model", str(m), "--grid", "train.seed=1,2",
                                              "--print_config"))
    assert (printed["model"]["n_layer"], printed["model"]["n_embd"], printed["model"]["n_head"]) == (1, 16, 2)


def test_a_field_given_nested_and_dotted_is_a_key_given_twice(tmp_path, capsys):
    # a new user's pass: `model: {n_layer: 1}` and `model.n_layer: 2` in one file trained with the later one silently
    f = _file(tmp_path, "model:\n  n_layer: 1\nmodel.n_layer: 2\n")
    assert cli_err(capsys, "train", "-c", str(f), "--print_config") == \
        f"depthlab: error: config file {f} line 3: key 'model.n_layer' appears twice (lines 2 and 3); keep one\n"
    from depthlab.config import key_twice

    assert key_twice("experiments:\n  - {name: a, grid: {x: [1]}}\n  - {name: b, grid: {x: [2]}}\n") is None

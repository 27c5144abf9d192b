"""Defects listed as seen-not-fixed in earlier closing notes, each fixed with the failing case here."""

from __future__ import annotations

from conftest import cli_err, run_cli


def test_probe_out_a_missing_folder_with_a_trailing_slash_is_refused_not_written_as_png(tmp_path, capsys):
    # was: `probe --out newdir/sub/` wrote newdir/sub.png (Path drops the trailing slash)
    out = f"{tmp_path / 'sub'}/"
    err = cli_err(capsys, "probe", "--model.n_layer", "1", "--model.n_embd", "32", "--model.n_head", "2",
                  "--out", out)
    assert err == (f"depthlab: error: probe: --out {out} names a folder that does not exist; create it "
                   f"(mkdir -p {out}) or give a .png file name\n"), err
    assert list(tmp_path.iterdir()) == []


def test_report_on_a_folder_that_is_neither_a_run_nor_a_sweep_names_both(tmp_path, capsys):
    # was: "... give the out_dir of a depthlab train run", though report takes a sweep folder as well
    (tmp_path / "notes.txt").write_text("x")
    err = cli_err(capsys, "report", str(tmp_path))
    assert err == (f"depthlab: error: report: {tmp_path} is neither a depthlab run directory (no config.json or "
                   "metrics.jsonl) nor a sweep folder (no sweep.json); give the out_dir of a depthlab train run or "
                   "of a depthlab sweep\n"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_bare_file_whose_one_class_does_not_build_gives_one_error_line_not_the_notice_first(tmp_path, capsys):
    # was: "noforward.py defines one nn.Module class, Net: it is the model (...)" and then the error on stderr
    f = tmp_path / "noforward.py"
    f.write_text("import torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self, vocab_size=65):\n"
                 "        super().__init__()\n        self.emb = nn.Embedding(vocab_size, 16)\n")
    want = (f"depthlab: error: {f}:Net: Net(...) has no forward method; define forward(self, idx) returning the "
            "logits (B, T, V)\n")
    for argv in (["check", str(f)], ["train", "--model.source", str(f), "--train.out_dir", str(tmp_path / "run")]):
        assert run_cli(capsys, *argv) == (2, "", want)
    assert not (tmp_path / "run").exists()

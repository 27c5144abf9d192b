"""Defects listed as seen-not-fixed in earlier closing notes, each fixed with the failing case here."""

from __future__ import annotations

from conftest import cli_err


def test_probe_out_a_missing_folder_with_a_trailing_slash_is_refused_not_written_as_png(tmp_path, capsys):
    # was: `probe --out newdir/sub/` wrote newdir/sub.png (Path drops the trailing slash)
    out = f"{tmp_path / 'sub'}/"
    err = cli_err(capsys, "probe", "--model.n_layer", "1", "--model.n_embd", "32", "--model.n_head", "2",
                  "--out", out)
    assert err == (f"depthlab: error: probe: --out {out} names a folder that does not exist; create it "
                   f"(mkdir -p {out}) or give a .png file name\n"), err
    assert list(tmp_path.iterdir()) == []

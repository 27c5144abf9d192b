"""Defects a new user's pass found (session 53), each test seen to fail with its fix undone."""

from conftest import run_cli, tiny_cli_args


def test_a_folder_with_another_programs_config_json_is_not_offered_to_resume(tmp_path, capsys, tiny_text_file):
    """`train --train.out_dir uf` into a folder holding a user's {"mine": 1} config.json said "use --resume uf to
    continue it", and that command then failed ("uf is not a depthlab run directory")."""
    uf = tmp_path / "uf"
    uf.mkdir()
    (uf / "config.json").write_text('{"mine": 1}')
    rc, out, err = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, uf))
    assert rc == 2 and err == (f"depthlab: error: train.out_dir {uf} already exists and is not a depthlab run "
                               "directory (its config.json is another program's); choose another --train.out_dir (a "
                               "new or empty folder)\n"), err
    assert [p.name for p in uf.iterdir()] == ["config.json"] and (uf / "config.json").read_text() == '{"mine": 1}'

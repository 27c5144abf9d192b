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


def test_a_one_character_window_is_not_told_the_bigram_estimate_is_its_floor():
    """`--model.block_size 1` said "bigram baseline 2.482 nats is its floor" while the run's own one-character floor
    (the val split's conditional entropy, a bound) was 2.374: the smoothed train estimate is beaten, not a floor."""
    from depthlab.analytics.rules import Evidence
    from depthlab.analytics.rules.losses import one_char_window

    base = {"uniform": {"nats": 4.17}, "unigram": {"nats": 3.3}, "bigram": {"nats": 2.482},
            "one_char_floor": {"nats": 2.374}}
    f = one_char_window(Evidence([], {"model": {"block_size": 1, "vocab_size": 65}}, base))
    assert "is its floor" not in f.evidence
    assert ("(bigram baseline 2.482 nats; no such model scores the val split below 2.374 nats, the conditional "
            "entropy of its own character pairs)") in f.evidence, f.evidence


def test_a_resume_whose_metrics_file_was_deleted_says_missing_not_cut(tmp_path, capsys, tiny_text_file):
    """After `rm RUN/metrics.jsonl`, --resume warned "the records of metrics.jsonl end at step 0, before the
    checkpoint at step 10 (cut or damaged)": there was no file to cut."""
    run = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run, train__max_iters=10))
    assert rc == 0, err
    (run / "metrics.jsonl").unlink()
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--train.max_iters", "12")
    assert rc == 0 and "cut or damaged" not in out + err, out + err
    assert ("warning: metrics.jsonl is missing (deleted?): the resumed run starts a new one and has no records of "
            "steps 0-10") in out + err


def test_no_intact_checkpoint_names_the_way_forward_in_sample_and_the_views(tmp_path, capsys, tiny_text_file):
    """With every weights file gone but manifest.json kept, sample/context said "no intact step checkpoint in ...:
    each one listed ... (step-000010.safetensors missing, ...)" and no fix (a resume names its own)."""
    run = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(tiny_text_file, run, train__max_iters=10))
    assert rc == 0, err
    for f in (run / "checkpoints").glob("*.safetensors"):
        f.unlink()
    for argv in (["sample", str(run), "--max_new_tokens", "2"], ["context", str(run), "--checkpoint", "last"]):
        rc, out, err = run_cli(capsys, *argv)
        assert rc == 2 and err.count("\n") == 1 and "no intact step checkpoint in" in err, err
        assert err.endswith(f"; restore {run / 'checkpoints'} from a copy of the run, or train the run again\n"), err


def test_bpe_training_items_cut_a_word_without_spaces_and_keep_all_other_text():
    """BPE on one 5,000,000-character line ("abcdefghij" repeated) trained for ~190 s before its refusal: the trainer's
    cost grows with the square of a word's length and the line was one word per 256 K piece. Runs longer than
    BPE_WORD_CHARS are cut into items of that length; text with shorter words passes whole."""
    from depthlab.tokenizer import BPE_WORD_CHARS, _short_words

    text = "ROMEO: hello " + "x" * (2 * BPE_WORD_CHARS + 5) + " tail\nmore"
    items = list(_short_words([text, "plain text"]))
    assert "".join(items[:-1]) == text and items[-1] == "plain text"
    assert [len(i) for i in items] == [13, BPE_WORD_CHARS, BPE_WORD_CHARS, 5, 10, 10]
    natural = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 100
    assert list(_short_words([natural])) == [natural]  # no word that long: the item is untouched

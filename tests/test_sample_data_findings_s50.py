"""A demanding new user of ``depthlab sample`` and of training on their own text (session 50's findings).

1. A prompt with CRLF or lone CR line ends: every corpus is read with them as ``\\n``, so no vocabulary has a CR; a
   char run refused the prompt ("train on a corpus that contains them", false even for a CRLF corpus) and a BPE run
   encoded the CR as a byte its model never saw. The prompt is now read as the corpus is.
2. A file holding NUL bytes (an executable, UTF-16 without a byte-order mark) trained silently, NULs as characters
   (or, for an executable, was refused with the advice to read it as latin-1, which then trained on it). It is refused
   in one line: UTF-16 named with the encoding to set, else the first NUL's byte offset.
"""

import numpy as np
import pytest

from depthlab import data as D
from depthlab.config import DataConfig
from depthlab.errors import DepthlabError
from depthlab.sample import sample_text

from conftest import TINY_TEXT, assert_clean_error, run_cli, tiny_cli_args


# ------------------------------------------------------------------------------------------- 1: CR in the prompt
@pytest.fixture(scope="module")
def crlf_run(tmp_path_factory):
    """A char run trained on TINY_TEXT written with CRLF line ends (what a Windows editor saves)."""
    from depthlab.cli import main

    d = tmp_path_factory.mktemp("s50crlf")
    (d / "t.txt").write_bytes(TINY_TEXT.replace("\n", "\r\n").encode())
    assert main(["train", *tiny_cli_args(d / "t.txt", d / "run", train__max_iters=4)]) == 0
    return d / "run"


@pytest.fixture(scope="module")
def bpe_run(tmp_path_factory):
    from depthlab.cli import main

    d = tmp_path_factory.mktemp("s50bpe")
    (d / "t.txt").write_text(TINY_TEXT)
    assert main(["train", *tiny_cli_args(d / "t.txt", d / "run", train__max_iters=4, data__tokenizer="bpe",
                                         data__vocab_size=300)]) == 0
    return d / "run"


@pytest.mark.parametrize("nl", ["\r\n", "\r"])
def test_a_crlf_prompt_on_a_run_of_a_crlf_corpus_samples_as_its_lf_twin(crlf_run, nl):
    """Was: 'the prompt has characters the model's vocabulary lacks: '\\r' at position 6; ... train on a corpus that
    contains them' -- the corpus did contain them."""
    prompt = "First" + nl + "Before"
    got = sample_text(crlf_run, prompt, 20, temperature=0)[0]
    assert got == sample_text(crlf_run, "First\nBefore", 20, temperature=0)[0]
    assert got.startswith("First\nBefore") and "\r" not in got and len(got) == len("First\nBefore") + 20


def test_the_cli_prints_a_crlf_prompt_with_lf(crlf_run, capsys):
    rc, out, err = run_cli(capsys, "sample", str(crlf_run), "--prompt", "All:\r\nSpeak", "--max_new_tokens", "10",
                           "--temperature", "0")
    assert rc == 0, err
    assert out.startswith("All:\nSpeak") and "\r" not in out and "error" not in err


def test_a_crlf_prompt_on_a_bpe_run_is_its_lf_twin(bpe_run):
    """Was: the CR encoded as its own byte token (never in the training text), and the text went on from there."""
    crlf = sample_text(bpe_run, "All:\r\nSpeak, speak.\r\n", 30, temperature=0)[0]
    lf = sample_text(bpe_run, "All:\nSpeak, speak.\n", 30, temperature=0)[0]
    assert crlf == lf and "\r" not in crlf


def test_a_char_outside_the_vocabulary_is_still_refused(crlf_run):
    with pytest.raises(DepthlabError, match=r"'é' at position 2"):
        sample_text(crlf_run, "\r\né", 5)  # positions count the prompt as read: "\n" then "é"


# ------------------------------------------------------------------------------------------- 2: NUL bytes
def _load(tmp_path, name, data: bytes, **kw):
    p = tmp_path / name
    p.write_bytes(data)
    return D.load_corpus(DataConfig(path=str(p), cache_dir=str(tmp_path / "cache"), **kw))


TEXT = TINY_TEXT[:2000]


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_bom_is_named_with_its_encoding(tmp_path, codec):
    """Was: trained as utf-8, a NUL after every character (vocabulary + '\\x00', bigram loss halved)."""
    with pytest.raises(DepthlabError) as e:
        _load(tmp_path, "u16.txt", TEXT.encode(codec))
    assert str(e.value) == (f"{tmp_path / 'u16.txt'} is not utf-8 text: it looks like UTF-16 (one byte in two is 0); "
                            f"set --data.encoding {codec}")
    c = _load(tmp_path, "u16.txt", TEXT.encode(codec), encoding=codec)  # the fix named works
    assert c.tokenizer.vocab == sorted(set(TEXT)) and len(c.tokens) == len(TEXT)


def test_utf16_with_a_bom_read_as_latin1_is_named(tmp_path):
    with pytest.raises(DepthlabError, match=r"is not latin-1 text: it looks like UTF-16 .*set --data.encoding utf-16$"):
        _load(tmp_path, "u16.txt", TEXT.encode("utf-16"), encoding="latin-1")


def test_a_few_bytes_with_a_nul_are_not_called_utf16(tmp_path):
    """Was: a 3-byte file 00 01 02 'looks like UTF-16 (one byte in two is 0)'; a pattern of 3 bytes says nothing."""
    with pytest.raises(DepthlabError) as e:
        _load(tmp_path, "b", b"\x00\x01\x02")
    assert "UTF-16" not in str(e.value) and "the first at byte offset 0" in str(e.value)


def test_a_binary_file_is_refused_with_its_first_nul(tmp_path):
    """Was: an executable 'is not valid utf-8: byte 0xd0 ...; set data.encoding (e.g. ... latin-1)', and with
    latin-1 it trained on the machine code."""
    elf = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8
    for enc in ("utf-8", "latin-1", "cp1252"):
        with pytest.raises(DepthlabError) as e:
            _load(tmp_path, "prog", elf, encoding=enc)
        assert str(e.value) == (f"{tmp_path / 'prog'} holds NUL bytes (the first at byte offset 7), which no text "
                                "has: it looks like a binary file, not text; give a text file")


def test_a_valid_utf8_file_with_nul_bytes_is_refused(tmp_path):
    with pytest.raises(DepthlabError, match=r"holds NUL bytes \(the first at byte offset 3\)"):
        _load(tmp_path, "nul.txt", b"abc\x00def\n" * 300)


def test_a_nul_in_a_utf16_file_read_as_utf16_is_refused(tmp_path):
    with pytest.raises(DepthlabError, match=r"read as utf-16 holds NUL characters \(U\+0000\)"):
        _load(tmp_path, "n.txt", ("ab\x00c\n" * 200).encode("utf-16"), encoding="utf-16")


def test_text_without_nul_still_loads(tmp_path):
    c = _load(tmp_path, "ok.txt", "héllo wörld\n".encode("cp1252") * 50, encoding="cp1252")
    assert c.tokenizer.decode(np.asarray(c.tokens[:12])) == "héllo wörld\n"


def test_train_on_utf16_without_a_bom_is_one_line(tmp_path, capsys):
    (tmp_path / "t.txt").write_bytes(TINY_TEXT.encode("utf-16-le"))
    rc, out, err = run_cli(capsys, "train", *tiny_cli_args(tmp_path / "t.txt", tmp_path / "run"))
    assert_clean_error(rc, err, "looks like UTF-16", "--data.encoding utf-16-le")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------- 3: Python callers
@pytest.mark.parametrize("kw,msg", [(dict(max_new_tokens=5.5), "max_new_tokens must be an integer >= 0, got 5.5"),
                                    (dict(max_new_tokens=5, num_samples=2.0),
                                     "num_samples must be an integer >= 1, got 2.0")])
def test_a_float_count_from_python_is_one_depthlab_error(crlf_run, kw, msg):
    """Was: TypeError from torch's new_empty (5.5) or range() (2.0), after the run was loaded."""
    with pytest.raises(DepthlabError) as e:
        sample_text(crlf_run, "First", **kw)
    assert str(e.value) == msg


def test_numpy_integer_counts_still_work(crlf_run):
    texts = sample_text(crlf_run, "First", np.int64(4), num_samples=np.int32(2), temperature=0)
    assert len(texts) == 2 and texts[0] == texts[1] and len(texts[0]) == len("First") + 4


# ------------------------------------------------------------------------------------------- 4: too few BPE tokens
def test_too_few_bpe_tokens_names_the_characters_and_the_char_tokenizer(tmp_path):
    """Was: 'the corpus ... has 6 tokens' for a file of 5,000 characters, the fix not naming the tokenizer."""
    c = _load(tmp_path, "a.txt", b"a" * 5000, tokenizer="bpe", vocab_size=300)
    assert len(c.tokens) == 7 and c.n_chars == 5000
    with pytest.raises(DepthlabError) as e:
        c.check_block_size(16)
    assert str(e.value) == (f"the corpus {tmp_path / 'a.txt'} has 7 tokens (BPE tokens of its 5,000 characters) but "
                            "model.block_size 16 needs at least 17 in each of the train and validation splits (34 in "
                            "all); use a smaller model.block_size or a longer text, or --data.tokenizer char (one "
                            "token per character: 5,000)")


def test_too_few_chars_is_worded_as_before(tmp_path):
    c = _load(tmp_path, "s.txt", b"hello world\n")
    with pytest.raises(DepthlabError) as e:
        c.check_block_size(16)
    assert str(e.value).endswith("has 12 tokens but model.block_size 16 needs at least 17 in each of the train and "
                                 "validation splits (34 in all); use a smaller model.block_size or a longer text")


# ------------------------------------------------------------------------------------------- 5: an export folder
def test_sampling_an_export_names_the_run_it_came_from(crlf_run, tmp_path, capsys):
    """Was: 'its config.json is not depthlab's (...; another program's, such as a Hugging Face model folder?)' for a
    folder depthlab export wrote, whose depthlab.json names the run."""
    pytest.importorskip("transformers")
    rc, _, err = run_cli(capsys, "export", str(crlf_run), str(tmp_path / "hf"))
    assert rc == 0, err
    rc, out, err = run_cli(capsys, "sample", str(tmp_path / "hf"), "--max_new_tokens", "5")
    assert_clean_error(rc, err, f"{tmp_path / 'hf'} is a Hugging Face export written by depthlab export, not a run "
                                f"directory; use depthlab sample {crlf_run} (the run it was exported from), or "
                                f"transformers' pipeline('text-generation', model='{tmp_path / 'hf'}')")
    assert out == ""
    # the other commands that take a run said "its config.json is not depthlab's (... a Hugging Face model folder?)"
    for argv in (["diagnose"], ["context"], ["export", str(tmp_path / "again")], ["train", "--resume"]):
        rc, out, err = run_cli(capsys, *argv[:1], *argv[1:] if argv[0] == "train" else [], str(tmp_path / "hf"),
                               *argv[1:] if argv[0] != "train" else [])
        assert rc == 2 and err.count("\n") == 1, err
        assert err.endswith(f"{tmp_path / 'hf'} is a Hugging Face export written by depthlab export, not a run "
                            f"directory; give the run it was exported from, {crlf_run}\n"), err
    import json

    info = json.loads((tmp_path / "hf" / "depthlab.json").read_text())
    info["run_dir"] = str(tmp_path / "gone")
    (tmp_path / "hf" / "depthlab.json").write_text(json.dumps(info))
    with pytest.raises(DepthlabError, match=r"depthlab sample RUN on the run it was exported from \(.*gone, no longer"):
        sample_text(tmp_path / "hf", "First", 5)


# ------------------------------------------------------------------------------------------- 6: best deleted
@pytest.fixture(scope="module")
def diverged_run(tmp_path_factory):
    """A run whose best evaluation is its first (learning rate 3: the loss goes up), checkpoints at steps 5 and 10."""
    from depthlab.cli import main

    d = tmp_path_factory.mktemp("s50div")
    (d / "t.txt").write_text(TINY_TEXT)
    assert main(["train", *tiny_cli_args(d / "t.txt", d / "run", train__max_iters=10, train__eval_interval=5,
                                         train__warmup_iters=0, train__learning_rate=3, train__muon_lr=3)]) == 0
    return d / "run"


def test_sampling_best_when_best_was_deleted_says_the_weights_are_not_the_best(diverged_run, tmp_path, capsys):
    """Was: only 'sampling from step-000010.safetensors (step 10, val loss 11.28 nats)', the best (step 0, 4.10)
    gone, for --checkpoint best (the default)."""
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(diverged_run, run)
    best = json.loads((run / "checkpoints" / "manifest.json").read_text())["best"]["step"]
    assert best != 10  # the precondition: the newest step checkpoint is not the best
    (run / "checkpoints" / "best.safetensors").unlink()
    rc, out, err = run_cli(capsys, "sample", str(run), "--max_new_tokens", "3")
    assert rc == 0 and len(out) == len("\n") + 3 + 1, (out, err)
    said = (f"depthlab: warning: {run / 'checkpoints'} has no best.safetensors (deleted?); manifest.json records the "
            f"best weights at step {best}, but the newest step checkpoint, step-000010.safetensors (step 10), is used "
            "instead: not the best weights\n")
    assert said in err
    rc, out, err = run_cli(capsys, "sample", str(run), "--max_new_tokens", "3", "--checkpoint", "last")
    assert rc == 0 and "warning" not in err
    # a new user's pass: layers and context read the step checkpoint without a word; now the same warning, once
    for cmd in ("layers", "context"):
        rc, out, err = run_cli(capsys, cmd, str(run), "--max_tokens", "64")
        assert rc == 0 and err.count(said) == 1, err
        rc, out, err = run_cli(capsys, cmd, str(run), "--max_tokens", "64", "--checkpoint", "last")
        assert rc == 0 and "best.safetensors" not in err, err


def test_sampling_best_when_best_was_deleted_at_the_newest_step_says_they_are_the_same(crlf_run, tmp_path, capsys):
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(crlf_run, run)
    assert json.loads((run / "checkpoints" / "manifest.json").read_text())["best"]["step"] == 4
    (run / "checkpoints" / "best.safetensors").unlink()
    rc, out, err = run_cli(capsys, "sample", str(run), "--max_new_tokens", "3")
    assert rc == 0
    assert (f"depthlab: warning: {run / 'checkpoints'} has no best.safetensors (deleted?); step-000004.safetensors "
            "is used instead, the step manifest.json records as best (4): the same weights\n") in err


# ------------------------------------------------------------------------------------------- 7: a -c file's null
@pytest.mark.parametrize("key,expected,default", [("prompt", "a string", '""'), ("max_new_tokens", "an integer", "500"),
                                                  ("temperature", "a finite number", "0.8"),
                                                  ("seed", "an integer", "1337"),
                                                  ("checkpoint", "one of best, last", "best")])
def test_a_sample_config_file_key_without_a_value_is_one_line(crlf_run, tmp_path, capsys, key, expected, default):
    """Was: 'depthlab: error: unexpected StopIteration: (run again with --debug ...)', exit 1 (cli_args._default
    looked for the key among the config sections only)."""
    f = tmp_path / "s.yaml"
    f.write_text(f"{key}:\n")
    rc, out, err = run_cli(capsys, "sample", str(crlf_run), "-c", str(f))
    assert_clean_error(rc, err)
    assert err == (f"depthlab: error: {f}: {key}: expected {expected}, got null (no value); give one, or delete the "
                   f"line for the default ({default})\n")
    assert out == ""


# ------------------------------------------------------------------------------------------- 8: generate's ids
@pytest.mark.parametrize("ids,msg", [
    ([[]], "generate needs idx as a (B, T) tensor of int64 token ids with B, T >= 1 (a prompt of at least one token), "
           "got shape (1, 0), dtype torch.int64"),
    ([[1, 40]], "generate: idx holds token ids outside the model's vocabulary 0..10 (smallest 1, largest 40)"),
    ([[-1]], "generate: idx holds token ids outside the model's vocabulary 0..10 (smallest -1, largest -1)"),
    ([1, 2], "generate needs idx as a (B, T) tensor of int64 token ids with B, T >= 1 (a prompt of at least one "
             "token), got shape (2,), dtype torch.int64"),
])
def test_generate_refuses_ids_it_cannot_continue(ids, msg):
    """Was: IndexError from inside the model (an empty prompt, an id past V), and an id of -1 generated text."""
    import torch

    from conftest import tiny_gpt
    from depthlab.sample import generate

    with pytest.raises(DepthlabError) as e:
        generate(tiny_gpt(), torch.tensor(ids, dtype=torch.long), 3)
    assert str(e.value) == msg


def test_generate_still_takes_int32_ids_and_batches():
    import torch

    from conftest import tiny_gpt
    from depthlab.sample import generate

    out = generate(tiny_gpt(), torch.tensor([[1, 2], [3, 10]], dtype=torch.int32), 3, temperature=0)
    assert out.shape == (2, 5) and out[:, :2].tolist() == [[1, 2], [3, 10]] and int(out.max()) < 11


# ------------------------------------------------------------------------------------------- 9: one line repeated
def _warnings(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    said = []
    D.load_corpus(DataConfig(path=str(p), cache_dir=str(tmp_path / "cache")), log=said.append)
    return [w for w in said if "order" in w]


@pytest.mark.parametrize("text", ["hello there\n" * 2000, "the cat sat\n\n" * 2000, "a\n" * 1999 + "b\n"])
def test_a_file_of_one_line_repeated_is_not_called_sorted(tmp_path, text):
    """Was: 'warning: ...: 100% of its 2,000 lines are in ascending order, so the tail split makes validation the last
    0.1 of the sorted list (a different distribution from train)', for a file whose lines are all the same."""
    assert _warnings(tmp_path, "same.txt", text) == []


def test_a_sorted_list_with_repeats_still_warns(tmp_path):
    names = sorted(f"name{i:04d}" for i in range(700))
    said = _warnings(tmp_path, "names.txt", "".join(f"{n}\n" * 3 for n in names))
    assert len(said) == 1 and "100% of its 2,100 lines are in ascending order" in said[0]


# ------------------------------------------------------------------------------------------- 10: a broken link
def test_a_broken_symlink_is_named_with_its_target(tmp_path, capsys):
    """Was: 'data.path link.txt not found', for a link that ls lists."""
    (tmp_path / "link.txt").symlink_to(tmp_path / "moved.txt")
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(tmp_path / "link.txt", tmp_path / "run"))
    assert_clean_error(rc, err)
    assert err == (f"depthlab: error: data.path {tmp_path / 'link.txt'} is a symbolic link to "
                   f"{tmp_path / 'moved.txt'}, which does not exist; point it at the text file, or give the file "
                   "itself\n")
    (tmp_path / "moved.txt").write_text(TINY_TEXT)  # mended: the link is read as the file
    c = D.load_corpus(DataConfig(path=str(tmp_path / "link.txt"), cache_dir=str(tmp_path / "cache")))
    assert len(c.tokens) == len(TINY_TEXT)


# ------------------------------------------------------------------------------------------- 11: utf-16, no BOM
@pytest.mark.parametrize("codec,fix", [
    ("utf-16-le", "its bytes read as UTF-16-LE: set --data.encoding utf-16-le"),
    ("utf-16-be", "its bytes read as UTF-16-BE: set --data.encoding utf-16-be"),
    ("utf-8", "it does not look like UTF-16 either (no byte in two is 0); set --data.encoding to the file's encoding "
              "(utf-8, the default, for most text)"),
])
def test_encoding_utf16_on_a_file_without_a_bom_is_one_line(tmp_path, capsys, codec, fix):
    """Was: 'depthlab: error: unexpected UnicodeError: UTF-16 stream does not start with BOM (run again with --debug
    ... and please report it)', exit 1."""
    f = tmp_path / "t.txt"
    f.write_bytes(TINY_TEXT.encode(codec))
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(f, tmp_path / "run"), "--data.encoding", "utf-16")
    assert_clean_error(rc, err)
    assert err == (f"depthlab: error: {f} cannot be read as utf-16: it does not start with the byte-order mark that "
                   f"says its byte order; {fix}\n")


# ------------------------------------------------------------------------------------------- 12: not a text encoding
@pytest.mark.parametrize("enc", ["rot13", "base64", "zlib"])
def test_a_codec_that_is_not_a_text_encoding_is_refused_by_name(tmp_path, capsys, enc):
    """Was: 'unexpected TypeError: descriptor 'translate' for 'str' objects doesn't apply to a 'bytes' object' (rot13),
    'unexpected Error: Incorrect padding' (base64), exit 1."""
    f = tmp_path / "t.txt"
    f.write_text(TINY_TEXT)
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(f, tmp_path / "run"), "--data.encoding", enc)
    assert_clean_error(rc, err)
    assert err == (f"depthlab: error: --data.encoding '{enc}' is a bytes-to-bytes or text-to-text transform, not a "
                   "text encoding (try utf-8, cp1252 or latin-1)\n")


@pytest.mark.parametrize("enc,why", [("undefined", "undefined encoding"),
                                     ("punycode", "Invalid extended code point ' '")])
def test_a_text_codec_that_cannot_read_the_file_is_one_line(tmp_path, capsys, enc, why):
    f = tmp_path / "t.txt"
    f.write_text(TINY_TEXT)
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(f, tmp_path / "run"), "--data.encoding", enc)
    assert_clean_error(rc, err)
    assert err == (f"depthlab: error: {f} cannot be read as {enc}: {why}; set --data.encoding to the file's encoding "
                   "(utf-8, the default, for most text)\n")

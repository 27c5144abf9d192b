"""Byte-level BPE: trained on the train split only, cached, chunk-independent encoding, bits per character,
streaming decode, runs that sample, resume, export and start from an export."""

import json
import math

import numpy as np
import pytest
import torch

from depthlab import data as D
from depthlab import train
from depthlab.config import DataConfig
from depthlab.data import get_batch
from depthlab.errors import DepthlabError
from depthlab.sample import load_run, sample_text
from depthlab.trainer import Trainer
from depthlab.trainer import train as bare_train

from conftest import QUIET, TINY_TEXT, tiny_config

VAL_WORD = "Xylophonequartz "


def _split_text(text, vf=0.1):
    cut = len(text) - int(len(text) * vf)
    return text[:cut], text[cut:]


@pytest.fixture
def bpe_file(tmp_path):
    """TINY_TEXT, then a validation tail made of a word the train part never has."""
    train_part = TINY_TEXT + "café 世界 naïve\n"
    n = len(train_part)
    tail = (VAL_WORD * (n // 9 // len(VAL_WORD) + 1))[: n // 9]  # 10 % of the whole
    p = tmp_path / "bpe.txt"
    p.write_text(train_part + tail, encoding="utf-8")
    return p


def test_bpe_learns_from_the_train_split_only_and_encodes_each_split_alone(bpe_file, monkeypatch):
    monkeypatch.setattr(D, "PIECE_CHARS", 37)  # many cuts: the safe cut must not change a single token
    c = D.load_corpus(DataConfig(path=str(bpe_file), tokenizer="bpe", vocab_size=400))
    text = bpe_file.read_text(encoding="utf-8")
    tr, va = _split_text(text)
    assert c.n_chars == len(text) and c.n_train_chars == len(tr)
    assert np.array_equal(np.asarray(c.train), c.tokenizer.encode(tr))
    assert np.array_equal(np.asarray(c.val), c.tokenizer.encode(va))
    assert not any("Xylo" in t or "quartz" in t for t in c.tokenizer.vocab)  # val text taught nothing
    assert c.tokenizer.vocab[0] == D.EOT and c.tokenizer.vocab_size <= 400
    assert c.tokens.dtype == np.uint16


def test_bpe_is_trained_once_per_corpus_and_settings(bpe_file, monkeypatch):
    a = D.load_corpus(DataConfig(path=str(bpe_file), tokenizer="bpe", vocab_size=300))

    def boom(*a, **k):
        raise AssertionError("retrained")

    monkeypatch.setattr(D, "train_bpe", boom)
    b = D.load_corpus(DataConfig(path=str(bpe_file), tokenizer="bpe", vocab_size=300))
    assert a.tokenizer.sha256 == b.tokenizer.sha256
    with pytest.raises(AssertionError, match="retrained"):  # other settings: another tokenizer
        D.load_corpus(DataConfig(path=str(bpe_file), tokenizer="bpe", vocab_size=301))
    # a given tokenizer (a resumed run's) is used as it is, never retrained
    c = D.load_corpus(DataConfig(path=str(bpe_file), tokenizer="bpe", vocab_size=301), tokenizer_json=a.tokenizer.json)
    assert c.tokenizer.sha256 == a.tokenizer.sha256


def test_token_chars_count_each_character_once():
    tok = D.train_bpe(["café 世界 naïve 🙂 " * 20 + TINY_TEXT[:500]], 300)
    for text in ("café 世界 naïve 🙂", "🙂🙂x世", TINY_TEXT[:300], "\u00e9\u4e16"):
        ids = tok.encode(text)
        assert tok.token_chars[ids].sum() == len(text)
    assert tok.token_chars[0] == 0  # <|endoftext|>


def test_streaming_decode_never_prints_a_broken_character():
    tok = D.train_bpe([TINY_TEXT], 300)  # ASCII only: "世" and "🙂" are several byte tokens each
    text = "ab 世界🙂 c"
    ids = tok.encode(text)
    assert len(ids) > len(text)  # some character is split across tokens
    piece = tok.stream_decoder(prefix=ids[:2])
    out = [piece(i) for i in ids[2:]]
    assert "".join(out) == tok.decode(ids[2:]) and all("\ufffd" not in p for p in out)
    assert "" in out  # the first bytes of a character print nothing; its last byte prints it whole


@pytest.mark.parametrize("kw,msg", [(dict(tokenizer="char", vocab_size=300), "data.tokenizer bpe only"),
                                    (dict(tokenizer="bpe", vocab_size=100), "[257, 1048576]"),
                                    (dict(tokenizer="wordpiece"), "data.tokenizer must be one of char, bpe"),
                                    (dict(split="random"), "data.split must be one of tail, lines")])
def test_bad_tokenizer_settings_name_the_field(kw, msg):
    with pytest.raises(DepthlabError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        DataConfig(**kw)


def _bpe_run(tmp_path, path, **train):
    cfg = tiny_config(tmp_path / "bpe_run", path, model=dict(block_size=64),
                      train={"max_iters": 20, "eval_iters": 3, **train})
    cfg.data.tokenizer, cfg.data.vocab_size = "bpe", 300
    return cfg


def test_val_bpc_is_total_nats_over_characters_of_the_evaluated_text(tmp_path, tiny_text_file):
    cfg = _bpe_run(tmp_path, tiny_text_file)
    run = train(cfg, **QUIET)
    rec = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"val_loss"' in x][-1]
    # an independent count: the val windows evaluate() draws, decoded, their characters counted
    _, tok = load_run(run)
    c = D.load_corpus(cfg.data, tokenizer_json=tok.json)
    rng = np.random.default_rng([cfg.train.seed, 1, 1])
    chars = tokens = 0
    for _ in range(cfg.train.eval_iters):
        _, y = get_batch(c.val, cfg.model.block_size, cfg.train.batch_size, rng)
        chars += sum(len(tok.decode(row)) for row in y.tolist())
        tokens += y.numel()
    assert rec["val_bpc"] == pytest.approx(rec["val_loss"] * tokens / chars / math.log(2), rel=1e-9)
    assert tokens / chars < 0.9  # BPE tokens hold more than one character: bpc is not val_loss / ln 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_val_bpc"] == pytest.approx(summary["best_val_loss"] * tokens / chars / math.log(2))


def test_char_run_bpc_is_nats_over_ln2(tmp_path, tiny_text_file):
    run = train(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=5, eval_interval=5)), **QUIET)
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "val_loss" in r:
            assert r["val_bpc"] == r["val_loss"] / math.log(2)


@pytest.mark.slow
def test_bpe_run_samples_resumes_exports_and_restarts_from_its_export(tmp_path, bpe_file, monkeypatch):
    pytest.importorskip("transformers")
    from depthlab.cli import main

    cfg = _bpe_run(tmp_path, bpe_file, max_iters=10)
    run = train(cfg, **QUIET)
    tok_json = (run / "tokenizer.json").read_text()
    text = sample_text(run, "café 世", 30, temperature=0)[0]
    assert text.startswith("café 世") and "\ufffd" not in text[:6]
    # resume: the run's own tokenizer, never a retrained one (the cache is gone, training would fail)
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "fresh-cache"))
    monkeypatch.setattr(D, "train_bpe", lambda *a, **k: (_ for _ in ()).throw(AssertionError("retrained")))
    cfg2 = _bpe_run(tmp_path, bpe_file, max_iters=20, resume=True)
    train(cfg2, **QUIET)
    assert (run / "tokenizer.json").read_text() == tok_json
    assert json.loads((run / "summary.json").read_text())["final_step"] == 20
    assert main(["export", str(run), str(tmp_path / "hf")]) == 0
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    htok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    model, tok = load_run(run)
    ids = tok.encode("café 世界")
    assert htok("café 世界").input_ids == ids and htok.eos_token_id == 0
    with torch.no_grad():
        assert torch.allclose(hf(torch.tensor([ids])).logits, model(torch.tensor([ids]))[0], atol=1e-5)
    # --init-from the export: the export's tokenizer and weights start a new run
    cfg3 = _bpe_run(tmp_path, bpe_file, max_iters=1, out_dir=str(tmp_path / "again"))
    t = Trainer(cfg3, init_from=str(tmp_path / "hf"), **QUIET)
    assert t.corpus.tokenizer.sha256 == tok.sha256
    for k, v in model.state_dict().items():
        assert torch.equal(t.raw_model.state_dict()[k], v), k


def test_resume_with_another_tokenizer_names_both(tmp_path, bpe_file):
    run = bare_train(tiny_config(tmp_path / "r", bpe_file, model=dict(block_size=64), train=dict(max_iters=5)), **QUIET)
    cfg = _bpe_run(tmp_path, bpe_file, max_iters=10, resume=True, out_dir=str(run))
    with pytest.raises(DepthlabError) as e:
        bare_train(cfg, **QUIET)
    assert "data.tokenizer 'char' -> 'bpe'" in str(e.value) and "data.vocab_size None -> 300" in str(e.value)


def test_large_train_split_teaches_bpe_from_evenly_spaced_pieces(monkeypatch):
    monkeypatch.setattr(D, "BPE_TRAIN_CHARS", 400)
    monkeypatch.setattr(D, "PIECE_CHARS", 100)
    text = "".join(f"{i:04d}|" for i in range(2000))  # 10,000 characters, each position recognisable
    chars = np.array([ord(c) for c in text], dtype="<u4")
    pieces = list(D._train_sample(chars, np.arange(0x110000, dtype="<u4"), 8000))
    assert len(pieces) == 4 and all(len(p) == 100 for p in pieces)
    assert [p[:5] for p in pieces] == ["0000|", "0400|", "0800|", "1200|"]  # spread over the train split only

"""Hugging Face export: same logits as depthlab, loads without depthlab, greedy text equal, refusals; rope runs as
GPT-NeoX, and back through --init-from."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from depthlab import train
from depthlab.checkpoint import clean_state_dict
from depthlab.cli import main
from depthlab.errors import DepthlabError
from depthlab.export import build_hf_model, check_exportable, export_run, hf_tokenizer
from depthlab.hf_layout import from_hf_state_dict
from depthlab.model import GPT
from depthlab.data import CharTokenizer
from depthlab.sample import load_run, sample_text

from conftest import QUIET, TINY_TEXT, tiny_config, tiny_gpt

pytest.importorskip("transformers")


def _randomised(**kw):
    """A tiny GPT with every parameter random (biases and norm gains included), so each mapping matters."""
    model = tiny_gpt(seed=1, **kw)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
    return model.eval()


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("act,variant,ff", [("gelu", "prenorm", 3), ("relu", "prenorm", 4), ("relu", "postnorm", 4)])
def test_exported_logits_equal_depthlab(tie, bias, act, variant, ff):
    model = _randomised(tie_weights=tie, bias=bias, activation=act, variant=variant, ff_mult=ff, position="learned")
    hf = build_hf_model(model, bos=0)
    assert type(hf).__name__ == ("GPT2LMHeadModel" if variant == "prenorm" else "OpenAIGPTLMHeadModel")
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, model.config.vocab_size, (3, model.config.block_size), generator=g)
    with torch.no_grad():
        assert torch.allclose(hf(x).logits, model(x)[0], atol=1e-5, rtol=0)
    assert (hf.get_output_embeddings().weight.data_ptr() == hf.get_input_embeddings().weight.data_ptr()) == tie


@pytest.mark.parametrize("field,kw", [
    ("model.variant plain", dict(variant="plain")), ("model.variant rezero", dict(variant="rezero")),
    ("model.variant deepnorm", dict(variant="deepnorm")), ("model.norm rmsnorm", dict(norm="rmsnorm")),
    ("model.norm none", dict(norm="none")), ("model.activation gelu", dict(variant="postnorm")),
    ("model.ff_mult 2", dict(variant="postnorm", activation="relu", ff_mult=2)),
    ("model.variant periln", dict(variant="periln")), ("model.norm dyt", dict(norm="dyt")),
    ("model.residual_scale depth", dict(residual_scale="depth")), ("model.norm_scale depth", dict(norm_scale="depth")),
    ("model.residual_scale depth", dict(variant="postnorm", activation="relu", residual_scale="depth")),
    ("model.position rope with postnorm", dict(variant="postnorm", activation="relu", position="rope")),
    ("model.norm rmsnorm", dict(norm="rmsnorm", position="rope")),
    ("model.embed_scale learned", dict(embed_scale="learned")),
    ("model.embed_scale learned", dict(embed_scale="learned", position="rope"))])
def test_unmappable_models_are_refused_naming_the_field(field, kw):
    with pytest.raises(DepthlabError) as e:
        check_exportable(tiny_gpt(**{"position": "learned", **kw}).config)
    assert field in str(e.value) and "\n" not in str(e.value) and "(exportable: " in str(e.value)


# ------------------------------------------- position rope: GPT-NeoX
@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("act,n_head,n_embd,ff", [("gelu", 2, 16, 4), ("relu", 4, 32, 3), ("gelu", 1, 16, 2)])
def test_exported_rope_logits_equal_depthlab_at_every_position(tie, bias, act, n_head, n_embd, ff):
    model = _randomised(position="rope", tie_weights=tie, bias=bias, activation=act, n_head=n_head, n_embd=n_embd,
                        ff_mult=ff, block_size=32)
    hf = build_hf_model(model)
    assert type(hf).__name__ == "GPTNeoXForCausalLM"
    c = hf.config
    assert (c.use_parallel_residual, c.rope_parameters["partial_rotary_factor"], c.rope_parameters["rope_theta"],
            c.hidden_act, c.intermediate_size, c.attention_bias) == (False, 1.0, 10000.0, act, ff * n_embd, bias)
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, model.config.vocab_size, (3, 32), generator=g)
    with torch.no_grad():
        diff = (hf(x).logits - model(x)[0]).abs().amax(dim=(0, 2))  # (T,): the largest difference at each position
    assert diff.max() <= 1e-5, diff
    assert (hf.get_output_embeddings().weight.data_ptr() == hf.get_input_embeddings().weight.data_ptr()) == tie


@pytest.mark.parametrize("tie,bias", [(True, False), (False, True)])
def test_a_saved_gpt_neox_maps_back_onto_the_same_depthlab_weights(tie, bias, tmp_path):
    """model.safetensors as save_pretrained writes it (the head as embed_out, q/k/v per head) -> depthlab's layout."""
    from safetensors.torch import load_file

    model = _randomised(position="rope", tie_weights=tie, bias=bias, n_head=4, n_embd=32)
    build_hf_model(model).save_pretrained(str(tmp_path))
    saved = load_file(str(tmp_path / "model.safetensors"))
    assert ("embed_out.weight" in saved) == (not tie)
    back = from_hf_state_dict(saved, model.config, tmp_path)
    again = GPT(model.config)
    again.load_state_dict(back, strict=False)
    want = clean_state_dict(model.state_dict())
    assert all(torch.equal(again.state_dict()[k], v) for k, v in want.items())


class _NeoXHeadNamedEmbedOut(torch.nn.Module):
    """transformers 4.x's GPTNeoXForCausalLM as export sees it: the same model, its head named ``embed_out`` (5.x:
    ``lm_head``) in its state_dict, tied to ``gpt_neox.embed_in`` when the config says so."""

    def __init__(self, config):
        from transformers import GPTNeoXModel

        super().__init__()
        self.config = config
        self.gpt_neox = GPTNeoXModel(config)
        self.embed_out = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.embed_out.weight = self.gpt_neox.embed_in.weight

    def get_output_embeddings(self):
        return self.embed_out

    def forward(self, x):
        from types import SimpleNamespace

        return SimpleNamespace(logits=self.embed_out(self.gpt_neox(x).last_hidden_state))


@pytest.mark.parametrize("tie", [True, False])
def test_a_gpt_neox_whose_head_is_embed_out_takes_the_head(tie, monkeypatch):
    """transformers 4.x names GPT-NeoX's head embed_out: export of a rope run failed there ('weights do not map onto
    GPTNeoXForCausalLM (missing ['embed_out.weight'])', 4.57.6); the head goes to the name the model's own
    state_dict has."""
    import depthlab.export as ex

    from depthlab.export import head_name

    real = ex.hf_config
    monkeypatch.setattr(ex, "hf_config", lambda *a: (real(*a)[0], _NeoXHeadNamedEmbedOut))
    model = _randomised(position="rope", tie_weights=tie, n_head=2, n_embd=16, block_size=16)
    hf = build_hf_model(model)
    assert type(hf) is _NeoXHeadNamedEmbedOut and head_name(hf) == "embed_out.weight"
    assert "lm_head.weight" not in hf.state_dict()
    want = model.transformer.wte.weight if tie else model.lm_head.weight
    assert torch.equal(hf.embed_out.weight, want)
    assert (hf.embed_out.weight.data_ptr() == hf.gpt_neox.embed_in.weight.data_ptr()) == tie


class _NeoXConfig4:
    """transformers 4.46-4.57's GPTNeoXConfig as to rotary: ``rotary_pct`` / ``rotary_emb_base`` are constructor
    arguments, from which it derives ``partial_rotary_factor`` / ``rope_theta`` (the frequencies its model builds);
    ``rope_parameters`` is an unknown keyword, kept as an attribute."""

    def __init__(self, rotary_pct=0.25, rotary_emb_base=10000, **kwargs):
        self.__dict__.update(kwargs)
        self.rotary_pct = self.partial_rotary_factor = rotary_pct
        self.rotary_emb_base = self.rope_theta = rotary_emb_base


@pytest.mark.parametrize("config_class", ["5.x", "4.x"])
def test_a_gpt_neox_config_says_the_whole_head_rotates_in_every_spelling(config_class, monkeypatch):
    """transformers 4.57 makes the rotary frequencies from partial_rotary_factor, which its constructor copies from
    rotary_pct: export set rotary_pct alone, after the config was made, so 4.57.6 kept 0.25 (a quarter of each head
    rotated)."""
    import transformers

    from depthlab.export import NEOX_ROTARY, hf_config

    if config_class == "4.x":
        monkeypatch.setattr(transformers, "GPTNeoXConfig", _NeoXConfig4)
    c = hf_config(tiny_gpt(position="rope").config)[0]
    assert NEOX_ROTARY == {"rotary_pct": 1.0, "rotary_emb_base": 10000.0, "partial_rotary_factor": 1.0,
                           "rope_theta": 10000.0}
    assert {k: getattr(c, k) for k in NEOX_ROTARY} == NEOX_ROTARY
    assert c.rope_parameters == {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}
    if config_class == "5.x":  # and config.json says them all, for every transformers that reads the folder
        written = c.to_dict()
        assert {k: written[k] for k in NEOX_ROTARY} == NEOX_ROTARY


@pytest.mark.parametrize("kw", [dict(position="learned", ff_mult=3), dict(position="rope", ff_mult=2, n_head=4),
                                dict(position="learned", variant="postnorm", activation="relu")])
def test_the_shape_export_writes_into_config_json_is_the_shape_init_from_reads_back(kw):
    """One table (hf_layout.HF_CONFIG_KEYS) of GPT-2's, OpenAI GPT's and GPT-NeoX's names, read both ways."""
    from depthlab.export import hf_config
    from depthlab.hf_layout import from_hf_config

    cfg = tiny_gpt(n_embd=32, block_size=16, **kw).config
    written = hf_config(cfg)[0].to_dict()  # what save_pretrained writes into config.json
    want = {"n_layer": 2, "n_head": cfg.n_head, "n_embd": 32, "block_size": 16, "vocab_size": cfg.vocab_size,
            "position": kw["position"]}
    assert from_hf_config(written) == (want if kw.get("variant") == "postnorm" else {**want, "ff_mult": kw["ff_mult"]})


def test_char_tokenizer_ids_are_depthlab_ids():
    tok = CharTokenizer.from_text(TINY_TEXT + "é")
    hf = hf_tokenizer(tok)
    text = "First Citizen:\n  Speak, é speak.\n\n"
    assert hf.encode(text).ids == tok.encode(text)
    assert hf.decode(tok.encode(text)) == text


def test_missing_transformers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(DepthlabError, match=r'pip install -e "\.\[hf\]"'):
        build_hf_model(tiny_gpt(), bos=0)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("x")
    p = d / "t.txt"
    p.write_text(TINY_TEXT)
    return train(tiny_config(d / "run", p, model=dict(block_size=128, tie_weights=False, bias=True, position="learned"),
                             train=dict(max_iters=20)), **QUIET)


HF_SCRIPT = r"""
import sys, json, importlib.abc
class NoDepthlab(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "depthlab":
            raise ImportError("depthlab must not be needed")
sys.meta_path.insert(0, NoDepthlab())
import torch, traceback
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
# one JSON line per export directory: argv holds (dir, prompt, n) triples
for d, prompt, n in zip(sys.argv[1::3], sys.argv[2::3], map(int, sys.argv[3::3])):
    try:
        m = AutoModelForCausalLM.from_pretrained(d, local_files_only=True, trust_remote_code=False).eval()
        tok = AutoTokenizer.from_pretrained(d, local_files_only=True, trust_remote_code=False)
        ids = tok(prompt, return_tensors="pt").input_ids
        out = m.generate(ids, max_new_tokens=n, do_sample=False)
        gen = pipeline("text-generation", model=m, tokenizer=tok)(prompt, max_new_tokens=10, do_sample=False)
        x = torch.tensor([[1, 2, 3, 4]])
        res = {"greedy": tok.decode(out[0], skip_special_tokens=True), "pipeline": gen[0]["generated_text"],
               "logits": m(x).logits[0].tolist(), "ids": ids[0].tolist(), "class": type(m).__name__}
        if res["class"] != "GPTNeoXForCausalLM":  # learned positions: the export's own generation settings
            torch.manual_seed(0)
            res["default_length"] = int(m.generate(ids).shape[1])
    except Exception:
        res = {"error": traceback.format_exc()}
    print(json.dumps(res), flush=True)
"""


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory):
    """A char run of model.position rope: 4 heads, relu, bias, untied head, context 32."""
    d = tmp_path_factory.mktemp("xr")
    p = d / "t.txt"
    p.write_text(TINY_TEXT)
    return train(tiny_config(d / "run", p, model=dict(position="rope", block_size=32, n_head=4, activation="relu",
                                                     tie_weights=False, bias=True), train=dict(max_iters=20)), **QUIET)


def _hf(*requests):
    """HF_SCRIPT on each ``(export_dir, prompt, n)`` in one process (its torch and transformers imports once):
    one result per request, ``{"error": traceback}`` where that one failed."""
    argv = [str(x) for req in requests for x in req]
    r = subprocess.run([sys.executable, "-c", HF_SCRIPT, *argv], capture_output=True,
                       text=True, timeout=300, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [line for line in r.stdout.strip().splitlines() if line.startswith("{")]
    assert len(lines) == len(requests), r.stdout[-2000:]
    return [json.loads(line) for line in lines]


#: The export test's cases: (run fixture, transformers class, characters generated). A rope run's text ends at
#: block_size: past it depthlab re-encodes a cropped context, GPT-NeoX rotates on.
HF_CASES = [("run", "GPT2LMHeadModel", 100), ("rope_run", "GPTNeoXForCausalLM", 32 - len("First Citizen:"))]


@pytest.fixture(scope="module")
def hf_loaded(request, tmp_path_factory):
    """Both runs exported (``depthlab export``) and loaded by transformers in one process without depthlab:
    ``{which: (export exit status, what HF_SCRIPT printed)}``. One interpreter importing torch and transformers
    for the two cases instead of one each (~4-5 s of the slow tier)."""
    d = tmp_path_factory.mktemp("hf")
    codes = {which: main(["export", str(request.getfixturevalue(which)), str(d / which)]) for which, _, _ in HF_CASES}
    outs = _hf(*[(d / which, "First Citizen:", n) for which, _, n in HF_CASES])
    return {which: (codes[which], out) for (which, _, _), out in zip(HF_CASES, outs)}


@pytest.mark.slow
@pytest.mark.parametrize("which,klass,n", HF_CASES)
def test_export_loads_without_depthlab_and_greedy_equals_sample(which, klass, n, request, hf_loaded):
    run = request.getfixturevalue(which)
    code, out = hf_loaded[which]
    assert code == 0
    assert "error" not in out, out.get("error")
    want = sample_text(run, "First Citizen:", n, temperature=0)[0]
    assert out["class"] == klass
    assert out["greedy"] == want and len(want) == len("First Citizen:") + n
    assert out["pipeline"].startswith("First Citizen:") and len(out["pipeline"]) > len("First Citizen:")
    if klass == "GPT2LMHeadModel":  # generation_config.json said max_new_tokens 500 past its 128 positions: IndexError
        assert out["default_length"] == 128, out
    model, tok = load_run(run)
    assert out["ids"] == tok.encode("First Citizen:")
    with torch.no_grad():
        ref = model(torch.tensor([[1, 2, 3, 4]]))[0][0]
    assert torch.allclose(torch.tensor(out["logits"]), ref, atol=1e-5, rtol=0)


def test_export_refuses_to_overwrite_and_leaves_nothing_on_failure(run, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(DepthlabError, match="not an export directory"):  # not "--overwrite", refused next
        export_run(run, out)
    with pytest.raises(DepthlabError, match="not an export directory"):
        export_run(run, out, overwrite=True)
    assert (out / "notes.txt").read_text() == "keep me" and len(list(out.iterdir())) == 1
    assert main(["export", str(run), str(tmp_path / "bad"), "--checkpoint", "worst"]) == 2
    assert not (tmp_path / "bad").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]  # no temporary folder left behind


def test_an_unwritable_out_dir_is_one_line_naming_the_fix_and_only_a_real_earlier_export_is_said_kept(
        run, tmp_path, capsys, monkeypatch):
    # was: an empty read-only OUT_DIR was said to hold "the earlier export ... kept", and no fix was named
    import depthlab.export as ex

    empty, hf = tmp_path / "empty", tmp_path / "hf"
    empty.mkdir()
    export_run(run, hf, which="last")
    before = (hf / "depthlab.json").read_text()
    capsys.readouterr()

    def denied(*a, **k):  # what a read-only folder does to a user who is not root
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(ex, "_write_tokenizer", denied)
    fix = "; make OUT_DIR and its folder writable (with room on the disk) or choose another OUT_DIR"
    for out, argv, kept in ((empty, [], ""), (hf, ["--overwrite"], f"; the earlier export in {hf} is kept")):
        rc = main(["export", str(run), str(out), *argv])
        err = capsys.readouterr().err
        assert rc == 2 and err == (f"depthlab: error: export: writing {out} failed: Permission denied; nothing of it "
                                   f"was left behind{kept}{fix}\n"), err
    assert list(empty.iterdir()) == [] and (hf / "depthlab.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "hf"]  # no temporary folder left behind


@pytest.mark.parametrize("inside", ["sub", "sub/deeper"])
@pytest.mark.parametrize("kind", ["file", "dangling link"])
def test_export_into_a_path_under_a_file_names_the_file_and_writes_nothing(run, tmp_path, capsys, inside, kind):
    """``export RUN afile.txt/sub`` said the system's "cannot write into afile.txt: File exists"."""
    above = tmp_path / "afile.txt"
    if kind == "file":
        above.write_text("my notes")
    else:
        above.symlink_to(tmp_path / "nowhere")
    out = above / inside
    rc = main(["export", str(run), str(out)])
    what = "a file, not a folder" if kind == "file" else "a symbolic link to nothing"
    assert rc == 2 and capsys.readouterr().err == (
        f"depthlab: error: export: {above} is {what}, so OUT_DIR {out} cannot be made inside it; choose an OUT_DIR "
        f"that is not inside {above} (e.g. a new folder beside it)\n")
    assert [p.name for p in tmp_path.iterdir()] == ["afile.txt"]
    assert above.read_text() == "my notes" if kind == "file" else above.is_symlink()


def test_export_into_a_folder_this_user_cannot_write_is_refused_before_any_work(run, tmp_path, capsys, monkeypatch):
    """The folder OUT_DIR would be made in is checked on the path (os.access) before the checkpoint is read."""
    import os

    import depthlab.export as ex

    ro = tmp_path / "ro"
    ro.mkdir()
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: Path(p) != ro and access(p, mode, **k))  # root may write
    monkeypatch.setattr(ex, "build_hf_model", lambda *a, **k: pytest.fail("export worked before refusing"))
    for out in (ro / "hf", ro / "new" / "hf"):
        rc = main(["export", str(run), str(out)])
        assert rc == 2 and capsys.readouterr().err == (
            f"depthlab: error: export: {ro} is not writable by this user (or is on a read-only disk), so OUT_DIR "
            f"{out} cannot be made there; choose an OUT_DIR in a folder you can write to\n")
    assert list(ro.iterdir()) == []


def test_a_failed_export_takes_away_the_folders_it_made_above_out_dir(run, tmp_path, capsys, monkeypatch):
    """``export RUN a/b/hf`` made a/ and a/b/ first, and a failed write left them behind."""
    import depthlab.export as ex

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ex, "_write_tokenizer", full)
    out = tmp_path / "a" / "b" / "hf"
    assert main(["export", str(run), str(out)]) == 2
    assert f"export: no space left on the device holding {out.parent} while writing {out}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    assert main(["export", str(run), str(out)]) == 0 and (out / "model.safetensors").is_file()  # and then it works


def test_export_overwrite_replaces_an_earlier_export(run, tmp_path):
    export_run(run, tmp_path / "hf", which="last")
    assert json.loads((tmp_path / "hf" / "depthlab.json").read_text())["checkpoint"] == "last"
    export_run(run, tmp_path / "hf", overwrite=True)
    info = json.loads((tmp_path / "hf" / "depthlab.json").read_text())
    assert info["checkpoint"] == "best" and info["config"]["model"]["bias"] is True
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert cfg["model_type"] == "gpt2" and cfg["activation_function"] == "gelu" and cfg["n_inner"] == 4 * 32
    assert cfg["tie_word_embeddings"] is False
    # a char model has no end-of-text token: no file names one (config.json named the newline: a tool stopped there)
    assert cfg["eos_token_id"] is None and cfg["bos_token_id"] is None
    gen = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert "eos_token_id" not in gen and "bos_token_id" not in gen  # generation never stops early


# ------------------------------------------- issue 23 cases 3, 4: special tokens, unknown characters
def _special_ids_of(d):
    """bos/eos as every exported file states them (token strings mapped to ids through tokenizer.json)."""
    from tokenizers import Tokenizer

    t = Tokenizer.from_file(str(d / "tokenizer.json"))
    cfg = json.loads((d / "config.json").read_text())
    gen = json.loads((d / "generation_config.json").read_text())
    tc = json.loads((d / "tokenizer_config.json").read_text())
    sm = json.loads((d / "special_tokens_map.json").read_text())
    info = json.loads((d / "depthlab.json").read_text())
    ids = lambda s: None if s is None else t.token_to_id(s)  # noqa: E731
    return {"config.json": (cfg.get("bos_token_id"), cfg.get("eos_token_id")),
            "generation_config.json": (gen.get("bos_token_id"), gen.get("eos_token_id")),
            "tokenizer_config.json": (ids(tc.get("bos_token")), ids(tc.get("eos_token"))),
            "special_tokens_map.json": (ids(sm.get("bos_token")), ids(sm.get("eos_token"))),
            "depthlab.json": (info.get("bos_token_id"), info.get("eos_token_id"))}


@pytest.fixture(scope="module")
def bpe_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("xb")
    p = d / "t.txt"
    p.write_text(TINY_TEXT + "café 世界 <|endoftext|>\n", encoding="utf-8")
    cfg = tiny_config(d / "run", p, model=dict(block_size=32), train=dict(max_iters=10))
    cfg.data.tokenizer, cfg.data.vocab_size = "bpe", 300
    return train(cfg, **QUIET)


def test_char_export_names_no_special_token_anywhere(run, tmp_path):
    export_run(run, tmp_path / "hf")
    got = _special_ids_of(tmp_path / "hf")
    assert set(got.values()) == {(None, None)}, got  # was config.json eos = the newline's id: stop after a line


def test_bpe_export_names_endoftext_alike_everywhere(bpe_run, tmp_path):
    export_run(bpe_run, tmp_path / "hf")
    assert set(_special_ids_of(tmp_path / "hf").values()) == {(0, 0)}


@pytest.mark.parametrize("variant,position", [("prenorm", "learned"), ("postnorm", "learned"), ("prenorm", "rope")])
def test_hf_config_writes_the_ids_it_is_given_and_no_default(variant, position):
    kw = dict(variant=variant, activation="relu", ff_mult=4, position=position)
    assert (build_hf_model(tiny_gpt(**kw)).config.eos_token_id, build_hf_model(tiny_gpt(**kw)).config.bos_token_id) \
        == (None, None)  # GPT2Config's own default would be 50256, GPTNeoXConfig's bos 0 and eos 2
    assert build_hf_model(tiny_gpt(**kw), bos=0, eos=0).config.eos_token_id == 0


def test_char_tokenizer_refuses_a_character_outside_the_vocabulary():
    tok = CharTokenizer.from_text(TINY_TEXT)
    hf = hf_tokenizer(tok)
    assert hf.encode("First Citizen:").ids == tok.encode("First Citizen:")
    with pytest.raises(Exception, match="outside this char model's vocabulary"):
        hf.encode("Café First:")  # was the ids of 'Caf First:' without a word


def test_export_says_how_its_tokenizer_treats_text_and_autotokenizer_does_it(run, bpe_run, tmp_path, capsys):
    from transformers import AutoTokenizer

    assert main(["export", str(run), str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    assert "refused" in err and "no character is dropped" in err
    info = json.loads((tmp_path / "c" / "depthlab.json").read_text())
    assert any("refused" in r for r in info["tokenizer_rules"])
    with pytest.raises(Exception, match="outside this char model's vocabulary"):
        AutoTokenizer.from_pretrained(str(tmp_path / "c"))("Café First:")
    assert main(["export", str(bpe_run), str(tmp_path / "b")]) == 0
    assert "<|endoftext|> typed in a text is encoded as its characters" in capsys.readouterr().err
    _, tok = load_run(bpe_run)
    hf = AutoTokenizer.from_pretrained(str(tmp_path / "b"))
    assert hf("a <|endoftext|> b café").input_ids == tok.encode("a <|endoftext|> b café")
    assert 0 not in hf("a <|endoftext|> b").input_ids


def test_a_rope_export_generates_depthlab_greedy_text_and_init_from_it_restores_the_weights(rope_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from depthlab.trainer import Trainer

    export_run(rope_run, tmp_path / "hf", log=None)
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf")).eval()
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert type(hf).__name__ == "GPTNeoXForCausalLM"
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    # transformers 4.x reads only these (else it rotates a quarter of each head), 5.x rope_parameters
    assert (written["rotary_pct"], written["rotary_emb_base"]) == (1.0, 10000.0)
    n = 32 - len("First Citizen:")
    out = hf.generate(tok("First Citizen:", return_tensors="pt").input_ids, max_new_tokens=n, do_sample=False)
    assert tok.decode(out[0]) == sample_text(rope_run, "First Citizen:", n, temperature=0)[0]
    # the round trip: --init-from the export starts a rope model with the run's weights, so the same logits
    model, _ = load_run(rope_run)
    cfg = tiny_config(tmp_path / "again", rope_run.parent / "t.txt", train=dict(max_iters=1),
                      model={k: getattr(model.config, k) for k in ("position", "block_size", "n_head", "activation",
                                                                   "tie_weights", "bias")})
    t = Trainer(cfg, init_from=str(tmp_path / "hf"), **QUIET)
    x = torch.randint(0, model.config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert torch.equal(t.raw_model.eval()(x)[0], model(x)[0])


@pytest.mark.parametrize("edit,said,want", [
    (dict(use_parallel_residual=True), "use_parallel_residual true", "use_parallel_residual false"),  # Pythia's
    (dict(rope_parameters=None, rotary_pct=None),  # GPTNeoXConfig's default: a quarter of each head
     "no rotary_pct nor rope_parameters.partial_rotary_factor (GPTNeoXConfig's default: 0.25 of each head rotated)",
     "rotary_pct 1.0 and rope_parameters.partial_rotary_factor 1.0"),
    (dict(use_parallel_residual=None), "no use_parallel_residual (GPTNeoXConfig's default: true)",
     "use_parallel_residual false"),
    (dict(rope_parameters=None, rotary_pct=1.0, rotary_emb_base=5000), "rotary_emb_base 5000",  # transformers 4's
     "rotary_emb_base 10000.0"),
    # one spelling edited alone, the others still depthlab's: was accepted (rope_parameters was read first), though
    # the transformers that reads that spelling builds another model (4.57: logits 2.7 and 0.34 off)
    (dict(rotary_pct=0.5), "rotary_pct 0.5", "rotary_pct 1.0"),
    (dict(rotary_emb_base=5000), "rotary_emb_base 5000", "rotary_emb_base 10000.0"),
    (dict(rope_scaling={"type": "linear", "factor": 2.0}), 'rope_scaling.type "linear"', 'rope_scaling.type "default"'),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
     "rope_parameters.partial_rotary_factor 0.5", "rope_parameters.partial_rotary_factor 1.0"),
    (dict(partial_rotary_factor=0.5), "partial_rotary_factor 0.5", "partial_rotary_factor 1.0"),
    (dict(rope_parameters="oops"), 'rope_parameters "oops"',  # was read as absent, and the rest accepted
     'rope_parameters {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}'),
    (dict(rotary_pct=0.5, rope_theta=5000), "rotary_pct 0.5 and rope_theta 5000",  # every one, in one line
     "rotary_pct 1.0 and rope_theta 10000.0"),
])
def test_init_from_refuses_a_gpt_neox_that_computes_another_function(rope_run, tmp_path, edit, said, want):
    from depthlab.init_from import init_weights

    export_run(rope_run, tmp_path / "hf", log=None)
    f = tmp_path / "hf" / "config.json"
    f.write_text(json.dumps({k: v for k, v in {**json.loads(f.read_text()), **edit}.items() if v is not None}))
    model, tok = load_run(rope_run)
    with pytest.raises(DepthlabError) as e:
        init_weights(tmp_path / "hf", model.config, tok)
    assert str(e.value) == (f"--init-from {tmp_path / 'hf'}: its config.json has {said}, but depthlab's position "
                            f"rope GPT is a GPT-NeoX with {want} (as depthlab export writes it), so these weights "
                            "would compute another function; start from a depthlab export (an edited one: export "
                            "its run again, depthlab export RUN FOLDER --overwrite)")


@pytest.mark.parametrize("edit", [dict(rope_scaling=None), dict(rope_scaling={"type": "default"}),
                                  dict(rope_parameters=None), dict(rotary_emb_base=10000, rope_theta=10000),
                                  dict(rope_parameters={"rope_type": "default", "rope_theta": 10000})])
def test_init_from_takes_a_gpt_neox_whose_every_spelling_says_depthlabs_rotary(rope_run, tmp_path, edit):
    """The spellings transformers writes or reads for the same settings (null, an int base, rotary_pct alone) load."""
    from depthlab.init_from import init_weights

    export_run(rope_run, tmp_path / "hf", log=None)
    f = tmp_path / "hf" / "config.json"
    f.write_text(json.dumps({k: v for k, v in {**json.loads(f.read_text()), **edit}.items() if v is not None}))
    model, tok = load_run(rope_run)
    sd, record = init_weights(tmp_path / "hf", model.config, tok)
    want = clean_state_dict(model.state_dict())
    assert record["kind"] == "export" and sd.keys() == want.keys()
    assert all(torch.equal(sd[k], v) for k, v in want.items())


@pytest.mark.parametrize("edit,said", [
    (dict(num_attention_heads=2), "model.n_head 2 in config.json, 4 in depthlab.json"),
    (dict(tie_word_embeddings=True),
     "tie_word_embeddings true in config.json, model.tie_weights false in depthlab.json"),
])
def test_init_from_an_export_whose_two_configs_disagree_is_refused(rope_run, tmp_path, capsys, edit, said):
    """A new user's pass: with config.json edited (heads, tying), --init-from loaded depthlab.json's model silently,
    while transformers builds another model from the same folder (logits 1.7 and 6.2 apart)."""
    from conftest import assert_clean_error, run_cli, tiny_cli_args

    export_run(rope_run, tmp_path / "hf", log=None)
    f = tmp_path / "hf" / "config.json"
    f.write_text(json.dumps({**json.loads(f.read_text()), **edit}))
    rc, _, err = run_cli(capsys, "train", *tiny_cli_args(rope_run.parent / "t.txt", tmp_path / "new"),
                         "--init-from", str(tmp_path / "hf"))
    assert_clean_error(rc, err, said, "describe different models", "delete depthlab.json")
    assert not (tmp_path / "new").exists()
    (tmp_path / "hf" / "depthlab.json").unlink()  # the fix it names: config.json's model, which loads
    from depthlab.init_from import source_model
    assert source_model(tmp_path / "hf")[0]["n_head"] == edit.get("num_attention_heads", 4)

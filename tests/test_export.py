"""Hugging Face export: same logits as depthlab, loads without depthlab, greedy text equal, refusals."""

import json
import subprocess
import sys

import pytest
import torch

from depthlab import train
from depthlab.cli import main
from depthlab.errors import DepthlabError
from depthlab.export import build_hf_model, check_exportable, export_run, hf_tokenizer
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
    model = _randomised(tie_weights=tie, bias=bias, activation=act, variant=variant, ff_mult=ff)
    hf = build_hf_model(model, bos=0)
    assert type(hf).__name__ == ("GPT2LMHeadModel" if variant == "prenorm" else "OpenAIGPTLMHeadModel")
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, model.config.vocab_size, (3, model.config.block_size), generator=g)
    with torch.no_grad():
        assert torch.allclose(hf(x).logits, model(x)[0], atol=1e-5, rtol=0)
    assert (hf.lm_head.weight.data_ptr() == hf.get_input_embeddings().weight.data_ptr()) == tie


@pytest.mark.parametrize("field,kw", [
    ("model.variant plain", dict(variant="plain")), ("model.variant rezero", dict(variant="rezero")),
    ("model.variant deepnorm", dict(variant="deepnorm")), ("model.norm rmsnorm", dict(norm="rmsnorm")),
    ("model.norm none", dict(norm="none")), ("model.activation gelu", dict(variant="postnorm")),
    ("model.ff_mult 2", dict(variant="postnorm", activation="relu", ff_mult=2))])
def test_unmappable_models_are_refused_naming_the_field(field, kw):
    with pytest.raises(DepthlabError) as e:
        check_exportable(tiny_gpt(**kw).config)
    assert field in str(e.value) and "\n" not in str(e.value)


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
    return train(tiny_config(d / "run", p, model=dict(block_size=128, tie_weights=False, bias=True),
                             train=dict(max_iters=20)), **QUIET)


HF_SCRIPT = r"""
import sys, json, importlib.abc
class NoDepthlab(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "depthlab":
            raise ImportError("depthlab must not be needed")
sys.meta_path.insert(0, NoDepthlab())
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
d, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = AutoModelForCausalLM.from_pretrained(d, local_files_only=True, trust_remote_code=False).eval()
tok = AutoTokenizer.from_pretrained(d, local_files_only=True, trust_remote_code=False)
ids = tok(prompt, return_tensors="pt").input_ids
out = m.generate(ids, max_new_tokens=n, do_sample=False)
gen = pipeline("text-generation", model=m, tokenizer=tok)(prompt, max_new_tokens=10, do_sample=False)
x = torch.tensor([[1, 2, 3, 4]])
print(json.dumps({"greedy": tok.decode(out[0], skip_special_tokens=True), "pipeline": gen[0]["generated_text"],
                  "logits": m(x).logits[0].tolist(), "ids": ids[0].tolist(), "class": type(m).__name__}))
"""


def _hf(export_dir, prompt, n):
    r = subprocess.run([sys.executable, "-c", HF_SCRIPT, str(export_dir), prompt, str(n)], capture_output=True,
                       text=True, timeout=300, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_export_loads_without_depthlab_and_greedy_equals_sample(run, tmp_path, capsys):
    assert main(["export", str(run), str(tmp_path / "hf")]) == 0
    out = _hf(tmp_path / "hf", "First Citizen:", 100)
    want = sample_text(run, "First Citizen:", 100, temperature=0)[0]
    assert out["class"] == "GPT2LMHeadModel"
    assert out["greedy"] == want and len(want) == len("First Citizen:") + 100
    assert out["pipeline"].startswith("First Citizen:") and len(out["pipeline"]) > len("First Citizen:")
    model, tok = load_run(run)
    assert out["ids"] == tok.encode("First Citizen:")
    with torch.no_grad():
        ref = model(torch.tensor([[1, 2, 3, 4]]))[0][0]
    assert torch.allclose(torch.tensor(out["logits"]), ref, atol=1e-5, rtol=0)


def test_export_refuses_to_overwrite_and_leaves_nothing_on_failure(run, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(DepthlabError, match="not empty"):
        export_run(run, out)
    with pytest.raises(DepthlabError, match="not an export directory"):
        export_run(run, out, overwrite=True)
    assert (out / "notes.txt").read_text() == "keep me" and len(list(out.iterdir())) == 1
    assert main(["export", str(run), str(tmp_path / "bad"), "--checkpoint", "worst"]) == 2
    assert not (tmp_path / "bad").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]  # no temporary folder left behind


def test_export_overwrite_replaces_an_earlier_export(run, tmp_path):
    export_run(run, tmp_path / "hf", which="last")
    assert json.loads((tmp_path / "hf" / "depthlab.json").read_text())["checkpoint"] == "last"
    export_run(run, tmp_path / "hf", overwrite=True)
    info = json.loads((tmp_path / "hf" / "depthlab.json").read_text())
    assert info["checkpoint"] == "best" and info["config"]["model"]["bias"] is True
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert cfg["model_type"] == "gpt2" and cfg["activation_function"] == "gelu" and cfg["n_inner"] == 4 * 32
    assert 0 <= cfg["eos_token_id"] < cfg["vocab_size"] and cfg["tie_word_embeddings"] is False
    gen = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert "eos_token_id" not in gen  # a char model has no end-of-text token: generation never stops early

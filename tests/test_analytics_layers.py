"""analytics.layers: logit lens, block ablation and relative update per block (``depthlab layers``)."""

import json

import pytest
import torch
import torch.nn.functional as F

from depthlab.analytics.layers import layer_access, measure_layers
from depthlab.config import NORMS, VARIANTS
from depthlab.errors import DepthlabError

from conftest import TINY_TEXT, run_cli, tiny_gpt

OWN_MODEL = '''
import torch, torch.nn as nn, torch.nn.functional as F

class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), nn.Linear(d, 3 * d)
        self.ln_2, self.mlp = nn.LayerNorm(d), nn.Linear(d, d)
    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.attn(self.ln_1(x)).view(B, T, 3, 2, C // 2).permute(2, 0, 3, 1, 4)
        x = x + F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        return x + self.mlp(self.ln_2(x))

class NanoGPT(nn.Module):
    """nanoGPT's names: transformer.wte/wpe/h/ln_f, lm_head; forward(idx, targets=None) -> (logits, loss)."""
    def __init__(self, vocab_size=11, n_embd=16, block_size=16, n_layer=2):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd), wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList(Block(n_embd) for _ in range(n_layer)), ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
    def forward(self, idx, targets=None):
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(idx.shape[1]))
        for b in self.transformer.h:
            x = b(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss

class Unnamed(NanoGPT):
    """The same maths with a final norm depthlab cannot find (self.norm_out)."""
    def __init__(self, vocab_size=11):
        super().__init__(vocab_size)
        self.norm_out = self.transformer.pop("ln_f")
    def forward(self, idx, targets=None):
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(idx.shape[1]))
        for b in self.transformer.h:
            x = b(x)
        return self.lm_head(self.norm_out(x))
'''

#: The candidates a refusal offers for Unnamed: its own modules, then those at numbered paths (its blocks'), one
#: entry per pattern, first .. last, each a name --norm / --head takes.
NORMS_H = "transformer.h.0.ln_1 .. transformer.h.1.ln_1, transformer.h.0.ln_2 .. transformer.h.1.ln_2"
HEADS_H = "lm_head"


def _batches(V=11, T=8, n=2, B=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)) for _ in range(n)]


def _own(tmp_path, name):
    from depthlab.usermodel import build_model, parse_source

    p = tmp_path / "own.py"
    p.write_text(OWN_MODEL)
    torch.manual_seed(0)
    return build_model(parse_source(f"{p}:{name}"))


@pytest.mark.parametrize("variant", VARIANTS)
def test_lens_after_the_last_block_is_the_models_own_val_loss(variant):
    model = tiny_gpt(seed=1, variant=variant)
    batches = _batches()
    res = measure_layers(model, batches)
    with torch.no_grad():  # the model's own forward; the batches are of equal size
        own = sum(float(model(x, y)[1]) for x, y in batches) / len(batches)
    assert res["val_loss"] == pytest.approx(own, abs=1e-5)
    assert res["blocks"][-1]["lens_loss"] == pytest.approx(res["val_loss"], abs=1e-5)
    assert [b["block"] for b in res["blocks"]] == [0, 1] and res["n_layer"] == 2


@pytest.mark.parametrize("norm", NORMS)
def test_the_lens_identity_holds_for_every_norm(norm):
    model = tiny_gpt(seed=5, norm=norm)
    batches = _batches(seed=6)
    res = measure_layers(model, batches)
    with torch.no_grad():
        own = sum(float(model(x, y)[1]) for x, y in batches) / len(batches)
    assert res["blocks"][-1]["lens_loss"] == pytest.approx(own, abs=1e-5)


def test_embedding_lens_is_the_head_on_the_embeddings_and_a_zeroed_block_costs_nothing():
    model = tiny_gpt(seed=2, variant="prenorm", bias=True, position="learned")  # the lens below adds wpe
    blk = model.transformer.h[0]
    with torch.no_grad():  # block 0's output projections zeroed: pre-LN's block 0 is then the identity
        for lin in (blk.attn.c_proj, blk.mlp.c_proj):
            lin.weight.zero_()
            lin.bias.zero_()
    batches = _batches(seed=3)
    res = measure_layers(model, batches)
    b0, b1 = res["blocks"]
    assert b0["ablation_delta"] == 0.0 and b0["relative_update"] == 0.0
    assert abs(b1["ablation_delta"]) > 1e-4 and b1["relative_update"] > 0  # the other block does change the stream
    assert b0["lens_loss"] == pytest.approx(res["embedding_lens_loss"], abs=1e-6)  # identity: same stream
    t = model.transformer
    with torch.no_grad():
        emb = sum(float(F.cross_entropy(model.lm_head(t.ln_f(t.wte(x) + t.wpe(torch.arange(x.shape[1])))).flatten(0, 1),
                                        y.flatten())) for x, y in batches) / len(batches)
    assert res["embedding_lens_loss"] == pytest.approx(emb, abs=1e-5)
    assert res["effective_depth"] == (1 if b1["ablation_delta"] >= 0.01 else 0)


def test_the_plain_variant_says_what_its_lens_reads():
    res = measure_layers(tiny_gpt(variant="plain"), _batches())
    assert "no stream passes around the blocks" in res["lens"] and "lm_head alone" in res["lens"]
    assert "transformer.ln_f + lm_head (the logit lens)" in measure_layers(tiny_gpt(), _batches())["lens"]


def test_an_own_model_with_gpt2_names_works_and_one_without_a_final_norm_is_refused(tmp_path):
    model = _own(tmp_path, "NanoGPT")
    assert layer_access(model).names == ("transformer.h", "transformer.ln_f", "lm_head")
    batches = _batches(T=16)
    res = measure_layers(model, batches)
    with torch.no_grad():
        own = sum(float(model(x, y)[1]) for x, y in batches) / len(batches)
    assert res["blocks"][-1]["lens_loss"] == pytest.approx(own, abs=1e-5) == pytest.approx(res["val_loss"], abs=1e-5)
    with pytest.raises(DepthlabError) as e:
        measure_layers(_own(tmp_path, "Unnamed"), batches)
    msg = str(e.value)
    assert msg.startswith("layers: the model (Unnamed) lacks a final norm (transformer.ln_f or ln_f")
    assert "lm_head" in msg and "`depthlab context` works on any model" in msg and "\n" not in msg


def test_cli_layers_json_keys_and_the_text_table(capsys, report_run):
    rd = report_run  # a tiny real run (n_layer 2, eval_iters 2 x batch 4 windows of 16; read only here)
    rc, out, _ = run_cli(capsys, "layers", str(rd), "--json")
    res = json.loads(out)
    assert rc == 0 and {"val_loss", "embedding_lens_loss", "blocks", "effective_depth"} <= set(res)
    assert [sorted(b) for b in res["blocks"]] == [["ablation_delta", "block", "lens_loss", "relative_update"]] * 2
    assert res["blocks"][-1]["lens_loss"] == pytest.approx(res["val_loss"], abs=1e-5)
    assert res["windows"] == 2 * 4 and res["tokens"] == 8 * 16  # eval_iters 2 x batch 4 windows of 16
    evals = [json.loads(r) for r in (rd / "metrics.jsonl").read_text().splitlines() if '"val_loss"' in r]
    best = min(evals, key=lambda r: r["val_loss"])
    assert res["val_loss"] == pytest.approx(best["val_loss"], abs=1e-5)  # all the run's eval windows, float32 run
    rc, out, _ = run_cli(capsys, "layers", str(rd))
    assert rc == 0 and f"effective depth: {res['effective_depth']} of 2 blocks cost >= 0.01 nats when removed" in out
    assert "all the run's 2 fixed val evaluation batches: 8 windows x 16 = 128 tokens" in out


def test_cli_layers_refuses_a_run_of_an_own_model_without_the_names(tmp_path, capsys):
    from depthlab.cli import main

    text = tmp_path / "t.txt"
    text.write_text(TINY_TEXT)
    (tmp_path / "own.py").write_text(OWN_MODEL)
    args = ["train", "--data.path", str(text), "--model.source", f"{tmp_path / 'own.py'}:Unnamed", "--model.block_size",
            "16", "--train.max_iters", "2", "--train.eval_interval", "2", "--train.eval_iters", "1",
            "--train.batch_size", "2", "--train.tensorboard", "false", "--train.out_dir", str(tmp_path / "r")]
    assert main(args) == 0
    capsys.readouterr()
    rc, out, err = run_cli(capsys, "layers", str(tmp_path / "r"))
    assert rc == 2 and err.startswith("depthlab: error: layers: the model (Unnamed) lacks a final norm")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    # the refusal named only --blocks, and no option named a final norm elsewhere (self.norm_out, say)
    assert "named with --blocks, --norm and --head (e.g. --blocks encoder.layers --norm encoder.norm); " \
           f"its norms: norm_out, {NORMS_H}; `depthlab context`" in err
    rc, out, err = run_cli(capsys, "layers", str(tmp_path / "r"), "--norm", "norm_out", "--json")
    res = json.loads(out)
    assert rc == 0 and res["n_layer"] == 2 and "norm_out" in res["lens"]
    assert res["blocks"][-1]["lens_loss"] == pytest.approx(res["val_loss"], abs=1e-5)  # norm_out + head: its logits
    for flag, bad, what in (("--norm", "nope", f"the model has no submodule 'nope'; its norms: norm_out, {NORMS_H}"),
                            ("--norm", "norm_out.weight", "its 'norm_out.weight' is a Parameter, not a module; "
                                                          f"its norms: norm_out, {NORMS_H}"),
                            ("--head", "lm_head.x", f"the model has no submodule 'lm_head.x'; its heads: {HEADS_H}")):
        rc, out, err = run_cli(capsys, "layers", str(tmp_path / "r"), "--norm", "norm_out", flag, bad)
        assert (rc, out, err) == (2, "", f"depthlab: error: {flag} {bad}: {what}\n")
    rc, out, err = run_cli(capsys, "context", str(tmp_path / "r"), "--json")  # context needs only the logits
    assert rc == 0 and len(json.loads(out)["loss_by_position"]) == 16


ENCODER_MODEL = OWN_MODEL + '''
class Encoder(nn.Module):
    def __init__(self, d, n_layer):
        super().__init__()
        self.layers = nn.ModuleList(Block(d) for _ in range(n_layer))

class EncoderGPT(nn.Module):
    """Blocks under encoder.layers, and a longer list of 3 taps the search would take for the blocks."""
    def __init__(self, vocab_size=11, n_embd=16, block_size=16):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.encoder = Encoder(n_embd, 2)
        self.taps = nn.ModuleList(nn.Linear(n_embd, 1) for _ in range(3))
        self.norm, self.lm_head = nn.LayerNorm(n_embd), nn.Linear(n_embd, vocab_size, bias=False)
    def forward(self, idx, targets=None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.encoder.layers:
            x = b(x)
        return self.lm_head(self.norm(x))
'''


def test_cli_layers_blocks_names_a_models_list_of_blocks_and_refuses_as_check_does(tmp_path, capsys):
    """A new user's pass: `depthlab layers` found only a model's longest list of one class, so blocks under
    encoder.layers beside a longer list (3 taps) could not be measured; --blocks names them, as check's does,
    and a name that is no list of blocks is refused by the same code, with the same line, exit 2."""
    from depthlab.analytics.check import find_blocks
    from depthlab.cli import main

    text = tmp_path / "t.txt"
    text.write_text(TINY_TEXT)
    (tmp_path / "own.py").write_text(ENCODER_MODEL)
    args = ["train", "--data.path", str(text), "--model.source", f"{tmp_path / 'own.py'}:EncoderGPT",
            "--model.block_size", "16", "--train.max_iters", "2", "--train.eval_interval", "2", "--train.eval_iters",
            "1", "--train.batch_size", "2", "--train.tensorboard", "false", "--train.out_dir", str(tmp_path / "r")]
    assert main(args) == 0
    capsys.readouterr()
    rc, out, err = run_cli(capsys, "layers", str(tmp_path / "r"), "--blocks", "encoder.layers", "--json")
    res = json.loads(out)
    assert rc == 0 and res["n_layer"] == 2 and [b["block"] for b in res["blocks"]] == [0, 1]
    assert res["blocks"][-1]["lens_loss"] == pytest.approx(res["val_loss"], abs=1e-5)  # norm + head after the last
    rc, _, err = run_cli(capsys, "layers", str(tmp_path / "r"))  # found: the 3 taps, never called in order
    assert rc == 2 and err.startswith("depthlab: error: layers: the model's forward did not call every block of "
                                      "taps with the stream") and "name that with --blocks" in err
    from depthlab.usermodel import build_model, parse_source

    model = build_model(parse_source(f"{tmp_path / 'own.py'}:EncoderGPT"))
    for bad in ("encoder", "encoder.layers.0", "nope"):
        with pytest.raises(DepthlabError) as e:
            find_blocks(model, bad)
        rc, out, err = run_cli(capsys, "layers", str(tmp_path / "r"), "--blocks", bad)
        assert (rc, out, err) == (2, "", f"depthlab: error: {e.value}\n")


def test_a_norm_or_head_that_is_not_one_is_refused_in_one_line_naming_the_options(tmp_path):
    """A new user's pass: --norm lm_head --head lm_head (a wrong module named) ended in 'unexpected RuntimeError: mat1
    and mat2 shapes ... please report it'; a block named as the head gave (B, T, C), not logits."""
    model, batches = _own(tmp_path, "Unnamed"), _batches(T=16)
    opts = "; --norm and --head name the final norm and the head the model's forward applies to the stream after " \
           f"its last block; its norms: norm_out, {NORMS_H}; its heads: {HEADS_H}"
    with pytest.raises(DepthlabError) as e:
        measure_layers(model, batches, norm_attr="lm_head", head_attr="lm_head")
    assert str(e.value) == ("layers: the lens lm_head + lm_head fails on the stream (4, 16, 16) after a block: "
                            "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x11 and 16x11)" + opts)
    with pytest.raises(DepthlabError) as e:
        measure_layers(model, batches, norm_attr="norm_out", head_attr="transformer.h.1")
    assert str(e.value) == ("layers: the lens norm_out + transformer.h.1 gives (4, 16, 16) from the stream (4, 16, 16),"
                            " not logits (4, 16, 11)" + opts)
    res = measure_layers(model, batches, norm_attr="norm_out", head_attr="lm_head")  # the right ones still work
    with pytest.raises(DepthlabError) as e:  # --head= : the model itself was taken for the head
        layer_access(model, None, "norm_out", "")
    assert str(e.value) == f"--head '': an empty name; give the dotted name of the model's head (its heads: {HEADS_H})"
    assert res["blocks"][-1]["lens_loss"] == pytest.approx(res["val_loss"], abs=1e-5)


TIED_MODEL = '''
import torch, torch.nn as nn

class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln, self.mlp = nn.LayerNorm(d), nn.Linear(d, d)
    def forward(self, x):
        return x + self.mlp(self.ln(x))

class Tied(nn.Module):
    """No head module: the logits are the stream times the token embedding's weight, transposed."""
    def __init__(self, vocab_size=11, n_embd=16, block_size=16):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd) for _ in range(2))
        self.final = nn.LayerNorm(n_embd)
    def forward(self, idx, targets=None):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.final(x) @ self.tok.weight.T

class SeqOut(Tied):
    """Its final norm and head at numbered paths: out.0, out.1 of a Sequential."""
    def __init__(self, vocab_size=11):
        super().__init__(vocab_size)
        self.out = nn.Sequential(nn.LayerNorm(16), nn.Linear(16, vocab_size))
    def forward(self, idx, targets=None):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.out(x)
'''


def test_a_head_tied_to_the_embedding_is_named_by_it_and_numbered_paths_are_offered(tmp_path):
    """A new user's pass: a model whose logits are ``x @ self.tok.weight.T`` has no head module; --head tok ended in
    'Expected tensor for argument #1 indices ... FloatTensor', --head tok.weight in 'not a module', and the refusals
    offered no head at all; a final norm and head in a Sequential (out.0, out.1) were left out of the lists."""
    from depthlab.usermodel import build_model, parse_source

    (tmp_path / "tied.py").write_text(TIED_MODEL)
    torch.manual_seed(0)
    model, batches = build_model(parse_source(f"{tmp_path / 'tied.py'}:Tied")), _batches(T=16)
    with pytest.raises(DepthlabError) as e:
        layer_access(model, norm_attr="final")
    assert str(e.value).endswith(
        "its heads: tok, pos, blocks.0.mlp .. blocks.1.mlp (an nn.Embedding named as the head reads the stream "
        "through its weight, as a tied head does); `depthlab context` works on any model")
    for head in ("tok", "tok.weight"):
        res = measure_layers(model, batches, norm_attr="final", head_attr=head)
        assert res["blocks"][-1]["lens_loss"] == pytest.approx(res["val_loss"], abs=1e-5)  # the model's own logits
        assert f"{head} read as a tied head: logits = stream @ tok.weight.T" in res["lens"]
    with pytest.raises(DepthlabError) as e:  # the position embedding gives no V logits: refused, not measured
        measure_layers(model, batches, norm_attr="final", head_attr="pos")
    assert "gives (4, 16, 16) from the stream (4, 16, 16), not logits (4, 16, 11)" in str(e.value)
    model = build_model(parse_source(f"{tmp_path / 'tied.py'}:SeqOut"))
    with pytest.raises(DepthlabError) as e:
        layer_access(model)
    assert "its norms: final, blocks.0.ln .. blocks.1.ln, out.0; its heads: tok, pos, blocks.0.mlp .. blocks.1.mlp, " \
           "out.1 (an nn.Embedding" in str(e.value)
    res = measure_layers(model, batches, norm_attr="out.0", head_attr="out.1")  # the names offered, copied
    assert res["blocks"][-1]["lens_loss"] == pytest.approx(res["val_loss"], abs=1e-5)

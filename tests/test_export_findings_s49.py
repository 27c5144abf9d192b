"""--init-from an export that is incomplete or edited (a new user's findings): a missing tokenizer.json was blamed on
data.path; a config.json shape key set to null was accepted silently; an edited hidden_act and a truncated
model.safetensors were refused without a fix; ``export.head_name`` raised a bare StopIteration. And the decision on a
GPT-NeoX config.json with ``rope_parameters`` alone (what transformers 5.x writes): accepted."""

import json
import shutil

import pytest
import torch

from depthlab.checkpoint import clean_state_dict
from depthlab.errors import DepthlabError
from depthlab.export import head_name
from depthlab.init_from import init_weights
from depthlab.sample import load_run

from conftest import TINY_TEXT, assert_clean_error, run_cli, tiny_cli_args, trained_tiny_run

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A char run of depthlab's default model (position rope: a GPT-NeoX export), 2 layers, n_embd 32, 10 steps."""
    return trained_tiny_run(tmp_path_factory, "s49", TINY_TEXT)


@pytest.fixture(scope="module")
def bpe_source(tmp_path_factory):
    """The same, with a 300-token BPE tokenizer (4 steps)."""
    from depthlab.cli import main

    d = tmp_path_factory.mktemp("s49bpe")
    (d / "t.txt").write_text(TINY_TEXT)
    assert main(["train", *tiny_cli_args(d / "t.txt", d / "run", train__max_iters=4, data__tokenizer="bpe",
                                         data__vocab_size=300)]) == 0
    return d / "run"


def _export(capsys, run, out):
    rc, _, err = run_cli(capsys, "export", str(run), str(out))
    assert rc == 0, err
    return out


def _edit(export, **fields):
    """Set (or, for a value ``...``, delete) keys of the export's config.json, as a user's editor would."""
    f = export / "config.json"
    d = json.loads(f.read_text())
    d.update(fields)
    f.write_text(json.dumps({k: v for k, v in d.items() if v is not ...}, indent=2))


def _train(capsys, run, export, out, *more):
    return run_cli(capsys, "train", "--init-from", str(export),
                   *tiny_cli_args(run.parent / "t.txt", out, train__max_iters=2), *more)


# ------------------------------------------------------------------------------------------------ 1: tokenizer.json
@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_init_from_an_export_without_tokenizer_json_says_the_export_is_incomplete(source, bpe_source, tmp_path,
                                                                                   capsys, kind):
    """It said 'its tokenizer (none) differs from this run's (char, 33 symbols) ... use the same data.path and
    data.tokenizer' (which were the same); a BPE run first trained a new tokenizer in its place."""
    run = source if kind == "char" else bpe_source
    export = _export(capsys, run, tmp_path / "hf")
    kept = (export / "tokenizer.json").read_bytes()
    (export / "tokenizer.json").unlink()
    more = ["--data.tokenizer", "bpe"] if kind == "bpe" else []
    rc, _, err = _train(capsys, run, export, tmp_path / "new", *more)
    assert_clean_error(rc, err)
    assert err.strip() == (
        f"depthlab: error: --init-from {export}: {export} has no tokenizer.json, so the export is incomplete (its "
        "weights' token ids mean nothing without the tokenizer they were trained with, and this run's data.path and "
        "data.tokenizer cannot stand in for it): export the run again (depthlab export "
        f"{run.resolve()} {export} --overwrite), or copy tokenizer.json back into {export} from a complete export of "
        "the same run")
    assert not (tmp_path / "new").exists()
    (export / "tokenizer.json").write_bytes(kept)  # the second fix it names
    rc, out, err = _train(capsys, run, export, tmp_path / "new", *more)
    assert rc == 0 and out.startswith(f"init-from: {export / 'model.safetensors'}"), err


# -------------------------------------------------------------------------------------- 2: a null or mistyped key
@pytest.mark.parametrize("edit, has, needs, back", [
    (dict(num_hidden_layers=None), "num_hidden_layers null", "num_hidden_layers to be a whole number above 0",
     '"num_hidden_layers": 2'),
    (dict(hidden_size="32"), 'hidden_size "32"', "hidden_size to be a whole number above 0", '"hidden_size": 32'),
    (dict(num_attention_heads=2.0, max_position_embeddings=...),
     "num_attention_heads 2.0 and max_position_embeddings nothing",
     "num_attention_heads to be a whole number above 0 and max_position_embeddings to be a whole number above 0",
     '"num_attention_heads": 2, "max_position_embeddings": 16'),
    (dict(num_hidden_layers=True), "num_hidden_layers true", "num_hidden_layers to be a whole number above 0",
     '"num_hidden_layers": 2'),
    (dict(intermediate_size=100), "intermediate_size 100",
     "intermediate_size to be a whole multiple of hidden_size 32 (depthlab's model.ff_mult times the width)",
     '"intermediate_size": 128'),
    (dict(tie_word_embeddings="false"), 'tie_word_embeddings "false"', "tie_word_embeddings to be true or false",
     '"tie_word_embeddings": true'),
])
def test_init_from_an_export_with_a_null_or_mistyped_shape_key_names_file_key_value_and_fix(source, tmp_path, capsys,
                                                                                          edit, has, needs, back):
    """``"num_hidden_layers": null`` was accepted (depthlab.json's 2 layers loaded, while transformers builds its
    class default, 44, from the same folder); the edit is refused in one line naming what export wrote, and putting
    that back trains. The user's edited file is left as it is."""
    export = _export(capsys, source, tmp_path / "hf")
    _edit(export, **edit)
    edited = (export / "config.json").read_bytes()
    rc, _, err = _train(capsys, source, export, tmp_path / "new")
    assert_clean_error(rc, err)
    path = export / "config.json"
    assert err.strip() == (
        f"depthlab: error: --init-from {export}: {path} has {has}, but transformers builds this folder's model from "
        f"that file and needs {needs} (edited by hand?): put {back} back into {path} (what depthlab export wrote, as "
        f"its depthlab.json records), or export the run again (depthlab export {source.resolve()} {export} "
        "--overwrite)")
    assert not (tmp_path / "new").exists() and (export / "config.json").read_bytes() == edited
    model, tok = load_run(source)
    with pytest.raises(DepthlabError) as e:  # the library's entry says the same
        init_weights(export, model.config, tok)
    assert str(e.value) == err.strip().removeprefix("depthlab: error: ")
    _edit(export, **json.loads("{" + back + "}"))  # the fix it names
    rc, _, err = _train(capsys, source, export, tmp_path / "new")
    assert rc == 0, err


def test_an_export_without_depthlab_json_and_a_null_key_is_refused_not_blamed_on_the_weights(source, tmp_path,
                                                                                            capsys):
    """Without depthlab.json the null was dropped and depthlab's default 4 layers built: 'checkpoint ... does not fit
    this model: missing transformer.h.2.ln_1.weight, ...'."""
    export = _export(capsys, source, tmp_path / "hf")
    (export / "depthlab.json").unlink()
    _edit(export, num_hidden_layers=None)
    rc, _, err = _train(capsys, source, export, tmp_path / "new")
    assert_clean_error(rc, err)
    assert err.strip() == (
        f"depthlab: error: --init-from {export}: {export / 'config.json'} has num_hidden_layers null, but "
        "transformers builds this folder's model from that file and needs num_hidden_layers to be a whole number "
        f"above 0 (edited by hand?): export the run again (depthlab export RUN {export} --overwrite)")


def test_a_gpt2_n_inner_of_null_is_gpt2s_four_times_the_width_and_no_fault():
    from depthlab.hf_layout import hf_config_faults

    h = {"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 16, "vocab_size": 65,
         "n_inner": None}
    assert hf_config_faults(h) == []
    assert hf_config_faults({**h, "n_inner": 0}) == [("n_inner", "0", "a whole number above 0")]


# ------------------------------------------------------------------------------------------------ 3: the activation
def test_init_from_an_export_whose_hidden_act_was_edited_names_the_value_export_wrote(source, tmp_path, capsys):
    """It said "its activation 'relu' is not model.activation gelu (depthlab computes gelu exactly, or relu)": no
    fix, and it read as if the run's setting were wrong."""
    export = _export(capsys, source, tmp_path / "hf")
    _edit(export, hidden_act="relu")
    rc, _, err = _train(capsys, source, export, tmp_path / "new")
    assert_clean_error(rc, err)
    path = export / "config.json"
    assert err.strip() == (
        f'depthlab: error: --init-from {export}: {path} has hidden_act "relu", but depthlab export wrote '
        '"hidden_act": "gelu" there (depthlab.json: model.activation gelu, the activation its weights were trained '
        "with), so transformers would build another model from this folder (edited by hand?): put "
        f'"hidden_act": "gelu" back into {path}, or export the run again (depthlab export {source.resolve()} '
        f"{export} --overwrite)")
    _edit(export, hidden_act="gelu")  # the fix it names
    assert _train(capsys, source, export, tmp_path / "new")[0] == 0


def test_init_from_an_export_of_an_activation_depthlab_lacks_or_with_another_flag_says_what_to_do(source, tmp_path,
                                                                                                 capsys):
    export = _export(capsys, source, tmp_path / "hf")
    rc, _, err = _train(capsys, source, export, tmp_path / "new", "--model.activation", "relu")
    assert_clean_error(rc, err)
    assert err.strip().endswith(f'{export / "config.json"} has hidden_act "gelu", the activation its weights were '
                                "trained with, but this run asks model.activation relu: set --model.activation gelu")
    (export / "depthlab.json").unlink()
    _edit(export, hidden_act="silu")
    rc, _, err = _train(capsys, source, export, tmp_path / "new")
    assert_clean_error(rc, err)
    assert err.strip().endswith(
        f'{export / "config.json"} has hidden_act "silu", an activation depthlab does not compute exactly (it '
        "computes gelu or relu; gelu is the exact erf form), so these weights would compute another function: start "
        "from a depthlab export of a run (depthlab export RUN FOLDER)")
    _edit(export, hidden_act=...)  # GPTNeoXConfig's default, the exact gelu: depthlab's
    assert _train(capsys, source, export, tmp_path / "new")[0] == 0


# --------------------------------------------------------------------------------------- 4: a damaged weights file
def test_init_from_an_export_with_a_truncated_or_missing_model_safetensors_names_the_fix(source, tmp_path, capsys):
    """It said 'cannot read model.safetensors (SafetensorError)', no fix."""
    export = _export(capsys, source, tmp_path / "hf")
    whole = (export / "model.safetensors").read_bytes()
    (export / "model.safetensors").write_bytes(whole[:5000])
    rc, _, err = _train(capsys, source, export, tmp_path / "new")
    assert_clean_error(rc, err)
    path = export / "model.safetensors"
    assert err.strip() == (
        f"depthlab: error: --init-from {export}: {path} is damaged or truncated, not a whole safetensors file "
        "(SafetensorError: Error while deserializing: incomplete metadata, file not fully covered; 5,000 bytes); "
        f"export the run again (depthlab export {source.resolve()} {export} --overwrite), or copy an intact "
        f"model.safetensors into {export} (one cut short in a copy or download: copy it again)")
    path.unlink()
    rc, _, err = _train(capsys, source, export, tmp_path / "new")
    assert_clean_error(rc, err, f"{export} has no model.safetensors, so the export is incomplete (it holds the "
                                f"weights): export the run again (depthlab export {source.resolve()} {export} "
                                "--overwrite), or copy model.safetensors back")
    assert not (tmp_path / "new").exists()
    rc, _, err = run_cli(capsys, "export", str(source), str(export), "--overwrite")  # the fix it names
    assert rc == 0, err
    assert _train(capsys, source, export, tmp_path / "new")[0] == 0


def test_init_from_a_run_whose_best_is_truncated_names_the_fix(source, tmp_path, capsys):
    """The run's own best.safetensors cut short: refused naming the file as truncated and its intact twin."""
    run = tmp_path / "src"
    shutil.copytree(source, run)
    best = run / "checkpoints" / "best.safetensors"
    best.write_bytes(best.read_bytes()[:5000])
    rc, _, err = _train(capsys, source, run, tmp_path / "new")
    twin = run / "checkpoints" / "step-000010.safetensors"
    assert_clean_error(rc, err, f"--init-from {run}: checkpoint {best} is corrupt or truncated (SafetensorError",
                       f"copy it over the broken file (cp {twin} {best}) and run the command again")


# ------------------------------------------------------------------------------------------------ 5: head_name
class _Detached(torch.nn.Module):
    """A model whose get_output_embeddings() is not one of its modules (or None, as a class without a head)."""

    def __init__(self, none: bool):
        super().__init__()
        self.wte = torch.nn.Embedding(4, 2)
        # set past nn.Module.__setattr__, so not registered: named_modules() never yields it
        object.__setattr__(self, "_head", None if none else torch.nn.Linear(2, 4))

    def get_output_embeddings(self):
        return self._head


@pytest.mark.parametrize("none, got", [(False, "a Linear"), (True, "None")])
def test_head_name_of_a_head_outside_the_modules_is_a_value_error_naming_it(none, got):
    """It raised a bare StopIteration (inside a generator: RuntimeError in some callers), naming nothing."""
    with pytest.raises(ValueError) as e:
        head_name(_Detached(none))
    assert str(e.value) == (f"_Detached.get_output_embeddings() returned {got}, which is not one of its named "
                            "modules, so its output head has no state_dict name to load depthlab's lm_head.weight "
                            "into")


# ------------------------------------------------------------------------- 6: rope_parameters alone (transformers 5)
def test_a_gpt_neox_config_as_transformers_5_saves_it_is_taken_and_depthlabs_export_writes_both(source, tmp_path,
                                                                                             capsys):
    """Decision: transformers 5.x's save_pretrained writes rope_parameters alone (no rotary_pct) for full rotary, and
    builds full rotary from it; such a folder loads. depthlab's export writes rotary_pct too (transformers 4.x reads
    only that; without it 4.x rotates a quarter of each head)."""
    transformers = pytest.importorskip("transformers")
    export = _export(capsys, source, tmp_path / "hf")
    written = json.loads((export / "config.json").read_text())
    assert (written["rotary_pct"], written["rotary_emb_base"]) == (1.0, 10000.0)
    assert written["rope_parameters"]["partial_rotary_factor"] == 1.0
    _edit(export, rotary_pct=..., rotary_emb_base=..., partial_rotary_factor=..., rope_theta=...)
    if int(transformers.__version__.split(".")[0]) >= 5:  # what 5.x itself writes: rope_parameters only
        saved = tmp_path / "saved"
        transformers.GPTNeoXConfig(rotary_pct=1.0).save_pretrained(str(saved))
        rope = {k for k in json.loads((saved / "config.json").read_text()) if "rot" in k or "rope" in k}
        assert rope == {"rope_parameters"}
    model, tok = load_run(source)
    sd, record = init_weights(export, model.config, tok)
    want = clean_state_dict(model.state_dict())
    assert record["kind"] == "export" and set(want) - set(sd) == {"lm_head.weight"}  # tied: the embedding's
    assert all(torch.equal(sd[k], want[k]) for k in sd) and len(sd) == 14  # 2 blocks of 6, wte, ln_f

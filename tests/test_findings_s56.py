"""Findings of the 2026-12-06 session (fourth)."""

import pytest

from conftest import SHAKESPEARE_BASELINES as BASE
from conftest import QUIET, eval_records, grad_record, tiny_config


def _lr_grad(step, ratio, lr):
    rec = grad_record(step, [0.5, 1.0], [ratio, ratio])
    rec["lr"] = lr
    return rec


def test_lr_too_high_judges_the_ratios_at_the_peak_rate_not_the_end_of_the_cosine():
    # AdamW at learning_rate 0.1: 0.048 and 0.04 at the peak, then the cosine's end (1e-4 at 1.1x min_lr) pulled the
    # median of all five under the 3e-2 line and lr_too_high said nothing
    from depthlab.analytics.diagnose import Evidence, diagnose

    records = eval_records([4.2, 3.0, 2.8, 2.7, 2.6, 2.6]) + [
        _lr_grad(100, 0.048, 0.1), _lr_grad(150, 0.04, 0.09), _lr_grad(200, 0.021, 0.06),
        _lr_grad(250, 1e-4, 1.1e-3), _lr_grad(300, 5e-5, 1e-3)]
    cfg = {"model": {"vocab_size": 65}, "train": {"learning_rate": 0.1, "warmup_iters": 50, "optimizer": "adamw"}}
    d = diagnose(Evidence(records, cfg, BASE))
    high = [f for f in d.findings if f.rule == "lr_too_high"]
    assert high and "median update/weight ratio 4.00e-02 per step (steps 100-200, 3 records)" in high[0].evidence, d
    # records without their rate (older runs) are all judged, as before
    for r in records:
        r.pop("lr", None)
    assert not [f for f in diagnose(Evidence(records, cfg, BASE)).findings if f.rule == "lr_too_high"]


def test_the_lr_rules_not_judged_line_counts_the_records_left_out_for_their_rate():
    from depthlab.analytics.diagnose import Evidence, diagnose

    records = [_lr_grad(100, 1e-3, 0.1), _lr_grad(150, 1e-3, 0.09), _lr_grad(200, 1e-4, 0.01)]
    lines = diagnose(Evidence(records, {"train": {"warmup_iters": 50}}, BASE)).without_data()
    assert ("lr_too_high, lr_too_low (they need 3 gradient records after the warmup at 0.5x the peak learning rate "
            "or more (1 later in the decay are not judged), the run has 2;") in lines[-1] or any(
        "(1 later in the decay are not judged), the run has 2;" in x for x in lines), lines


def test_gradient_records_carry_the_learning_rate_of_their_step(tmp_path, tiny_text_file):
    from depthlab import train  # with the default observers (depthlab.trainer.train has none)
    from depthlab.rundir import read_metrics

    cfg = tiny_config(tmp_path / "run", tiny_text_file, train=dict(grad_log_interval=5, log_interval=5, max_iters=10))
    rd = train(cfg, **QUIET)
    recs = read_metrics(rd)
    lr_train = {r["step"]: r["lr"] for r in recs if r.get("kind") == "train"}
    grads = [r for r in recs if r.get("kind") == "grad"]
    assert [r["step"] for r in grads] == [5, 10]
    for r in grads:
        assert r["lr"] == pytest.approx(lr_train[r["step"]]), (r["step"], r["lr"], lr_train)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from conftest import TINY_TEXT, trained_tiny_run

    return trained_tiny_run(tmp_path_factory, "s56", TINY_TEXT, steps=4)


@pytest.mark.parametrize("kw, words", [
    (dict(which="nope"),
     "which must be 'best' (the lowest val loss) or 'last' (the newest step checkpoint), got 'nope'"),
    (dict(device="tpu"), "device must be auto, cpu, cuda, cuda:N or mps; got 'tpu'"),
    (dict(device="cuda:3"), "device cuda:3 requested but CUDA is not available on this machine; use device='cpu'"),
])
def test_the_python_api_names_its_own_arguments(run, kw, words):
    # load_run(which='nope') said "--checkpoint must be best or last", device='tpu' "--device tpu ... use --device cpu"
    import torch

    from depthlab import DepthlabError, load_run, sample_text

    if "cuda" in kw.get("device", "") and torch.cuda.is_available():
        pytest.skip("CUDA is here")
    for call in (load_run, sample_text):
        with pytest.raises(DepthlabError) as e:
            call(run, **kw)
        assert str(e.value) == words, (call, str(e.value))


def test_load_run_takes_device_auto(run):
    from depthlab import load_run

    model, tok = load_run(run, device="auto")
    assert tok.vocab_size > 1 and next(model.parameters()).device.type in ("cpu", "cuda", "mps")


def test_train_from_python_names_the_config_that_resumes_and_the_overwrite_argument(run):
    # it said "use --resume RUN to continue it, --overwrite to replace it, or another --train.out_dir"
    from depthlab import DepthlabError, RunConfig, TrainConfig, train

    with pytest.raises(DepthlabError) as e:
        train(RunConfig(train=TrainConfig(out_dir=str(run), max_iters=5)))
    assert str(e.value) == (f"train.out_dir {run} already exists; use depthlab.train(RunConfig.from_run({str(run)!r})) "
                            "to continue it, overwrite=True to replace it, or another train.out_dir"), str(e.value)


def test_api_words_keep_a_command_line_to_run_as_it_is():
    from depthlab.errors import api_words

    msg = "changed (run r): depthlab train -c r/config.json --model.n_layer 3 --train.out_dir NEW; or --checkpoint last"
    assert api_words(msg) == ("changed (run r): depthlab train -c r/config.json --model.n_layer 3 --train.out_dir NEW; "
                              "or which='last'")

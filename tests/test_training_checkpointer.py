"""training.checkpointer: a new run from another run's weights (``init_from``)."""


import pytest
import torch

from depthlab import train
from depthlab.sample import load_run
from depthlab.trainer import Trainer

from conftest import QUIET, tiny_config


def test_init_from_starts_new_run_with_old_weights(tmp_path, tiny_text_file):
    old = train(tiny_config(tmp_path / "old", tiny_text_file), **QUIET)
    t = Trainer(tiny_config(tmp_path / "new", tiny_text_file), init_from=str(old), **QUIET)
    m, _ = load_run(old)
    assert torch.equal(t.raw_model.lm_head.weight, m.lm_head.weight) and t.step == 0


# ------------------------------------------------------------------ background writes (the default on CUDA)
def _files(run):
    """Each checkpoint file's tensors (safetensors) or the manifest without its sha256s (they cover out_dir)."""
    import json

    from safetensors.torch import load_file

    ck, out = run / "checkpoints", {}
    for p in sorted(ck.iterdir()):
        if p.suffix == ".safetensors":
            out[p.name] = load_file(p)
        elif p.name == "manifest.json":
            m = json.loads(p.read_text())
            out[p.name] = ([(c["name"], c["step"], sorted(c["files"])) for c in m["checkpoints"]],
                           m["best"]["step"], m["best"]["val_loss"])
    return out


@pytest.mark.slow  # several seconds on 2 cores: the fast tier stays under 3 min
def test_background_writes_leave_the_same_files_as_writing_at_once(tmp_path, tiny_text_file, monkeypatch):
    """The same files with the same tensors, the same manifest entries and best (the sha256s vouch for them:
    a run that resumes or samples verifies them), even when each write takes longer than the steps after it."""
    import json
    import time

    from depthlab import checkpoint as ckpt

    real = ckpt.write_checkpoint

    def slow(*a):
        time.sleep(0.3)
        real(*a)

    monkeypatch.setattr(ckpt, "write_checkpoint", slow)
    runs = {}
    for name, background in (("now", False), ("thread", True)):
        t = Trainer(tiny_config(tmp_path / name, tiny_text_file, train=dict(max_iters=30, eval_interval=10)), **QUIET)
        t.checkpointer.background = background
        runs[name] = t.fit()
        assert t.checkpointer.writes.thread is None  # fit waited for the last write
    now, thread = _files(runs["now"]), _files(runs["thread"])
    assert set(now) == set(thread) == {"best.safetensors", "manifest.json", "step-000020.safetensors",
                                       "step-000030.safetensors"}
    assert now["manifest.json"] == thread["manifest.json"]
    for name in ("best.safetensors", "step-000020.safetensors", "step-000030.safetensors"):
        assert now[name].keys() == thread[name].keys()
        assert all(torch.equal(now[name][k], thread[name][k]) for k in now[name])
    assert ckpt.verified_best(runs["thread"]).name == "best.safetensors"
    t.save()  # outside the loop (the API): on disk when it returns, even with background writes allowed
    assert t.checkpointer.writes.thread is None and json.loads((runs["thread"] / "checkpoints" / "manifest.json")
                                                         .read_text())["checkpoints"][-1]["name"] == "step-000030"


def test_a_failed_background_write_stops_the_run_at_the_next_save(tmp_path, tiny_text_file, monkeypatch):
    """The write of step 10 fails in its thread: the run trains on and stops with that error at step 20's save."""
    import pytest

    from depthlab import checkpoint as ckpt

    real = ckpt.write_checkpoint

    def failing(run_dir, files, *a):
        if files[0] == 10:
            raise OSError(28, "No space left on device")
        real(run_dir, files, *a)

    monkeypatch.setattr(ckpt, "write_checkpoint", failing)
    t = Trainer(tiny_config(tmp_path / "r", tiny_text_file, train=dict(max_iters=40, eval_interval=10)), **QUIET)
    t.checkpointer.background = True
    with pytest.raises(OSError, match="No space left"):
        t.fit()
    assert t.step == 20 and t.checkpointer.writes.thread is None
    manifest = (tmp_path / "r" / "checkpoints" / "manifest.json").read_text()
    assert '"step": 0' in manifest and "step-000010" not in manifest and "step-000020" not in manifest


def test_background_writes_raise_a_failed_write_once_and_settle_logs_it(tmp_path, monkeypatch):
    """The writer split out of Checkpointer (training.ckwriter): a failed write is raised by the next wait, once;
    settle says it in one warning line instead of raising; a good write leaves nothing in flight."""
    import pytest

    from depthlab import checkpoint as ckpt
    from depthlab.training.ckwriter import BackgroundWrites

    done = []
    monkeypatch.setattr(ckpt, "write_checkpoint", lambda *a: done.append(a) if a[0] else (_ for _ in ()).throw(
        OSError(28, "No space left on device")))
    w = BackgroundWrites()
    w.start(1, "x")
    w.wait()
    assert done == [(1, "x")] and w.thread is None
    w.start(0)
    with pytest.raises(OSError, match="No space left"):
        w.wait()
    w.wait()  # raised once: nothing left to raise
    lines: list = []
    w.start(0)
    w.settle(lines.append)
    assert lines == ["warning: the last checkpoint write failed too (OSError: [Errno 28] No space left on device)"]

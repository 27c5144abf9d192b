"""analytics.samples: samples during training (issue 13)."""


from depthlab import train
from depthlab.rundir import RunDir

from conftest import QUIET, tiny_config


def test_samples_every_interval_are_recorded_and_leave_the_trajectory_alone(tmp_path, tiny_text_file):
    on = train(tiny_config(tmp_path / "on", tiny_text_file, train=dict(sample_interval=5, sample_tokens=40)),
               **QUIET)
    off = train(tiny_config(tmp_path / "off", tiny_text_file), **QUIET)
    samples = RunDir(on).metrics("sample")
    assert [s["step"] for s in samples] == [5, 10, 15, 20]
    assert all(len(s["text"]) == 41 and s["text"][0] == "\n" for s in samples)  # prompt + 40 characters
    assert len({s["text"] for s in samples}) > 1  # same seed: they differ only because the weights did
    def curve(run):
        return [(r["step"], r["val_loss"]) for r in RunDir(run).evals]
    assert curve(on) == curve(off)

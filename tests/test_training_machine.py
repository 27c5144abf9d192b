"""busy_cores: how many cores *other* processes keep busy (training/machine.py)."""

import pytest

from depthlab.training import machine


@pytest.mark.parametrize("own_ticks, want", [(30, 0), (15, 1), (0, 2)])
def test_busy_cores_does_not_count_this_process_s_own_threads(monkeypatch, own_ticks, want):
    """With a very large OMP_NUM_THREADS the auto line said "2 of 2 cores busy": /proc/stat counted the run's
    own OpenMP threads spinning while busy_cores slept. A fake /proc/stat: 2 cores, 30 ticks of which none
    idle; this process used ``own_ticks`` of them."""
    stats, own = iter([(1000, 400), (1030, 400)]), iter([500.0, 500.0 + own_ticks])
    monkeypatch.setattr(machine, "_proc_stat", lambda: next(stats))
    monkeypatch.setattr(machine, "_own_cpu_ticks", lambda: next(own))
    monkeypatch.setattr(machine.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(machine.time, "sleep", lambda s: None)
    assert machine.busy_cores() == want


def test_busy_cores_own_time_is_read_from_the_process(monkeypatch):
    import time

    # 0.2 s of CPU, at least 0.1 s read: tick accounting samples (0.05 s once read fewer than 4 ticks of 10 ms)
    t0 = machine._own_cpu_ticks()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    assert machine._own_cpu_ticks() - t0 >= 0.1 * __import__("os").sysconf("SC_CLK_TCK")

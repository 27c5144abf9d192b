"""Measured ``auto`` (depthlab.training.autotune): the chooser fed fake timings picks the faster setting,
caches it, keeps explicit values, and asks for a restart only when it may."""

import json

import pytest
import torch

from depthlab.config import TrainConfig
from depthlab.training import autotune as at
from depthlab.training.autotune import Restart, Setting, Tuning, candidates, fastest

from conftest import tiny_config


@pytest.fixture(autouse=True)
def _no_omp_num_threads(monkeypatch):
    """The chooser's cases assume a thread count left to measure: OMP_NUM_THREADS would fix it."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def S(threads=1, dtype="float32", attention="sdpa", omp="passive"):
    return Setting(threads, dtype, attention, omp)


def test_candidates_cover_every_auto_field_and_keep_explicit_ones():
    auto = TrainConfig(dtype="auto", attention="auto", threads=0)
    c = candidates(auto, cores=2, bf16_native=False, policy="passive", other_policy=True)
    # one thread runs no OpenMP team, so its waiting policy is not timed twice; bf16 is emulated here
    assert c == [S(1), S(1, attention="explicit"), S(2), S(2, attention="explicit"),
                 S(2, omp="active"), S(2, attention="explicit", omp="active")]
    c = candidates(auto, cores=2, bf16_native=True, policy="active", other_policy=False)
    assert {s.dtype for s in c} == {"float32", "bfloat16"} and {s.omp_wait for s in c} == {"active"}
    fixed = TrainConfig(dtype="bfloat16", attention="sdpa", threads=2)
    assert candidates(fixed, cores=2, bf16_native=False, policy="passive", other_policy=False) == [
        S(2, "bfloat16")]


def test_a_source_models_attention_is_its_own_and_not_timed():
    """model.source: train.attention does not apply, so sdpa/explicit are neither timed nor reported."""
    auto = TrainConfig(dtype="auto", attention="auto", threads=0)
    c = candidates(auto, cores=2, bf16_native=False, policy="passive", other_policy=False, own=True)
    assert c == [S(1, attention="own"), S(2, attention="own")]
    assert S(1, attention="own").label() == "1 thread, float32, the model's own attention, passive"


def test_fastest_picks_the_lowest_time_and_breaks_near_ties_toward_the_simpler_setting():
    order = [S(1), S(2), S(2, omp="active")]
    assert fastest({S(1): 30.0, S(2): 20.0, S(2, omp="active"): 10.0}, order) == S(2, omp="active")
    assert fastest({S(1): 30.0, S(2): 10.0, S(2, omp="active"): 9.9}, order) == S(2)  # within 2 %: simpler
    assert fastest({S(2): 10.0}, order) == S(2)


def _fake_timer(monkeypatch, table):
    """time_settings replaced: the fake table's ms for each setting asked for (what a machine would measure)."""
    def fake(model, make_opt, loss_fn, batch, settings, rounds=2, set_attention=None, ref_ms=0, deadline=0,
             busy=False):
        return {s: table[s] for s in settings if s in table}

    monkeypatch.setattr(at, "time_settings", fake)
    monkeypatch.setattr(at, "_child", lambda cfg, settings, policy, **kw: {s: table[s] for s in settings})
    monkeypatch.setattr(at, "busy_cores", lambda window_s=0.15: 0)


def _long_cfg(tmp_path, model=None, **train):
    """A long run with every speed knob auto (``train`` overrides); ``model``: its ModelConfig (None = tiny's)."""
    cfg = tiny_config(tmp_path / "run", train={"max_iters": 100_000, "dtype": "auto", "attention": "auto",
                                               "threads": 0, **train})
    return cfg if model is None else type(cfg)(cfg.data, model, cfg.train)


@pytest.fixture
def cfg(tmp_path):
    """:func:`_long_cfg` with vocab_size 11, so a GPT can be built from its model config."""
    c = _long_cfg(tmp_path)
    return type(c)(c.data, type(c.model)(**{**c.model.__dict__, "vocab_size": 11}), c.train)


@pytest.fixture
def table(monkeypatch):
    """Fake timings (ms per step) of every candidate on 2 cores, installed by :func:`_fake_timer`: S(2) is the
    fastest; a test may change an entry (the fake reads the dict when asked)."""
    t = {S(1): 50.0, S(1, attention="explicit"): 60.0, S(2): 30.0, S(2, attention="explicit"): 40.0,
         S(2, omp="active"): 35.0, S(2, attention="explicit", omp="active"): 45.0}
    _fake_timer(monkeypatch, t)
    return t


@pytest.fixture
def chosen_by_depthlab(monkeypatch):
    monkeypatch.setattr(at.os, "cpu_count", lambda: 2)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv(at.OMP_MARK, "PASSIVE")
    monkeypatch.delenv(at.SWITCH, raising=False)
    monkeypatch.setattr(at.runtime, "cpu_has_bf16", lambda: False)


def test_tune_picks_the_faster_measured_setting_and_caches_it(tmp_path, monkeypatch, chosen_by_depthlab, cfg,
                                                              table):
    from depthlab.model import GPT

    model = GPT(cfg.model)
    t = at.tune(cfg, model, torch.device("cpu"), restart_ok=True)
    assert t.setting == S(2) and t.source == "measured"
    assert t.ms_per_step[S(2).label()] == 30.0 and len(t.ms_per_step) == 6
    again = at.tune(cfg, model, torch.device("cpu"), restart_ok=True)
    assert again.source == "cached" and again.setting == S(2)

    # now spinning is faster: a command line (restart_ok) is asked to restart with that policy ...
    table[S(2, omp="active")] = 10.0
    other = _long_cfg(tmp_path, cfg.model, batch_size=5)  # another shape: another cache entry
    with pytest.raises(Restart) as r:
        at.tune(other, model, torch.device("cpu"), restart_ok=True)
    assert r.value.env["OMP_WAIT_POLICY"] == "ACTIVE" and r.value.tuning.setting == S(2, omp="active")
    decided = json.loads(r.value.env[at.SWITCH + "_DECIDED"])
    # ... and the restarted process takes the decision instead of measuring again
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.setenv(at.OMP_MARK, "ACTIVE")
    monkeypatch.setenv(at.SWITCH + "_DECIDED", json.dumps(decided))
    assert at.tune(other, model, torch.device("cpu"), restart_ok=True).setting == S(2, omp="active")


def test_a_measurement_whose_load_changed_is_not_cached_and_says_so(tmp_path, monkeypatch, chosen_by_depthlab, cfg,
                                                                      table):
    """The load is read before and after timing: a process that started meanwhile (seen: a second training
    run) made the measurement a busy machine's, and caching it under "0 busy cores" chose 1 thread for every
    later idle run of that shape. Such a measurement is used for this run only, and the line says so."""
    from depthlab.model import GPT

    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "own-cache"))
    reads = [0, 1]  # before and after the first measurement; idle from then on
    monkeypatch.setattr(at, "busy_cores", lambda window_s=0.15: reads.pop(0) if reads else 0)
    t = at.tune(cfg, GPT(cfg.model), torch.device("cpu"), restart_ok=False)
    assert t.source == "measured" and (t.busy, t.busy_after) == (0, 1)
    assert t.line().endswith("0 then 1 of 2 cores busy with other work while timed: not cached, measured again "
                             "next time)")
    assert t.to_record()["busy_cores_after"] == 1 and Tuning.from_record(t.to_record()).busy_after == 1
    again = at.tune(cfg, GPT(cfg.model), torch.device("cpu"), restart_ok=False)
    assert again.source == "measured" and again.busy_after is None  # measured again: nothing was cached
    assert "busy_cores_after" not in again.to_record() and again.line().endswith("0 of 2 cores busy with other work)")
    assert at.tune(cfg, GPT(cfg.model), torch.device("cpu"), restart_ok=False).source == "cached"


def test_python_callers_keep_their_policy_and_explicit_values_win(tmp_path, chosen_by_depthlab, cfg, table):
    from depthlab.model import GPT

    table[S(2, omp="active")] = 10.0  # spinning is the fastest, but only a restart could switch to it
    t = at.tune(cfg, GPT(cfg.model), torch.device("cpu"), restart_ok=False)  # no restart: this policy only
    assert t.setting == S(2)
    given = _long_cfg(tmp_path, cfg.model, threads=1, attention="explicit")
    assert at.tune(given, GPT(cfg.model), torch.device("cpu")).setting == S(1, attention="explicit")


def test_a_resumed_run_keeps_its_measured_settings_unless_given_others(tmp_path, monkeypatch, chosen_by_depthlab,
                                                                      cfg):
    from depthlab.model import GPT

    _fake_timer(monkeypatch, {})  # any measuring would find nothing
    old = Tuning(S(2, attention="explicit"), "measured", "fastest measured", {"x": 1.0}).to_record()
    t = at.tune(cfg, GPT(cfg.model), torch.device("cpu"), resumed={"tuning": old}, restart_ok=True)
    assert t.source == "resumed" and t.setting == S(2, attention="explicit")
    given = _long_cfg(tmp_path, cfg.model, threads=1)
    assert at.tune(given, GPT(cfg.model), torch.device("cpu"), resumed={"tuning": old}).setting.threads == 1


def test_a_resume_running_a_setting_its_first_session_never_timed_says_so(tmp_path, monkeypatch, chosen_by_depthlab,
                                                                          cfg):
    """A new user's pass: a run measured at 2 threads, resumed with --train.threads 1 (or OMP_NUM_THREADS=1), ended in
    'unexpected TypeError: unsupported format string passed to NoneType' building its 'auto settings' line."""
    from depthlab.model import GPT

    _fake_timer(monkeypatch, {})
    old = Tuning(S(2), "measured", "fastest measured", {S(2).label(): 5.0, S(2, "bfloat16").label(): 9.0},
                 busy=0).to_record()
    given = _long_cfg(tmp_path, cfg.model, threads=1)
    t = at.tune(given, GPT(cfg.model), torch.device("cpu"), resumed={"tuning": old})
    assert t.setting == S(1) and t.line(["train.threads"]) == (
        "auto settings: 1 thread, float32, sdpa, passive (train.threads as given; this setting was not timed; fastest "
        "timed 2 threads, float32, sdpa, passive 5 ms; 2 candidates, resumed, 0 of 2 cores busy with other work)")
    # a given setting that was timed and is beaten names the faster one, not it as "slowest" (a new user's pass)
    slow = Tuning(S(1), "measured", "fastest measured", {S(1).label(): 7.0, S(2).label(): 5.0})
    assert "(train.threads as given; 7 ms/step; fastest timed 2 threads, float32, sdpa, passive 5 ms;" in slow.line(
        ["train.threads"])
    fast = Tuning(S(2), "measured", "fastest measured",
                  {S(1).label(): 7.0, S(2).label(): 5.0, S(2, "bfloat16").label(): 6.0})
    assert "(5 ms/step; slowest 1 thread, float32, sdpa, passive 7 ms;" in fast.line()


def test_a_resume_on_one_thread_says_the_omp_policy_this_process_runs_under(tmp_path, monkeypatch, chosen_by_depthlab,
                                                                             cfg):
    """A new user's pass: a run that started spinning (active), resumed with OMP_NUM_THREADS=1 in a passive process,
    said 'auto settings: 1 thread, ..., active' while config.json's resolved.omp_wait said passive."""
    from depthlab.model import GPT

    _fake_timer(monkeypatch, {})
    old = Tuning(S(2, omp="active"), "measured", "fastest measured", {S(2, omp="active").label(): 5.0,
                                                                      S(1).label(): 8.0}).to_record()
    given = _long_cfg(tmp_path, cfg.model, threads=1)
    t = at.tune(given, GPT(cfg.model), torch.device("cpu"), resumed={"tuning": old}, restart_ok=True)
    assert t.source == "resumed" and t.setting == S(1, omp="passive")  # the process's policy (chosen_by_depthlab)
    assert t.line([]).startswith("auto settings: 1 thread, float32, sdpa, passive (8 ms/step; ")
    # the why of 'resumed' is true of every other field only
    assert t.why == ("the settings this run started with; OpenMP waits passive in this process (one thread: it "
                     "started active)")


def test_time_settings_measures_each_setting_and_stops_timing_a_slow_one(monkeypatch):
    clock = [0.0]  # a fake clock: a step takes 2 ms with one thread and 20 ms with two
    monkeypatch.setattr(at, "time", type("T", (), {"perf_counter": staticmethod(lambda: clock[0])}))
    calls = []

    def loss_fn(model, x, y):
        calls.append(torch.get_num_threads())
        clock[0] += 0.002 if torch.get_num_threads() == 1 else 0.020
        return model(x).float().mean()

    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    ms = at.time_settings(model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1), loss_fn, (x, x),
                          [S(1), S(2)], rounds=2)
    assert ms == {S(1): pytest.approx(2.0), S(2): pytest.approx(20.0)}
    # two threads is dropped at its warm-up (20 ms > 2 x CAP x 2 ms): it is never timed again
    assert calls == [1, 2, 1, 1]


def test_time_settings_on_a_busy_machine_leaves_each_switch_untimed_and_takes_the_median(monkeypatch):
    # one spinning process per core: the minimum of single steps right after a switch picked 1 thread in 3 of 5
    # measurements where 2 threads trained 1.36x faster; now each visit is one untimed step, then the median
    clock = [0.0]
    monkeypatch.setattr(at, "time", type("T", (), {"perf_counter": staticmethod(lambda: clock[0])}))
    script = {1: iter([5, 1, 9, 11, 1, 9, 13]), 2: iter([6, 50, 7, 7, 40, 8, 6])}  # warm-up, then 3 per visit
    calls = []

    def loss_fn(model, x, y):
        calls.append(torch.get_num_threads())
        clock[0] += next(script[torch.get_num_threads()]) / 1e3
        return model(x).float().mean()

    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    ms = at.time_settings(model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1), loss_fn, (x, x),
                          [S(1), S(2)], rounds=2, busy=True)
    # S(1): visits' medians 10 and 11 -> 10.5 (its untimed 1 ms steps would have won a minimum); S(2): 7, 7
    assert ms == {S(1): pytest.approx(10.5), S(2): pytest.approx(7.0)}
    assert calls == [1, 2] + [1] * 3 + [2] * 3 + [1] * 3 + [2] * 3


def test_a_single_possible_setting_is_not_timed(tmp_path, monkeypatch, chosen_by_depthlab, capsys):
    """One core, dtype and attention given: the one candidate was "timed" ("1 candidate, measured in 2.9 s")."""
    from depthlab.model import GPT

    monkeypatch.setattr(at.os, "cpu_count", lambda: 1)
    monkeypatch.setenv(at.SWITCH, "on")  # even where measuring is asked for
    monkeypatch.setattr(at, "time_settings", lambda *a, **k: pytest.fail("timed a single candidate"))
    monkeypatch.setattr(at, "busy_cores", lambda window_s=0.15: pytest.fail("read the load for nothing"))
    cfg = _long_cfg(tmp_path, dtype="float32", attention="explicit")
    cfg = type(cfg)(cfg.data, type(cfg.model)(**{**cfg.model.__dict__, "vocab_size": 11}), cfg.train)
    t = at.tune(cfg, GPT(cfg.model), torch.device("cpu"), restart_ok=True)
    assert t.setting == S(1, attention="explicit") and t.source == "rule" and t.ms_per_step == {}
    assert t.line(["train.dtype", "train.attention"]) == (
        "auto settings: 1 thread, float32, explicit, passive (train.dtype, train.attention as given; "
        "only one setting possible, not timed)")


def test_a_short_run_is_not_measured(tmp_path, monkeypatch, chosen_by_depthlab):
    from depthlab.model import GPT

    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))  # nothing measured before

    cfg = tiny_config(tmp_path / "run", train={"max_iters": 20, "dtype": "auto", "threads": 0})
    cfg = type(cfg)(cfg.data, type(cfg.model)(**{**cfg.model.__dict__, "vocab_size": 11}), cfg.train)
    t = at.tune(cfg, GPT(cfg.model), torch.device("cpu"), restart_ok=True)
    assert t.source == "rule" and "not measured" in t.why and t.ms_per_step == {}


def test_only_a_measurement_of_both_policies_sets_the_policy_a_command_starts_with(tmp_path, monkeypatch,
                                                                                  chosen_by_depthlab, cfg, table):
    """A sweep worker or a Python caller times one policy only: its winner's policy is no evidence and must
    not replace what a comparison found (a sweep had left every later idle `depthlab train` passive, 2x slower)."""
    from depthlab.model import GPT
    from depthlab.training import machine

    monkeypatch.setattr(machine, "busy_cores", lambda window_s=0.15: 0)
    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "own-cache"))  # no guess from the tests before
    table[S(2, omp="active")] = 10.0
    at.tune(cfg, GPT(cfg.model), torch.device("cpu"), restart_ok=False)  # passive only: no restart possible
    assert machine.guess_policy() is None
    with pytest.raises(Restart):  # both timed: spinning wins, and is what the next command starts with
        at.tune(_long_cfg(tmp_path, cfg.model, batch_size=5), GPT(cfg.model), torch.device("cpu"), restart_ok=True)
    assert machine.guess_policy() == "active"
    at.tune(_long_cfg(tmp_path, cfg.model, batch_size=6), GPT(cfg.model), torch.device("cpu"), restart_ok=False)
    assert machine.guess_policy() == "active"


def test_start_policy_spins_on_an_idle_machine_sleeps_on_a_busy_one_unless_measured(tmp_path, monkeypatch):
    from depthlab.training import machine

    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "cache"))
    busy = {"n": 0}
    monkeypatch.setattr(machine, "busy_cores", lambda window_s=0.15: busy["n"])
    assert machine.start_policy() == "active"  # never measured, idle
    busy["n"] = 2
    assert machine.start_policy() == "passive"  # never measured, both cores taken
    from depthlab.rundir import write_json
    machine.cache_file().parent.mkdir(parents=True)
    write_json(machine.cache_file(), {machine.policy_key(2): {"omp_wait": "active"}})
    assert machine.start_policy() == "active"  # what a measurement at this load found wins


def test_the_auto_line_says_which_settings_were_given_not_chosen(tmp_path, capsys):
    """`--train.threads 999` printed "auto settings: 999 threads, ..." as if auto had chosen 999 threads."""
    from depthlab.cli import main

    from conftest import tiny_cli_args

    text = tmp_path / "t.txt"
    text.write_text("to be or not to be, that is the question. " * 40)
    assert main(["train", *tiny_cli_args(text, tmp_path / "r", train__max_iters=2, train__threads=1)]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("auto settings:")]
    assert line and line[0].startswith("auto settings: 1 thread, ")
    assert "(train.threads as given; not measured" in line[0]
    t = Tuning(S(2), "rule", "every setting given")
    assert t.line(["train.threads", "train.dtype", "train.attention"]).endswith("(every setting given)")
    assert t.line().endswith("(every setting given)")


def test_omp_num_threads_is_a_given_thread_count_and_train_threads_wins(monkeypatch):
    """OMP_NUM_THREADS=1 in the environment: only 1-thread settings are timed (it had been replaced by a
    measured 2 without a word); an explicit train.threads wins over it; junk in the variable is ignored."""
    auto = TrainConfig(dtype="auto", attention="auto", threads=0)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    c = candidates(auto, cores=2, bf16_native=False, policy="passive", other_policy=True)
    assert {s.threads for s in c} == {1} and len(c) == 2
    assert {s.threads for s in candidates(TrainConfig(threads=2), cores=2, bf16_native=False, policy="passive",
                                          other_policy=False)} == {2}
    monkeypatch.setenv("OMP_NUM_THREADS", "two")
    assert at.given_threads(auto) == 0
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert {s.threads for s in candidates(auto, cores=2, bf16_native=False, policy="passive",
                                          other_policy=False)} == {1, 2}


@pytest.mark.parametrize("raw", ["abc", "0", "4,2", "-1", "", " "])
def test_an_omp_num_threads_that_is_not_a_count_is_warned_with_what_sets_the_threads_instead(monkeypatch, raw):
    monkeypatch.setenv("OMP_NUM_THREADS", raw)
    auto = TrainConfig(threads=0)
    assert at.env_threads_warning(auto, 2, "measured") == (
        f"OMP_NUM_THREADS={raw!r} is not a thread count (a positive integer): depthlab ignores it and runs with "
        "2 threads, the fastest it measured; set it to a number (OMP_NUM_THREADS=1) or unset it")
    assert "runs with 1 thread, its auto choice, not measured;" in at.env_threads_warning(auto, 1, "rule")
    assert "runs with 4 threads, the fastest measured earlier on this machine;" in at.env_threads_warning(
        auto, 4, "cached")
    assert "depthlab ignores it and lets train.threads 3 set the thread count;" in at.env_threads_warning(
        TrainConfig(threads=3), 3, "rule")


@pytest.mark.parametrize("raw", ["1", "8", None])
def test_a_valid_or_unset_omp_num_threads_gets_no_warning(monkeypatch, raw):
    if raw is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", raw)
    assert at.env_threads_warning(TrainConfig(threads=0), 2, "rule") is None


@pytest.mark.parametrize("raw", ["abc", ""])
def test_train_warns_once_on_stderr_of_a_junk_omp_num_threads_with_the_threads_it_uses(monkeypatch, tmp_path,
                                                                                       tiny_text_file, capsys, raw):
    from depthlab.cli import main
    from conftest import tiny_cli_args

    monkeypatch.setenv("OMP_NUM_THREADS", raw)
    assert main(["train", *tiny_cli_args(tiny_text_file, tmp_path / "r", train__threads=0,
                                         train__max_iters=4, train__warmup_iters=0)]) == 0
    cap = capsys.readouterr()
    used = json.loads((tmp_path / "r" / "config.json").read_text())["resolved"]["threads"]
    line = [x for x in cap.err.splitlines() if "OMP_NUM_THREADS" in x]
    assert line == [f"depthlab: warning: OMP_NUM_THREADS={raw!r} is not a thread count (a positive integer): depthlab "
                    f"ignores it and runs with {used} thread{'s' if used != 1 else ''}, its auto choice, not measured; "
                    "set it to a number (OMP_NUM_THREADS=1) or unset it"]
    assert "OMP_NUM_THREADS" not in cap.out


def test_a_resumed_run_keeps_settings_its_short_first_session_ruled_over_a_cached_measurement(
        tmp_path, monkeypatch, chosen_by_depthlab, cfg, table):
    """A new user's resume of a 30-step run (ruled: not measured) took the cache's measured choice for the shape,
    moved from one dtype and attention to others mid-run, and a later resume's record called that its start."""
    from depthlab.model import GPT

    model = GPT(cfg.model)
    assert at.tune(cfg, model, torch.device("cpu"), restart_ok=True).setting == S(2)  # the cache now says S(2)
    old = Tuning(S(1, attention="explicit"), "rule", "not measured: about 3 s of training planned, under 60 s")
    t = at.tune(cfg, model, torch.device("cpu"), resumed={"tuning": old.to_record()}, restart_ok=True)
    assert t.source == "resumed" and t.setting == S(1, attention="explicit")


@pytest.mark.parametrize("raw", ["999999", "4097"])
def test_an_omp_num_threads_past_the_thread_cap_is_ignored_not_given_to_torch(monkeypatch, raw):
    """OMP_NUM_THREADS=999999 went to torch.set_num_threads and the train died of a segfault (exit 139) after
    one warning; it is ignored like train.threads' cap (4096) refuses it, and the warning says why."""
    from depthlab.training.machine import env_threads

    monkeypatch.setenv("OMP_NUM_THREADS", raw)
    auto = TrainConfig(threads=0)
    assert env_threads() == 0 and at.given_threads(auto) == 0
    assert at.env_threads_warning(auto, 2, "rule") == (
        f"OMP_NUM_THREADS={raw!r} is more than the 4,096 threads depthlab accepts: depthlab ignores it and runs "
        "with 2 threads, its auto choice, not measured; set it to a number (OMP_NUM_THREADS=1) or unset it")
    monkeypatch.setenv("OMP_NUM_THREADS", "4096")
    assert env_threads() == 4096 and at.env_threads_warning(auto, 4096, "rule") is None


def test_a_short_run_keeps_the_rules_when_its_shape_is_cached(tmp_path, monkeypatch, chosen_by_depthlab, cfg, table):
    """A new user's pass: the same 20-s command ran 2 threads (rules), 1 thread (a cached measurement under load) or
    restarted itself for a cached spinning policy, as README says a run planned under a minute keeps its rules."""
    import dataclasses

    from depthlab.model import GPT

    monkeypatch.setenv("DEPTHLAB_CACHE", str(tmp_path / "own-cache"))
    table[S(2, omp="active")] = 10.0  # spinning fastest: a long run restarts for it
    model = GPT(cfg.model)
    with pytest.raises(Restart):
        at.tune(cfg, model, torch.device("cpu"), restart_ok=True)  # measured and cached
    short = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_iters=2000))  # 2000 x 10 ms = 20 s
    t = at.tune(short, model, torch.device("cpu"), restart_ok=True)
    assert (t.source, t.why) == ("rule", "not measured: about 20 s of training planned, under 60 s")
    assert at.tune(cfg, model, torch.device("cpu"), restart_ok=False).source == "cached"  # a long run reads it


def test_a_max_time_under_a_minute_keeps_the_rules_without_timing_a_step(tmp_path, monkeypatch, chosen_by_depthlab,
                                                                         cfg):
    """A new user's pass: ``--preset nanogpt-gpu --train.max_time 20`` on a CPU timed a GPU-sized step first (a
    minute of silence) to learn that its 20 s were under a minute."""
    import dataclasses

    from depthlab.model import GPT

    monkeypatch.setattr(at, "time_settings", lambda *a, **k: pytest.fail("no step is timed"))
    short = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_time=20.0))
    monkeypatch.setattr(at, "busy_cores", lambda window_s=0.15: 2)
    t = at.tune(short, GPT(cfg.model), torch.device("cpu"), restart_ok=True)
    assert (t.source, t.why) == ("rule", "not measured: train.max_time 20 s, under 60 s")
    # the load the rules were applied under, as read (every ruled run recorded busy_cores 0, under any load)
    assert t.to_record()["busy_cores"] == 2
    assert at.Tuning(t.setting, "rule", "not measured: not a CPU run").to_record()["busy_cores"] is None

"""The Ray backend: one Ray Tune trial per point, on a real two-node Ray cluster on loopback.

Every Ray test runs against ``ray.cluster_utils.Cluster`` (a head and one added node, each a real
raylet) bound to 127.0.0.1 (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``). Its Python processes load
``tests/netguard/sitecustomize.py``, which refuses connections and DNS lookups for any other
address, so no test opens a connection off the machine.
"""

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import read_hparams, read_sweep_rows, tiny_sweep_spec

from depthlab import rundir, sweep
from depthlab.errors import DepthlabError

GUARD = Path(__file__).parent / "netguard"
TINY = {"model.n_layer": 1, "model.n_head": 2, "model.n_embd": 16, "model.block_size": 16,
        "train.batch_size": 4, "train.max_iters": 6, "train.eval_interval": 3, "train.eval_iters": 1,
        "train.log_interval": 3, "train.warmup_iters": 1, "train.keep_last": 1, "train.dtype": "float32"}
GRID = {"model.n_layer": [1, 2], "model.variant": ["plain", "prenorm"]}


def tiny_spec(text_file, grid, **over):
    return tiny_sweep_spec(text_file, grid, TINY, **over)


read_rows = read_sweep_rows


def quiet(_):
    pass


def statuses(sweep_dir) -> dict:
    return {p.name: rundir.RunDir(p).sweep_status for p in sorted((Path(sweep_dir) / "runs").iterdir())}


def best_losses(sweep_dir) -> dict:
    return {p.name: rundir.RunDir(p).summary["best_val_loss"] for p in sorted((Path(sweep_dir) / "runs").iterdir())}


def pid_writing(path: Path):
    """The pid of the process that holds ``path`` open (Linux /proc), or None."""
    target = str(path)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) == target:
                    return int(proc.name)
        except OSError:
            continue
    return None


# ----------------------------------------------------------------------------- without Ray
@pytest.mark.slow  # a few seconds: the fast tier stays under 3 min
def test_without_ray_the_backend_is_a_one_line_error_naming_the_extra(tiny_text_file, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1]})
    with pytest.raises(DepthlabError, match=r'--backend ray needs Ray Tune.*pip install -e "\.\[ray\]"'):
        sweep.run_sweep(spec, tmp_path / "sw", backend="ray", log=quiet)
    assert not (tmp_path / "sw").exists()  # refused before anything was written
    with pytest.raises(DepthlabError, match="^--ray_address needs --backend ray$"):
        sweep.run_sweep(spec, tmp_path / "sw", ray_address="auto", log=quiet)
    code = ("import sys; sys.modules['ray'] = None; from depthlab.cli import main; "
            f"sys.exit(main(['sweep', '--grid', 'model.n_layer=1', '--data.path', {str(tiny_text_file)!r}, "
            f"'--out-dir', {str(tmp_path / 'sw2')!r}, '--backend', 'ray']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("depthlab: error: --backend ray needs Ray Tune") and '".[ray]"' in line
    assert not (tmp_path / "sw2").exists()


# ----------------------------------------------------------------------------- the two-node cluster
@pytest.mark.slow  # imports Ray (a few seconds)
def test_a_ray_address_where_nothing_listens_is_one_line_before_anything_is_written(tiny_text_file, tmp_path):
    """`--ray_address 127.0.0.1:1`: Ray's own "Failed to connect to GCS" lines for 7+ minutes, and a sweep folder of
    pending rows; now one line naming the address and the fix, exit 2, no folder, in seconds."""
    import socket

    with socket.socket() as s:  # a loopback port that was just free: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sw = tmp_path / "sw"
    cmd = [sys.executable, "-m", "depthlab", "sweep", "--grid", "model.n_layer=1", "--data.path", str(tiny_text_file),
           "--train.max_iters", "2", "--backend", "ray", "--ray_address", f"127.0.0.1:{port}", "--out-dir", str(sw)]
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, (out.stdout[-2000:], out.stderr[-2000:])
    assert out.stderr == (f"depthlab: error: no Ray cluster answers at --ray_address 127.0.0.1:{port} (Connection "
                          "refused); start it there with `ray start --head` (it prints the address to use), check "
                          "the host and port, or drop --ray_address to start Ray on this machine\n"), out.stderr
    assert out.stdout == "" and not sw.exists()
    assert time.time() - t0 < 60


def test_the_ray_address_check_reads_the_forms_ray_takes():
    from depthlab.sweep import ray as ray_backend

    assert ray_backend._host_port("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert ray_backend._host_port("ray://head.example:10001") == ("head.example", 10001)
    assert ray_backend._host_port("[::1]:6379") == ("::1", 6379)
    assert ray_backend._host_port("auto") is None and ray_backend._host_port("head.example") is None
    ray_backend.check_reachable(None)  # Ray started here: nothing to check
    ray_backend.check_reachable("auto")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head and one more node (1 CPU each) on 127.0.0.1, every Python process behind the network guard."""
    if not os.environ.get("CI"):
        pytest.importorskip("ray", reason='the Ray backend needs pip install -e ".[ray]"')
    refused = tmp_path_factory.mktemp("netguard") / "refused.log"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.setenv("DEPTHLAB_NETGUARD", "1")
        mp.setenv("DEPTHLAB_NETGUARD_LOG", str(refused))
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(GUARD), os.environ.get("PYTHONPATH")) if p))
        mp.setenv("DEPTHLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
        sys.path.insert(0, str(GUARD))
        import sitecustomize as guard

        guard.install()
        from ray._private import ray_constants
        from ray.cluster_utils import Cluster

        mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)  # in case ray was imported before the env was set
        # Idle worker processes are kept (not only num_cpus of them): the storage check's task workers, which
        # import torch, then serve every sweep of the shared ``driver`` instead of being started again each time
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                          "_system_config": {"num_workers_soft_limit": 8}})
        try:
            c.add_node(num_cpus=1)
            c.wait_for_nodes()
            c.refused = refused
            yield c
        finally:
            import ray

            ray.shutdown()  # the driver of the tests that took ``driver``, if one is still connected
            c.shutdown()
            guard.uninstall()
            sys.path.remove(str(GUARD))
            sys.modules.pop("sitecustomize", None)


@pytest.fixture
def driver(cluster):
    """The cluster, this process connected to it as one Ray driver that the tests taking this fixture share.

    A sweep run in this process then uses that connection (as in a notebook: ``connect`` leaves a caller's
    connection alone) instead of starting a Ray job of its own and ending it: no driver start-up per sweep, and
    the storage check's task workers, each a process importing torch, are started once, not twice per sweep.
    """
    import ray

    if not ray.is_initialized():
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING)
    return cluster


@pytest.fixture
def own_driver(cluster):
    """The cluster with no Ray connection in this process: a sweep connects (and says so) and disconnects itself."""
    import ray

    ray.shutdown()  # a no-op when not connected
    return cluster


def node_ids(c) -> set:
    return {n.node_id for n in c.list_all_nodes()}


@pytest.mark.slow
@pytest.mark.usefixtures("own_driver")
def test_ray_equals_local_on_a_two_node_cluster(cluster, tiny_text_file, tmp_path):
    spec = tiny_spec(tiny_text_file, GRID)
    # the local backend in this process (--workers 1): the same execute() as its worker processes, none started
    sweep.run_sweep(spec, tmp_path / "loc", workers=1, threads=1, log=quiet)
    logs = []
    sweep.run_sweep(spec, tmp_path / "ray", threads=1, backend="ray", ray_address=cluster.address, log=logs.append)
    loc, ray_ = best_losses(tmp_path / "loc"), best_losses(tmp_path / "ray")
    assert len(loc) == 4 and loc == ray_  # the same float32 numbers, bit for bit
    rows = read_rows(tmp_path / "ray")
    assert [(r["n_layer"], r["variant"], r["status"]) for r in rows] == [
        (r["n_layer"], r["variant"], r["status"]) for r in read_rows(tmp_path / "loc")]
    assert all(r["status"] == "ok" and r["best_val_loss"] != "" for r in rows)
    st = statuses(tmp_path / "ray")
    assert {s["ray_node_id"] for s in st.values()} == node_ids(cluster)  # trials ran on both nodes
    assert all(s["backend"] == "ray" and s["threads"] == 1 and s["ray_ip"] == "127.0.0.1" for s in st.values())
    assert any(line.startswith("ray: connected to") and "2 nodes, 2 CPU" in line for line in logs)
    assert sum(line.startswith("[") for line in logs) == 4
    cfg = rundir.RunDir(tmp_path / "ray" / "runs" / "n_layer-2_variant-plain").config
    assert Path(cfg["train"]["out_dir"]).is_absolute() and Path(cfg["data"]["path"]).is_absolute()
    # HParams: the fields the sweep varies, in each run's own event files
    hp, metrics, scalars = read_hparams(tmp_path / "ray" / "runs" / "n_layer-2_variant-plain" / "tb")
    assert hp == {"model.n_layer": 2, "model.variant": "plain"}
    assert scalars["hparams/best_val_loss"][0][1] == pytest.approx(ray_["n_layer-2_variant-plain"], rel=1e-6)
    # a rerun finds everything finished and starts no Ray trial
    logs.clear()
    sweep.run_sweep(spec, tmp_path / "ray", threads=1, backend="ray", ray_address=cluster.address, log=logs.append)
    assert any("nothing to run: all 4 runs had finished" in line for line in logs)
    assert not any(line.startswith("ray:") for line in logs)


@pytest.mark.slow
@pytest.mark.usefixtures("driver")
def test_killed_trial_is_a_failed_row_and_a_rerun_redoes_it(cluster, tiny_text_file, tmp_path):
    # the long run is killed as soon as a process holds its metrics.jsonl open (before its first step is done): 400
    # steps leave it running 100s of times longer than a look through /proc takes, and its rerun trains them all
    spec = tiny_spec(tiny_text_file, {"train.max_iters": [4, 400]}, train__eval_interval=500)
    sw = tmp_path / "sw"
    metrics = sw / "runs" / "max_iters-400" / "metrics.jsonl"
    killed = []

    def killer():
        deadline = time.time() + 120
        while time.time() < deadline and not killed:
            pid = pid_writing(metrics) if metrics.exists() else None
            if pid:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.02)

    t = threading.Thread(target=killer)
    t.start()
    logs = []
    sweep.run_sweep(spec, sw, threads=1, backend="ray", ray_address=cluster.address, log=logs.append)
    t.join()
    assert killed and killed[0] != os.getpid()
    rows = {r["train.max_iters"]: r for r in read_rows(sw)}
    assert rows["4"]["status"] == "ok"
    assert rows["400"]["status"] == "failed" and "ActorDiedError" in rows["400"]["message"]
    assert "\n" not in rows["400"]["message"] and len(rows["400"]["message"]) <= 500
    assert any("max_iters-400: failed" in line for line in logs)
    done = (sw / "runs" / "max_iters-004" / "summary.json").stat().st_mtime_ns
    logs.clear()
    sweep.run_sweep(spec, sw, threads=1, backend="ray", ray_address=cluster.address, log=logs.append)
    assert any("1 already finished, 1 to run" in line for line in logs)
    rows = {r["train.max_iters"]: r for r in read_rows(sw)}
    assert rows["400"]["status"] == "ok" and rows["400"]["message"] == ""
    assert (sw / "runs" / "max_iters-004" / "summary.json").stat().st_mtime_ns == done


@pytest.mark.slow
def test_interrupted_cli_sweep_then_the_same_command_finishes_only_what_is_missing(cluster, tiny_text_file, tmp_path):
    sw = tmp_path / "sw"
    cmd = [sys.executable, "-m", "depthlab", "sweep", "--grid", "train.max_iters=4,1500", "--data.path",
           str(tiny_text_file), "--model.n_layer", "1", "--model.n_embd", "16", "--model.n_head", "2",
           "--model.block_size", "16", "--train.batch_size", "4", "--train.eval_interval", "1000",
           "--train.eval_iters", "1", "--train.dtype", "float32", "--threads", "1", "--no-report",
           "--backend", "ray", "--ray-address", cluster.address, "--out-dir", str(sw)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    short, long_ = sw / "runs" / "max_iters-0004" / "summary.json", sw / "runs" / "max_iters-1500" / "metrics.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline and not (short.exists() and long_.exists()) and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, (out[-2000:], err[-2000:])
    assert "sweep interrupted; run the same command again" in err
    assert not (sw / "runs" / "max_iters-1500" / "summary.json").exists()
    rows = {r["train.max_iters"]: r["status"] for r in read_rows(sw)}
    assert rows["4"] == "ok" and rows["1500"] != "ok"
    done = short.stat().st_mtime_ns
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "1 already finished, 1 to run" in out.stdout, out.stdout
    assert [(r["status"], r["message"]) for r in read_rows(sw)] == [("ok", "")] * 2, out.stdout
    assert short.stat().st_mtime_ns == done


@pytest.mark.slow
@pytest.mark.usefixtures("driver")
def test_an_interrupted_run_resumes_from_its_checkpoint_on_the_ray_backend(cluster, tiny_text_file, tmp_path,
                                                                            monkeypatch):
    from conftest import StopAt

    from depthlab import analytics

    spec = tiny_spec(tiny_text_file, {"model.n_layer": [1]}, train__max_iters=8, train__eval_interval=2)
    real, sw = analytics.train, tmp_path / "sw"
    monkeypatch.setattr(analytics, "train", lambda cfg, callbacks=(), **k: real(cfg, [*callbacks, StopAt(4)], **k))
    with pytest.raises(KeyboardInterrupt):  # stopped after step 4, as Ctrl-C would: a checkpoint, no summary.json
        sweep.run_sweep(spec, sw, workers=1, threads=1, log=quiet)
    monkeypatch.setattr(analytics, "train", real)
    rd = rundir.RunDir(sw / "runs" / "n_layer-1")
    assert rd.summary is None and (rd.path / "checkpoints" / "step-000004.safetensors").exists()
    logs = []
    sweep.run_sweep(spec, sw, threads=1, backend="ray", ray_address=cluster.address, log=logs.append)
    assert any("1 to run (1 of them resume from a checkpoint)" in line for line in logs), logs
    rd = rundir.RunDir(rd.path)  # read afresh (a RunDir keeps what it read)
    assert "resuming" in rd.file(rundir.TRAIN_LOG).read_text(), (logs, rd.sweep_status)
    steps = [r["step"] for r in rd.metrics() if "val_loss" in r]
    assert steps == [0, 2, 4, 6, 8]  # one history: steps 0-4 from before, 6 and 8 resumed, not again from step 0
    assert rd.summary["final_step"] == 8 and rd.sweep_status["status"] == "ok"
    assert rd.sweep_status["backend"] == "ray"


@pytest.mark.slow
@pytest.mark.usefixtures("driver")
def test_a_node_that_cannot_use_the_sweep_dir_is_a_clear_error(cluster, tmp_path):
    import ray

    from depthlab.sweep import ray as backend

    def probe(check_dir, token):  # the head node "cannot write" there
        import ray as r

        return "cannot write in it (test)" if r.get_runtime_context().get_node_id() == head else None

    head = cluster.head_node.node_id
    backend.check_storage(ray, tmp_path)  # the real check: both nodes read the token and write
    with pytest.raises(DepthlabError) as e:
        backend.check_storage(ray, tmp_path, probe=probe)
    msg = str(e.value)
    assert f"node {head[:12]} (127.0.0.1): cannot write in it (test)" in msg
    assert len(re.findall(r"node [0-9a-f]{12} \(", msg)) == 1  # only the node that failed
    assert "storage every node mounts at the same path" in msg
    assert not (tmp_path / ".ray_storage_check").exists()
    assert backend.storage_probe(str(tmp_path / "missing"), "t").startswith("cannot read")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "token").write_text("other")
    assert "not shared storage" in backend.storage_probe(str(tmp_path / "d"), "t")


@pytest.mark.slow
@pytest.mark.usefixtures("driver")
def test_asha_is_opt_in_and_stops_poor_runs(cluster, tiny_text_file, tmp_path):
    # two trials at a time: the good learning rates first set the rung at step 10 (grace period: a quarter of
    # max_iters); the near-zero ones come later, are worse than that rung's median and are stopped there
    grid = {"train.learning_rate": [0.01, 0.003, 1e-7, 1e-8]}
    spec = tiny_spec(tiny_text_file, grid, train__max_iters=40, train__eval_interval=5, train__min_lr=1e-9)
    sweep.run_sweep(spec, tmp_path / "sw", threads=1, backend="ray", ray_address=cluster.address,
                    ray_scheduler="asha", log=quiet)
    rows = {float(r["train.learning_rate"]): r for r in read_rows(tmp_path / "sw")}
    assert rows[0.01]["status"] == "ok" and rows[0.01]["message"] == ""  # the best: never stopped, ran to 40
    assert rundir.RunDir(tmp_path / "sw" / "runs" / "learning_rate-0.01").summary["final_step"] == 40
    assert rows[0.003]["status"] in ("ok", "stopped")  # stopped when it reached step 10 after lr 0.01
    for lr in (1e-7, 1e-8):
        assert rows[lr]["status"] == "stopped"
        assert rows[lr]["message"] == "stopped early by the asha scheduler at step 10"
    assert rows[1e-8]["best_val_loss"] != ""  # read back from the evaluations it logged
    # FIFO (the default) runs every point to its end
    sweep.run_sweep(spec, tmp_path / "fifo", threads=1, backend="ray", ray_address=cluster.address, log=quiet)
    assert [r["status"] for r in read_rows(tmp_path / "fifo")] == ["ok"] * 4


@pytest.mark.slow
@pytest.mark.usefixtures("driver")
def test_ray_processes_run_behind_the_network_guard(cluster):
    """The trials' worker processes on both nodes load the guard; what Ray itself tried was refused here."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def guarded():
        import socket

        return socket.socket.connect.__module__, socket.getaddrinfo.__module__

    task = ray.remote(num_cpus=0)(guarded)
    found = ray.get([task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
                     for n in node_ids(cluster)], timeout=120)
    assert found == [("sitecustomize", "sitecustomize")] * 2
    text = cluster.refused.read_text() if cluster.refused.exists() else ""
    for line in text.splitlines():  # e.g. the cloud-metadata probe of Ray's usage statistics
        assert line.split(" ", 1)[1].startswith(("connect ", "resolve ")), line


def test_trial_resources_and_absolute_paths(tmp_path, monkeypatch):
    from depthlab.sweep import ray as backend

    class FakeRay:
        def __init__(self, gpus):
            self.gpus = gpus

        def cluster_resources(self):
            return {"CPU": 8.0, **({"GPU": float(self.gpus)} if self.gpus else {})}

    def job(device="auto"):
        return {"name": "a", "threads": 2, "config": {"data": {"path": "c.txt", "cache_dir": None},
                                                      "train": {"out_dir": "sw/runs/a", "device": device}}}

    assert backend.trial_resources(FakeRay(0), [job()]) == {"cpu": 2}  # threads as CPUs
    assert backend.trial_resources(FakeRay(2), [job(), job("cuda")]) == {"cpu": 2, "gpu": 1}
    assert backend.trial_resources(FakeRay(2), [job(), job("cpu")]) == {"cpu": 2}
    monkeypatch.chdir(tmp_path)
    j = backend.absolute_job(job())
    assert j["threads"] == 2 and j["config"]["train"]["out_dir"] == str(tmp_path / "sw" / "runs" / "a")
    assert j["config"]["data"] == {"path": str(tmp_path / "c.txt"), "cache_dir": None}
    assert job()["config"]["train"]["out_dir"] == "sw/runs/a"  # a copy


def test_a_sweep_without_an_address_starts_its_own_ray_even_beside_a_running_one():
    """`ray.init()` with no address joins the cluster `ray start` left on this machine, where num_cpus is
    refused ("When connecting to an existing cluster, num_cpus ... must not be provided"): seen when a
    stray cluster was running. address="local" starts a new instance, as README promises."""
    from depthlab.sweep import ray as ray_backend

    calls = []

    class FakeRay:
        def is_initialized(self):
            return False

        def init(self, **kw):
            calls.append(kw)

        def cluster_resources(self):
            return {"CPU": 2}

        def nodes(self):
            return [{"Alive": True}]

    assert ray_backend.connect(FakeRay(), None, quiet) is True
    assert calls[0]["address"] == "local" and calls[0]["_node_ip_address"] == "127.0.0.1"
    calls.clear()
    ray_backend.connect(FakeRay(), "10.0.0.5:6379", quiet)
    assert calls[0]["address"] == "10.0.0.5:6379" and "num_cpus" not in calls[0]

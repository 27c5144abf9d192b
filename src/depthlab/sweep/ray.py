"""The Ray backend: each point of a sweep is one Ray Tune trial, on one machine or a Ray cluster.

``depthlab sweep ... --backend ray [--ray_address auto|HOST:PORT]`` runs the same jobs as the local
backend (:func:`depthlab.sweep.local.execute`: init probe, training with the default analytics,
``sweep_status.json``), each as a trial of one ``ray.tune.Tuner`` over the grid:

- FIFO by default: every run goes to its end, since stopping the slow deep runs early would bias
  the depth comparison a sweep exists to show; ``scheduler="asha"`` (``--ray_scheduler asha``) is
  the explicit opt-in to early stopping (a stopped run is a ``stopped`` row, redone on a rerun).
- ``tune.with_resources``: each trial reserves ``threads`` CPUs (and one GPU when the cluster has
  GPUs and the run's device is not ``cpu``); the trial sets torch's threads itself (Ray sets
  ``OMP_NUM_THREADS=1`` in its workers), so a point gives the same numbers as on the local backend.
- The run directories stay the source of truth: trials write them at absolute paths (Ray changes
  a trial's working directory), finished runs are skipped on a rerun by the same plan as the local
  backend, and a trial whose process dies (SIGKILL, out of memory) becomes a ``failed`` row with
  Ray's message, redone on the next run. Tune's own files go to ``SWEEP_DIR/ray_tune`` (bookkeeping
  only, rewritten by each run of the command).
- Without ``address`` Ray is started for this sweep on this machine, bound to 127.0.0.1
  (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, unless set otherwise), and stopped at the end. With an
  address (``auto`` or ``HOST:PORT``) the sweep joins that running cluster (a HOST:PORT where nothing
  accepts a TCP connection is refused in one line before anything is written: Ray retried it for
  minutes); the sweep directory must then be on storage every node mounts at the same path, which is
  checked at start.

``ray`` is an optional dependency (``pip install -e ".[ray]"``) imported only inside functions.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from .. import rundir
from ..callbacks import Callback
from ..errors import DepthlabError
from ..rundir import RunDir, write_json
from ..units import counted, finite_or
from .common import Log, Progress, cores
from .local import execute

__all__ = ["ray_runner", "run_trials", "import_ray", "SCHEDULERS", "TUNE_DIR", "EXTRA"]

#: How to install the extra, as error messages say it.
EXTRA = 'pip install -e ".[ray]"'
#: ``scheduler`` values: ``fifo`` (default, every run to its end) or ``asha`` (early stopping, opt-in).
SCHEDULERS = ("fifo", "asha")
#: Tune's experiment folder inside the sweep directory (its bookkeeping; the run directories are the record).
TUNE_DIR = "ray_tune"
#: The folder the storage check writes in, removed afterwards.
_CHECK_DIR = ".ray_storage_check"
#: Environment of this process set before Ray is imported (``setdefault``: the user's values win): no usage
#: statistics, Tune's console output and per-trial loggers off (the run directories are the record), and
#: Ctrl-C raises KeyboardInterrupt at once (Tune's own handler lets running trials go on while it stops).
_ENV_DEFAULTS = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AIR_NEW_OUTPUT": "0", "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
                 "TUNE_DISABLE_SIGINT_HANDLER": "1"}
#: Seconds the check of ``--ray_address`` waits for a TCP connection to HOST:PORT before Ray is asked to connect.
REACH_TIMEOUT_S = 5.0


def _host_port(address: str) -> Optional[tuple[str, int]]:
    """(host, port) of ``HOST:PORT``, ``[IPV6]:PORT`` or ``ray://HOST:PORT``; None for ``auto`` or an address
    without a port (Ray resolves those itself)."""
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


#: An HTTP/2 client's connection preface and an empty SETTINGS frame (RFC 9113 sections 3.4 and 6.5).
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_H2_SETTINGS = 4  # the frame type a server's own preface opens with


def check_reachable(address: Optional[str], timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Refuse a ``--ray_address`` HOST:PORT where no Ray cluster answers (Ray retried it for minutes, or waited on a
    listener that never answered).

    A connect, then the opening of an HTTP/2 connection: Ray's GCS and Ray Client servers speak gRPC, and an HTTP/2
    server answers a client's preface with its SETTINGS frame (RFC 9113 section 3.4). ``None`` (Ray started here),
    ``auto`` and an address without a port are left to Ray, as is every address when ``RAY_USE_TLS`` is set (the
    server then waits for a TLS handshake first).

    Raises:
        DepthlabError: no connection at HOST:PORT within ``timeout_s``, or something there that did not answer as an
            HTTP/2 (gRPC) server does within ``timeout_s`` (names the address, the reason and the fix).
    """
    import socket

    hp = _host_port(address) if address else None
    if hp is None:
        return
    fix = ("start it there with `ray start --head` (it prints the address to use), check the host and port, or drop "
           "--ray_address to start Ray on this machine")
    try:
        conn = socket.create_connection(hp, timeout=timeout_s)
    except OSError as e:
        why = "no answer within {:g}s".format(timeout_s) if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise DepthlabError(f"no Ray cluster answers at --ray_address {address} ({why}); {fix}") from None
    if os.environ.get("RAY_USE_TLS", "0").lower() not in ("", "0", "false"):
        conn.close()
        return
    with conn:
        header = _first_frame_header(conn)
    if header is None or len(header) < 9 or header[3] != _H2_SETTINGS:
        heard = "no reply within {:g}s".format(timeout_s) if header is None else \
            ("it closed the connection" if not header else "its reply is not gRPC's")
        raise DepthlabError(f"something listens at --ray_address {address} but it is not a Ray cluster ({heard}); "
                            f"{fix}")


def _first_frame_header(conn) -> Optional[bytes]:
    """The first 9 bytes a server sends after an HTTP/2 client preface (fewer where it closed first, b"" at once),
    or None when it said nothing before the socket's timeout."""
    got = b""
    try:
        conn.sendall(_H2_PREFACE)
        while len(got) < 9:
            chunk = conn.recv(9 - len(got))
            if not chunk:
                break
            got += chunk
    except TimeoutError:
        return got or None
    except OSError:  # reset by a server that refuses the preface: it said no
        pass
    return got


def import_ray():
    """``(ray, ray.tune)``, or a one-line error naming the extra.

    Returns:
        The ``ray`` and ``ray.tune`` modules.

    Raises:
        DepthlabError: Ray Tune is not installed.
    """
    try:
        import ray
        from ray import tune
    except ImportError as e:
        raise DepthlabError(f"--backend ray needs Ray Tune, which is not installed here ({e}); install the "
                            f"extra: {EXTRA}") from None
    return ray, tune


def _prepare_env(address: Optional[str]) -> None:
    """Quiet Ray/Tune output and, for a Ray started here, bind it to 127.0.0.1 (before ``import ray``)."""
    for k, v in _ENV_DEFAULTS.items():
        os.environ.setdefault(k, v)
    if address is None:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def ray_runner(sweep_dir: str | Path, address: Optional[str] = None, workers: int = 0,
               scheduler: str = "fifo") -> Callable[[list, int, Log, int, int], list]:
    """The Ray backend as a job runner with :func:`depthlab.sweep.local.run_jobs`'s signature.

    Checks the scheduler and that Ray is installed now, before the sweep writes anything.

    Args:
        sweep_dir: the sweep directory.
        address: ``auto`` / ``HOST:PORT`` of a running Ray cluster, or None to start Ray here.
        workers: trials at a time; 0 = as many as the cluster's CPUs hold.
        scheduler: one of :data:`SCHEDULERS`.

    Returns:
        ``runner(jobs, workers, log, total, n_done) -> results`` (``workers`` there is ignored:
        the one given here counts).

    Raises:
        DepthlabError: unknown scheduler, Ray is not installed (naming the extra), or nothing answers at the
            HOST:PORT of ``address`` (:func:`check_reachable`).
    """
    if scheduler not in SCHEDULERS:
        raise DepthlabError(f"--ray_scheduler must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}")
    _prepare_env(address)
    import_ray()
    check_reachable(address)  # before the sweep folder is made, and before Ray retries it for minutes

    def runner(jobs: list, _workers: int, log: Log, total: int, n_done: int) -> list:
        return run_trials(jobs, sweep_dir, log, total, n_done, address=address, workers=workers, scheduler=scheduler)

    return runner


# --------------------------------------------------------------------------- the trial (worker side)
class _TuneReport(Callback):
    """Reports each evaluation before the last step to Tune (``step``, ``val_loss`` in nats), for ASHA.

    The last evaluation is left to the trial's final report, made after the run directory is
    complete, so a scheduler deciding at ``max_iters`` cannot stop a run that is writing its summary.
    """

    def on_eval(self, run, info, record: dict) -> None:
        from ray import tune

        if info.step < run.cfg.train.max_iters:
            # +inf for a missing or non-finite loss: a value Tune's schedulers can compare, ranked last
            tune.report({"step": info.step, "val_loss": finite_or(record.get("val_loss"), math.inf)})


def _one_line(text: str, limit: int = 500) -> str:
    """``text`` on one line (whitespace runs become one space), cut to ``limit`` characters."""
    return re.sub(r"\s+", " ", text).strip()[:limit]


def _trial(config: dict) -> None:
    """One Tune trial: one sweep point through :func:`depthlab.sweep.local.execute` (in a Ray worker).

    The status file also records where it ran: ``ray_node_id``, ``ray_ip``, ``ray_trial_id``, ``pid``.
    """
    import ray
    from ray import tune

    job = config["job"]
    meta = {"backend": "ray", "ray_node_id": ray.get_runtime_context().get_node_id(),
            "ray_ip": ray.util.get_node_ip_address(), "ray_trial_id": tune.get_context().get_trial_id(),
            "pid": os.getpid()}
    res = execute({**job, "meta": meta}, callbacks=[_TuneReport()] if config.get("report_evals") else [])
    summ = RunDir(job["config"]["train"]["out_dir"]).summary or {}
    tune.report({"step": int(summ.get("final_step") or 0),
                 "val_loss": finite_or(summ.get("best_val_loss"), math.inf),  # +inf (ranked last) when missing
                 "status": res["status"]})


def storage_probe(check_dir: str, token: str) -> Optional[str]:
    """On one node: read the driver's token in ``check_dir`` and write a file there; None when both work."""
    p = Path(check_dir)
    try:
        seen = (p / "token").read_text(encoding="utf-8")
    except OSError as e:
        return f"cannot read {p}: {e.strerror or e}"
    if seen != token:
        return f"{p} there is another folder than the driver's (not shared storage)"
    f = p / f"node-{os.getpid()}-{secrets.token_hex(4)}.tmp"
    try:
        f.write_text(token, encoding="utf-8")
        f.unlink()
    except OSError as e:
        return f"cannot write in {p}: {e.strerror or e}"
    return None


# --------------------------------------------------------------------------- the driver
def absolute_job(job: dict) -> dict:
    """A copy of ``job`` whose run directory and data paths are absolute (trials run in another folder)."""
    j = json.loads(json.dumps(job))
    c = j["config"]
    c["train"]["out_dir"] = str(Path(c["train"]["out_dir"]).resolve())
    for k in ("path", "cache_dir"):
        if c.get("data", {}).get(k):
            c["data"][k] = str(Path(c["data"][k]).resolve())
    return j


def connect(ray, address: Optional[str], log: Log) -> bool:
    """Start Ray here (127.0.0.1) or join the cluster at ``address``; True when this call connected."""
    if ray.is_initialized():
        return False  # the caller (a notebook, a test) is connected already: use that cluster
    t0 = time.time()
    kw: dict = {"log_to_driver": False, "logging_level": logging.WARNING}
    if address is None:  # "local": a new Ray for this sweep, even when `ray start` left one running here
        kw.update(address="local", num_cpus=cores(), include_dashboard=False, _node_ip_address="127.0.0.1")
    else:
        kw["address"] = address
    try:
        ray.init(**kw)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
        where = f"the Ray cluster at {address}" if address else "Ray on this machine"
        raise DepthlabError(f"cannot connect to {where}: {_one_line(str(e), 300)}; start the cluster first "
                            "(ray start --head), or drop --ray_address to start Ray here") from None
    res = ray.cluster_resources()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    log(f"ray: {'connected to ' + address if address else 'started on 127.0.0.1'} in {time.time() - t0:.1f}s: "
        f"{counted(len(nodes), 'node')}, {res.get('CPU', 0):g} CPU, {res.get('GPU', 0):g} GPU")
    return True


def check_storage(ray, sweep_dir: Path, probe: Callable = storage_probe, timeout_s: float = 120.0) -> None:
    """Check that a task on every alive node reads and writes ``sweep_dir`` (the same folder as here).

    Raises:
        DepthlabError: a node cannot read the driver's token file, sees another folder, or cannot
            write there (names the node and its address), or does not answer within ``timeout_s``.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    check = sweep_dir / _CHECK_DIR
    check.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    (check / "token").write_text(token, encoding="utf-8")
    task = ray.remote(num_cpus=0, max_retries=0)(probe)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
        str(check), token) for n in nodes]
    problems = []
    for node, ref in zip(nodes, refs):
        try:
            err = ray.get(ref, timeout=timeout_s)
        except Exception as e:  # noqa: BLE001 - a node that cannot even run the check is a problem to report
            err = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
        if err:
            problems.append(f"node {str(node.get('NodeID'))[:12]} ({node.get('NodeManagerAddress')}): {err}")
    shutil.rmtree(check, ignore_errors=True)
    if problems:
        raise DepthlabError(f"the sweep directory {sweep_dir} is not usable from every Ray node: {'; '.join(problems)}"
                            "; put --out_dir on storage every node mounts at the same path (e.g. NFS), and install "
                            "depthlab on every node")


def _error_message(trial) -> str:
    """One line saying why a Tune trial failed: its exception (``ActorDiedError: ...`` for a killed process)."""
    err = None
    try:  # the exception as Tune pickled it a moment ago, in this process, next to error.txt
        from ray import cloudpickle

        with open(trial.pickled_error_file, "rb") as f:
            err = cloudpickle.load(f)
    except Exception:  # noqa: BLE001 - no or an unreadable pickle: fall back to the text
        err = None
    cause = getattr(err, "cause", None)  # RayTaskError wraps the trial's own exception
    if isinstance(cause, BaseException):
        err = cause
    if err is not None:
        return _one_line(f"{type(err).__name__}: {err}")
    text = ""
    try:
        text = Path(trial.error_file).read_text(encoding="utf-8", errors="replace") if trial.error_file else ""
    except OSError:
        pass
    text = re.sub(r"^Failure # \d+ \(occurred at [^)]*\)\s*", "", text)
    return _one_line(text or "the trial failed without an error message")


def _failed_row(job: dict, status: str, message: str, t0: float) -> dict:
    """Write (and return) the status of a run whose trial ended without writing one."""
    res = {"name": job["name"], "status": status, "message": message, "wall_s": round(time.time() - t0, 3),
           "threads": job.get("threads"), "backend": "ray"}
    out = Path(job["config"]["train"]["out_dir"])
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / rundir.SWEEP_STATUS, res)
    except OSError:
        pass
    return res


def _finished(job: dict) -> Optional[dict]:
    """The status the trial of ``job`` wrote, or None when it wrote none."""
    st = RunDir(job["config"]["train"]["out_dir"]).sweep_status
    return st if isinstance(st, dict) and st.get("name") == job["name"] else None


def _callback(tune, progress: Progress, results: dict, scheduler: str, t0: float):
    """A Tune callback (driver side) that turns each ended trial into a result row and a progress line."""

    class _Rows(tune.Callback):
        def _done(self, trial, res: dict) -> None:
            res["run_dir"] = trial.config["job"]["config"]["train"]["out_dir"]
            results[res["name"]] = res
            progress(res)

        def on_trial_complete(self, iteration, trials, trial, **info):
            job = trial.config["job"]
            res = _finished(job)
            if res is None:  # ended without a status: stopped by the scheduler (or by Tune)
                step = (trial.last_result or {}).get("step")
                res = _failed_row(job, "stopped", f"stopped early by the {scheduler} scheduler at step {step}",
                                  getattr(trial, "start_time", None) or t0)
            self._done(trial, dict(res))

        def on_trial_error(self, iteration, trials, trial, **info):
            job = trial.config["job"]
            res = _finished(job) or _failed_row(job, "failed", _error_message(trial),
                                                getattr(trial, "start_time", None) or t0)
            self._done(trial, dict(res))

    return _Rows()


def _trial_name(trial) -> str:
    """Tune's name of a trial: the run's name."""
    return trial.config["job"]["name"]


def _trial_dirname(trial) -> str:
    """Tune's folder of a trial: the run's name made safe for a path, plus the trial id."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", trial.config["job"]["name"])[:80] + "-" + trial.trial_id


def _scheduler(tune, scheduler: str, jobs: list):
    """FIFO, or ASHA on ``val_loss`` (nats) over ``step`` with a grace period of a quarter of the longest run."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    if scheduler == "fifo":
        return FIFOScheduler()
    max_t = max(int(j["config"]["train"]["max_iters"]) for j in jobs)
    return ASHAScheduler(time_attr="step", metric="val_loss", mode="min", max_t=max_t, grace_period=max(1, max_t // 4),
                         reduction_factor=2)


def trial_resources(ray, jobs: list) -> dict:
    """What a trial reserves: its threads as CPUs, plus one GPU when the cluster has GPUs and the runs may use one."""
    threads = max(1, int(jobs[0].get("threads") or 1))
    gpus = ray.cluster_resources().get("GPU", 0)
    if gpus >= 1 and all(str(j["config"]["train"].get("device", "auto")).startswith(("auto", "cuda")) for j in jobs):
        return {"cpu": threads, "gpu": 1}
    return {"cpu": threads}


def _tuner(ray, tune, jobs: list, sweep_dir: Path, workers: int, scheduler: str, callback):
    """The ``Tuner`` over the grid: one trial per job, no retries, Tune's files in ``sweep_dir/ray_tune``."""
    shutil.rmtree(sweep_dir / TUNE_DIR, ignore_errors=True)  # bookkeeping of an earlier run of the command
    return tune.Tuner(
        tune.with_resources(_trial, trial_resources(ray, jobs)),
        param_space={"job": tune.grid_search(jobs), "report_evals": scheduler != "fifo"},
        tune_config=tune.TuneConfig(scheduler=_scheduler(tune, scheduler, jobs), max_concurrent_trials=workers or None,
                                    reuse_actors=scheduler == "fifo", trial_name_creator=_trial_name,
                                    trial_dirname_creator=_trial_dirname),
        run_config=tune.RunConfig(name=TUNE_DIR, storage_path=str(sweep_dir), verbose=0, callbacks=[callback],
                                  failure_config=tune.FailureConfig(max_failures=0)))


def _quiet_tune() -> list:
    """Silence Tune's loggers (the sweep prints one line per run); returns what to restore."""
    old = []
    for name in ("ray.tune", "ray.train", "ray.air"):
        lg = logging.getLogger(name)
        old.append((lg, lg.level))
        lg.setLevel(logging.CRITICAL)
    return old


def _fit(tuner) -> None:
    """``tuner.fit()`` with SIGTERM turned into KeyboardInterrupt (as the local backend does) and Tune quiet."""
    def on_term(signum, frame):
        raise KeyboardInterrupt

    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, on_term)
    old_levels = _quiet_tune()
    try:
        tuner.fit()
    finally:
        for lg, level in old_levels:
            lg.setLevel(level)
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


def run_trials(jobs: list, sweep_dir: str | Path, log: Log, total: int, n_done: int, address: Optional[str] = None,
               workers: int = 0, scheduler: str = "fifo") -> list:
    """Run ``jobs`` as the trials of one Ray Tune ``Tuner`` (see the module docstring).

    Args:
        jobs: ``{"name", "config", "threads", "hparams"}`` each (see :func:`depthlab.sweep.local.execute`).
        sweep_dir: the sweep directory (must be writable from every node; checked first).
        log: ``callable(str)`` for one progress line per finished run.
        total: runs in the whole sweep (for ``[k/total]``).
        n_done: runs already finished before this call.
        address: ``auto`` / ``HOST:PORT`` of a running cluster, or None to start Ray on 127.0.0.1.
        workers: trials at a time; 0 = as many as the cluster's CPUs hold.
        scheduler: ``fifo`` or ``asha``.

    Returns:
        One result per job that ended (:func:`execute`'s result, or a ``failed``/``stopped`` row,
        plus ``run_dir``), in finishing order.

    Raises:
        DepthlabError: Ray missing, unreachable, or a node that cannot use the sweep directory.
        KeyboardInterrupt: the sweep was interrupted (Ctrl-C, SIGTERM) before every trial ended;
            the running trials are stopped.
    """
    if not jobs:
        return []
    _prepare_env(address)
    ray, tune = import_ray()
    sweep_dir = Path(sweep_dir).resolve()
    jobs = [absolute_job(j) for j in jobs]
    results: dict = {}
    if not ray.is_initialized():  # as ray_runner checks it (run_trials may be called without it)
        check_reachable(address)
    owned = connect(ray, address, log)
    try:
        check_storage(ray, sweep_dir)
        cb = _callback(tune, Progress(log, total, n_done), results, scheduler, time.time())
        _fit(_tuner(ray, tune, jobs, sweep_dir, workers, scheduler, cb))
    finally:
        if owned:
            ray.shutdown()
    if len(results) < len(jobs):  # Tune stopped early (its own SIGINT handler); the rest is redone next time
        raise KeyboardInterrupt
    return list(results.values())

"""Sweeps on a real Ray cluster: the head and worker node `cluster/ray.sh up` starts on this host,
driven by `train.py -m ... hydra/launcher=ray_cluster` through Hydra's Ray launcher. Marked `ray`
(and `slow`); skipped, with the install command, where Ray is not installed (uv sync --extra ray)."""
import contextlib
import fcntl
import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.cluster_sweeps import kill_worker_node
from helpers import (LONG_RUN, ROOT, assert_same_weights, checkpoint_steps, final_weights, session_dir,
                     uninterrupted_long_run)

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SHORT = ["total_steps=600", "learning_starts=200", "eval_every=200", "eval_episodes=2", "logger.progress=false"]
ON_RAY = ["hydra/launcher=ray_cluster", "speed.threads.inter_op=1", "speed.threads.intra_op=1"]
RAY_DIR = "/tmp/tfrl-ray"


def ray_sh(command: str, env, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", os.path.join(ROOT, "cluster", "ray.sh"), command], capture_output=True, text=True,
                          timeout=timeout, env=env)


def ray_up(env) -> str:
    """Start what of the cluster is not running (a head, one worker node): RAY_ADDRESS."""
    proc = ray_sh("up", env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (address,) = [line.split("=", 1)[1] for line in proc.stdout.splitlines() if line.startswith("export RAY_ADDRESS=")]
    return address


def head_running() -> bool:
    """Whether cluster/ray.sh's head node is alive (its pid file names a live, unreaped process)."""
    try:
        with open(os.path.join(RAY_DIR, "head.pid")) as f, open(f"/proc/{int(f.read())}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, ValueError, IndexError):
        return False


@contextlib.contextmanager
def held_for_this_session(tmp_path_factory, env):
    """This session's hold on the cluster, shared by the xdist workers whose tests use it (a count
    under a lock in the session's temp dir; xdist may run this module's tests on two workers): the
    last to finish takes it down, so its idle daemons (about 7% of a core) do not run through the
    rest of the suite. A cluster that was up before the session (a developer's) stays up."""
    shared = session_dir(tmp_path_factory)
    record = shared / "ray_users.json"

    def change(by: int) -> None:
        with open(shared / "ray_users.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = json.loads(record.read_text()) if record.exists() else {"users": 0, "ours": not head_running()}
            state["users"] += by
            record.write_text(json.dumps(state))
            if state["users"] == 0 and state["ours"]:
                ray_sh("down", env, timeout=120)

    change(+1)
    try:
        yield
    finally:
        change(-1)


@pytest.fixture(scope="module")
def ray_env(tmp_path_factory):
    if importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None:
        pytest.skip("Ray and Hydra's Ray launcher are not installed: uv sync --extra ray")
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}", "TFRL_RAY_DIR": RAY_DIR}
    with held_for_this_session(tmp_path_factory, env):
        yield {**env, "RAY_ADDRESS": ray_up(env)}


def multirun(env, sweep_dir, *overrides, timeout=900):
    cmd = [sys.executable, "train.py", "-m", f"hydra.sweep.dir={sweep_dir}", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def test_a_sweep_runs_as_ray_tasks_and_aggregates_the_points_that_did_not_fail(ray_env, tmp_path):
    """Three points, the first with a bad value: it records its error, the two others train as Ray
    tasks on the worker node, and aggregate.py counts them and reports the failed one."""
    sweep = tmp_path / "sweep"
    proc = multirun(ray_env, sweep, "batch_size=0,64,128", *SHORT, *ON_RAY)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"error: 1 point of the sweep failed ({sweep / '0'}: batch_size must be a positive integer" in proc.stderr
    assert "(_run_job pid=" in proc.stdout + proc.stderr  # Ray's prefix of a task's output
    failed = json.loads((sweep / "0" / "failed.json").read_text())
    assert failed["exit_code"] == 2 and failed["error"].startswith("batch_size must be a positive integer")
    for job in ("1", "2"):
        summary = json.loads((sweep / job / "summary.json").read_text())
        assert summary["steps"] == 600 and not summary["stopped"]
    agg = subprocess.run([sys.executable, "aggregate.py", str(sweep), "--out", str(tmp_path / "agg")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert agg.returncode == 0, agg.stderr[-3000:]
    assert "| td3 | pendulum | 2 |" in agg.stdout, agg.stdout
    assert f"skipped {sweep / '0'}: failed with exit code 2: batch_size must be a positive integer" in agg.stdout


def test_a_job_whose_node_dies_is_retried_on_a_new_node_and_ends_as_the_uninterrupted_run(ray_env, tmp_path_factory,
                                                                                          tmp_path):
    """The worker node dies with everything on it (SIGKILL to its raylet and the processes below,
    as when a machine is pre-empted), a new node joins, Ray retries the job there, and the run
    continues from its last checkpoint to the weights of the run uninterrupted."""
    uninterrupted = uninterrupted_long_run(tmp_path_factory)
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "train.py", "-m", f"hydra.sweep.dir={sweep}", "seed=0", *LONG_RUN, *ON_RAY]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ray_env)
    deadline = time.time() + 600
    while not checkpoint_steps(sweep / "0"):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.5)
    kill_worker_node(RAY_DIR)
    ray_up(ray_env)  # the replacement node
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    summary = json.loads((sweep / "0" / "summary.json").read_text())
    assert summary["steps"] == 4000 and not summary["stopped"]
    assert "resumed" in out, out[-3000:]
    assert_same_weights(final_weights(sweep / "0"), uninterrupted)

"""Exact resume: a run stopped by a signal (SIGINT, SIGTERM, SIGKILL) and resumed ends where the
uninterrupted run does; a finished run is extended only to a larger total."""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import ROOT, RUN, final_weights, read_csv, resume, train

LONG = "total_steps=2000"  # long enough after the first checkpoint that a signal lands mid-run


@pytest.fixture(scope="module")
def long_reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("long_reference")
    proc = train(run_dir, LONG)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_process_group_stops_async_envs_at_a_checkpoint(tmp_path, sig):
    """Ctrl-C in a terminal (or a cluster's SIGTERM) reaches the env workers too: the run must still
    stop at a checkpoint and say how to resume, not die in a worker's KeyboardInterrupt."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "train.py", f"hydra.run.dir={run_dir}", *RUN, LONG, "num_envs=2", "speed.vectorization=async"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not glob.glob(str(run_dir / "checkpoints" / "step_0000000200")):
        time.sleep(0.1)
    time.sleep(0.3)
    assert proc.poll() is None, "run finished before it could be interrupted"
    os.killpg(proc.pid, sig)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, err[-3000:]
    assert f"stopped by {signal.Signals(sig).name}" in out and f"resume={run_dir}" in out
    assert "Traceback" not in err
    steps = sorted(int(os.path.basename(p)[5:]) for p in glob.glob(str(run_dir / "checkpoints" / "step_*")))
    assert steps[-1] > 200  # the stop checkpoint, past the periodic one


def lock_holder(run_dir):
    """The pid that run.lock names, or None (no file yet, or its record half written)."""
    try:
        return json.loads((run_dir / "run.lock").read_text()).get("pid")
    except (FileNotFoundError, ValueError):
        return None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_resume_after_kill_reproduces_the_uninterrupted_run(tmp_path, long_reference, sig):
    reference = long_reference
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "train.py", f"hydra.run.dir={run_dir}", *RUN, LONG], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # wait until the run is past its first periodic checkpoint, then kill it mid-run
    deadline = time.time() + 300
    while time.time() < deadline and not glob.glob(str(run_dir / "checkpoints" / "step_0000000200")):
        time.sleep(0.1)
    time.sleep(0.3)
    assert proc.poll() is None, "run finished before it could be interrupted"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
        assert "stopped by SIGTERM" in out and f"resume={run_dir}" in out
    else:
        assert proc.returncode == -signal.SIGKILL
        # the killed run's hold is stale: its record is left, its lock went with the process
        assert lock_holder(run_dir) == proc.pid
    assert not os.path.exists(run_dir / "summary.json")

    # two resumes at once: the one that comes second is refused, naming the first, and writes nothing
    first = subprocess.Popen([sys.executable, "train.py", f"resume={run_dir}"], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while time.time() < deadline and lock_holder(run_dir) != first.pid:
        time.sleep(0.1)
    listing = sorted(os.listdir(run_dir / "checkpoints"))
    second = resume(run_dir)
    assert second.returncode == 2, second.stderr[-3000:]
    assert f"being written by another live process (pid {first.pid} on" in second.stderr
    assert "Traceback" not in second.stderr
    assert first.poll() is None, "the first resume ended before the second one tried"
    assert set(listing) <= set(os.listdir(run_dir / "checkpoints"))
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    assert "resumed" in out and not (run_dir / "run.lock").exists()
    ref, res = final_weights(reference), final_weights(run_dir)
    assert ref.keys() == res.keys() and len(ref) > 10
    for k in ref:
        np.testing.assert_array_equal(ref[k], res[k], err_msg=k)
    def evals(d):  # everything but the wall clock
        return [{k: v for k, v in r.items() if k != "wall_time"} for r in read_csv(d / "eval.csv")]

    assert evals(run_dir) == evals(reference)
    ref_summary = json.loads((reference / "summary.json").read_text())
    res_summary = json.loads((run_dir / "summary.json").read_text())
    assert res_summary["final_return"] == ref_summary["final_return"]
    assert res_summary["updates"] == ref_summary["updates"] == 1800


def test_resume_refuses_a_finished_run_without_a_larger_total(tmp_path, reference, cli):
    before = sorted(os.listdir(reference / "checkpoints"))
    proc = cli.resume(reference)
    assert proc.returncode == 2
    assert "already reached 600 steps" in proc.stderr and "total_steps=" in proc.stderr
    assert sorted(os.listdir(reference / "checkpoints")) == before
    proc = cli.resume(reference, "batch_size=32")
    assert proc.returncode == 2 and "batch_size=32 cannot be" in proc.stderr


def test_resume_extends_a_finished_run(tmp_path, reference):
    run_dir = tmp_path / "extended"
    shutil.copytree(reference, run_dir)
    proc = resume(run_dir, "total_steps=800", f"hydra.run.dir={tmp_path / 'hydra_dir'}")
    assert not (tmp_path / "hydra_dir").exists()  # resume continues in the run's dir: Hydra's own is removed
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [int(r["step"]) for r in read_csv(run_dir / "eval.csv")] == [0, 200, 400, 600, 800]
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 800
    # the summary of the run as it first finished is kept aside, not left to describe the extension
    assert json.loads((run_dir / "summary_600.json").read_text())["steps"] == 600

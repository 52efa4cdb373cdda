"""Sweeps on a real SLURM cluster: the one-host cluster `cluster/slurm.sh up` brings up (munge,
slurmctld, slurmd), driven by `train.py -m ... hydra/launcher=slurm` through Hydra's submitit
plugin, as a user on a cluster runs them. Marked `slurm` (and `slow`); the first test brings the
cluster up, installing Debian's packages where they are missing, and they are skipped only where
SLURM is missing and cannot be installed (no root, or no apt-get), with the script's message."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from helpers import LONG_RUN, ROOT, assert_same_weights, checkpoint_steps, final_weights, read_csv, uninterrupted_long_run

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# Short Pendulum runs, one CPU each: the cluster has two.
SHORT = ["total_steps=600", "learning_starts=200", "eval_every=200", "eval_episodes=2", "logger.progress=false"]
ON_THIS_CLUSTER = ["hydra/launcher=slurm", "hydra.launcher.partition=main", "hydra.launcher.gpus_per_node=0",
                   "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2", "hydra.launcher.timeout_min=20",
                   "speed.threads.inter_op=1", "speed.threads.intra_op=1"]


@pytest.fixture(scope="module")
def slurm_env():
    """The environment in which sbatch and squeue reach the cluster (SLURM_CONF), the cluster up."""
    proc = subprocess.run(["bash", os.path.join(ROOT, "cluster", "slurm.sh"), "up"], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode == 3:  # not installed, and this machine cannot install it (no root or no apt-get)
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (conf,) = [line.split("=", 1)[1] for line in proc.stdout.splitlines() if line.startswith("export SLURM_CONF=")]
    return {**os.environ, "SLURM_CONF": conf}


def multirun(env, sweep_dir, *overrides, timeout=900):
    cmd = [sys.executable, "train.py", "-m", f"hydra.sweep.dir={sweep_dir}", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def job_dirs(sweep_dir):
    return sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def test_a_seed_sweep_runs_as_slurm_jobs_and_aggregates_the_points_that_did_not_fail(slurm_env, tmp_path):
    """Seeds 0 and 1, and a third point whose seed is refused (-1): the bad point fails alone, with
    its error recorded for aggregate.py, and the others finish."""
    sweep = tmp_path / "sweep"
    proc = multirun(slurm_env, sweep, "seed=0,1,-1", *SHORT, *ON_THIS_CLUSTER)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"error: 1 point of the sweep failed ({sweep / '2'}: seed must be an integer" in proc.stderr
    jobs = job_dirs(sweep)
    assert [job.name for job in jobs] == ["0", "1", "2"]
    summaries = [json.loads((job / "summary.json").read_text()) for job in jobs[:2]]
    assert [s["seed"] for s in summaries] == [0, 1]
    for job, summary in zip(jobs, summaries):
        assert summary["steps"] == 600 and not summary["stopped"]
        assert [int(r["step"]) for r in read_csv(job / "eval.csv")] == [0, 200, 400, 600]
    failed = json.loads((sweep / "2" / "failed.json").read_text())
    assert failed["exit_code"] == 2 and failed["error"].startswith("seed must be an integer in [0, 2**31), got -1")
    assert not (sweep / "2" / "summary.json").exists()
    # each job ran as a task of one SLURM array job: submitit's logs name it (<array id>_<task>)
    logs = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.out"))
    assert len(re.findall(r"Starting with JobEnvironment\(job_id=\d+_[012],", logs)) == 3, logs[-2000:]
    agg = subprocess.run([sys.executable, "aggregate.py", str(sweep), "--out", str(tmp_path / "agg")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert agg.returncode == 0, agg.stderr[-3000:]
    assert "| td3 | pendulum | 2 |" in agg.stdout, agg.stdout
    assert f"skipped {sweep / '2'}: failed with exit code 2: seed must be an integer" in agg.stdout, agg.stdout


def test_a_partition_it_lacks_or_a_cluster_that_does_not_answer_is_refused_before_any_job(slurm_env, tmp_path):
    sweep = tmp_path / "sweep"
    elsewhere = [o for o in ON_THIS_CLUSTER if not o.startswith("hydra.launcher.partition=")]
    proc = multirun(slurm_env, sweep, "seed=0,1", *SHORT, *elsewhere, "hydra.launcher.partition=gpu", timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "this SLURM cluster has no partition gpu; its partitions are main, short" in proc.stderr
    # the same cluster's config with a port where no controller listens
    conf = tmp_path / "slurm.conf"
    conf.write_text(re.sub(r"^ClusterName=.*$", r"\g<0>\nSlurmctldPort=6899", open(slurm_env["SLURM_CONF"]).read(),
                           flags=re.M))
    proc = multirun({**slurm_env, "SLURM_CONF": str(conf)}, sweep, "seed=0,1", *SHORT, *ON_THIS_CLUSTER, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "cannot reach the SLURM cluster" in proc.stderr and "Unable to contact slurm controller" in proc.stderr
    assert "Traceback" not in proc.stderr and not sweep.exists()  # nothing submitted, no sweep dir


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    return uninterrupted_long_run(tmp_path_factory)


def test_a_job_requeued_by_the_scheduler_then_warned_of_its_time_limit_ends_as_the_uninterrupted_run(
        slurm_env, uninterrupted, tmp_path):
    """One job, interrupted the two ways a cluster interrupts a run, each after a checkpoint:
    - `scontrol requeue`, as a pre-emption does: SLURM sends the job SIGTERM, the run checkpoints
      and exits, and SLURM starts the job again;
    - SIGUSR2, as SLURM sends it `signal_delay_s` before a job's time limit (sent here with scancel:
      SLURM times its own warning to within 60 s only): the run checkpoints and hands the signal
      to submitit, which requeues the job.
    Each start continues from the checkpoint of the stop before it, and the run ends with the
    weights of the run never interrupted."""
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "train.py", "-m", f"hydra.sweep.dir={sweep}", "seed=0", *LONG_RUN, *ON_THIS_CLUSTER]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=slurm_env)
    _wait_for(proc, lambda: checkpoint_steps(sweep / "0"))
    (job,) = subprocess.run(["squeue", "-h", "-o", "%i"], env=slurm_env, capture_output=True, text=True,
                            check=True).stdout.split()
    subprocess.run(["scontrol", "requeue", job], env=slurm_env, check=True)
    # the second start resumed from the stop's checkpoint and wrote one of its own after it
    first_stop = _wait_for(proc, lambda: _stops(sweep, "SIGTERM"))[0]
    _wait_for(proc, lambda: [s for s in checkpoint_steps(sweep / "0") if s > first_stop])
    subprocess.run(["scancel", "--signal=USR2", job], env=slurm_env, check=True)

    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads((sweep / "0" / "summary.json").read_text())
    assert summary["steps"] == 4000 and not summary["stopped"]
    logs = _logs(sweep)
    stops = [_stops(sweep, "SIGTERM"), _stops(sweep, "SIGUSR2")]
    resumed = [int(s) for s in re.findall(r"resumed \S+ from step_\d+ at step (\d+)", logs)]
    # each start resumed where the stop before it was (not from an earlier periodic checkpoint)
    assert [len(set(s)) for s in stops] == [1, 1] and resumed == [stops[0][0], stops[1][0]], logs[-3000:]
    assert 1000 <= stops[0][0] < stops[1][0] < 4000, stops
    # submitit's handler had the SIGUSR2 the run passed on, and requeued the job: it started three
    # times (its "Requeued job" line may not come: SLURM's SIGTERM for the requeue can end it first)
    assert "Caught signal SIGUSR2" in logs and logs.count("Starting with JobEnvironment") == 3, logs[-3000:]
    assert_same_weights(final_weights(sweep / "0"), uninterrupted)


def _logs(sweep) -> str:
    """The sweep's submitit logs: the stdout of every start of its jobs."""
    return "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.out")) if sweep.exists() else ""


def _stops(sweep, signal_name: str) -> list[int]:
    """The steps at which the sweep's job said it stopped on the signal (it may say so twice)."""
    return [int(s) for s in re.findall(rf"stopped by {signal_name} at step (\d+)", _logs(sweep))]


def _wait_for(proc, found, timeout=600):
    """Poll `found()` until it returns something true, while the sweep runs; return it."""
    deadline = time.time() + timeout
    while not (result := found()):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.2)
    return result

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

from helpers import LONG_RUN, ROOT, assert_same_weights, final_weights, has_a_checkpoint, read_csv, uninterrupted_long_run

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


def test_a_seed_sweep_runs_as_slurm_jobs_and_aggregates(slurm_env, tmp_path):
    sweep = tmp_path / "sweep"
    proc = multirun(slurm_env, sweep, "seed=0,1", *SHORT, *ON_THIS_CLUSTER)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = job_dirs(sweep)
    summaries = [json.loads((job / "summary.json").read_text()) for job in jobs]
    assert sorted(s["seed"] for s in summaries) == [0, 1]
    for job, summary in zip(jobs, summaries):
        assert summary["steps"] == 600 and not summary["stopped"]
        assert [int(r["step"]) for r in read_csv(job / "eval.csv")] == [0, 200, 400, 600]
    # each job ran as a task of one SLURM array job: submitit's logs name it (<array id>_<task>)
    logs = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.out"))
    assert len(re.findall(r"Starting with JobEnvironment\(job_id=\d+_[01],", logs)) == 2, logs[-2000:]
    agg = subprocess.run([sys.executable, "aggregate.py", str(sweep), "--out", str(tmp_path / "agg")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert agg.returncode == 0, agg.stderr[-3000:]
    assert "| td3 | pendulum | 2 |" in agg.stdout, agg.stdout


def test_a_sweep_point_that_fails_leaves_the_others_to_finish_and_aggregate_reports_it(slurm_env, tmp_path):
    sweep = tmp_path / "sweep"
    proc = multirun(slurm_env, sweep, "batch_size=0,64", *SHORT, *ON_THIS_CLUSTER)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    failed = json.loads((sweep / "0" / "failed.json").read_text())
    assert failed["exit_code"] == 2 and failed["error"].startswith("batch_size must be a positive integer")
    assert json.loads((sweep / "1" / "summary.json").read_text())["steps"] == 600
    agg = subprocess.run([sys.executable, "aggregate.py", str(sweep), "--out", str(tmp_path / "agg")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert agg.returncode == 0, agg.stderr[-3000:]
    assert "| td3 | pendulum | 1 |" in agg.stdout, agg.stdout
    assert f"skipped {sweep / '0'}: failed with exit code 2: batch_size must be a positive integer" in agg.stdout


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


def test_a_job_the_scheduler_requeues_mid_run_ends_as_the_uninterrupted_run(slurm_env, uninterrupted, tmp_path):
    """`scontrol requeue`, as a pre-emption does: SLURM sends the job SIGTERM, the run checkpoints
    and exits, SLURM starts the job again, and it continues from the checkpoint."""
    sweep = tmp_path / "sweep"
    proc, job = _start_and_wait_for_a_checkpoint(slurm_env, sweep)
    subprocess.run(["scontrol", "requeue", job], env=slurm_env, check=True)
    logs = _finished_as_uninterrupted(proc, sweep, uninterrupted)
    _assert_resumed_where_stopped(logs, "SIGTERM")
    assert logs.count("Starting with JobEnvironment") == 2  # one job, started twice by SLURM


def _start_and_wait_for_a_checkpoint(env, sweep, *overrides):
    """A one-job sweep started on the cluster, once its run has written a checkpoint: (the sweep's
    process, the SLURM job id)."""
    cmd = [sys.executable, "train.py", "-m", f"hydra.sweep.dir={sweep}", "seed=0", *LONG_RUN, *ON_THIS_CLUSTER, *overrides]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 600
    while not has_a_checkpoint(sweep / "0"):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.5)
    (job,) = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True,
                            check=True).stdout.split()
    return proc, job


def _finished_as_uninterrupted(proc, sweep, uninterrupted) -> str:
    """Wait for the sweep; its one run finished whole, with the uninterrupted run's weights. Returns
    the job's submitit logs (stdout of every start)."""
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads((sweep / "0" / "summary.json").read_text())
    assert summary["steps"] == 6000 and not summary["stopped"]
    assert_same_weights(final_weights(sweep / "0"), uninterrupted)
    return "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.out"))


def _assert_resumed_where_stopped(logs: str, signal_name: str) -> None:
    """The job stopped mid-run on the signal, with a checkpoint at that step, and its next start
    resumed from that step (not from an earlier periodic checkpoint)."""
    stopped = re.findall(rf"stopped by {signal_name} at step (\d+)", logs)
    resumed = re.findall(r"resumed \S+ from step_\d+ at step (\d+)", logs)
    assert len(resumed) == 1 and set(stopped) == set(resumed), logs[-3000:]  # (the stop may be told twice)
    assert 2000 < int(stopped[0]) < 6000


def test_a_job_warned_of_its_time_limit_checkpoints_is_requeued_and_ends_as_the_uninterrupted_run(slurm_env, uninterrupted,
                                                                                               tmp_path):
    """SIGUSR2 from the scheduler to the job's steps, as SLURM sends it `signal_delay_s` before a
    job's time limit (sent here with scancel: SLURM times its own warning to within 60 s only):
    the run checkpoints, hands the signal to submitit, which requeues the job, and the job
    continues from the checkpoint."""
    sweep = tmp_path / "sweep"
    proc, job = _start_and_wait_for_a_checkpoint(slurm_env, sweep)
    subprocess.run(["scancel", "--signal=USR2", job], env=slurm_env, check=True)
    logs = _finished_as_uninterrupted(proc, sweep, uninterrupted)
    _assert_resumed_where_stopped(logs, "SIGUSR2")
    assert "Requeued job" in logs, logs[-3000:]  # by submitit, the handler the run passed SIGUSR2 on to

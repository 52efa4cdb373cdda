"""Faults of a run and of its machine, through the real train.py: a run whose losses become NaN,
an output or resume directory that cannot be written, and a disk that fills up while a checkpoint
(its networks or its replay buffer) is written. Each ends in one `error:` paragraph that names the
fix, no traceback, a documented exit code (2 bad input, 3 diverged, 4 a write failed), and keeps
every checkpoint written before it. The full disk is a real one: a small tmpfs mounted for the test
(root in this project's sandbox and CI; skipped with the reason where mounting is refused)."""
import glob
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["env=pendulum", "network.hidden=[32,32]", "batch_size=64", "eval_episodes=1", "logger.progress=false"]
DIVERGING = ["agent.critic_lr=1e12", "agent.actor_lr=1e12"]


def train(*args, timeout=600):
    return subprocess.run([sys.executable, "train.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def error_paragraph(proc):
    """The one `error:` paragraph on stderr (TensorFlow's own start-up lines aside)."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


@pytest.fixture
def tmpfs(tmp_path):
    """Mount a tmpfs of the given size (a real filesystem that fills up) under tmp_path."""
    mounted = []

    def mount(size: str, name: str = "disk"):
        path = tmp_path / name
        path.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here to fill a real disk (needs root): {proc.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path, options):
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True)


# --- bad output directories ----------------------------------------------------------------------
@pytest.mark.parametrize("where", ["/proc/forbidden", "file"])
def test_an_output_directory_that_cannot_be_written_is_refused(tmp_path, where):
    run_dir = "/proc/forbidden" if where == "/proc/forbidden" else str(tmp_path / "a_file" / "run")
    (tmp_path / "a_file").write_text("not a directory")
    proc = train(f"hydra.run.dir={run_dir}", *SMALL)
    assert proc.returncode == 2
    msg = error_paragraph(proc)
    assert msg.startswith(f"error: cannot write the run's output directory hydra.run.dir={run_dir}: ")
    assert ("it cannot be created in /proc" if where == "/proc/forbidden" else "a_file is a file, not a directory") in msg
    assert "leave hydra.run.dir out for the default outputs/<date>/<time>" in msg


def test_a_sweep_directory_that_cannot_be_written_is_refused():
    proc = train("-m", "hydra.sweep.dir=/proc/forbidden_sweep", "seed=0,1", *SMALL)
    assert proc.returncode == 2
    assert "cannot write the run's output directory hydra.sweep.dir=/proc/forbidden_sweep" in error_paragraph(proc)


def test_a_read_only_disk_is_refused_and_resume_of_a_run_on_it_too(tmpfs):
    disk = tmpfs("16m")
    run_dir = disk / "run"
    proc = train(f"hydra.run.dir={run_dir}", *SMALL, "total_steps=300", "learning_starts=200", "eval_every=300")
    assert proc.returncode == 0, proc.stderr[-3000:]
    remount(disk, "ro")

    proc = train(f"resume={run_dir}", "total_steps=400")
    assert proc.returncode == 2
    msg = error_paragraph(proc)
    assert f"cannot write in the run directory {run_dir}: a file cannot be written in it (Read-only file system)" in msg
    assert f"cp -r {run_dir} NEW_DIR" in msg and "python train.py resume=NEW_DIR" in msg

    proc = train(f"hydra.run.dir={disk}/new_run", *SMALL)
    assert proc.returncode == 2
    assert "it cannot be created in" in error_paragraph(proc) and "(Read-only file system)" in proc.stderr


# --- divergence ------------------------------------------------------------------------------------
def test_a_run_whose_losses_become_nan_stops_there_and_keeps_its_earlier_checkpoints(tmp_path):
    from training.checkpoints import verify

    run_dir = tmp_path / "run"
    proc = train(f"hydra.run.dir={run_dir}", *SMALL, *DIVERGING, "total_steps=3000", "learning_starts=300",
                 "logger.every=300", "checkpoint.every=300", "eval_every=3000")
    assert proc.returncode == 3, proc.stderr[-3000:]
    msg = error_paragraph(proc)
    # the first record with updates (step 600) is the first to see the NaN losses
    assert msg.startswith("error: training diverged: at step 600 the update metrics are NaN or infinite (critic_loss=nan")
    assert "agent.actor_lr=1e+12 agent.critic_lr=1e+12" in msg and "lower learning rates" in msg
    assert "scale of the env's rewards and observations" in msg
    assert "step_0000000300, best" in msg and "none holds the diverged weights" in msg
    assert "done:" not in proc.stdout
    # the checkpoint before it is kept and whole; none was written of the diverged weights
    ckpts = run_dir / "checkpoints"
    assert sorted(os.listdir(ckpts)) == ["best", "step_0000000300"]
    verify(str(ckpts / "step_0000000300"))
    # the NaN record is logged, and summary.json says where it diverged (aggregate.py counts it so)
    last = (run_dir / "update.csv").read_text().splitlines()[-1].split(",")
    assert last[0] == "600" and "nan" in last
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["diverged_at"] == 600 and summary["steps"] == 600 and math.isnan(summary["final_return"])


def test_diverged_weights_are_never_checkpointed_even_between_log_records(tmp_path):
    # no update record before the end (logger.every > total_steps): the final checkpoint's own check
    # of the weights finds them NaN and writes nothing
    run_dir = tmp_path / "run"
    proc = train(f"hydra.run.dir={run_dir}", *SMALL, *DIVERGING, "total_steps=600", "learning_starts=300",
                 "logger.every=5000", "checkpoint.every=0", "checkpoint.best=false", "eval_every=5000")
    assert proc.returncode == 3, proc.stderr[-3000:]
    msg = error_paragraph(proc)
    assert msg.startswith("error: training diverged: at step 600 the agent's weights or optimizer state are NaN or infinite (")
    assert "before it wrote a checkpoint" in msg
    assert not os.path.exists(run_dir / "checkpoints") or not os.listdir(run_dir / "checkpoints")


def test_a_diverged_job_of_a_sweep_does_not_end_the_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    proc = train("-m", f"hydra.sweep.dir={sweep}", *SMALL, "agent.critic_lr=1e12,3e-4",
                 "total_steps=600", "learning_starts=300", "logger.every=300", "eval_every=600")
    assert proc.returncode == 1, proc.stderr[-3000:]  # the sweep ran on, and ends naming the failed point
    assert "error: training diverged: at step 600" in proc.stderr
    assert f"error: 1 point of the sweep failed ({sweep / '0'}: training diverged at step 600)." in proc.stderr
    summaries = [json.loads((sweep / job / "summary.json").read_text()) for job in ("0", "1")]
    assert summaries[0]["diverged_at"] == 600 and summaries[1]["steps"] == 600


# --- a full disk -------------------------------------------------------------------------------------
def test_a_full_disk_at_the_first_checkpoint_removes_the_partial_one(tmpfs):
    # TD3 on Ant: its networks, targets and Adam moments (4.5 MB) do not fit on 4 MB; the first
    # checkpoint written is the best one, after the evaluation at step 0
    disk = tmpfs("4m")
    run_dir = disk / "run"
    proc = train(f"hydra.run.dir={run_dir}", "agent=td3", "env=ant", "checkpoint.every=500", "total_steps=1000",
                 "learning_starts=900", "eval_every=1000", "eval_episodes=1", "logger.progress=false")
    assert proc.returncode == 4, proc.stderr[-3000:]
    msg = error_paragraph(proc)
    assert msg.startswith("error: could not write the checkpoint checkpoints/best: the disk is full (No space left on device")
    assert "the partial checkpoints/best.tmp was removed" in msg and f"df -h {run_dir}" in msg
    assert "no whole checkpoint yet, so there is nothing to resume" in msg
    assert os.listdir(run_dir / "checkpoints") == []
    assert os.statvfs(disk).f_bfree * os.statvfs(disk).f_frsize > 3 << 20  # the space is free again


def test_a_full_disk_while_writing_the_replay_buffer_keeps_the_last_whole_checkpoint_to_resume(tmpfs):
    # TD3 on Ant with 64-unit networks (agent 0.55 MB, state 0.17 MB, buffer 0.43 MB per 500 steps)
    # on 3 MB: best and step 500 fit, step 1000's buffer.npz does not
    disk = tmpfs("3m")
    run_dir = disk / "run"
    proc = train(f"hydra.run.dir={run_dir}", "agent=td3", "env=ant", "network.hidden=[64,64]", "checkpoint.every=500",
                 "total_steps=2000", "learning_starts=1500", "eval_every=1000", "eval_episodes=1", "logger.progress=false")
    assert proc.returncode == 4, proc.stderr[-3000:]
    msg = error_paragraph(proc)
    assert msg.startswith("error: could not write the checkpoint checkpoints/step_0000001000: the disk is full "
                          f"(No space left on device: {run_dir}/checkpoints/step_0000001000.tmp/buffer.npz)")
    assert "the partial checkpoints/step_0000001000.tmp was removed" in msg
    assert msg.endswith(f"Its last whole checkpoint is checkpoints/step_0000000500 (step 500); continue from it "
                        f"with: python train.py resume={run_dir}")
    assert sorted(os.listdir(run_dir / "checkpoints")) == ["best", "step_0000000500"]
    assert not (run_dir / "summary.json").exists()

    # the command it names works once there is space
    remount(disk, "size=64m")
    proc = train(f"resume={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed" in proc.stdout and "from step_0000000500 at step 500" in proc.stdout and "done: 2000 steps" in proc.stdout


def test_a_full_disk_while_replacing_the_best_checkpoint_costs_no_other(tmpfs):
    import tensorflow as tf

    from training.checkpoints import Checkpointer, CheckpointWriteError, list_checkpoints, verify

    disk = tmpfs("2m")
    run_dir = str(disk / "run")
    weights = tf.Variable(np.arange(200_000, dtype=np.float32))  # 0.8 MB a checkpoint
    ckpt = Checkpointer(run_dir, {"w": weights}, keep=2)
    ckpt.save(100, {"loop": 1}, None)
    ckpt.save(100, {"loop": 1}, None, best=True)
    weights.assign(weights + 1)
    with pytest.raises(CheckpointWriteError) as err:  # a new best needs 0.8 MB more beside the old one
        ckpt.save(200, {"loop": 2}, None, best=True)
    msg = str(err.value)
    assert msg.startswith("could not write the checkpoint checkpoints/best: the disk is full (No space left on device")
    assert "Its last whole checkpoint is checkpoints/step_0000000100 (step 100)" in msg
    assert sorted(os.listdir(os.path.join(run_dir, "checkpoints"))) == ["best", "step_0000000100"]
    verify(os.path.join(run_dir, "checkpoints", "best"))  # the old best is whole
    assert list(list_checkpoints(run_dir)) == [100]
    assert not glob.glob(os.path.join(run_dir, "checkpoints", "*.tmp"))

"""Multirun sweeps as a user runs them: Hydra's real joblib, submitit_local and Optuna plugins,
a job requeued by submitit that resumes its checkpoint, and the bad inputs of a sweep."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.stats
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Short Pendulum runs: past learning_starts, three evaluations each.
SHORT = ["total_steps=600", "learning_starts=200", "eval_every=200", "eval_episodes=2", "logger.progress=false"]


def multirun(sweep_dir, *overrides, timeout=900, config_dir=None):
    cmd = [sys.executable, "train.py", *(["--config-dir", str(config_dir)] if config_dir else []), "-m",
           f"hydra.sweep.dir={sweep_dir}", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def job_dirs(sweep_dir):
    return sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def assert_complete_seed_sweep(sweep_dir, seeds):
    jobs = job_dirs(sweep_dir)
    assert len(jobs) == len(seeds)
    summaries = [json.loads((job / "summary.json").read_text()) for job in jobs]
    assert sorted(s["seed"] for s in summaries) == list(seeds)
    for job, summary in zip(jobs, summaries):
        assert summary["steps"] == 600 and not summary["stopped"]
        assert summary["agent"] == "td3" and summary["env"] == "pendulum"
        assert f"seed={summary['seed']}" in summary["overrides"]
        assert [int(r["step"]) for r in read_csv(job / "eval.csv")] == [0, 200, 400, 600]
        assert float(read_csv(job / "eval.csv")[-1]["return_mean"]) == summary["final_return"]
    # every seed trained its own agent
    assert len({s["final_return"] for s in summaries}) == len(seeds)
    return summaries


def test_joblib_launcher_runs_each_seed_in_its_own_job(tmp_path):
    sweep = tmp_path / "sweep"
    proc = multirun(sweep, "seed=0,1,2", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *SHORT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Joblib.Parallel(n_jobs=2" in proc.stdout + proc.stderr
    summaries = assert_complete_seed_sweep(sweep, [0, 1, 2])

    # aggregate.py on the real sweep: the table's numbers against a direct computation
    agg = subprocess.run([sys.executable, "aggregate.py", str(sweep)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert agg.returncode == 0, agg.stderr
    (row,) = read_csv(sweep / "aggregate" / "results.csv")
    finals = np.array([s["final_return"] for s in summaries])
    assert (row["agent"], row["env"], int(row["n_runs"]), int(row["n_incomplete"])) == ("td3", "pendulum", 3, 0)
    np.testing.assert_allclose(float(row["mean"]), finals.mean(), rtol=1e-12)
    np.testing.assert_allclose(float(row["iqm"]), scipy.stats.trim_mean(finals, 0.25), rtol=1e-12)
    assert float(row["iqm_ci_low"]) <= float(row["iqm"]) <= float(row["iqm_ci_high"])
    # a bootstrap mean lies within the runs' range (up to the rounding of a mean of equal values)
    slack = 1e-9 * np.abs(finals).max()
    assert finals.min() - slack <= float(row["mean_ci_low"]) <= float(row["mean_ci_high"]) <= finals.max() + slack
    assert "| td3 | pendulum | 3 |" in (sweep / "aggregate" / "results.md").read_text()
    for png in ("curves_pendulum.png", "performance_profile.png"):
        data = (sweep / "aggregate" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_submitit_local_launcher_runs_each_seed_in_its_own_job(tmp_path):
    sweep = tmp_path / "sweep"
    proc = multirun(sweep, "seed=0,1", "hydra/launcher=submitit_local", "logger.wandb=true", "wandb.mode=offline", *SHORT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (sweep / ".submitit").is_dir()
    assert_complete_seed_sweep(sweep, [0, 1])

    # one W&B run per job, all in one group named after the sweep
    from wandb.proto import wandb_internal_pb2
    from helpers import read_wandb_log

    runs = []
    for job in job_dirs(sweep):
        (log,) = job.glob("wandb/offline-run-*/run-*.wandb")
        for data in read_wandb_log(str(log)):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(data)
            if rec.WhichOneof("record_type") == "run":
                runs.append((rec.run.run_group, rec.run.display_name, rec.run.run_id))
                break
    assert {group for group, _, _ in runs} == {"sweep"}
    assert sorted(next(o for o in name.split(",") if o.startswith("seed=")) for _, name, _ in runs) == ["seed=0", "seed=1"]
    assert len({run_id for _, _, run_id in runs}) == 2


def _submitit_job_pid(sweep_dir) -> int | None:
    """The process of the submitit job running in `sweep_dir` (python -m submitit.core._submit)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        if "submitit.core._submit" in cmdline and str(sweep_dir) in cmdline:
            return int(pid)
    return None


def test_the_handler_handed_the_stop_runs_its_commands_with_sigterm_ignored():
    """submitit's handler runs `scontrol requeue`, and SLURM's SIGTERM for the requeue reaches that
    command too; killed before it exits, it reads as the job's failure (seen once in test_slurm).
    The handler the run hands its stop to starts its commands with SIGTERM ignored (an ignored
    signal stays ignored in a child), and the run's own SIGTERM handling comes back after it."""
    from training.stopping import StopSignal

    seen = []

    def launchers_handler(signum, frame):
        seen.append(subprocess.run([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGTERM) == signal.SIG_IGN)"],
                                   capture_output=True, text=True, check=True).stdout.strip())

    before_usr2, before_term = signal.signal(signal.SIGUSR2, launchers_handler), signal.getsignal(signal.SIGTERM)
    try:
        with StopSignal() as stop:
            os.kill(os.getpid(), signal.SIGUSR2)
            deadline = time.time() + 10
            while stop.signum is None and time.time() < deadline:
                time.sleep(0.01)
        assert stop.signum == signal.SIGUSR2
        stop.hand_over(7)
    finally:
        signal.signal(signal.SIGUSR2, before_usr2)
    assert seen == ["True"]
    assert signal.getsignal(signal.SIGTERM) == before_term


def test_preempted_submitit_job_is_requeued_and_resumes_its_checkpoint(tmp_path):
    """SIGUSR2 is submitit's pre-emption/timeout signal: the run checkpoints, hands the signal to
    submitit, which requeues the job, and the requeued job continues from that checkpoint."""
    from helpers import checkpoint_steps

    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "train.py", "-m", f"hydra.sweep.dir={sweep}", "seed=0", "total_steps=3000",
           "learning_starts=200", "eval_every=500", "eval_episodes=2", "checkpoint.every=500",
           "logger.progress=false", "hydra/launcher=submitit_local"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = sweep / "0"
    deadline = time.time() + 600
    while not checkpoint_steps(run_dir):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.5)
    pid = _submitit_job_pid(sweep)
    assert pid is not None
    os.kill(pid, signal.SIGUSR2)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]

    logs = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.*"))
    assert "Requeued job" in logs
    assert "resumed" in logs and "at step" in logs
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 3000 and not summary["stopped"]
    steps = [int(r["step"]) for r in read_csv(run_dir / "eval.csv")]
    assert steps == list(range(0, 3001, 500))  # each evaluation once: resumed, not restarted


def test_optuna_sweep_of_three_trials_maximises_the_final_return(tmp_path):
    sweep = tmp_path / "sweep"
    proc = multirun(
        sweep, "agent=dqn", "env=cartpole", "hydra/sweeper=optuna_dqn", "hydra.sweeper.n_trials=3",
        "total_steps=600", "learning_starts=200", "eval_every=300", "eval_episodes=2", "logger.progress=false",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = job_dirs(sweep)
    assert len(trials) == 3
    summaries = [json.loads((t / "summary.json").read_text()) for t in trials]
    assert all(s["steps"] == 600 and s["agent"] == "dqn" for s in summaries)
    # each trial ran the parameters Optuna proposed
    assert all(any(o.startswith("agent.lr=") for o in s["overrides"]) for s in summaries)
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["best_value"] == max(s["final_return"] for s in summaries)
    assert set(results["best_params"]) == {"agent.lr", "batch_size", "agent.target_update_every", "agent.eps_decay_steps"}


def test_search_space_naming_a_missing_key_is_refused_before_any_job(tmp_path):
    conf = tmp_path / "conf" / "hydra" / "sweeper"
    conf.mkdir(parents=True)
    (conf / "typo.yaml").write_text("defaults:\n  - optuna_dqn\nparams:\n  agent.lrr: tag(log, interval(1e-4, 3e-3))\n")
    sweep = tmp_path / "sweep"
    proc = multirun(sweep, "agent=dqn", "env=cartpole", "hydra/sweeper=typo", config_dir=tmp_path / "conf", timeout=120)
    assert proc.returncode == 2
    assert "search space (hydra.sweeper.params) names agent.lrr" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not any(p.is_dir() and p.name.isdigit() for p in sweep.iterdir()) if sweep.exists() else True

    proc = multirun(sweep, "agent=td3", "hydra/sweeper=optuna_dqn", timeout=120)
    assert proc.returncode == 2 and "use the preset that matches the agent" in proc.stderr


def test_launcher_whose_plugin_is_not_installed_gets_an_install_hint(capsys, monkeypatch, tmp_path):
    from helpers import train_in_process
    import training.plugins

    # Ray's plugin is an extra (uv sync --extra ray): as where it was not installed
    installed = training.plugins._installed
    monkeypatch.setattr(training.plugins, "_installed", lambda module: "ray" not in module and installed(module))
    proc = train_in_process(capsys, "-m", f"hydra.sweep.dir={tmp_path / 'sweep'}", "seed=0,1", "hydra/launcher=ray")
    assert proc.returncode == 2
    assert "needs Hydra's hydra-ray-launcher plugin" in proc.stderr and "uv sync --extra ray" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_slurm_sweep_where_sbatch_is_missing_is_refused_before_hydra_starts(capsys, monkeypatch):
    from helpers import train_in_process

    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # python, and no SLURM
    proc = train_in_process(capsys, "-m", "seed=0,1", "hydra/launcher=slurm")
    assert proc.returncode == 2, proc.stderr
    assert "`sbatch` is not on PATH" in proc.stderr and "hydra/launcher=joblib" in proc.stderr


def test_a_sweep_point_that_fails_is_recorded_and_the_points_after_it_still_run(tmp_path):
    """A bad value in the sweep's first point: that job records its error, the next job trains,
    the sweep ends with exit code 1 naming the failed point, and aggregate.py reports it."""
    sweep = tmp_path / "sweep"
    proc = multirun(sweep, "batch_size=0,64", "total_steps=300", "learning_starts=100", "eval_every=300",
                    "eval_episodes=1", "logger.progress=false")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "error: batch_size must be a positive integer, got 0" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.rstrip().endswith(
        f"error: 1 point of the sweep failed ({sweep / '0'}: batch_size must be a positive integer, got 0; set e.g. "
        f"batch_size=256.). The other points ran; aggregate.py {sweep} reports the failed ones and leaves them out. "
        f"Correct what the errors name and run the sweep again with resume=auto: it keeps the points that finished."), \
        proc.stderr[-1500:]
    failed = json.loads((sweep / "0" / "failed.json").read_text())
    assert failed["exit_code"] == 2 and failed["error"].startswith("batch_size must be a positive integer")
    assert json.loads((sweep / "1" / "summary.json").read_text())["steps"] == 300
    agg = subprocess.run([sys.executable, "aggregate.py", str(sweep)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert agg.returncode == 0, agg.stderr
    assert "| td3 | pendulum | 1 |" in agg.stdout
    assert f"skipped {sweep / '0'}: failed with exit code 2: batch_size must be a positive integer" in agg.stdout


def test_slurm_preset_composes_with_requeue_settings():
    proc = subprocess.run(
        [sys.executable, "train.py", "hydra/launcher=slurm", "hydra.launcher.partition=gpu", "--cfg", "hydra"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    launcher = yaml.safe_load(proc.stdout)["hydra"]["launcher"]
    assert launcher["_target_"].endswith("submitit_launcher.SlurmLauncher")
    assert launcher["partition"] == "gpu" and launcher["gpus_per_node"] == 1
    assert launcher["max_num_timeout"] > 0 and launcher["signal_delay_s"] > 0


def test_resume_auto_starts_a_fresh_run_and_continues_an_existing_one(tmp_path):
    def run(*overrides):
        cmd = [sys.executable, "train.py", f"hydra.run.dir={tmp_path}", "resume=auto", "total_steps=300",
               "learning_starts=200", "eval_every=150", "eval_episodes=1", "logger.progress=false", *overrides]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)

    # the records of an attempt killed before its first checkpoint: the fresh start logs these steps again
    (tmp_path / "eval.csv").write_text("step,return_mean\n0,-1.0\n150,-2.0\n")
    (tmp_path / "train.csv").write_text("step,episode_return,episode_length\n200,-3.0,200\n")
    first = run()
    assert first.returncode == 0, first.stderr[-3000:]
    assert "resumed" not in first.stdout
    assert [int(r["step"]) for r in read_csv(tmp_path / "eval.csv")] == [0, 150, 300]  # no stale rows
    assert [int(r["step"]) for r in read_csv(tmp_path / "train.csv")] == [200]
    assert "-3.0" not in (tmp_path / "train.csv").read_text()
    second = run("total_steps=450")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed" in second.stdout and "at step 300" in second.stdout
    assert [int(r["step"]) for r in read_csv(tmp_path / "eval.csv")] == [0, 150, 300, 450]
    # the same command once more (a sweep run again whole): finished, nothing to do, nothing written
    third = run("total_steps=450")
    assert third.returncode == 0, third.stderr[-3000:]
    assert "already finished: 450 steps" in third.stdout and "resumed" not in third.stdout
    assert [int(r["step"]) for r in read_csv(tmp_path / "eval.csv")] == [0, 150, 300, 450]
    assert not (tmp_path / "failed.json").exists()


def test_the_sweeps_end_names_the_points_that_failed_in_it(tmp_path, capsys):
    """training.callbacks.ReportFailedPoints over a sweep dir: a point with failed.json and one whose
    summary says it diverged are named, a finished point and a point that failed in an earlier
    sweep (an older failed.json) are not; a grid exits 1, a search (Optuna) only warns."""
    from omegaconf import OmegaConf

    from training.callbacks import ReportFailedPoints

    for job, name, record in [("0", "failed.json", {"error": "batch_size must be a positive integer", "exit_code": 2}),
                              ("1", "summary.json", {"steps": 600, "diverged_at": 600}),
                              ("2", "summary.json", {"steps": 600}),
                              ("3", "failed.json", {"error": "an old failure", "exit_code": 2})]:
        (tmp_path / job).mkdir()
        (tmp_path / job / name).write_text(json.dumps(record))
    os.utime(tmp_path / "3" / "failed.json", (0, 0))

    def end(sweeper: str) -> None:
        config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}, "sweeper": {"_target_": sweeper},
                                             "launcher": {"_target_": "hydra_plugins.hydra_joblib_launcher.JoblibLauncher"}}})
        callback = ReportFailedPoints()
        callback.on_multirun_start(config)
        os.utime(tmp_path / "3" / "failed.json", (0, 0))
        callback._started -= 60  # the points' files were written after the sweep started
        callback.on_multirun_end(config)

    with pytest.raises(SystemExit) as stop:
        end("hydra._internal.core_plugins.basic_sweeper.BasicSweeper")
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: 2 points of the sweep failed ({tmp_path / '0'}: batch_size must be a positive "
                          f"integer; {tmp_path / '1'}: training diverged at step 600). The other points ran;"), err
    assert "an old failure" not in err
    end("hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper")
    assert capsys.readouterr().err.startswith("warning: 2 points of the sweep failed (")


def test_the_pixel_and_dmc_suites_sweep_as_the_mujoco_tasks_do(tmp_path):
    """A sweep over DMC tasks through joblib's worker processes (each DMC env runs dm_control in a
    process of its own, which loky's workers must be able to start) and one over MinAtar games:
    each point trains its own task, and aggregate.py reports each DMC task as a row of its own."""
    dmc, minatar = tmp_path / "dmc", tmp_path / "minatar"
    tiny = ["learning_starts=100", "eval_every=200", "eval_episodes=1", "logger.progress=false"]
    proc = multirun(dmc, "agent=sac", "env=dmc", "env.domain=cartpole", "env.task=swingup,balance",
                    "network.hidden=[32,32]", "total_steps=200", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *tiny)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = multirun(minatar, "agent=dqn", "env=minatar", "env.game=breakout,freeway", "total_steps=400", *tiny)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for sweep, agent, labels in ((dmc, "sac", ["dmc-cartpole-balance", "dmc-cartpole-swingup"]),
                                 (minatar, "dqn", ["minatar-breakout", "minatar-freeway"])):
        summaries = [json.loads((job / "summary.json").read_text()) for job in job_dirs(sweep)]
        assert sorted(s["env"] for s in summaries) == labels
        assert all(s["agent"] == agent and not s["stopped"] for s in summaries)
    agg = subprocess.run([sys.executable, "aggregate.py", str(dmc)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert agg.returncode == 0, agg.stderr
    rows = read_csv(dmc / "aggregate" / "results.csv")
    assert sorted((r["env"], int(r["n_runs"])) for r in rows) == [("dmc-cartpole-balance", 1), ("dmc-cartpole-swingup", 1)]
